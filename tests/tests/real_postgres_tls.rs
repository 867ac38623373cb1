//! PostgreSQL 15 with `ssl = on` and a certificate made by the test (rcgen), on every runtime,
//! each through its own runtime crate's `tls` feature (`keepwire_tokio::tls`,
//! `keepwire_smol::tls`, `keepwire_async_std::tls`): the handshake hook sends PostgreSQL's
//! SSLRequest, reads the server's `S`, upgrades the stream to TLS with the crate's
//! `tls::connect` (verifying the server's certificate against the test CA), then runs the
//! PostgreSQL client's startup ([`Startup::run`]) over TLS. The queries are the plaintext
//! client's (`real_postgres.rs`: trust and clear-text password logins, several statements with
//! NULLs and tags, an error that leaves the stream aligned, 64 tasks pipelining on one
//! connection), and the server itself says the session is encrypted (`pg_stat_ssl`). A second
//! server asks for client certificates (`ssl_ca_file`, `hostssl ... cert`): a certificate its
//! CA signed logs in; another CA's, or none, is a typed, final refusal.

use std::sync::Arc;
use std::time::Duration;

use keepwire_driver::tls::TlsConfig;
use keepwire_driver::{
    Client, ClientBuilder, HandshakeError, HandshakeIo, Runtime, SendError, Target,
};
use keepwire_proto::{CloseReason, Config, Sent};
use keepwire_tests::pg::{pipelined, query, value};
use keepwire_tests::protocols::postgres::{Postgres, Startup};
use keepwire_tests::servers::{PostgresServer, Shared};
use keepwire_tests::tls::{CLIENT_NAME, Pki, TlsOn};
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

/// The server that asks for client certificates, and its PKI.
static MUTUAL: Shared<(PostgresServer, Pki)> = Shared::new();

/// The mutual-TLS server (started by the first test that needs it, stopped after the last):
/// the role [`CLIENT_NAME`] logs in with a certificate the test CA signed, and only so.
fn mutual_server() -> Arc<(PostgresServer, Pki)> {
    MUTUAL
        .get(|| {
            let pki = Pki::new();
            let server = PostgresServer::start_with_mutual_tls(
                pki.server_cert_pem(),
                pki.server_key_pem(),
                pki.ca_pem(),
                CLIENT_NAME,
            )?;
            server.create_role(CLIENT_NAME, "never used")?;
            Ok((server, pki))
        })
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Certificate authentication against PostgreSQL (`hostssl ... cert`, `ssl_ca_file`), as a
/// user configures it: a client certificate the server's CA signed logs in as the role it
/// names; one signed by another CA is refused by the TLS layer (OpenSSL's alert, which under
/// TLS 1.3 comes after the client's side of the handshake, on the startup's first read) as a
/// final `CertificateRejected`; none at all is refused by PostgreSQL's authentication, a
/// final `AuthFailed`. The refused requests end at once, not retried.
async fn a_client_certificate_logs_in_and_a_refused_one_is_final(
    runtime: Arc<dyn Runtime>,
    on: TlsOn,
) {
    let server = mutual_server();
    let (postgres, pki) = (&server.0, &server.1);
    let stranger = Pki::new();
    let signed = pki.client_config_presenting(pki);
    let foreign = pki.client_config_presenting(&stranger);
    let none = pki.client_config();
    let connect = |tls: TlsConfig| {
        let startup = Startup::new(CLIENT_NAME, "postgres");
        ClientBuilder::new(config())
            .node(postgres.addr())
            .codec(Postgres::new())
            .handshake(move |io: HandshakeIo| tls_startup(on, tls.clone(), startup.clone(), io))
            .build(Arc::clone(&runtime))
            .unwrap()
    };
    bounded(
        &*runtime,
        Duration::from_secs(20),
        "certificate logins",
        async {
            let client = connect(signed);
            assert_eq!(value(&client, "SELECT current_user").await, CLIENT_NAME);
            let dn = value(
                &client,
                "SELECT client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            )
            .await;
            assert_eq!(dn, format!("/CN={CLIENT_NAME}"));
            client.shutdown().await;

            for (case, tls, cause) in [
                (
                    "another CA's certificate",
                    foreign,
                    CloseReason::CertificateRejected,
                ),
                ("no certificate", none, CloseReason::AuthFailed),
            ] {
                let client = connect(tls);
                let node = client.initial_nodes()[0];
                let refused = client
                    .send(
                        Target::Node(node),
                        "SELECT 1".to_owned(),
                        Duration::from_secs(5),
                    )
                    .await;
                println!("[postgres mutual TLS, {on:?}] {case}: {refused:?}");
                assert_eq!(
                    refused,
                    Err(SendError::ConnectionLost {
                        cause,
                        sent: Sent::Nothing,
                        retried: false,
                    }),
                    "{case}"
                );
                assert_eq!(client.counters().await.unwrap().connects, 1, "{case}");
                client.shutdown().await;
            }
        },
    )
    .await;
}

test_tls_on_every_runtime!(
    queries_and_logins_over_tls,
    many_tasks_get_their_own_answers_over_tls,
    a_client_certificate_logs_in_and_a_refused_one_is_final,
);
