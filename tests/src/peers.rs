//! Loopback peers, each on its own std threads (independent of the runtime under test), bound
//! to `127.0.0.1` on a port the kernel picks. Each stops and closes its sockets when dropped.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use bytes::BytesMut;
use keepwire_driver::LengthPrefixed;
use socket2::{Domain, Protocol, SockRef, Socket, Type};

/// How a [`Peer`] treats each connection it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Answers every request frame with the same correlation id and payload.
    Echo,
    /// Reads requests and never answers.
    Hold,
    /// Accepts, keeps the socket open and never reads (pair with a small receive buffer).
    NeverRead,
    /// Answers the first request with a header announcing a 2 GiB frame.
    Oversize,
    /// Answers the first request with a length too short to hold a correlation id.
    Malformed,
    /// Answers the first request with a correlation id that was never issued.
    UnknownId,
    /// Answers the first request correctly, one byte every 100 ms.
    Drip,
}

/// A TCP server on loopback with one [`Behaviour`].
#[derive(Debug)]
pub struct Peer {
    addr: SocketAddr,
    recv_buffer: Option<usize>,
    state: Arc<PeerState>,
    acceptor: Option<JoinHandle<()>>,
    /// While killed: the port, bound but not listening, so every connect is refused and no
    /// one else takes it before [`Peer::revive`].
    held: Option<Socket>,
}

#[derive(Debug, Default)]
struct PeerState {
    stop: AtomicBool,
    /// Stalled (a wedged or stopped process): nothing is read or answered, connections stay
    /// open, and the kernel still accepts connections and buffers what clients send.
    stalled: AtomicBool,
    accepted: AtomicUsize,
    requests: AtomicUsize,
    streams: Mutex<Vec<TcpStream>>,
    servers: Mutex<Vec<JoinHandle<()>>>,
}

impl Peer {
    /// Starts a peer on a fresh port.
    pub fn start(behaviour: Behaviour) -> Self {
        Self::start_at(
            "127.0.0.1:0".parse().expect("literal address"),
            behaviour,
            None,
        )
    }

    /// Starts a peer that accepts and never reads, with a 4 KiB receive buffer set on the
    /// listener before bind/listen (accepted sockets inherit it).
    pub fn never_read() -> Self {
        Self::start_at(
            "127.0.0.1:0".parse().expect("literal address"),
            Behaviour::NeverRead,
            Some(4096),
        )
    }

    fn start_at(addr: SocketAddr, behaviour: Behaviour, recv_buffer: Option<usize>) -> Self {
        let socket = bind(addr, recv_buffer).expect("bind a loopback listener");
        Self::start_on(socket, behaviour, recv_buffer)
    }

    fn start_on(socket: Socket, behaviour: Behaviour, recv_buffer: Option<usize>) -> Self {
        socket.listen(128).expect("listen on loopback");
        let listener: TcpListener = socket.into();
        let addr = listener.local_addr().expect("listener address");
        let state = Arc::new(PeerState::default());
        let acceptor = {
            let state = Arc::clone(&state);
            thread::spawn(move || accept_loop(&listener, behaviour, &state))
        };
        Self {
            addr,
            recv_buffer,
            state,
            acceptor: Some(acceptor),
            held: None,
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// Request frames read so far.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Simulates a server restart on the same port: closes the listener and every accepted
    /// connection (the client sees end of stream), then listens again as `behaviour`.
    pub fn restart(&mut self, behaviour: Behaviour) {
        self.stop();
        *self = Self::start_at(self.addr, behaviour, self.recv_buffer);
    }

    /// Simulates a server whose host crashed and came back on the same port: every accepted
    /// connection is *aborted* (SO_LINGER 0: its kernel forgets the connection at once and
    /// sends one RST, which is lost if the path is blocked), not closed with a FIN as by
    /// [`restart`](Self::restart); then it listens again as `behaviour`. A client that still
    /// believes in its connection finds out by its next write, which the kernel answers with
    /// RST.
    pub fn crash_and_restart(&mut self, behaviour: Behaviour) {
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let streams = std::mem::take(
            &mut *self
                .state
                .streams
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for stream in &streams {
            SockRef::from(stream)
                .set_linger(Some(Duration::ZERO))
                .expect("SO_LINGER 0");
            // Wakes the connection's server thread (its read returns end of stream) without
            // sending anything, so it exits and drops its clones of the socket.
            let _ = stream.shutdown(Shutdown::Read);
        }
        let servers = std::mem::take(
            &mut *self
                .state
                .servers
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for server in servers {
            let _ = server.join();
        }
        // The last descriptor of each socket closes here: with SO_LINGER 0 that aborts it.
        drop(streams);
        *self = Self::start_at(self.addr, behaviour, self.recv_buffer);
    }

    /// Stalls the server, as a wedged or SIGSTOPped process: from now on it reads and answers
    /// nothing (a request it was reading when stalled is answered only on [`resume`]), while
    /// its connections stay open and the kernel keeps accepting connections and buffering
    /// what clients send.
    ///
    /// [`resume`]: Peer::resume
    pub fn stall(&self) {
        self.state.stalled.store(true, Ordering::SeqCst);
    }

    /// Ends a [`stall`](Peer::stall): the server reads and answers everything buffered
    /// meanwhile, in order, then carries on.
    pub fn resume(&self) {
        self.state.stalled.store(false, Ordering::SeqCst);
    }

    /// Kills the server: closes the listener and every accepted connection (the client sees
    /// end of stream), and keeps the port bound but not listening, so every connect is refused
    /// until [`revive`](Peer::revive).
    pub fn kill(&mut self) {
        self.stop();
        self.held = Some(bind(self.addr, self.recv_buffer).expect("hold the killed peer's port"));
    }

    /// Starts a killed server again on the same port, as `behaviour`; returns once it listens.
    pub fn revive(&mut self, behaviour: Behaviour) {
        let socket = match self.held.take() {
            Some(socket) => socket,
            None => {
                self.stop();
                bind(self.addr, self.recv_buffer).expect("bind the peer's port again")
            }
        };
        *self = Self::start_on(socket, behaviour, self.recv_buffer);
    }

    fn stop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let streams = std::mem::take(
            &mut *self
                .state
                .streams
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for stream in streams {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A socket bound to `addr` (reusing it), not yet listening: connects to it are refused.
fn bind(addr: SocketAddr, recv_buffer: Option<usize>) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if let Some(size) = recv_buffer {
        socket.set_recv_buffer_size(size)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket)
}

fn accept_loop(listener: &TcpListener, behaviour: Behaviour, state: &Arc<PeerState>) {
    listener
        .set_nonblocking(true)
        .expect("non-blocking listener");
    while !state.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).expect("blocking stream");
                state.accepted.fetch_add(1, Ordering::SeqCst);
                let kept = stream.try_clone().expect("clone accepted stream");
                state
                    .streams
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(kept);
                if behaviour != Behaviour::NeverRead {
                    let server = {
                        let state = Arc::clone(state);
                        thread::spawn(move || serve(stream, behaviour, &state))
                    };
                    let mut servers = state.servers.lock().unwrap_or_else(PoisonError::into_inner);
                    servers.retain(|server| !server.is_finished());
                    servers.push(server);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(2))
            }
            Err(_) => thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// Waits while the peer is stalled; `false` if it stopped meanwhile.
fn unless_stalled(state: &PeerState) -> bool {
    while state.stalled.load(Ordering::SeqCst) {
        if state.stop.load(Ordering::SeqCst) {
            return false;
        }
        thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Serves one connection until the client closes it or the peer stops.
fn serve(mut stream: TcpStream, behaviour: Behaviour, state: &PeerState) {
    let reader = stream.try_clone().expect("clone stream");
    let mut reader = io::BufReader::with_capacity(64 * 1024, reader);
    loop {
        if !unless_stalled(state) {
            return;
        }
        let Ok((id, payload)) = read_frame(&mut reader) else {
            return;
        };
        // A request read just as the peer stalled is answered only once it resumes.
        if !unless_stalled(state) {
            return;
        }
        state.requests.fetch_add(1, Ordering::SeqCst);
        let answer = match behaviour {
            Behaviour::Echo => LengthPrefixed::frame(id, &payload)
                .expect("frame fits")
                .to_vec(),
            Behaviour::Hold | Behaviour::NeverRead => continue,
            Behaviour::Oversize => {
                [0x8000_0000u32.to_be_bytes().as_slice(), &id.to_be_bytes()].concat()
            }
            Behaviour::Malformed => [3u32.to_be_bytes().as_slice(), &[0; 8]].concat(),
            Behaviour::UnknownId => {
                let forged = id ^ (1 << 63);
                LengthPrefixed::frame(forged, &payload)
                    .expect("frame fits")
                    .to_vec()
            }
            Behaviour::Drip => {
                let frame = LengthPrefixed::frame(id, &payload).expect("frame fits");
                for byte in frame.iter() {
                    if state.stop.load(Ordering::SeqCst) || stream.write_all(&[*byte]).is_err() {
                        return;
                    }
                    thread::sleep(Duration::from_millis(100));
                }
                continue;
            }
        };
        if stream.write_all(&answer).is_err() {
            return;
        }
    }
}

/// Reads one request frame in the built-in codec's format: `(correlation id, payload)`.
pub fn read_frame(reader: &mut impl Read) -> io::Result<(u64, Vec<u8>)> {
    let mut header = [0; LengthPrefixed::HEADER_LEN];
    reader.read_exact(&mut header)?;
    let (len, id) = header.split_at(4);
    let len = u32::from_be_bytes(len.try_into().expect("4 bytes"));
    let id = u64::from_be_bytes(id.try_into().expect("8 bytes"));
    let payload_len = len.checked_sub(8).ok_or(io::ErrorKind::InvalidData)?;
    let mut payload = vec![0; payload_len as usize];
    reader.read_exact(&mut payload)?;
    Ok((id, payload))
}

/// A peer that reads `LengthPrefixed` requests until it holds `batch` of them, then echoes
/// them all in one write; for one connection, until it closes. Its address.
///
/// Lighter than a [`Peer`] (a 4 KiB read buffer on its stack, no 64 KiB `BufReader`), for
/// tests that count what the process allocates, and deterministic in what it sends at once.
pub fn batch_echo(batch: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("bound address");
    thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        stream.set_nodelay(true).expect("nodelay");
        let codec = LengthPrefixed::default();
        let mut inbound = BytesMut::new();
        let mut answers = BytesMut::new();
        let mut held = 0;
        let mut buf = [0; 4096];
        loop {
            let Ok(n) = stream.read(&mut buf) else { return };
            if n == 0 {
                return;
            }
            inbound.extend_from_slice(&buf[..n]);
            while let Some((id, payload)) = codec.cut(&mut inbound).expect("a request frame") {
                LengthPrefixed::frame_into(id, &payload, &mut answers).expect("frame fits");
                held += 1;
                if held == batch {
                    if stream.write_all(&answers).is_err() {
                        return;
                    }
                    answers.clear();
                    held = 0;
                }
            }
        }
    });
    addr
}

/// A loopback port with nothing listening: a socket bound to it (so no one else takes it)
/// that never listens, so every connect is refused.
#[derive(Debug)]
pub struct RefusingPort {
    addr: SocketAddr,
    _bound: Socket,
}

impl RefusingPort {
    /// Reserves a port that refuses connections.
    pub fn new() -> Self {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).expect("socket");
        socket
            .bind(&"127.0.0.1:0".parse::<SocketAddr>().expect("literal").into())
            .expect("bind");
        let addr = socket
            .local_addr()
            .expect("address")
            .as_socket()
            .expect("inet address");
        Self {
            addr,
            _bound: socket,
        }
    }

    /// The refusing address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Default for RefusingPort {
    fn default() -> Self {
        Self::new()
    }
}

/// A listener with `listen(0)` that never accepts, whose accept queue is already full: a
/// connect to it stays in SYN_SENT (Linux drops the SYN), like a host that does not answer.
#[derive(Debug)]
pub struct FullAcceptQueue {
    addr: SocketAddr,
    _listener: Socket,
    _filler: TcpStream,
}

impl FullAcceptQueue {
    /// Listens with a zero backlog and fills the queue with one connection.
    pub fn new() -> Self {
        let listener =
            Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).expect("socket");
        listener
            .bind(&"127.0.0.1:0".parse::<SocketAddr>().expect("literal").into())
            .expect("bind");
        listener.listen(0).expect("listen");
        let addr = listener
            .local_addr()
            .expect("address")
            .as_socket()
            .expect("inet address");
        let filler = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .expect("fill the accept queue");
        Self {
            addr,
            _listener: listener,
            _filler: filler,
        }
    }

    /// The address whose connects hang.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Default for FullAcceptQueue {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(peer: &Peer, id: u64, payload: &[u8]) -> io::Result<(u64, Vec<u8>)> {
        let mut stream = TcpStream::connect(peer.addr())?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(&LengthPrefixed::frame(id, payload).expect("fits"))?;
        read_frame(&mut stream)
    }

    #[test]
    fn echo_answers_with_the_same_id_and_payload() {
        let peer = Peer::start(Behaviour::Echo);
        assert_eq!(round_trip(&peer, 42, b"hi").unwrap(), (42, b"hi".to_vec()));
        assert_eq!((peer.accepted(), peer.requests()), (1, 1));
    }

    #[test]
    fn unknown_id_forges_the_correlation_id() {
        let peer = Peer::start(Behaviour::UnknownId);
        let (id, _) = round_trip(&peer, 42, b"hi").unwrap();
        assert_ne!(id, 42);
    }

    #[test]
    fn restart_closes_old_connections_and_listens_again_on_the_same_port() {
        let mut peer = Peer::start(Behaviour::Hold);
        let mut old = TcpStream::connect(peer.addr()).unwrap();
        while peer.accepted() == 0 {
            thread::sleep(Duration::from_millis(5));
        }
        let addr = peer.addr();
        peer.restart(Behaviour::Echo);
        assert_eq!(peer.addr(), addr);
        old.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(
            old.read(&mut [0; 16]).unwrap_or(0),
            0,
            "the old connection is closed"
        );
        assert_eq!(
            round_trip(&peer, 7, b"again").unwrap(),
            (7, b"again".to_vec())
        );
    }

    #[test]
    fn a_stalled_peer_answers_nothing_until_it_resumes() {
        let peer = Peer::start(Behaviour::Echo);
        let mut stream = TcpStream::connect(peer.addr()).unwrap();
        stream
            .write_all(&LengthPrefixed::frame(1, b"before").unwrap())
            .unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(read_frame(&mut stream).unwrap(), (1, b"before".to_vec()));
        peer.stall();
        for id in 2..5 {
            stream
                .write_all(&LengthPrefixed::frame(id, b"during").unwrap())
                .unwrap();
        }
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let err = read_frame(&mut stream).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock, "nothing answered");
        let during = TcpStream::connect(peer.addr());
        assert!(during.is_ok(), "the kernel still accepts connections");
        peer.resume();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        for id in 2..5 {
            assert_eq!(read_frame(&mut stream).unwrap(), (id, b"during".to_vec()));
        }
    }

    #[test]
    fn a_killed_peer_refuses_until_revived_on_the_same_port() {
        let mut peer = Peer::start(Behaviour::Echo);
        let addr = peer.addr();
        let mut old = TcpStream::connect(addr).unwrap();
        while peer.accepted() == 0 {
            thread::sleep(Duration::from_millis(5));
        }
        peer.kill();
        old.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(old.read(&mut [0; 16]).unwrap_or(0), 0, "connections closed");
        let err = TcpStream::connect(addr).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
        peer.revive(Behaviour::Echo);
        assert_eq!(peer.addr(), addr);
        assert_eq!(
            round_trip(&peer, 9, b"back").unwrap(),
            (9, b"back".to_vec())
        );
    }

    #[test]
    fn a_refusing_port_refuses() {
        let port = RefusingPort::new();
        let err = TcpStream::connect(port.addr()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn a_full_accept_queue_leaves_the_next_connect_hanging() {
        let queue = FullAcceptQueue::new();
        let err =
            TcpStream::connect_timeout(&queue.addr(), Duration::from_millis(300)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn a_never_reading_peer_stalls_a_large_write() {
        let peer = Peer::never_read();
        let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        socket.set_send_buffer_size(4096).unwrap();
        socket.connect(&peer.addr().into()).unwrap();
        let mut stream: TcpStream = socket.into();
        stream
            .set_write_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let err = stream.write_all(&vec![0; 1 << 20]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn crash_and_restart_aborts_old_connections_and_listens_again() {
        let mut peer = Peer::start(Behaviour::Echo);
        let mut old = TcpStream::connect(peer.addr()).unwrap();
        while peer.accepted() == 0 {
            thread::sleep(Duration::from_millis(5));
        }
        peer.crash_and_restart(Behaviour::Echo);
        old.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let err = old.read(&mut [0; 16]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
        assert_eq!(
            round_trip(&peer, 8, b"fresh").unwrap(),
            (8, b"fresh".to_vec())
        );
    }
}
