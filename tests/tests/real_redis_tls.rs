//! Redis over TLS (its `--tls-port`, OpenSSL on the server's side) through keepwire, on every
//! runtime with its own crate's TLS: mutual TLS with a client certificate the server's CA
//! signed, commands and 64 pipelining tasks on one connection; and the two refusals a user
//! meets first, a certificate from another CA and none at all, each the typed, final
//! `CertificateRejected`, whichever side of the TLS 1.3 handshake it arrives on.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use keepwire_driver::{ClientEvent, Runtime, SendError, Target};
use keepwire_proto::{CloseReason, NodeState};
use keepwire_tests::protocols::redis::{Redis, Reply, command};
use keepwire_tests::redis::{self, ask};
use keepwire_tests::servers::{RedisServer, Shared};
use keepwire_tests::tls::{Pki, TlsOn};
use keepwire_tests::{bounded, runtime_name, test_tls_on_every_runtime};

static SERVER: Shared<(RedisServer, Pki)> = Shared::new();

/// The shared server, which asks every TLS client for a certificate its CA signed.
fn server() -> Arc<(RedisServer, Pki)> {
    SERVER
        .get(|| {
            let pki = Pki::new();
            let server = RedisServer::start_with_tls(
                pki.server_cert_pem(),
                pki.server_key_pem(),
                Some(pki.ca_pem()),
            )?;
            Ok((server, pki))
        })
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A client certificate the server's CA signed: commands, a 1 MiB value both ways, and 64
/// tasks × 100 `ECHO`s pipelined on the one TLS connection, each answer its own.
async fn commands_over_mutual_tls(runtime: Arc<dyn Runtime>, on: TlsOn) {
    let server = server();
    let (redis, pki) = (&server.0, &server.1);
    let name = runtime_name(&*runtime);
    bounded(&*runtime, Duration::from_secs(30), "mutual TLS", async {
        let (client, _) = on.client(
            &runtime,
            redis.tls_addr(),
            Redis::new(),
            pki.client_config_presenting(pki),
        );
        let key = format!("tls-{name}");
        let big = Bytes::from(vec![b't'; 1 << 20]);
        assert_eq!(
            ask(&client, [b"SET", key.as_bytes(), &big]).await,
            Reply::Status("OK".into())
        );
        assert!(ask(&client, [b"GET", key.as_bytes()]).await == Reply::Bulk(big));
        redis::pipelined(&runtime, &client, 64, 100).await;
        let counters = client.counters().await.unwrap();
        assert_eq!(
            (counters.connects, counters.reconnects),
            (1, 0),
            "{counters:?}"
        );
        client.shutdown().await;
    })
    .await;
}

/// A certificate from another CA, and none at all. OpenSSL refuses both once it has the
/// client's certificate message, which under TLS 1.3 follows the client's side of the
/// handshake: the client's hook is done, and the refusal arrives on the first read of a ready
/// connection. Each is the typed, final `CertificateRejected` all the same: the request ends
/// with it, not retried, a `HandshakeFailed` event says why, the node enters `AuthFailed`,
/// and nothing reconnects.
async fn a_refused_client_certificate_is_final(runtime: Arc<dyn Runtime>, on: TlsOn) {
    let server = server();
    let (redis, pki) = (&server.0, &server.1);
    let stranger = Pki::new();
    bounded(
        &*runtime,
        Duration::from_secs(20),
        "refused certificates",
        async {
            for (case, tls) in [
                (
                    "another CA's certificate",
                    pki.client_config_presenting(&stranger),
                ),
                ("no certificate", pki.client_config()),
            ] {
                let (client, node) = on.client(&runtime, redis.tls_addr(), Redis::new(), tls);
                let mut events = client.subscribe();
                let outcome = client
                    .send(
                        Target::Node(node),
                        command(["PING"]),
                        Duration::from_secs(5),
                    )
                    .await;
                println!("[redis mutual TLS, {on:?}] {case}: {outcome:?}");
                let Err(SendError::ConnectionLost { cause, retried, .. }) = outcome else {
                    panic!("{case}: {outcome:?}");
                };
                assert_eq!(
                    (cause, retried),
                    (CloseReason::CertificateRejected, false),
                    "{case}"
                );
                assert!(outcome.unwrap_err().is_final(), "{case}");
                let failed = keepwire_tests::within(&*runtime, Duration::from_secs(1), async {
                    while let Some(event) = events.recv().await {
                        if let ClientEvent::HandshakeFailed { error, .. } = event {
                            return Some(error);
                        }
                    }
                    None
                })
                .await
                .flatten();
                assert!(failed.is_some(), "{case}: a HandshakeFailed event");
                let info = client.node_info(node).await.unwrap();
                assert!(
                    matches!(info.state, NodeState::AuthFailed { .. }),
                    "{case}: {:?}",
                    info.state
                );
                assert_eq!(client.counters().await.unwrap().connects, 1, "{case}");
                client.shutdown().await;
            }
        },
    )
    .await;
}

test_tls_on_every_runtime!(
    commands_over_mutual_tls,
    a_refused_client_certificate_is_final
);
