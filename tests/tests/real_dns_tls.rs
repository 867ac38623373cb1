//! DNS over TLS (RFC 7858: Unbound's `tls-port`, OpenSSL on the resolver's side) through
//! keepwire, on every runtime with its own crate's TLS: a slow answer overtaken by fast ones
//! and 64 pipelining tasks on one TLS connection, each answer its own query's; and a resolver
//! whose certificate another CA signed, refused by the client at its handshake: the typed,
//! final `CertificateRejected`, nothing sent.

use std::sync::Arc;
use std::time::Duration;

use keepwire_driver::{Runtime, SendError, Sent};
use keepwire_proto::{CloseReason, NodeState};
use keepwire_tests::dns::{self, resolve, resolve_local};
use keepwire_tests::protocols::dns::Dns;
use keepwire_tests::servers::{LOCAL_ZONE, Shared, UnboundServer};
use keepwire_tests::tls::{Pki, TlsOn};
use keepwire_tests::{bounded, runtime_name, test_tls_on_every_runtime};

static SERVER: Shared<(UnboundServer, Pki)> = Shared::new();

/// The shared resolver, its certificate for `localhost` and `127.0.0.1`.
fn server() -> Arc<(UnboundServer, Pki)> {
    SERVER
        .get(|| {
            let pki = Pki::new();
            let server =
                UnboundServer::start_with_tls(pki.server_cert_pem(), pki.server_key_pem())?;
            Ok((server, pki))
        })
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Over one TLS connection: a query the upstream answers after 300 ms overtaken by 16 the
/// resolver answers itself, then 64 tasks × 50 names pipelined, each answer its own.
async fn queries_over_tls_overtake_each_other(runtime: Arc<dyn Runtime>, on: TlsOn) {
    let server = server();
    let (unbound, pki) = (&server.0, &server.1);
    let name = runtime_name(&*runtime);
    bounded(&*runtime, Duration::from_secs(30), "DNS over TLS", async {
        let (client, _) = on.client(
            &runtime,
            unbound.tls_addr(),
            Dns::new(),
            pki.client_config(),
        );
        resolve_local(&client, &format!("warm-tls-{name}")).await;
        let tag = format!("tls-{name}");
        let seen = dns::overtaken(&runtime, &client, Duration::from_millis(300), 16, &tag).await;
        let took = dns::pipelined(&runtime, &client, 64, 50, &tag).await;
        let counters = client.counters().await.unwrap();
        assert_eq!(
            (counters.connects, counters.reconnects),
            (1, 0),
            "{counters:?}"
        );
        println!(
            "[dns over TLS, {on:?}] 16 local answers within {:.2?}, the upstream's after \
             {:.2?}; 64 × 50 names in {took:.2?}",
            seen.fast, seen.slow
        );
        client.shutdown().await;
    })
    .await;
}

/// A client that trusts another CA than the one that signed the resolver's certificate: the
/// handshake fails at once with the typed, final `CertificateRejected`, nothing sent, not
/// retried, and the node enters `AuthFailed`.
async fn a_resolver_certificate_from_another_ca_is_refused(runtime: Arc<dyn Runtime>, on: TlsOn) {
    let server = server();
    let unbound = &server.0;
    let stranger = Pki::new();
    bounded(
        &*runtime,
        Duration::from_secs(10),
        "untrusted resolver",
        async {
            let (client, node) = on.client(
                &runtime,
                unbound.tls_addr(),
                Dns::new(),
                stranger.client_config(),
            );
            let query = format!("refused.{LOCAL_ZONE}");
            let outcome = resolve(&client, &query, Duration::from_secs(5)).await;
            assert_eq!(
                outcome,
                Err(SendError::ConnectionLost {
                    cause: CloseReason::CertificateRejected,
                    sent: Sent::Nothing,
                    retried: false,
                })
            );
            assert!(outcome.unwrap_err().is_final());
            let info = client.node_info(node).await.unwrap();
            assert!(
                matches!(info.state, NodeState::AuthFailed { .. }),
                "{:?}",
                info.state
            );
            assert_eq!(client.counters().await.unwrap().connects, 1);
            client.shutdown().await;
        },
    )
    .await;
}

test_tls_on_every_runtime!(
    queries_over_tls_overtake_each_other,
    a_resolver_certificate_from_another_ca_is_refused,
);
