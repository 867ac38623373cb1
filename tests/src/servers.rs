//! Real servers for the tests: memcached, PostgreSQL, Redis and Unbound (a DNS resolver), each
//! a process of this test binary's own on 127.0.0.1 and a free port, started, signalled
//! (SIGSTOP, SIGCONT, SIGKILL) and stopped by pid.
//!
//! Nothing is skipped: a server binary that is not installed is an error that says so and how
//! to install it. Every process is stopped and every directory removed when its handle is
//! dropped (also while a failing test unwinds); whatever a handle in a `static` still holds
//! when the test binary exits is stopped and removed then, and directories left by a test
//! binary that was killed are removed by the next one.
//!
//! PostgreSQL refuses to run as root: run as root (as CI does), the tests run it as the user
//! `keepwire`, created on first use (`useradd`), and memcached as `nobody` (`-u nobody`);
//! run as anyone else, both run as that user.

use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::thread;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use keepwire_driver::{Codec, Decoded};

use crate::protocols::postgres::{Postgres, Response, Startup, Step};

mod redis;
mod unbound;
pub use redis::RedisServer;
pub use unbound::{LOCAL_TEXT, LOCAL_ZONE, UnboundServer};

/// The user PostgreSQL runs as when the tests run as root.
pub const SERVER_USER: &str = "keepwire";
/// How long a server may take to be ready.
const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// Ports tried before giving up (another process may take a free port before the server
/// binds it).
const PORT_TRIES: usize = 5;

/// Why a server could not be started or used. Its text says what to do.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerError(String);

impl ServerError {
    fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ServerError {
    /// The message itself, so that `expect` prints it readably.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServerError {}

/// A signal the tests send to a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGSTOP: the process stops; the kernel still completes connects (into the accept
    /// queue) and buffers what arrives, but nothing is read, accepted or answered.
    Stop,
    /// SIGCONT: it goes on.
    Continue,
    /// SIGKILL (`kill -9`): the process ends at once, without closing anything itself.
    Kill,
}

impl Signal {
    fn number(self) -> i32 {
        match self {
            Self::Stop => libc::SIGSTOP,
            Self::Continue => libc::SIGCONT,
            Self::Kill => libc::SIGKILL,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Processes and cleanup

/// How a process is stopped for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// SIGKILL (memcached, Redis).
    Killed,
    /// SIGQUIT (immediate shutdown: the postmaster stops its backends), then SIGKILL if it
    /// has not exited within a few seconds.
    Postgres,
}

/// Everything alive that the process must clean up at exit.
#[derive(Debug, Default)]
struct Registry {
    processes: Vec<(u32, Kind)>,
    dirs: Vec<PathBuf>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    processes: Vec::new(),
    dirs: Vec::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Registers the exit handler (once) and removes directories of test binaries that died.
fn init_cleanup() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        // SAFETY: `at_exit` is an `extern "C" fn()` that does not unwind (it catches panics);
        // registering it has no other precondition.
        unsafe {
            libc::atexit(at_exit);
        }
        sweep_stale_dirs();
    });
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let registry = std::mem::take(&mut *registry());
        for &(pid, kind) in &registry.processes {
            stop_pid(pid, kind);
        }
        for dir in &registry.dirs {
            let _ = fs::remove_dir_all(dir);
        }
    });
}

/// Stops a child that no `Child` handle waits for any more (at exit).
fn stop_pid(pid: u32, kind: Kind) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    let first = match kind {
        Kind::Killed => libc::SIGKILL,
        Kind::Postgres => libc::SIGQUIT,
    };
    // SAFETY: `pid` is a child of this process that has not been reaped (the registry only
    // holds unreaped children), so it names no other process; kill has no memory effects.
    unsafe {
        libc::kill(pid, first);
        libc::kill(pid, libc::SIGCONT);
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let mut status = 0;
        // SAFETY: as above; `status` is a valid place for waitpid to write.
        let reaped = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if reaped != 0 {
            return; // reaped, or not our child any more
        }
        if Instant::now() > deadline {
            // SAFETY: as above.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

const DIR_PREFIX: &str = "keepwire-server-";

/// Removes the directories of test binaries that are no longer running (killed before they
/// could clean up).
fn sweep_stale_dirs() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next() else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// A fresh directory for one server (or the PostgreSQL template), registered for removal.
fn new_dir(what: &str) -> Result<PathBuf, ServerError> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    init_cleanup();
    let name = format!(
        "{DIR_PREFIX}{}-{what}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let dir = std::env::temp_dir().join(name);
    fs::create_dir_all(&dir).map_err(|e| ServerError::new(format!("create {dir:?}: {e}")))?;
    registry().dirs.push(dir.clone());
    Ok(dir)
}

fn remove_dir(dir: &Path) {
    let _ = fs::remove_dir_all(dir);
    registry().dirs.retain(|d| d != dir);
}

/// A server process: our child, signalled by pid, stopped and reaped when dropped.
#[derive(Debug)]
struct Process {
    child: Child,
    kind: Kind,
    log: PathBuf,
}

impl Process {
    fn spawn(command: &mut Command, kind: Kind, log: &Path) -> Result<Self, ServerError> {
        let program = command.get_program().to_string_lossy().into_owned();
        let log_file =
            fs::File::create(log).map_err(|e| ServerError::new(format!("create {log:?}: {e}")))?;
        let err_file = log_file
            .try_clone()
            .map_err(|e| ServerError::new(format!("log file: {e}")))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(err_file)
            .spawn()
            .map_err(|e| ServerError::new(format!("start {program}: {e}")))?;
        registry().processes.push((child.id(), kind));
        Ok(Self {
            child,
            kind,
            log: log.to_owned(),
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, signal: Signal) {
        let pid = libc::pid_t::try_from(self.pid()).expect("pids fit pid_t");
        // SAFETY: the child is not reaped while `self` exists (only `stop` waits for it, and
        // it consumes `self`), so `pid` names our child; kill has no memory effects.
        let done = unsafe { libc::kill(pid, signal.number()) };
        assert_eq!(
            done,
            0,
            "kill -{signal:?} {pid}: {}",
            io::Error::last_os_error()
        );
        if signal == Signal::Stop {
            self.wait_stopped();
        }
    }

    /// Waits until every thread of the process has stopped. `kill` only queues SIGSTOP: a
    /// thread running on another core meanwhile may still answer a request, which a test
    /// that counts on nothing being answered after the stop cannot tell from a bug.
    fn wait_stopped(&self) {
        let tasks = format!("/proc/{}/task", self.pid());
        let stopped = |task: fs::DirEntry| {
            fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                // The state follows the command name, which is in parentheses.
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with(['T', 't']))
            })
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        while !fs::read_dir(&tasks).is_ok_and(|dir| dir.filter_map(Result::ok).all(stopped)) {
            assert!(
                Instant::now() < deadline,
                "pid {} not stopped within 2 s of SIGSTOP",
                self.pid()
            );
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether it has exited (then with the end of its log).
    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!("{status}; its log ends:\n{}", self.log_tail())),
            _ => None,
        }
    }

    fn log_tail(&self) -> String {
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Stops it for good and reaps it.
    fn stop(mut self) {
        let pid = self.pid();
        match self.kind {
            Kind::Killed => {
                let _ = self.child.kill();
            }
            Kind::Postgres => {
                if self.child.try_wait().ok().flatten().is_none() {
                    self.signal_quietly(libc::SIGQUIT);
                    self.signal_quietly(libc::SIGCONT);
                    let deadline = Instant::now() + Duration::from_secs(5);
                    while self.child.try_wait().ok().flatten().is_none()
                        && Instant::now() < deadline
                    {
                        thread::sleep(Duration::from_millis(10));
                    }
                    let _ = self.child.kill();
                }
            }
        }
        let _ = self.child.wait();
        registry().processes.retain(|&(p, _)| p != pid);
    }

    fn signal_quietly(&self, signal: i32) {
        if let Ok(pid) = libc::pid_t::try_from(self.pid()) {
            // SAFETY: as in `signal`.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }
}

/// The program's path, or an error saying it is not installed.
fn find_program(program: &str, install: &str) -> Result<PathBuf, ServerError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            ServerError::new(format!(
                "`{program}` is not installed (not found on PATH): {install}. The tests \
                 that need it fail rather than skip."
            ))
        })
}

fn free_port() -> Result<u16, ServerError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| ServerError::new(format!("find a free port: {e}")))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The uid and gid to run servers as: [`SERVER_USER`] (created if need be) as root, `None`
/// (ourselves) otherwise.
fn server_user() -> Result<Option<(u32, u32)>, ServerError> {
    static USER: OnceLock<Result<Option<(u32, u32)>, ServerError>> = OnceLock::new();
    USER.get_or_init(|| {
        if !is_root() {
            return Ok(None);
        }
        let id = |flag: &str| -> Option<u32> {
            let out = Command::new("id").args([flag, SERVER_USER]).output().ok()?;
            String::from_utf8(out.stdout).ok()?.trim().parse().ok()
        };
        if id("-u").is_none() {
            let out = Command::new("useradd")
                .args(["-M", "-s", "/bin/false", SERVER_USER])
                .output()
                .map_err(|e| ServerError::new(format!("useradd {SERVER_USER}: {e}")))?;
            // 9: it exists (another test binary created it meanwhile).
            if !out.status.success() && out.status.code() != Some(9) {
                return Err(ServerError::new(format!(
                    "PostgreSQL refuses to run as root and useradd {SERVER_USER} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                )));
            }
        }
        match (id("-u"), id("-g")) {
            (Some(uid), Some(gid)) => Ok(Some((uid, gid))),
            _ => Err(ServerError::new(format!(
                "cannot read the ids of {SERVER_USER}"
            ))),
        }
    })
    .clone()
}

fn run_as(command: &mut Command, user: Option<(u32, u32)>) -> &mut Command {
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    command
}

fn chown(path: &Path, user: Option<(u32, u32)>) -> Result<(), ServerError> {
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(|e| ServerError::new(format!("chown {path:?}: {e}")))?;
    }
    Ok(())
}

/// Polls `ready` until it succeeds, the process exits, or [`READY_TIMEOUT`] passes.
fn wait_ready(
    process: &mut Process,
    what: &str,
    mut ready: impl FnMut() -> Result<(), String>,
) -> Result<(), ServerError> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(exit) = process.exited() {
            return Err(ServerError::new(format!("{what} exited: {exit}")));
        }
        let last = match ready() {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if Instant::now() > deadline {
            return Err(ServerError::new(format!(
                "{what} not ready within {READY_TIMEOUT:?} ({last}); its log ends:\n{}",
                process.log_tail()
            )));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Spawns a server that is stopped with SIGKILL and waits until the one answering on its port
/// is this process (`answering_pid`): another test's server may have taken the port first,
/// and ours then exits, but the port answers all the same.
fn spawn_answering(
    command: &mut Command,
    what: &str,
    log: &Path,
    answering_pid: impl Fn() -> io::Result<u32>,
) -> Result<Process, ServerError> {
    let mut process = Process::spawn(command, Kind::Killed, log)?;
    let ours = process.pid();
    let ready = wait_ready(&mut process, what, || match answering_pid() {
        Ok(pid) if pid == ours => Ok(()),
        Ok(pid) => Err(format!("the port is {what} {pid}'s, not ours ({ours})")),
        Err(e) => Err(e.to_string()),
    });
    match ready {
        Ok(()) => Ok(process),
        Err(e) => {
            process.stop();
            Err(e)
        }
    }
}

/// A server handle shared by the tests of one binary that run at the same time: started by
/// the first, stopped when the last lets go.
#[derive(Debug)]
pub struct Shared<T> {
    slot: Mutex<Weak<T>>,
}

impl<T> Shared<T> {
    /// An empty slot.
    pub const fn new() -> Self {
        Self {
            slot: Mutex::new(Weak::new()),
        }
    }

    /// The running server, or a new one from `start`.
    pub fn get(
        &self,
        start: impl FnOnce() -> Result<T, ServerError>,
    ) -> Result<Arc<T>, ServerError> {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(server) = slot.upgrade() {
            return Ok(server);
        }
        let server = Arc::new(start()?);
        *slot = Arc::downgrade(&server);
        Ok(server)
    }
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Self::new()
    }
}

// ---------------------------------------------------------------------------------------------
// memcached

/// A memcached process on 127.0.0.1 (`memcached -l 127.0.0.1 -p PORT -U 0`).
#[derive(Debug)]
pub struct MemcachedServer {
    process: Option<Process>,
    program: PathBuf,
    port: u16,
    dir: PathBuf,
}

impl MemcachedServer {
    /// Starts one on a free port and waits until it answers `version`.
    pub fn start() -> Result<Self, ServerError> {
        let program = find_program(
            "memcached",
            "install it with `apt-get install -y memcached` (.ci/run does)",
        )?;
        let mut server = Self {
            process: None,
            program,
            port: 0,
            dir: new_dir("memcached")?,
        };
        let mut last = None;
        for _ in 0..PORT_TRIES {
            server.port = free_port()?;
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e), // most likely the port was taken meanwhile
            }
        }
        Err(last.expect("tried at least once"))
    }

    fn spawn(&mut self) -> Result<(), ServerError> {
        let mut command = Command::new(&self.program);
        command
            .args([
                "-l",
                "127.0.0.1",
                "-U",
                "0",
                "-t",
                "2",
                "-c",
                "4096",
                "-m",
                "512",
            ])
            .args(["-p", &self.port.to_string()]);
        if is_root() {
            command.args(["-u", "nobody"]);
        }
        let addr = self.addr();
        let log = self.dir.join("log");
        self.process = Some(spawn_answering(&mut command, "memcached", &log, || {
            memcached_pid(addr)
        })?);
        Ok(())
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Its process id.
    ///
    /// # Panics
    /// If it is not running (killed and not restarted).
    pub fn pid(&self) -> u32 {
        self.running().pid()
    }

    fn running(&self) -> &Process {
        self.process.as_ref().expect("memcached is running")
    }

    /// Sends `signal` to it. [`Signal::Kill`] also reaps it; [`restart`](Self::restart)
    /// starts it again.
    pub fn signal(&mut self, signal: Signal) {
        self.running().signal(signal);
        if signal == Signal::Kill {
            if let Some(process) = self.process.take() {
                process.stop();
            }
        }
    }

    /// Starts it again on the same port, after [`Signal::Kill`]; returns the instant just
    /// before the new process was spawned (it cannot listen earlier) once it answers.
    pub fn restart(&mut self) -> Result<Instant, ServerError> {
        assert!(self.process.is_none(), "kill it first");
        let spawned = Instant::now();
        self.spawn()?;
        Ok(spawned)
    }
}

impl Drop for MemcachedServer {
    fn drop(&mut self) {
        if let Some(process) = self.process.take() {
            process.stop();
        }
        remove_dir(&self.dir);
    }
}

/// The pid of the memcached answering at `addr` (from `stats`).
fn memcached_pid(addr: SocketAddr) -> io::Result<u32> {
    memcached_ask(addr, "stats", "END\r\n")?
        .lines()
        .find_map(|line| line.strip_prefix("STAT pid ")?.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no pid in memcached's stats"))
}

/// Asks `version` on a fresh blocking connection.
#[cfg(test)]
fn memcached_version(addr: SocketAddr) -> io::Result<String> {
    let answer = memcached_ask(addr, "version", "\r\n")?;
    if answer.starts_with("VERSION ") {
        Ok(answer)
    } else {
        Err(io::Error::other(format!("unexpected answer {answer:?}")))
    }
}

/// Sends `command` on a fresh blocking connection and reads the answer up to `end`.
fn memcached_ask(addr: SocketAddr, command: &str, end: &str) -> io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    stream.write_all(format!("{command}\r\n").as_bytes())?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    while !answer.ends_with(end.as_bytes()) {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        answer.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

/// A PostgreSQL 15 server on 127.0.0.1: `postgres -D DIR -p PORT`, from a data directory
/// copied from one `initdb` per test binary.
///
/// Authentication over TCP: the superuser `postgres` is trusted; every other role logs in
/// with a clear-text password ([`create_role`](Self::create_role)).
#[derive(Debug)]
pub struct PostgresServer {
    process: Option<Process>,
    port: u16,
    dir: PathBuf,
}

/// The `pg_hba.conf` of every server.
const PG_HBA: &str = "\
local all all trust
host all postgres 127.0.0.1/32 trust
host all all 127.0.0.1/32 password
";

/// One `initdb` per test binary: the data directory every server copies.
fn template() -> Result<PathBuf, ServerError> {
    static TEMPLATE: OnceLock<Result<PathBuf, ServerError>> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let install = "PostgreSQL 15's initdb, pg_ctl and postgres must be on the PATH";
            let initdb = find_program("initdb", install)?;
            find_program("postgres", install)?;
            let user = server_user()?;
            let dir = new_dir("pg-template")?;
            chown(&dir, user)?;
            let data = dir.join("data");
            let out = run_as(&mut Command::new(initdb), user)
                .args([
                    "-N",
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "-D",
                ])
                .arg(&data)
                .current_dir(&dir)
                .output()
                .map_err(|e| ServerError::new(format!("run initdb: {e}")))?;
            if !out.status.success() {
                return Err(ServerError::new(format!(
                    "initdb failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )));
            }
            fs::write(data.join("pg_hba.conf"), PG_HBA)
                .map_err(|e| ServerError::new(format!("write pg_hba.conf: {e}")))?;
            chown(&data.join("pg_hba.conf"), user)?;
            Ok(data)
        })
        .clone()
}

impl PostgresServer {
    /// Starts one on a free port and waits until it takes queries.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(None, None)
    }

    /// Starts one with TLS on (`ssl = on`, presenting `cert_pem` with its key `key_pem`, as
    /// `server.crt` and `server.key` in its data directory); it still takes plaintext
    /// sessions too.
    pub fn start_with_tls(cert_pem: &str, key_pem: &str) -> Result<Self, ServerError> {
        Self::start_with(Some((cert_pem, key_pem)), None)
    }

    /// As [`start_with_tls`](Self::start_with_tls), and asks TLS clients for a certificate
    /// signed by `client_ca_pem` (`ssl_ca_file`): the role `cert_role` logs in over TLS
    /// with certificate authentication only (`hostssl ... cert`: the certificate's common
    /// name must be the role's name), and must present one; the other roles log in as
    /// before.
    pub fn start_with_mutual_tls(
        cert_pem: &str,
        key_pem: &str,
        client_ca_pem: &str,
        cert_role: &str,
    ) -> Result<Self, ServerError> {
        Self::start_with(Some((cert_pem, key_pem)), Some((client_ca_pem, cert_role)))
    }

    fn start_with(
        tls: Option<(&str, &str)>,
        client_certs: Option<(&str, &str)>,
    ) -> Result<Self, ServerError> {
        let template = template()?;
        let user = server_user()?;
        let dir = new_dir("postgres")?;
        chown(&dir, user)?;
        let copied = Command::new("cp")
            .arg("-a")
            .arg(&template)
            .arg(dir.join("data"))
            .output()
            .map_err(|e| ServerError::new(format!("copy the data directory: {e}")))?;
        if !copied.status.success() {
            remove_dir(&dir);
            return Err(ServerError::new(format!(
                "copy the data directory: {}",
                String::from_utf8_lossy(&copied.stderr)
            )));
        }
        let mut files = Vec::new();
        if let Some((cert, key)) = tls {
            files.extend([
                ("server.crt", cert.to_owned()),
                ("server.key", key.to_owned()),
            ]);
        }
        if let Some((ca, role)) = client_certs {
            files.push(("root.crt", ca.to_owned()));
            files.push((
                "pg_hba.conf",
                format!("hostssl all {role} 127.0.0.1/32 cert\n{PG_HBA}"),
            ));
        }
        for (name, text) in files {
            let file = dir.join("data").join(name);
            let written = fs::write(&file, text).and_then(|()| {
                fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            });
            if let Err(e) = written.map_err(|e| ServerError::new(format!("{name}: {e}"))) {
                remove_dir(&dir);
                return Err(e);
            }
            chown(&file, user)?;
        }
        let mut last = None;
        for _ in 0..PORT_TRIES {
            let port = free_port()?;
            match Self::spawn(&dir, port, user, tls.is_some(), client_certs.is_some()) {
                Ok(process) => {
                    return Ok(Self {
                        process: Some(process),
                        port,
                        dir,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        remove_dir(&dir);
        Err(last.expect("tried at least once"))
    }

    fn spawn(
        dir: &Path,
        port: u16,
        user: Option<(u32, u32)>,
        ssl: bool,
        client_certs: bool,
    ) -> Result<Process, ServerError> {
        let mut command = Command::new(find_program(
            "postgres",
            "PostgreSQL 15 must be on the PATH",
        )?);
        run_as(&mut command, user)
            .arg("-D")
            .arg(dir.join("data"))
            .arg("-k")
            .arg(dir)
            .args(["-p", &port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "shared_buffers=32MB"])
            .args(["-c", "max_connections=200"])
            .args(["-c", if ssl { "ssl=on" } else { "ssl=off" }])
            .current_dir(dir);
        if client_certs {
            command.args(["-c", "ssl_ca_file=root.crt"]);
        }
        let mut process = Process::spawn(&mut command, Kind::Postgres, &dir.join("log"))?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let ready = wait_ready(&mut process, "postgres", || {
            query(addr, "postgres", None, "SELECT 1")
                .map(drop)
                .map_err(|e| e.to_string())
        });
        match ready {
            Ok(()) => Ok(process),
            Err(e) => {
                process.stop();
                Err(e)
            }
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The postmaster's process id.
    pub fn pid(&self) -> u32 {
        self.process.as_ref().expect("postgres is running").pid()
    }

    /// Sends `signal` to the postmaster (its backends, one process per session, go on:
    /// [`Signal::Stop`] freezes accepting new sessions, not the ones already there).
    pub fn signal(&self, signal: Signal) {
        self.process
            .as_ref()
            .expect("postgres is running")
            .signal(signal);
    }

    /// Runs `sql` as the superuser on a connection of its own (blocking).
    pub fn query(&self, sql: &str) -> Result<Response, ServerError> {
        query(self.addr(), "postgres", None, sql)
            .map_err(|e| ServerError::new(format!("{sql}: {e}")))
    }

    /// Creates a role that logs in with `password` (clear text over TCP).
    pub fn create_role(&self, name: &str, password: &str) -> Result<(), ServerError> {
        let sql = format!("CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'");
        self.query(&sql)?
            .into_result()
            .map(drop)
            .map_err(|e| ServerError::new(format!("{sql}: {e}")))
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if let Some(process) = self.process.take() {
            process.stop();
        }
        remove_dir(&self.dir);
    }
}

/// One query on a fresh blocking connection: startup as `user`, then the query.
pub fn query(
    addr: SocketAddr,
    user: &str,
    password: Option<&str>,
    sql: &str,
) -> Result<Response, Box<dyn std::error::Error + Send + Sync>> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut startup = Startup::new(user, "postgres");
    if let Some(password) = password {
        startup = startup.password(password);
    }
    stream.write_all(&startup.message())?;
    let mut received = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        match startup.step(&mut received)? {
            Step::Ready => break,
            Step::Send(bytes) => stream.write_all(&bytes)?,
            Step::Read => {
                let n = stream.read(&mut chunk)?;
                if n == 0 {
                    return Err("the server closed the connection during startup".into());
                }
                received.extend_from_slice(&chunk[..n]);
            }
        }
    }
    let codec = Postgres::new();
    let mut request = BytesMut::new();
    codec.encode(sql.as_bytes(), None, &mut request)?;
    stream.write_all(&request)?;
    let mut decoder = codec.decoder();
    loop {
        let decoded = decoder
            .decode(&mut received)
            .map_err(|v| format!("protocol violation: {v}"))?;
        if let Some(Decoded::Next(payload)) = decoded {
            return Ok(Response::parse(&payload)?);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        received.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_starts_stops_and_restarts_on_its_port() {
        let mut server = MemcachedServer::start().unwrap();
        let (addr, dir) = (server.addr(), server.dir.clone());
        assert!(memcached_version(addr).unwrap().starts_with("VERSION 1.6"));
        assert_eq!(memcached_pid(addr).unwrap(), server.pid(), "ours answers");
        server.signal(Signal::Kill);
        assert!(memcached_version(addr).is_err(), "gone");
        server.restart().unwrap();
        assert_eq!(memcached_pid(addr).unwrap(), server.pid(), "back on {addr}");
        let pid = server.pid();
        drop(server);
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "reaped");
        assert!(!dir.exists(), "removed");
    }

    #[test]
    fn postgres_answers_trust_and_password_logins() {
        let server = PostgresServer::start().unwrap();
        let dir = server.dir.clone();
        let version = server.query("SHOW server_version").unwrap();
        assert!(version.value(0, 0).unwrap().starts_with(b"15."));
        server.create_role("tester", "pw").unwrap();
        let who = query(server.addr(), "tester", Some("pw"), "SELECT current_user").unwrap();
        assert_eq!(who.value(0, 0), Some(&b"tester"[..]));
        let refused = query(server.addr(), "tester", Some("nope"), "SELECT 1").unwrap_err();
        assert!(refused.to_string().contains("28P01"), "{refused}");
        let pid = server.pid();
        drop(server);
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "reaped");
        assert!(!dir.exists(), "removed");
    }
}
