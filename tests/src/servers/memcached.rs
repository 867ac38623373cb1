//! A memcached process of the test binary's own, and blocking side connections that ask it
//! for its version and pid.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{
    PORT_TRIES, Process, ServerError, Signal, find_program, free_port, is_root, new_dir,
    remove_dir, spawn_answering,
};

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

#[cfg(test)]
mod tests {
    use std::path::Path;

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
}
