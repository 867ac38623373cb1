//! A Redis process of the test binary's own, and a blocking side connection to administer it
//! (`CLIENT PAUSE`, `CLIENT KILL`, `CONFIG SET`) while a keepwire client uses it.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use bytes::BytesMut;
use keepwire_driver::{Codec, Decoded};

use super::{
    Kind, PORT_TRIES, Process, ServerError, Signal, find_program, free_port, new_dir, remove_dir,
    wait_ready,
};
use crate::protocols::redis::{self, Redis, Reply};

/// A Redis server on 127.0.0.1 (`redis-server --bind 127.0.0.1 --port PORT`), with no
/// persistence, its working directory a fresh one of its own.
#[derive(Debug)]
pub struct RedisServer {
    process: Option<Process>,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts one on a free port and waits until it answers `PING` with its own pid.
    pub fn start() -> Result<Self, ServerError> {
        let program = find_program(
            "redis-server",
            "install it with `apt-get install -y redis-server` (.ci/run does)",
        )?;
        let mut server = Self {
            process: None,
            port: 0,
            dir: new_dir("redis")?,
        };
        let mut last = None;
        for _ in 0..PORT_TRIES {
            server.port = free_port()?;
            match server.spawn(&program) {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e), // most likely the port was taken meanwhile
            }
        }
        Err(last.expect("tried at least once"))
    }

    fn spawn(&mut self, program: &PathBuf) -> Result<(), ServerError> {
        let mut command = Command::new(program);
        command
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(["--daemonize", "no", "--logfile", ""])
            .arg("--dir")
            .arg(&self.dir);
        let mut process = Process::spawn(&mut command, Kind::Killed, &self.dir.join("log"))?;
        let ours = process.pid();
        let addr = self.addr();
        // Ready once *this* process answers: another test's server may have taken the port.
        let ready = wait_ready(&mut process, "redis-server", || match server_pid(addr) {
            Ok(pid) if pid == ours => Ok(()),
            Ok(pid) => Err(format!(
                "the port is redis-server {pid}'s, not ours ({ours})"
            )),
            Err(e) => Err(e.to_string()),
        });
        match ready {
            Ok(()) => {
                self.process = Some(process);
                Ok(())
            }
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

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process
            .as_ref()
            .expect("redis-server is running")
            .pid()
    }

    /// Sends `signal` to it.
    pub fn signal(&self, signal: Signal) {
        self.process
            .as_ref()
            .expect("redis-server is running")
            .signal(signal);
    }

    /// Runs one command on a connection of its own (opened for it, then closed) and returns
    /// the answer; panics if the server cannot be reached. For what a test does to the server
    /// beside the client it tests: `CLIENT PAUSE`, `CLIENT KILL`, `CONFIG SET`.
    pub fn admin<I, A>(&self, args: I) -> Reply
    where
        I: IntoIterator<Item = A>,
        A: AsRef<[u8]>,
    {
        let request = redis::command(args);
        ask(self.addr(), &request)
            .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(&request)))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(process) = self.process.take() {
            process.stop();
        }
        remove_dir(&self.dir);
    }
}

/// The pid of the server answering at `addr` (`INFO server`'s `process_id`).
fn server_pid(addr: SocketAddr) -> io::Result<u32> {
    let info = ask(addr, &redis::command(["INFO", "server"]))?;
    let text = info
        .as_bulk()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .ok_or_else(|| io::Error::other(format!("INFO answered {info:?}")))?;
    text.lines()
        .find_map(|line| line.strip_prefix("process_id:")?.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no process_id in INFO server"))
}

/// Sends `request` on a fresh blocking connection and reads one answer.
fn ask(addr: SocketAddr, request: &[u8]) -> io::Result<Reply> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(request)?;
    let mut decoder = Redis::new().decoder();
    let mut inbound = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        match decoder.decode(&mut inbound) {
            Ok(Some(Decoded::Next(payload))) => {
                return Reply::parse(&payload).map_err(io::Error::other);
            }
            Ok(_) => {}
            Err(violation) => return Err(io::Error::other(format!("{violation:?}"))),
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        inbound.extend_from_slice(&chunk[..n]);
    }
}
