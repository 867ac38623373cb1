//! PostgreSQL 15 with `ssl = on` and a certificate made by the test (rcgen), on every runtime,
//! each through its own runtime crate's `tls` feature (`keepwire_tokio::tls`,
//! `keepwire_smol::tls`, `keepwire_async_std::tls`): the handshake hook sends PostgreSQL's
//! SSLRequest, reads the server's `S`, upgrades the stream to TLS with the crate's
//! `tls::connect` (verifying the server's certificate against the test CA), then runs the
//! PostgreSQL client's startup ([`Startup::run`]) over TLS. The queries are the plaintext
//! client's (`real_postgres.rs`: trust and clear-text password logins, several statements with
//! NULLs and tags, an error that leaves the stream aligned, 64 tasks pipelining on one
//! connection), and the server itself says the session is encrypted (`pg_stat_ssl`).

use std::sync::Arc;
use std::time::Duration;

use keepwire_driver::tls::TlsConfig;
use keepwire_driver::{Client, ClientBuilder, HandshakeError, HandshakeIo, Runtime};
use keepwire_proto::Config;
use keepwire_tests::pg::{pipelined, query, value};
use keepwire_tests::protocols::postgres::{Postgres, Startup};
use keepwire_tests::servers::{PostgresServer, Shared};
use keepwire_tests::tls::{Pki, TlsOn};
use keepwire_tests::{bounded, runtime_name, test_config, test_tls_on_every_runtime};

/// PostgreSQL's SSLRequest: length 8, code 80877103.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
/// Whether the server sees this session encrypted, and with which TLS version.
const SSL_OF_THIS_SESSION: &str =
    "SELECT ssl::text || ' ' || version FROM pg_stat_ssl WHERE pid = pg_backend_pid()";
/// The role that logs in with a clear-text password (over TLS here).
const APP: (&str, &str) = ("app", "app-secret");

/// The TLS server, and the client configuration that trusts its certificate.
static SERVER: Shared<(PostgresServer, TlsConfig)> = Shared::new();

/// The shared server (started by the first test that needs it, stopped after the last).
fn server() -> Arc<(PostgresServer, TlsConfig)> {
    SERVER
        .get(|| {
            let pki = Pki::new();
            let server =
                PostgresServer::start_with_tls(pki.server_cert_pem(), pki.server_key_pem())?;
            server.create_role(APP.0, APP.1)?;
            Ok((server, pki.client_config()))
        })
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The test configuration with room for a fork per session and a TLS handshake on a loaded
/// machine.
fn config() -> Config {
    let mut config = test_config();
    config.setup_timeout = Duration::from_secs(2);
    config.setup_timeout_max = Duration::from_secs(4);
    config.write_timeout = Duration::from_secs(2);
    config
}

/// SSLRequest, `S`, TLS with `on`'s crate, then `startup` over TLS.
async fn tls_startup(
    on: TlsOn,
    tls: TlsConfig,
    startup: Startup,
    mut io: HandshakeIo,
) -> Result<HandshakeIo, HandshakeError> {
    io.write_all(&SSL_REQUEST).await?;
    let mut answer = [0u8; 1];
    io.read_exact(&mut answer).await?;
    if answer[0] != b'S' {
        return Err(HandshakeError::failed(format!(
            "the server refused TLS (answered {:?})",
            char::from(answer[0])
        )));
    }
    let io = on.connect(&tls, io).await?;
    startup.run(io).await
}

fn client(
    runtime: &Arc<dyn Runtime>,
    server: &(PostgresServer, TlsConfig),
    on: TlsOn,
    startup: Startup,
) -> Client {
    let tls = server.1.clone();
    ClientBuilder::new(config())
        .node(server.0.addr())
        .codec(Postgres::new())
        .handshake(move |io: HandshakeIo| tls_startup(on, tls.clone(), startup.clone(), io))
        .build(Arc::clone(runtime))
        .unwrap()
}

fn superuser() -> Startup {
    Startup::new("postgres", "postgres")
}

/// The plaintext client's queries and logins, over TLS.
async fn queries_and_logins_over_tls(runtime: Arc<dyn Runtime>, on: TlsOn) {
    let server = server();
    bounded(
        &*runtime,
        Duration::from_secs(20),
        "queries and logins over TLS",
        async {
            // Trust.
            let admin = client(&runtime, &server, on, superuser());
            let ssl = value(&admin, SSL_OF_THIS_SESSION).await;
            println!("[postgres over TLS, {on:?}] pg_stat_ssl: {ssl}");
            assert!(ssl.starts_with("true TLS"), "{ssl}");
            assert_eq!(value(&admin, "SELECT current_user").await, "postgres");
            // Several statements, NULLs, a command tag.
            let response = query(
                &admin,
                "SELECT 1 AS a, NULL AS b; SELECT 'x' UNION ALL SELECT 'y'",
            )
            .await
            .into_result()
            .unwrap();
            assert_eq!(response.results.len(), 2);
            assert_eq!(response.results[0].columns, ["a", "b"]);
            assert_eq!(response.value(0, 1), None);
            assert_eq!(response.results[1].tag, "SELECT 2");
            // An error is an answer like any other: the stream stays aligned.
            let error = query(&admin, "SELECT * FROM no_such_table").await;
            assert_eq!(error.into_result().unwrap_err().code, "42P01");
            assert_eq!(
                value(&admin, "SELECT 'after the error'").await,
                "after the error"
            );
            // A row larger than several TLS records.
            assert_eq!(
                value(&admin, "SELECT repeat('x', 200000)").await.len(),
                200_000
            );

            // Clear-text password, inside TLS.
            let app = client(
                &runtime,
                &server,
                on,
                Startup::new(APP.0, "postgres").password(APP.1),
            );
            assert_eq!(value(&app, "SELECT current_user").await, "app");
            let app_ssl = value(&app, SSL_OF_THIS_SESSION).await;
            assert!(app_ssl.starts_with("true TLS"), "{app_ssl}");
            admin.shutdown().await;
            app.shutdown().await;
        },
    )
    .await;
}

/// 64 tasks pipelining on one TLS connection, each getting its own answers.
async fn many_tasks_get_their_own_answers_over_tls(runtime: Arc<dyn Runtime>, on: TlsOn) {
    const TASKS: usize = 64;
    const REQUESTS: usize = 100;
    let server = server();
    let name = runtime_name(&*runtime);
    bounded(
        &*runtime,
        Duration::from_secs(60),
        "64 × 100 queries over TLS",
        async {
            let client = client(&runtime, &server, on, superuser());
            let took = pipelined(&runtime, &client, TASKS, REQUESTS).await;
            println!(
                "[postgres over TLS 64 × 100, {name}] {} queries in {took:?}, 0 mismatches",
                TASKS * REQUESTS
            );
            client.shutdown().await;
        },
    )
    .await;
}

test_tls_on_every_runtime!(
    queries_and_logins_over_tls,
    many_tasks_get_their_own_answers_over_tls,
);
