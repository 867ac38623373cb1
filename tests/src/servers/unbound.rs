//! An Unbound resolver of the test binary's own, DNS over TCP (and over TLS if asked for),
//! with an upstream of the test's own: nothing it asks leaves loopback.
//!
//! - Names under `fast.kw.` it answers itself, at once: a `redirect` zone, so every name under
//!   it has the one TXT record `fast`, with the name asked for as its owner.
//! - Every other name it forwards to [`Upstream`], a UDP server on 127.0.0.1 in this process,
//!   which answers with one TXT record holding the name asked for, after the delay the name's
//!   first label spells (`d250.q1.up` waits 250 ms; a name without one is answered at once).
//!
//! So the queries of one connection come back in the order their answers are ready, not the
//! order they were asked in: a resolver's ordinary out-of-order answering (RFC 7766 §6.2.1.1).
//! Unbound is set to give its upstream at least 1.5 s before it asks again
//! (`unknown-server-time-limit`, `infra-cache-min-rtt`); the tests' delays stay below that.

use std::fs;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use super::{
    PORT_TRIES, Process, ServerError, Signal, find_program, free_port, new_dir, remove_dir,
    spawn_answering,
};
use crate::protocols::dns::{self, CH, Data, Message, TXT};

/// The zone Unbound answers itself.
pub const LOCAL_ZONE: &str = "fast.kw";
/// The text of every record in [`LOCAL_ZONE`].
pub const LOCAL_TEXT: &str = "fast";

/// An Unbound on 127.0.0.1: the zone [`LOCAL_ZONE`] its own, every other name forwarded to
/// an upstream on loopback that waits as long as the name's first label says (`d250.q1.up`:
/// 250 ms). Stopped, and its directory removed, when dropped.
#[derive(Debug)]
pub struct UnboundServer {
    process: Option<Process>,
    port: u16,
    tls_port: Option<u16>,
    dir: PathBuf,
    /// `tcp-idle-timeout`, if not the default.
    idle_timeout: Option<Duration>,
    upstream: Upstream,
}

impl UnboundServer {
    /// Starts one on a free port and waits until it answers `id.server` with its identity.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(None, None)
    }

    /// As [`start`](Self::start), with a second port that speaks DNS over TLS
    /// ([`tls_addr`](Self::tls_addr)), serving `cert_pem` with `key_pem`.
    pub fn start_with_tls(cert_pem: &str, key_pem: &str) -> Result<Self, ServerError> {
        Self::start_with(Some((cert_pem, key_pem)), None)
    }

    /// As [`start`](Self::start), closing a connection that has sent no query for `idle`
    /// (`tcp-idle-timeout`, 30 s by default).
    pub fn start_closing_idle(idle: Duration) -> Result<Self, ServerError> {
        Self::start_with(None, Some(idle))
    }

    fn start_with(
        tls: Option<(&str, &str)>,
        idle_timeout: Option<Duration>,
    ) -> Result<Self, ServerError> {
        let program = program()?;
        let dir = new_dir("unbound")?;
        let mut server = Self {
            process: None,
            port: 0,
            tls_port: None,
            dir,
            idle_timeout,
            upstream: Upstream::start()?,
        };
        if let Some((cert_pem, key_pem)) = tls {
            for (name, pem) in [("cert.pem", cert_pem), ("key.pem", key_pem)] {
                let path = server.dir.join(name);
                fs::write(&path, pem)
                    .map_err(|e| ServerError::new(format!("write {path:?}: {e}")))?;
            }
        }
        let mut last = None;
        for _ in 0..PORT_TRIES {
            server.port = free_port()?;
            if tls.is_some() {
                server.tls_port = Some(free_port()?);
            }
            match server.spawn(&program) {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e), // most likely a port was taken meanwhile
            }
        }
        Err(last.expect("tried at least once"))
    }

    fn spawn(&mut self, program: &Path) -> Result<(), ServerError> {
        let config = self.dir.join("unbound.conf");
        fs::write(&config, self.config())
            .map_err(|e| ServerError::new(format!("write {config:?}: {e}")))?;
        let mut command = Command::new(program);
        command.arg("-d").arg("-c").arg(&config);
        let (addr, identity, pidfile) = (self.addr(), self.identity(), self.pidfile());
        let log = self.dir.join("log");
        self.process = Some(spawn_answering(&mut command, "unbound", &log, || {
            let answer = ask(
                addr,
                &dns::query_in("id.server", TXT, CH).expect("a valid name"),
            )?;
            let said = answer.answers.first().map(|r| &r.data);
            match said {
                Some(Data::Txt(text))
                    if text.first().is_some_and(|t| t[..] == *identity.as_bytes()) =>
                {
                    let pid = fs::read_to_string(&pidfile)?;
                    pid.trim().parse().map_err(io::Error::other)
                }
                _ => Err(io::Error::other(format!("id.server answered {said:?}"))),
            }
        })?);
        Ok(())
    }

    /// What identifies this process when asked `id.server`: its directory is its own.
    fn identity(&self) -> String {
        format!("keepwire-{}", self.dir.display())
    }

    fn pidfile(&self) -> PathBuf {
        self.dir.join("unbound.pid")
    }

    fn config(&self) -> String {
        let dir = self.dir.display();
        let mut server = vec![
            format!("interface: 127.0.0.1@{}", self.port),
            format!("port: {}", self.port),
            format!("directory: \"{dir}\""),
            format!("pidfile: \"{}\"", self.pidfile().display()),
            format!("identity: \"{}\"", self.identity()),
            // Its own process, as the test's user, in the foreground, logging to stderr.
            "username: \"\"".into(),
            "chroot: \"\"".into(),
            "do-daemonize: no".into(),
            "use-syslog: no".into(),
            "logfile: \"\"".into(),
            "verbosity: 0".into(),
            "num-threads: 1".into(),
            "do-ip6: no".into(),
            "access-control: 127.0.0.0/8 allow".into(),
            "incoming-num-tcp: 64".into(),
            // Forwarding to loopback, without validation, nothing cached: every query of a
            // name outside the local zone reaches the upstream.
            "do-not-query-localhost: no".into(),
            "module-config: \"iterator\"".into(),
            "cache-max-ttl: 0".into(),
            // Up to 1.5 s for the upstream before asking again.
            "unknown-server-time-limit: 1500".into(),
            "infra-cache-min-rtt: 1500".into(),
            format!("local-zone: \"{LOCAL_ZONE}.\" redirect"),
            format!("local-data: \"{LOCAL_ZONE}. 0 IN TXT {LOCAL_TEXT}\""),
        ];
        if let Some(idle) = self.idle_timeout {
            server.push(format!("tcp-idle-timeout: {}", idle.as_millis()));
        }
        if let Some(port) = self.tls_port {
            server.extend([
                format!("interface: 127.0.0.1@{port}"),
                format!("tls-port: {port}"),
                format!("tls-service-key: \"{dir}/key.pem\""),
                format!("tls-service-pem: \"{dir}/cert.pem\""),
            ]);
        }
        format!(
            "server:\n  {}\nforward-zone:\n  name: \".\"\n  forward-addr: 127.0.0.1@{}\n",
            server.join("\n  "),
            self.upstream.addr.port()
        )
    }

    /// Where it listens (DNS over TCP).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Where it listens for DNS over TLS.
    ///
    /// # Panics
    /// If it was started without TLS.
    pub fn tls_addr(&self) -> SocketAddr {
        let port = self.tls_port.expect("started with TLS");
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// Sends it `signal` (SIGSTOP waits until it has stopped).
    pub fn signal(&self, signal: Signal) {
        self.process.as_ref().expect("running").signal(signal);
    }

    /// Kills it (`kill -9`): every connection to it is closed by the kernel.
    pub fn kill(&mut self) {
        if let Some(process) = self.process.take() {
            process.stop();
        }
    }

    /// Starts it again, on the same ports, with the same upstream.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill();
        self.spawn(&program()?)
    }

    /// How many queries its upstream has received.
    pub fn upstream_queries(&self) -> usize {
        self.upstream.queries.load(Ordering::Relaxed)
    }
}

impl Drop for UnboundServer {
    fn drop(&mut self) {
        self.kill();
        remove_dir(&self.dir);
    }
}

/// Unbound's path: on the PATH, or where Debian installs it (`/usr/sbin`, which a user's PATH
/// may lack).
fn program() -> Result<PathBuf, ServerError> {
    let installed = Path::new("/usr/sbin/unbound");
    find_program(
        "unbound",
        "install it with `apt-get install -y unbound` (.ci/run does)",
    )
    .or_else(|e| installed.is_file().then(|| installed.to_owned()).ok_or(e))
}

/// Sends `query` on a fresh blocking connection and reads its answer.
fn ask(addr: SocketAddr, query: &[u8]) -> io::Result<Message> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut framed = BytesMut::new();
    framed.put_u16(query.len() as u16);
    framed.put_slice(query);
    stream.write_all(&framed)?;
    let mut len = [0; 2];
    stream.read_exact(&mut len)?;
    let mut message = vec![0; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut message)?;
    Message::parse(&Bytes::from(message)).map_err(io::Error::other)
}

// ---- the upstream ----

/// The UDP server Unbound forwards to: answers each query with a TXT record holding the name
/// asked for, after the delay its first label spells. Stops when dropped.
#[derive(Debug)]
struct Upstream {
    addr: SocketAddr,
    queries: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Upstream {
    fn start() -> Result<Self, ServerError> {
        let socket = UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| {
                s.set_read_timeout(Some(Duration::from_millis(50)))
                    .map(|()| s)
            })
            .map_err(|e| ServerError::new(format!("bind the upstream: {e}")))?;
        let addr = socket
            .local_addr()
            .map_err(|e| ServerError::new(format!("the upstream's address: {e}")))?;
        let queries = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (counted, stopped) = (Arc::clone(&queries), Arc::clone(&stop));
        let socket = Arc::new(socket);
        thread::spawn(move || {
            let mut buf = [0; 4096];
            while !stopped.load(Ordering::Relaxed) {
                let Ok((n, from)) = socket.recv_from(&mut buf) else {
                    continue; // the read timeout: look at the stop flag again
                };
                let Some((answer, delay)) = answer(&buf[..n]) else {
                    continue;
                };
                counted.fetch_add(1, Ordering::Relaxed);
                let socket = Arc::clone(&socket);
                thread::spawn(move || {
                    thread::sleep(delay);
                    let _ = socket.send_to(&answer, from);
                });
            }
        });
        Ok(Self {
            addr,
            queries,
            stop,
        })
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The answer to `query` (its question echoed, EDNS dropped, one TXT record holding the name
/// asked for) and when to send it; `None` for what is not a one-question query.
fn answer(query: &[u8]) -> Option<(Vec<u8>, Duration)> {
    let parsed = Message::parse(&Bytes::copy_from_slice(query)).ok()?;
    let [question] = &parsed.questions[..] else {
        return None;
    };
    let name = &question.name;
    let delay = name
        .split('.')
        .next()
        .and_then(|label| label.strip_prefix('d')?.parse().ok())
        .map_or(Duration::ZERO, Duration::from_millis);
    // The header and the question (uncompressed in a query): up to the name's end and 4 bytes.
    let name_end = dns::HEADER_LEN + query[dns::HEADER_LEN..].iter().position(|&b| b == 0)?;
    let mut message = query.get(..name_end + 5)?.to_vec();
    message[2] |= 0x84; // QR, AA
    message[3] = 0x80; // RA, no error
    message[6..12].copy_from_slice(&[0, 1, 0, 0, 0, 0]);
    let text = &name.as_bytes()[..name.len().min(255)];
    message.extend_from_slice(&[0xc0, 12, 0, TXT as u8, 0, 1, 0, 0, 0, 0]);
    message.extend_from_slice(&(text.len() as u16 + 1).to_be_bytes());
    message.push(text.len() as u8);
    message.extend_from_slice(text);
    Some((message, delay))
}
