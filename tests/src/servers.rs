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
use std::io;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::thread;
use std::time::{Duration, Instant};

mod memcached;
mod postgres;
mod redis;
mod unbound;
pub use memcached::MemcachedServer;
pub use postgres::{PostgresServer, query};
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
