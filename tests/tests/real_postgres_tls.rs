//! PostgreSQL 15 with `ssl = on` and a certificate made by the test (rcgen), on every runtime,
//! each through its own runtime crate's `tls` feature: the handshake hook sends PostgreSQL's
//! SSLRequest, reads the server's `S`, upgrades the stream to TLS with the runtime crate's
//! `tls::connect`, then runs the startup exchange over TLS. Simple queries then run over the
//! TLS session: the server itself says the session is encrypted (`pg_stat_ssl`), rows come
//! back, an error answers its own query and leaves the connection usable, and pipelined
//! queries are answered in order.
//!
//! Self-contained (a minimal simple-query codec and server launcher of its own), so that it
//! does not depend on the PostgreSQL client under `tests/src/protocols/`.
//!
//! Needs root (PostgreSQL refuses to run as root: the test creates a system user
//! `keepwire` for the server, as `useradd -M -s /bin/false`), and `initdb` and `postgres`
//! on the PATH; without them it fails with the reason.

use std::fs;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant as WallClock};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use keepwire_driver::proto::Violation;
use keepwire_driver::tls::TlsConfig;
use keepwire_driver::{
    ClientBuilder, Codec, Correlation, Decoded, Decoder, EncodeError, HandshakeError, HandshakeIo,
    Runtime, Target,
};
use keepwire_tests::tls::{Pki, TlsOn};
use keepwire_tests::{spawn, test_config, test_tls_on_every_runtime};

/// PostgreSQL's SSLRequest: length 8, code 80877103.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
/// The system user the server runs as (the one the PostgreSQL client's tests use too).
const SERVER_USER: &str = "keepwire";

/// A PostgreSQL server with TLS on, in a fresh data directory, stopped and removed on drop.
struct Postgres {
    addr: SocketAddr,
    dir: PathBuf,
    server: Child,
}

impl Postgres {
    fn start(pki: &Pki) -> Result<Self, String> {
        ensure_user()?;
        static SERVERS: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "keepwire-pg-tls-{}-{}-{}",
            std::process::id(),
            SERVERS.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let data = dir.join("data");
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        run("chown", &[&format!("{SERVER_USER}:"), path(&dir)?])?;
        run(
            "runuser",
            &[
                "-u",
                SERVER_USER,
                "--",
                "initdb",
                "-D",
                path(&data)?,
                "-A",
                "trust",
                "-U",
                "postgres",
            ],
        )?;
        for (name, pem) in [
            ("server.crt", pki.server_cert_pem()),
            ("server.key", pki.server_key_pem()),
        ] {
            let file = data.join(name);
            fs::write(&file, pem).map_err(|e| format!("{}: {e}", file.display()))?;
            fs::set_permissions(&file, fs::Permissions::from_mode(0o600))
                .map_err(|e| format!("{}: {e}", file.display()))?;
            run("chown", &[&format!("{SERVER_USER}:"), path(&file)?])?;
        }
        let port = fresh_port()?;
        let server = Command::new("runuser")
            .args(["-u", SERVER_USER, "--", "postgres", "-D", path(&data)?])
            .args(["-p", &port.to_string(), "-k", path(&dir)?])
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "ssl=on"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("postgres: {e}"))?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let server = Self { addr, dir, server };
        let started = WallClock::now();
        while TcpStream::connect(addr).is_err() {
            if started.elapsed() > Duration::from_secs(20) {
                return Err("postgres did not listen within 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT to the postmaster (its pid heads postmaster.pid): PostgreSQL's fast
        // shutdown; runuser then exits with it.
        let pid = fs::read_to_string(self.dir.join("data/postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().map(str::to_owned));
        match pid {
            Some(pid) => {
                let _ = Command::new("kill").args(["-INT", &pid]).status();
            }
            None => {
                let _ = self.server.kill();
            }
        }
        let _ = self.server.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn ensure_user() -> Result<(), String> {
    let exists = Command::new("id")
        .arg(SERVER_USER)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if exists {
        return Ok(());
    }
    match run("useradd", &["-M", "-s", "/bin/false", SERVER_USER]) {
        // Another test of this run created it meanwhile.
        Err(_)
            if Command::new("id")
                .arg(SERVER_USER)
                .output()
                .is_ok_and(|o| o.status.success()) =>
        {
            Ok(())
        }
        other => other,
    }
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program).args(args).output().map_err(|e| {
        format!("{program}: {e} (PostgreSQL's tests need root and initdb/postgres)")
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn path(p: &std::path::Path) -> Result<&str, String> {
    p.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", p.display()))
}

fn fresh_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

/// The startup message for user `postgres`, database `postgres`.
fn startup_message() -> Bytes {
    let params: &[u8] = b"user\0postgres\0database\0postgres\0\0";
    let mut m = BytesMut::new();
    m.put_i32(8 + params.len() as i32);
    m.put_i32(196_608); // protocol 3.0
    m.put_slice(params);
    m.freeze()
}

/// The handshake: SSLRequest, `S`, TLS with the runtime crate's `tls::connect`, then the
/// startup exchange over TLS up to ReadyForQuery.
async fn handshake(
    on: TlsOn,
    tls: TlsConfig,
    mut io: HandshakeIo,
) -> Result<HandshakeIo, HandshakeError> {
    io.write_all(&SSL_REQUEST).await?;
    let mut answer = [0u8; 1];
    io.read_exact(&mut answer).await?;
    if answer[0] != b'S' {
        return Err(HandshakeError::failed(format!(
            "the server refused TLS (answered {:?})",
            answer[0] as char
        )));
    }
    let mut io = on.connect(&tls, io).await?;
    io.write_all(&startup_message()).await?;
    let mut received = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some((ty, body)) = message(&mut received) {
            match ty {
                b'R' if body.len() >= 4 && body[..4] == [0, 0, 0, 0] => {} // AuthenticationOk
                b'R' => return Err(HandshakeError::auth("trust authentication expected")),
                b'E' => return Err(HandshakeError::failed(error_text(&body))),
                b'Z' => return Ok(io),
                _ => {} // ParameterStatus, BackendKeyData, notices
            }
        }
        let n = io.read(&mut chunk).await?;
        if n == 0 {
            return Err(HandshakeError::failed("closed during startup"));
        }
        received.extend_from_slice(&chunk[..n]);
    }
}

/// Cuts one complete message (type, body) off the front of `buf`.
fn message(buf: &mut BytesMut) -> Option<(u8, Bytes)> {
    if buf.len() < 5 {
        return None;
    }
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if len < 4 || buf.len() < 1 + len {
        return None;
    }
    let ty = buf[0];
    buf.advance(5);
    Some((ty, buf.split_to(len - 4).freeze()))
}

fn error_text(body: &[u8]) -> String {
    body.split(|&b| b == 0)
        .filter(|f| f.first() == Some(&b'M'))
        .map(|f| String::from_utf8_lossy(&f[1..]).into_owned())
        .next()
        .unwrap_or_else(|| "an error without a message".into())
}

/// PostgreSQL's simple query protocol, in order: a request is a `Q` message, a response every
/// message up to and including ReadyForQuery.
#[derive(Debug)]
struct SimpleQuery;

impl Codec for SimpleQuery {
    fn correlation(&self) -> Correlation {
        Correlation::InOrder
    }

    fn encode(&self, sql: &[u8], _: Option<u64>, dst: &mut BytesMut) -> Result<(), EncodeError> {
        if sql.contains(&0) {
            return Err(EncodeError::Invalid("a query holds no NUL".into()));
        }
        dst.put_u8(b'Q');
        dst.put_i32(sql.len() as i32 + 5);
        dst.put_slice(sql);
        dst.put_u8(0);
        Ok(())
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(SimpleQueryDecoder { scanned: 0 })
    }
}

#[derive(Debug)]
struct SimpleQueryDecoder {
    /// Bytes of `buf` already known to be complete messages of the response being read.
    scanned: usize,
}

impl Decoder for SimpleQueryDecoder {
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Violation> {
        loop {
            let rest = &buf[self.scanned..];
            if rest.len() < 5 {
                return Ok(None);
            }
            let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
            if !(4..=64 * 1024 * 1024).contains(&len) {
                return Err(Violation::MalformedHeader);
            }
            if rest.len() < 1 + len {
                return Ok(None);
            }
            let ty = rest[0];
            self.scanned += 1 + len;
            if ty == b'Z' {
                let response = buf.split_to(self.scanned).freeze();
                self.scanned = 0;
                return Ok(Some(Decoded::Next(response)));
            }
        }
    }
}

/// A response's rows (first column, text), or its error message.
fn rows(response: &Bytes) -> Result<Vec<String>, String> {
    let mut buf = BytesMut::from(&response[..]);
    let mut rows = Vec::new();
    while let Some((ty, body)) = message(&mut buf) {
        match ty {
            b'D' => {
                let mut body = &body[..];
                let _columns = body.get_i16();
                let len = body.get_i32();
                rows.push(if len < 0 {
                    "NULL".to_owned()
                } else {
                    String::from_utf8_lossy(&body[..len as usize]).into_owned()
                });
            }
            b'E' => return Err(error_text(&body)),
            _ => {}
        }
    }
    Ok(rows)
}

async fn postgres_queries_over_tls(runtime: Arc<dyn Runtime>, on: TlsOn) {
    let pki = Pki::new();
    let server = Postgres::start(&pki)
        .unwrap_or_else(|e| panic!("PostgreSQL with TLS could not start: {e}"));
    let tls = pki.client_config();
    let mut config = test_config();
    config.setup_timeout = Duration::from_secs(5);
    config.setup_timeout_max = Duration::from_secs(5);
    let client = ClientBuilder::new(config)
        .node(server.addr)
        .codec(SimpleQuery)
        .handshake(move |io: HandshakeIo| handshake(on, tls.clone(), io))
        .build(Arc::clone(&runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    let query = |sql: &str| {
        let client = client.clone();
        let sql = sql.to_owned();
        async move {
            let response = client
                .send(Target::Node(node), sql, Duration::from_secs(10))
                .await
                .expect("an answer");
            rows(&response)
        }
    };

    // PostgreSQL listens before it takes sessions ("the database system is starting up"
    // fails the handshake): wait until one connection is set up.
    let started = WallClock::now();
    loop {
        match client
            .send(Target::Node(node), "SELECT 1", Duration::from_secs(5))
            .await
        {
            Ok(_) => break,
            Err(e) if started.elapsed() < Duration::from_secs(20) => {
                println!("{on:?}: not yet ({e}); again");
                keepwire_tests::sleep(&*runtime, Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no session with PostgreSQL within 20 s: {e}"),
        }
    }
    let connects = client.counters().await.unwrap().connects;

    // The server says this session is encrypted.
    let ssl =
        query("SELECT ssl::text || ' ' || version FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .await
            .unwrap();
    println!("{on:?}: pg_stat_ssl says {ssl:?}");
    assert!(ssl.len() == 1 && ssl[0].starts_with("true TLS"), "{ssl:?}");

    assert_eq!(query("SELECT 1").await.unwrap(), ["1"]);
    assert_eq!(
        query("CREATE TEMP TABLE kv (k int primary key, v text)")
            .await
            .unwrap(),
        Vec::<String>::new()
    );
    query("INSERT INTO kv SELECT g, 'value ' || g FROM generate_series(1, 1000) g")
        .await
        .unwrap();
    assert_eq!(query("SELECT count(*) FROM kv").await.unwrap(), ["1000"]);
    assert_eq!(
        query("SELECT v FROM kv WHERE k = 42").await.unwrap(),
        ["value 42"]
    );
    // A large row, more than one TLS record each way.
    let big = query("SELECT repeat('x', 200000)").await.unwrap();
    assert_eq!(big[0].len(), 200_000);
    // An error answers its own query; the connection stays usable.
    let error = query("SELECT 1/0").await.unwrap_err();
    assert!(error.contains("division by zero"), "{error}");
    assert_eq!(query("SELECT 2").await.unwrap(), ["2"]);

    // Pipelined: 50 queries at once on the one connection, each answered with its own row.
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let q = query(&format!("SELECT v FROM kv WHERE k = {}", i + 1));
            spawn(&*runtime, async move { (i + 1, q.await) })
        })
        .collect();
    for task in tasks {
        let (k, rows) = task.join().await;
        assert_eq!(rows.unwrap(), [format!("value {k}")]);
    }
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.connects, connects, "one connection: {counters:?}");
    client.shutdown().await;
    drop(server);
}

test_tls_on_every_runtime!(postgres_queries_over_tls);
