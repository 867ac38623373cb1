//! Creating a TCP socket and applying keepwire's [`SocketOptions`] to it before it connects,
//! with a typed report of every option the platform could not apply (never silent), and
//! reading the options back from a live socket.
//!
//! socket2 does the work, but it stays behind keepwire's own types (as quinn keeps its UDP
//! socket behind its own): a runtime receives a [`PreparedSocket`] to connect and lends a
//! [`SocketRef`] for reading options back, so socket2's version is not part of keepwire's
//! API. A [`SocketRef`] is `AsFd` (`AsSocket` on Windows): an application that wants more
//! than [`SocketRef::read_back`] wraps it in its own socket2 (`SockRef::from(&socket_ref)`).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use keepwire_proto::SocketOptions;
use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};

/// A TCP socket the driver created and configured for one connection, not yet connected:
/// what [`Runtime::connect`](crate::Runtime::connect) receives.
///
/// It is already non-blocking. A runtime either hands it to its own connect
/// ([`into_std`](Self::into_std), then e.g. tokio's `TcpSocket::from_std_stream`) or starts a
/// non-blocking connect itself ([`begin_connect`](Self::begin_connect)), waits until the
/// socket is writable, and finishes with [`finish_connect`].
#[derive(Debug)]
pub struct PreparedSocket {
    socket: Socket,
}

impl PreparedSocket {
    /// Creates an unconnected, non-blocking TCP socket for `addr` and applies `options` to it.
    ///
    /// Fails only if the socket itself cannot be created; every option that could not be
    /// applied is listed in the returned [`OptionReport`] instead.
    pub fn new(addr: SocketAddr, options: &SocketOptions) -> io::Result<(Self, OptionReport)> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_nonblocking(true)?;
        let report = apply(&socket, options);
        Ok((Self { socket }, report))
    }

    /// The socket as a (not yet connected, non-blocking) `std::net::TcpStream`, for a runtime
    /// whose connect takes a std socket.
    pub fn into_std(self) -> std::net::TcpStream {
        self.socket.into()
    }

    /// Starts a non-blocking `connect(2)` to `addr` and returns the socket as a std stream.
    ///
    /// The flag is `true` if the connection completed at once, `false` if it is in progress:
    /// register the stream with the reactor, wait until it is writable, then call
    /// [`finish_connect`].
    pub fn begin_connect(self, addr: SocketAddr) -> io::Result<(std::net::TcpStream, bool)> {
        let done = match self.socket.connect(&addr.into()) {
            Ok(()) => true,
            Err(e) if connect_in_progress(&e) => false,
            Err(e) => return Err(e),
        };
        Ok((self.socket.into(), done))
    }

    /// The socket, for reading its options back.
    pub fn socket(&self) -> SocketRef<'_> {
        SocketRef(SockRef::from(&self.socket))
    }
}

fn connect_in_progress(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(libc::EINPROGRESS) || e.kind() == io::ErrorKind::WouldBlock
    }
    #[cfg(not(unix))]
    {
        e.kind() == io::ErrorKind::WouldBlock
    }
}

/// Completes a connect started with [`PreparedSocket::begin_connect`] once the socket is
/// writable: returns the connect error, if the kernel recorded one.
pub fn finish_connect(socket: &SocketRef<'_>) -> io::Result<()> {
    match socket.0.take_error()? {
        Some(e) => Err(e),
        None => {
            // Writable without an error can still mean "not connected" on some platforms.
            socket.0.peer_addr().map(drop)
        }
    }
}

/// A borrowed connected (or connecting) socket: its addresses and its options read back.
///
/// Every runtime's stream gives one ([`IoStream::socket`](crate::IoStream::socket)), and so
/// does the stream a handshake hook is lent ([`HandshakeIo::socket`](crate::HandshakeIo::socket)).
/// It is `AsFd` (`AsSocket` on Windows), so anything beyond [`read_back`](Self::read_back)
/// is one `socket2::SockRef::from(&socket_ref)` away, with the application's own socket2.
#[derive(Debug)]
pub struct SocketRef<'a>(SockRef<'a>);

impl<'a> SocketRef<'a> {
    /// Borrows the socket of `stream` (a tokio, async-io or std TCP stream, or anything else
    /// that owns a socket).
    #[cfg(unix)]
    pub fn new<S: std::os::fd::AsFd>(stream: &'a S) -> Self {
        Self(SockRef::from(stream))
    }

    /// Borrows the socket of `stream` (a tokio, async-io or std TCP stream, or anything else
    /// that owns a socket).
    #[cfg(windows)]
    pub fn new<S: std::os::windows::io::AsSocket>(stream: &'a S) -> Self {
        Self(SockRef::from(stream))
    }

    /// The options keepwire manages, as the kernel reports them now; an option the platform
    /// cannot report is `None`.
    pub fn read_back(&self) -> SocketReadback {
        read_back(&self.0)
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()?.as_socket().ok_or_else(not_inet)
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.0.peer_addr()?.as_socket().ok_or_else(not_inet)
    }

    /// Sets `TCP_QUICKACK` again, after a read (the kernel leaves quick-ACK mode by itself).
    pub(crate) fn rearm_quickack(&self) {
        rearm_quickack(&self.0);
    }
}

fn not_inet() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "not an IP socket address")
}

#[cfg(unix)]
impl std::os::fd::AsFd for SocketRef<'_> {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(windows)]
impl std::os::windows::io::AsSocket for SocketRef<'_> {
    fn as_socket(&self) -> std::os::windows::io::BorrowedSocket<'_> {
        self.0.as_socket()
    }
}

/// Applies `options` to `socket`, returning what could not be applied.
pub fn apply_options(socket: &SocketRef<'_>, options: &SocketOptions) -> OptionReport {
    apply(&socket.0, options)
}

fn apply(socket: &Socket, options: &SocketOptions) -> OptionReport {
    let mut report = OptionReport::default();
    report.record(
        SocketOption::NoDelay,
        socket.set_tcp_nodelay(options.nodelay),
    );
    if let Some(keepalive) = options.keepalive {
        let params = TcpKeepalive::new().with_time(keepalive.idle);
        let params = keepalive_params::interval(params, keepalive.interval, &mut report);
        let params = keepalive_params::retries(params, keepalive.retries, &mut report);
        report.record(SocketOption::Keepalive, socket.set_tcp_keepalive(&params));
    } else {
        report.record(SocketOption::Keepalive, socket.set_keepalive(false));
    }
    if let Some(timeout) = options.user_timeout {
        set_user_timeout(socket, timeout, &mut report);
    }
    if let Some(size) = options.send_buffer_size {
        report.record(
            SocketOption::SendBuffer,
            socket.set_send_buffer_size(size as usize),
        );
        check_buffer(
            SocketOption::SendBuffer,
            size,
            socket.send_buffer_size().ok(),
            &mut report,
        );
    }
    if let Some(size) = options.recv_buffer_size {
        report.record(
            SocketOption::RecvBuffer,
            socket.set_recv_buffer_size(size as usize),
        );
        check_buffer(
            SocketOption::RecvBuffer,
            size,
            socket.recv_buffer_size().ok(),
            &mut report,
        );
    }
    if options.quickack {
        set_quickack(socket, &mut report);
    }
    report
}

// TCP_QUICKACK exists on Linux (and the systems built on its TCP) only. Each of these has its
// other platforms' branch inside, not a twin behind the opposite cfg: one body per function,
// so a mutation test on Linux mutates the code that Linux runs, and nothing it never builds.

fn set_quickack(socket: &Socket, report: &mut OptionReport) {
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    {
        let set = socket.set_tcp_quickack(true);
        report.quickack = set.is_ok();
        report.record(SocketOption::QuickAck, set);
    }
    #[cfg(not(any(target_os = "android", target_os = "fuchsia", target_os = "linux")))]
    {
        let _ = socket;
        report.unsupported(SocketOption::QuickAck);
    }
}

fn rearm_quickack(socket: &Socket) {
    // Applied at connect, so a failure now has nothing new to report.
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    let _ = socket.set_tcp_quickack(true);
    #[cfg(not(any(target_os = "android", target_os = "fuchsia", target_os = "linux")))]
    let _ = socket;
}

fn read_quickack(socket: &Socket) -> Option<bool> {
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    return socket.tcp_quickack().ok();
    #[cfg(not(any(target_os = "android", target_os = "fuchsia", target_os = "linux")))]
    {
        let _ = socket;
        None
    }
}

/// The options of a live socket, read back with `getsockopt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketReadback {
    /// `TCP_NODELAY`.
    pub nodelay: Option<bool>,
    /// `SO_KEEPALIVE`.
    pub keepalive: Option<bool>,
    /// `TCP_KEEPIDLE` (or the platform's equivalent).
    pub keepalive_idle: Option<Duration>,
    /// `TCP_KEEPINTVL`, where the platform has it.
    pub keepalive_interval: Option<Duration>,
    /// `TCP_KEEPCNT`, where the platform has it.
    pub keepalive_retries: Option<u32>,
    /// `TCP_USER_TIMEOUT` (Linux); `None` when off or unavailable.
    pub user_timeout: Option<Duration>,
    /// `SO_SNDBUF` (Linux reports twice the requested size).
    pub send_buffer_size: Option<usize>,
    /// `SO_RCVBUF` (Linux reports twice the requested size).
    pub recv_buffer_size: Option<usize>,
    /// `TCP_QUICKACK` (Linux): whether the socket is in quick-ACK mode now.
    pub quickack: Option<bool>,
}

fn read_back(socket: &SockRef<'_>) -> SocketReadback {
    SocketReadback {
        nodelay: socket.tcp_nodelay().ok(),
        keepalive: socket.keepalive().ok(),
        keepalive_idle: keepalive_idle(socket),
        keepalive_interval: keepalive_params::read_interval(socket),
        keepalive_retries: keepalive_params::read_retries(socket),
        user_timeout: read_user_timeout(socket),
        send_buffer_size: socket.send_buffer_size().ok(),
        recv_buffer_size: socket.recv_buffer_size().ok(),
        quickack: read_quickack(socket),
    }
}

/// Every socket option the platform could not apply to one connection. Empty when all were
/// applied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OptionReport {
    unapplied: Vec<Unapplied>,
    /// `TCP_QUICKACK` was asked for and applied: the driver sets it again after every read.
    quickack: bool,
}

impl OptionReport {
    /// Whether every requested option was applied.
    pub fn is_empty(&self) -> bool {
        self.unapplied.is_empty()
    }

    /// The options that were not applied, in the order they were tried.
    pub fn unapplied(&self) -> &[Unapplied] {
        &self.unapplied
    }

    /// Whether `TCP_QUICKACK` was asked for and applied, so that it is set again after every
    /// read.
    pub(crate) fn quickack(&self) -> bool {
        self.quickack
    }

    fn record(&mut self, option: SocketOption, result: io::Result<()>) {
        if let Err(error) = result {
            self.unapplied.push(Unapplied {
                option,
                why: NotApplied::Failed(error.kind(), error.raw_os_error()),
            });
        }
    }

    #[cfg_attr(
        any(target_os = "android", target_os = "fuchsia", target_os = "linux"),
        expect(
            dead_code,
            reason = "every option keepwire manages exists on these platforms"
        )
    )]
    fn unsupported(&mut self, option: SocketOption) {
        self.unapplied.push(Unapplied {
            option,
            why: NotApplied::Unsupported,
        });
    }
}

impl fmt::Display for OptionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.unapplied.is_empty() {
            return f.write_str("all socket options applied");
        }
        for (i, item) in self.unapplied.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{item}")?;
        }
        Ok(())
    }
}

/// One option that was not applied, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unapplied {
    /// The option.
    pub option: SocketOption,
    /// Why it was not applied.
    pub why: NotApplied,
}

impl fmt::Display for Unapplied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} not applied: {}", self.option, self.why)
    }
}

/// A socket option keepwire manages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SocketOption {
    /// `TCP_NODELAY`.
    NoDelay,
    /// `SO_KEEPALIVE` with its idle time.
    Keepalive,
    /// `TCP_KEEPINTVL`.
    KeepaliveInterval,
    /// `TCP_KEEPCNT`.
    KeepaliveRetries,
    /// `TCP_USER_TIMEOUT`.
    UserTimeout,
    /// `SO_SNDBUF`.
    SendBuffer,
    /// `SO_RCVBUF`.
    RecvBuffer,
    /// `TCP_QUICKACK`.
    QuickAck,
}

/// Why an option was not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotApplied {
    /// This platform has no such option.
    Unsupported,
    /// `setsockopt` failed, with its error kind and `errno`.
    Failed(io::ErrorKind, Option<i32>),
    /// The kernel took a smaller value than requested (for example capped by
    /// `net.core.wmem_max`).
    Clamped {
        /// The value requested.
        requested: u64,
        /// The value read back.
        got: u64,
    },
}

impl fmt::Display for NotApplied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported => f.write_str("not supported on this platform"),
            Self::Failed(kind, Some(errno)) => {
                write!(f, "setsockopt failed ({kind}, errno {errno})")
            }
            Self::Failed(kind, None) => write!(f, "setsockopt failed ({kind})"),
            Self::Clamped { requested, got } => {
                write!(f, "kernel set {got} instead of the requested {requested}")
            }
        }
    }
}

fn check_buffer(
    option: SocketOption,
    requested: u32,
    got: Option<usize>,
    report: &mut OptionReport,
) {
    // Linux doubles the value it is given (bookkeeping overhead), so only less than requested
    // means the kernel capped it.
    if let Some(got) = got {
        if (got as u64) < u64::from(requested) {
            report.unapplied.push(Unapplied {
                option,
                why: NotApplied::Clamped {
                    requested: u64::from(requested),
                    got: got as u64,
                },
            });
        }
    }
}

// socket2 0.6 sets TCP_KEEPINTVL and TCP_KEEPCNT on these platforms only (its own cfg);
// elsewhere the driver reports them as unsupported. Reading the interval back is not offered
// on Windows.
#[cfg(any(
    target_os = "android",
    target_os = "dragonfly",
    target_os = "freebsd",
    target_os = "fuchsia",
    target_os = "illumos",
    target_os = "ios",
    target_os = "linux",
    target_os = "macos",
    target_os = "netbsd",
    target_os = "tvos",
    target_os = "watchos",
    target_os = "windows",
))]
mod keepalive_params {
    use std::time::Duration;

    use socket2::{SockRef, TcpKeepalive};

    use super::OptionReport;

    pub(super) fn interval(
        params: TcpKeepalive,
        interval: Duration,
        _: &mut OptionReport,
    ) -> TcpKeepalive {
        params.with_interval(interval)
    }

    pub(super) fn retries(
        params: TcpKeepalive,
        retries: u32,
        _: &mut OptionReport,
    ) -> TcpKeepalive {
        params.with_retries(retries)
    }

    #[cfg(not(target_os = "windows"))]
    pub(super) fn read_interval(socket: &SockRef<'_>) -> Option<Duration> {
        socket.tcp_keepalive_interval().ok()
    }

    #[cfg(target_os = "windows")]
    pub(super) fn read_interval(_: &SockRef<'_>) -> Option<Duration> {
        None
    }

    pub(super) fn read_retries(socket: &SockRef<'_>) -> Option<u32> {
        socket.tcp_keepalive_retries().ok()
    }
}

#[cfg(not(any(
    target_os = "android",
    target_os = "dragonfly",
    target_os = "freebsd",
    target_os = "fuchsia",
    target_os = "illumos",
    target_os = "ios",
    target_os = "linux",
    target_os = "macos",
    target_os = "netbsd",
    target_os = "tvos",
    target_os = "watchos",
    target_os = "windows",
)))]
mod keepalive_params {
    use std::time::Duration;

    use socket2::{SockRef, TcpKeepalive};

    use super::{OptionReport, SocketOption};

    pub(super) fn interval(
        params: TcpKeepalive,
        _: Duration,
        report: &mut OptionReport,
    ) -> TcpKeepalive {
        report.unsupported(SocketOption::KeepaliveInterval);
        params
    }

    pub(super) fn retries(params: TcpKeepalive, _: u32, report: &mut OptionReport) -> TcpKeepalive {
        report.unsupported(SocketOption::KeepaliveRetries);
        params
    }

    pub(super) fn read_interval(_: &SockRef<'_>) -> Option<Duration> {
        None
    }

    pub(super) fn read_retries(_: &SockRef<'_>) -> Option<u32> {
        None
    }
}

#[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
fn set_user_timeout(socket: &Socket, timeout: Duration, report: &mut OptionReport) {
    report.record(
        SocketOption::UserTimeout,
        socket.set_tcp_user_timeout(Some(timeout)),
    );
}

#[cfg(not(any(target_os = "android", target_os = "fuchsia", target_os = "linux")))]
fn set_user_timeout(_: &Socket, _: Duration, report: &mut OptionReport) {
    report.unsupported(SocketOption::UserTimeout);
}

#[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
fn read_user_timeout(socket: &SockRef<'_>) -> Option<Duration> {
    socket.tcp_user_timeout().ok().flatten()
}

#[cfg(not(any(target_os = "android", target_os = "fuchsia", target_os = "linux")))]
fn read_user_timeout(_: &SockRef<'_>) -> Option<Duration> {
    None
}

#[cfg(not(any(
    target_os = "haiku",
    target_os = "openbsd",
    target_os = "vita",
    target_os = "windows"
)))]
fn keepalive_idle(socket: &SockRef<'_>) -> Option<Duration> {
    socket.tcp_keepalive_time().ok()
}

#[cfg(any(
    target_os = "haiku",
    target_os = "openbsd",
    target_os = "vita",
    target_os = "windows"
))]
fn keepalive_idle(_: &SockRef<'_>) -> Option<Duration> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use keepwire_proto::Keepalive;

    fn options() -> SocketOptions {
        let mut options = SocketOptions::default();
        options.nodelay = true;
        options.keepalive = Some(Keepalive {
            idle: Duration::from_secs(7),
            interval: Duration::from_secs(3),
            retries: 4,
        });
        options.user_timeout = Some(Duration::from_millis(1500));
        options.send_buffer_size = Some(16 * 1024);
        options.recv_buffer_size = Some(32 * 1024);
        options
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn every_option_is_applied_and_reads_back_on_linux() {
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let (socket, report) = PreparedSocket::new(addr, &options()).unwrap();
        assert!(report.is_empty(), "{report}");
        let back = socket.socket().read_back();
        assert_eq!(back.nodelay, Some(true));
        assert_eq!(back.keepalive, Some(true));
        assert_eq!(back.keepalive_idle, Some(Duration::from_secs(7)));
        assert_eq!(back.keepalive_interval, Some(Duration::from_secs(3)));
        assert_eq!(back.keepalive_retries, Some(4));
        assert_eq!(back.user_timeout, Some(Duration::from_millis(1500)));
        assert!(back.send_buffer_size.unwrap() >= 16 * 1024);
        assert!(back.recv_buffer_size.unwrap() >= 32 * 1024);
    }

    #[test]
    fn keepalive_none_turns_it_off() {
        let mut options = options();
        options.keepalive = None;
        let (socket, report) =
            PreparedSocket::new("127.0.0.1:9".parse().unwrap(), &options).unwrap();
        assert!(report.is_empty(), "{report}");
        assert_eq!(socket.socket().read_back().keepalive, Some(false));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_buffer_above_the_kernel_cap_is_reported_as_clamped() {
        let mut options = options();
        options.send_buffer_size = Some(u32::MAX / 2);
        let (_, report) = PreparedSocket::new("127.0.0.1:9".parse().unwrap(), &options).unwrap();
        let clamped = report
            .unapplied()
            .iter()
            .find(|u| u.option == SocketOption::SendBuffer);
        assert!(
            matches!(clamped.map(|u| u.why), Some(NotApplied::Clamped { .. })),
            "{report}"
        );
        assert!(
            report
                .to_string()
                .contains("SendBuffer not applied: kernel set"),
            "{report}"
        );
    }

    /// `apply_options` sets the options on a socket someone else created (a connected std
    /// stream here), as `PreparedSocket::new` does on its own.
    #[test]
    #[cfg(target_os = "linux")]
    fn apply_options_sets_every_option_on_a_connected_stream() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let socket = SocketRef::new(&stream);
        let report = apply_options(&socket, &options());
        assert!(report.is_empty(), "{report}");
        assert!(!report.quickack(), "off by default");
        let back = socket.read_back();
        assert_eq!(back.nodelay, Some(true));
        assert_eq!(back.keepalive_idle, Some(Duration::from_secs(7)));
        assert_eq!(back.keepalive_retries, Some(4));
        assert_eq!(back.user_timeout, Some(Duration::from_millis(1500)));

        let mut quick = options();
        quick.quickack = true;
        let report = apply_options(&socket, &quick);
        assert!(report.is_empty() && report.quickack(), "{report}");
        assert_eq!(socket.read_back().quickack, Some(true));
        socket.rearm_quickack();
        assert_eq!(socket.read_back().quickack, Some(true));
    }

    /// Options a socket refuses are each reported with the kernel's error, in the order
    /// tried, and the report says them all: a UDP socket has no TCP options.
    #[test]
    #[cfg(target_os = "linux")]
    fn every_option_a_socket_refuses_is_reported() {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut options = options();
        options.send_buffer_size = None;
        options.recv_buffer_size = None;
        options.quickack = true;
        let report = apply_options(&SocketRef::new(&udp), &options);
        let refused: Vec<SocketOption> = report.unapplied().iter().map(|u| u.option).collect();
        assert_eq!(
            refused,
            [
                SocketOption::NoDelay,
                SocketOption::Keepalive,
                SocketOption::UserTimeout,
                SocketOption::QuickAck
            ],
            "{report}"
        );
        assert!(!report.quickack(), "not set again after reads when refused");
        assert!(
            report
                .unapplied()
                .iter()
                .all(|u| matches!(u.why, NotApplied::Failed(_, Some(_)))),
            "{report}"
        );
        let text = report.to_string();
        assert_eq!(text.matches("; ").count(), 3, "{text}");
        assert!(
            text.starts_with("NoDelay not applied") && text.contains("; UserTimeout not applied"),
            "{text}"
        );
    }

    /// Linux reports twice the buffer it was given; only less than requested is a cap, and
    /// exactly the request is not.
    #[test]
    fn a_buffer_is_clamped_only_below_the_request() {
        for (got, clamped) in [(4095, true), (4096, false), (8192, false)] {
            let mut report = OptionReport::default();
            check_buffer(SocketOption::SendBuffer, 4096, Some(got), &mut report);
            assert_eq!(!report.is_empty(), clamped, "{got}: {report}");
        }
        let mut report = OptionReport::default();
        check_buffer(SocketOption::SendBuffer, 4096, None, &mut report);
        assert!(
            report.is_empty(),
            "a size not read back is not a cap: {report}"
        );
    }

    /// An error the kernel gives at once is the connect's error, not "in progress": the
    /// stream would otherwise wait for a writability that reports no error of its own.
    #[test]
    fn a_connect_that_fails_at_once_returns_its_error() {
        // An IPv4 socket cannot connect to an IPv6 address: refused by the call itself, with
        // nothing sent.
        let (socket, _) =
            PreparedSocket::new("127.0.0.1:9".parse().unwrap(), &SocketOptions::default()).unwrap();
        let error = socket
            .begin_connect("[::1]:9".parse().unwrap())
            .map(drop)
            .unwrap_err();
        assert!(!connect_in_progress(&error), "{error}");
    }

    #[test]
    fn only_in_progress_and_would_block_mean_in_progress() {
        #[cfg(unix)]
        assert!(connect_in_progress(&io::Error::from_raw_os_error(
            libc::EINPROGRESS
        )));
        assert!(connect_in_progress(&io::ErrorKind::WouldBlock.into()));
        for refused in [
            io::Error::from(io::ErrorKind::ConnectionRefused),
            #[cfg(unix)]
            io::Error::from_raw_os_error(libc::ECONNREFUSED),
            #[cfg(unix)]
            io::Error::from_raw_os_error(libc::ENETUNREACH),
        ] {
            assert!(!connect_in_progress(&refused), "{refused}");
        }
    }

    #[test]
    fn an_empty_report_says_so() {
        assert_eq!(
            OptionReport::default().to_string(),
            "all socket options applied"
        );
    }
}
