//! A PostgreSQL 15 process of the test binary's own, copied from one `initdb` per test binary,
//! and blocking queries on it through the `postgres` codec.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::BytesMut;
use keepwire_driver::{Codec, Decoded};

use super::{
    Kind, PORT_TRIES, Process, ServerError, Signal, chown, find_program, free_port, new_dir,
    remove_dir, run_as, server_user, wait_ready,
};
use crate::protocols::postgres::{Postgres, Response, Startup, Step};

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
