//! A Redis process of the test binary's own, with TLS if asked for, and a blocking side
//! connection to administer it (`CLIENT PAUSE`, `CLIENT KILL`, `CONFIG SET`) while a keepwire
//! client uses it.

use std::fs;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bytes::BytesMut;
use keepwire_driver::{Codec, Decoded};

use super::{
    PORT_TRIES, Process, ServerError, find_program, free_port, new_dir, remove_dir, spawn_answering,
};
use crate::protocols::redis::{self, Redis, Reply};

/// A Redis server on 127.0.0.1 (`redis-server --bind 127.0.0.1 --port PORT`), with no
/// persistence, its working directory a fresh one of its own; with TLS, a second port that
/// speaks only TLS (`--tls-port`), the plain one staying for [`admin`](Self::admin).
#[derive(Debug)]
pub struct RedisServer {
    process: Option<Process>,
    port: u16,
    /// The TLS port, with TLS.
    tls_port: Option<u16>,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts one on a free port and waits until it answers `PING` with its own pid.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(None)
    }

    /// As [`start`](Self::start), with a TLS port ([`tls_addr`](Self::tls_addr)) serving
    /// `cert_pem` with `key_pem`; with `client_ca_pem`, a TLS client must present a certificate
    /// that CA signed (`--tls-auth-clients yes`), else none is asked for.
    pub fn start_with_tls(
        cert_pem: &str,
        key_pem: &str,
        client_ca_pem: Option<&str>,
    ) -> Result<Self, ServerError> {
        Self::start_with(Some((cert_pem, key_pem, client_ca_pem)))
    }

    fn start_with(tls: Option<(&str, &str, Option<&str>)>) -> Result<Self, ServerError> {
        let program = find_program(
            "redis-server",
            "install it with `apt-get install -y redis-server` (.ci/run does)",
        )?;
        let mut server = Self {
            process: None,
            port: 0,
            tls_port: None,
            dir: new_dir("redis")?,
        };
        let mut tls_args = Vec::new();
        if let Some((cert_pem, key_pem, client_ca_pem)) = tls {
            let file = |name: &str, pem: &str| -> Result<String, ServerError> {
                let path = server.dir.join(name);
                fs::write(&path, pem)
                    .map_err(|e| ServerError::new(format!("write {path:?}: {e}")))?;
                Ok(path.to_string_lossy().into_owned())
            };
            tls_args.extend(["--tls-cert-file".into(), file("cert.pem", cert_pem)?]);
            tls_args.extend(["--tls-key-file".into(), file("key.pem", key_pem)?]);
            match client_ca_pem {
                Some(ca) => {
                    tls_args.extend(["--tls-ca-cert-file".into(), file("ca.pem", ca)?]);
                    tls_args.extend(["--tls-auth-clients".into(), "yes".into()]);
                }
                None => tls_args.extend(["--tls-auth-clients".into(), "no".into()]),
            }
        }
        let mut last = None;
        for _ in 0..PORT_TRIES {
            server.port = free_port()?;
            if tls.is_some() {
                server.tls_port = Some(free_port()?);
            }
            match server.spawn(&program, &tls_args) {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e), // most likely a port was taken meanwhile
            }
        }
        Err(last.expect("tried at least once"))
    }

    fn spawn(&mut self, program: &Path, tls_args: &[String]) -> Result<(), ServerError> {
        let mut command = Command::new(program);
        command
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(["--daemonize", "no", "--logfile", ""])
            .arg("--dir")
            .arg(&self.dir);
        if let Some(port) = self.tls_port {
            command
                .args(["--tls-port", &port.to_string()])
                .args(tls_args);
        }
        let addr = self.addr();
        let log = self.dir.join("log");
        self.process = Some(spawn_answering(&mut command, "redis-server", &log, || {
            server_pid(addr)
        })?);
        Ok(())
    }

    /// Where it listens (plain TCP).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Where it listens for TLS.
    ///
    /// # Panics
    /// If it was started without TLS.
    pub fn tls_addr(&self) -> SocketAddr {
        let port = self.tls_port.expect("started with TLS");
        SocketAddr::from(([127, 0, 0, 1], port))
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
