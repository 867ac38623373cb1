//! Final connect failures: a name that does not exist, refused credentials, a rejected
//! certificate. Each ends the requests waiting on the node at once, backs the node off for
//! `final_failure_backoff`, and makes submits to it fail fast meanwhile; everything else stays
//! retryable.

use alloc::string::ToString;
use alloc::vec::Vec;

use bytes::Bytes;

use super::{Harness, exact, ms, secs};
use crate::{
    Action, CloseReason, Config, ConnId, Endpoint, Event, Failure, HandshakeFailure, NodeId,
    NodeState, Outcome, QuarantineCause, RequestId, Sent, SubmitError, Target, Unavailable,
};

const NS: core::time::Duration = core::time::Duration::from_nanos(1);
const NAME_NOT_FOUND: CloseReason = CloseReason::ConnectFailed(Failure::NameNotFound);

/// Transparent retries on, so "not retried" means something.
fn retrying() -> Config {
    let mut c = exact();
    c.retry_unsent = true;
    c
}

fn lost(reason: CloseReason) -> (Outcome, Sent, bool) {
    (Outcome::ConnectionLost(reason), Sent::Nothing, false)
}

fn named(h: &mut Harness, host: &str) -> NodeId {
    let endpoint = Endpoint::name(host, 5432).unwrap();
    h.pool.add_node(h.now, endpoint)
}

fn try_submit(h: &mut Harness, target: Target) -> Result<RequestId, SubmitError> {
    let frame = Bytes::from_static(b"request");
    h.pool.submit(h.now, target, h.now + secs(60), frame)
}

fn failed(reason: CloseReason) -> Result<RequestId, SubmitError> {
    Err(SubmitError::NodeUnavailable(Unavailable::Failed(reason)))
}

/// Fails the node's pending connect with `failure`, reported by the adapter.
fn connect_fails(h: &mut Harness, failure: Failure) {
    let (conn, _) = h.expect_open();
    h.pool.handle_connect_failed(h.now, conn, failure).unwrap();
    h.collect();
}

/// Runs the node's pending connect to its handshake: the connection, handshaking.
fn handshaking(h: &mut Harness) -> ConnId {
    let (conn, _) = h.expect_open();
    h.pool.handle_connected(h.now, conn).unwrap();
    conn
}

/// Runs the node's pending connect to its handshake and fails it with `failure`; proto closes
/// the connection.
fn handshake_fails(h: &mut Harness, failure: HandshakeFailure) {
    let conn = handshaking(h);
    h.pool
        .handle_handshake_failed(h.now, conn, failure)
        .unwrap();
    let actions = h.take_actions();
    assert!(
        matches!(
            actions[..],
            [Action::Handshake { .. }, Action::Close { .. }]
        ),
        "{actions:?}"
    );
}

#[test]
fn only_refused_credentials_a_rejected_certificate_and_a_missing_name_are_final() {
    let finals = [
        CloseReason::AuthFailed,
        CloseReason::CertificateRejected,
        NAME_NOT_FOUND,
    ];
    for reason in finals {
        assert!(reason.is_final() && reason.is_failure(), "{reason:?}");
    }
    let retryable = [
        CloseReason::ConnectFailed(Failure::ResolveFailed),
        CloseReason::ConnectFailed(Failure::Refused),
        CloseReason::HandshakeFailed,
        CloseReason::SetupTimeout,
        CloseReason::Io(Failure::NameNotFound), // only a connect can fail to resolve
        CloseReason::HeartbeatTimeout,
        CloseReason::Shutdown,
    ];
    for reason in retryable {
        assert!(!reason.is_final(), "{reason:?}");
    }
    assert_eq!(
        SubmitError::NodeUnavailable(Unavailable::Failed(CloseReason::AuthFailed)).to_string(),
        "node unavailable: final failure: authentication failed"
    );
}

#[test]
fn a_name_that_does_not_exist_ends_the_waiting_requests_at_once_and_backs_off_long() {
    let mut h = Harness::new(retrying());
    let node = named(&mut h, "gone.example");
    let _other = h.add(); // somewhere a transparent retry could have gone
    let pinned = h.submit(node, 10, secs(60));
    let best = try_submit(&mut h, Target::Best).unwrap(); // the pool picks the connecting node
    connect_fails(&mut h, Failure::NameNotFound);
    assert_eq!(h.ended(pinned), lost(NAME_NOT_FOUND));
    assert_eq!(h.ended(best), lost(NAME_NOT_FOUND));
    assert_eq!(h.pool.counters().transparent_retries, 0);
    assert_eq!(
        h.pool.node_state(node),
        Some(NodeState::Disconnected {
            reconnect_at: h.now + secs(30)
        }),
        "final_failure_backoff, not the 50 ms reconnect backoff"
    );
    assert!(h.take_actions().is_empty(), "no other connect");
}

#[test]
fn refused_credentials_and_a_rejected_certificate_end_the_waiting_requests_at_once() {
    for (failure, reason) in [
        (HandshakeFailure::AuthRefused, CloseReason::AuthFailed),
        (
            HandshakeFailure::CertificateRejected,
            CloseReason::CertificateRejected,
        ),
    ] {
        let mut config = retrying();
        config.handshake = true;
        let mut h = Harness::new(config);
        let node = h.add();
        let ids = [h.submit(node, 10, secs(60)), h.submit(node, 20, secs(60))];
        handshake_fails(&mut h, failure);
        for id in ids {
            assert_eq!(h.ended(id), lost(reason), "{failure:?}");
        }
        assert_eq!(
            h.pool.node_state(node),
            Some(NodeState::AuthFailed {
                reconnect_at: h.now + secs(30)
            }),
            "{failure:?}"
        );
        assert_eq!(h.pool.counters().transparent_retries, 0);
    }
}

/// A TLS 1.3 server refuses the client's certificate after the client's side of the
/// handshake is done: the adapter reports it on the ready connection. The requests it holds,
/// written or queued, end with the final reason and are not retried; the node enters
/// `AuthFailed` with the final backoff, as for a refusal during the handshake.
#[test]
fn a_certificate_refused_after_the_handshake_is_final_too() {
    let mut config = retrying();
    config.handshake = true;
    let mut h = Harness::new(config);
    let node = h.add();
    h.pool.connect(h.now, node).unwrap();
    let conn = handshaking(&mut h);
    h.pool.handle_handshake_done(h.now, conn).unwrap();
    h.collect();
    h.take_actions(); // the handshake's
    let written = h.submit(node, 10, secs(60));
    h.flush(conn);
    let queued = h.submit(node, 20, secs(60));
    h.pool
        .handle_handshake_failed(h.now, conn, HandshakeFailure::CertificateRejected)
        .unwrap();
    let actions = h.take_actions();
    assert!(matches!(actions[..], [Action::Close { .. }]), "{actions:?}");
    let reason = CloseReason::CertificateRejected;
    assert_eq!(
        h.ended(written),
        (Outcome::ConnectionLost(reason), Sent::Fully, false)
    );
    assert_eq!(h.ended(queued), lost(reason));
    assert_eq!(h.pool.counters().transparent_retries, 0);
    assert_eq!(
        h.pool.node_state(node),
        Some(NodeState::AuthFailed {
            reconnect_at: h.now + secs(30)
        })
    );
    assert_eq!(
        try_submit(&mut h, Target::Node(node)),
        failed(reason),
        "fail-fast during the final backoff"
    );
    // The connection is gone: a second report of it is stale.
    assert_eq!(
        h.pool
            .handle_handshake_failed(h.now, conn, HandshakeFailure::CertificateRejected),
        Err(crate::HandleError::StaleConn)
    );
}

#[test]
fn retryable_failures_keep_the_reconnect_backoff_and_the_transparent_retry() {
    // A resolver that could not be reached, and a handshake that failed for another reason.
    let mut h = Harness::new(retrying());
    let node = named(&mut h, "db.example");
    let id = h.submit(node, 10, secs(60));
    connect_fails(&mut h, Failure::ResolveFailed);
    assert_eq!(
        h.outcome(id),
        None,
        "queued once more, on a fresh connection"
    );
    assert_eq!(h.pool.counters().transparent_retries, 1);
    assert_eq!(h.reconnect_at(node), h.now + ms(50));
    assert!(
        try_submit(&mut h, Target::Node(node)).is_ok(),
        "no fail-fast"
    );

    let mut config = exact();
    config.handshake = true;
    let mut h = Harness::new(config);
    let node = h.add();
    h.pool.connect(h.now, node).unwrap();
    handshake_fails(&mut h, HandshakeFailure::Failed);
    assert_eq!(
        h.pool.node_state(node),
        Some(NodeState::Disconnected {
            reconnect_at: h.now + ms(50)
        })
    );
    assert!(try_submit(&mut h, Target::Node(node)).is_ok());
}

#[test]
fn submits_to_the_node_fail_fast_until_its_final_backoff_ends_then_it_connects() {
    let mut h = Harness::new(exact());
    let node = named(&mut h, "gone.example");
    h.pool.connect(h.now, node).unwrap();
    connect_fails(&mut h, Failure::NameNotFound);
    let until = h.reconnect_at(node);
    assert_eq!(
        try_submit(&mut h, Target::Node(node)),
        failed(NAME_NOT_FOUND)
    );
    h.advance_to(until - NS);
    assert_eq!(
        try_submit(&mut h, Target::Node(node)),
        failed(NAME_NOT_FOUND)
    );
    // The query an adapter's readiness reads says the same, and until when.
    assert_eq!(
        h.pool.final_failure(h.now, node),
        Some((NAME_NOT_FOUND, until))
    );
    assert!(h.take_actions().is_empty());
    h.advance_to(until);
    assert_eq!(h.pool.final_failure(h.now, node), None);
    let id = try_submit(&mut h, Target::Node(node)).unwrap();
    // The name is tried again once the backoff allows, and is still missing: the new request
    // ends at once too.
    connect_fails(&mut h, Failure::NameNotFound);
    assert_eq!(h.ended(id), lost(NAME_NOT_FOUND));
    assert_eq!(h.reconnect_at(node), h.now + secs(30));
}

#[test]
fn an_application_connect_waits_out_the_final_backoff() {
    let mut config = exact();
    config.handshake = true;
    let mut h = Harness::new(config);
    let node = h.add();
    h.pool.connect(h.now, node).unwrap();
    handshake_fails(&mut h, HandshakeFailure::AuthRefused);
    let until = h.reconnect_at(node);
    h.pool.connect(h.now, node).unwrap();
    assert!(h.take_actions().is_empty());
    assert_eq!(h.pool.poll_timeout(), Some(until));
    h.advance_to(until);
    h.expect_open();
}

#[test]
fn best_fails_with_the_final_reason_only_when_every_admitted_node_is_in_a_final_backoff() {
    let mut config = exact();
    config.handshake = true;
    let mut h = Harness::new(config);
    let (a, b) = (h.add(), h.add());
    h.pool.connect(h.now, a).unwrap();
    handshake_fails(&mut h, HandshakeFailure::CertificateRejected);
    // b is still connectable: selection picks it.
    assert!(try_submit(&mut h, Target::Best).is_ok());
    handshake_fails(&mut h, HandshakeFailure::AuthRefused);
    // Both failed for good: the first node's reason, not "no node".
    let first = failed(CloseReason::CertificateRejected);
    assert_eq!(try_submit(&mut h, Target::Best), first);
    // A disabled node is not admitted: it changes nothing.
    let c = h.add();
    h.pool.disable_node(h.now, c).unwrap();
    assert_eq!(try_submit(&mut h, Target::Best), first);
    // An admitted node in an ordinary backoff: "no node", as before.
    h.pool.enable_node(h.now, c).unwrap();
    h.refuse(c);
    assert_eq!(
        try_submit(&mut h, Target::Best),
        Err(SubmitError::NoNode { all_full: false })
    );
    assert!(matches!(
        h.pool.node_state(b),
        Some(NodeState::AuthFailed { .. })
    ));
}

#[test]
fn the_final_backoff_is_jittered_like_the_reconnect_backoff() {
    let mut waits = Vec::new();
    for seed in 0..16 {
        let mut config = exact();
        config.reconnect_jitter = 0.2;
        config.seed = Some(seed);
        let mut h = Harness::new(config);
        let node = named(&mut h, "gone.example");
        h.pool.connect(h.now, node).unwrap();
        connect_fails(&mut h, Failure::NameNotFound);
        let wait = h.reconnect_at(node) - h.now;
        assert!(wait >= secs(24) && wait < secs(36), "{wait:?}");
        waits.push(wait);
    }
    waits.dedup();
    assert!(waits.len() > 1, "the draws differ: {waits:?}");
}

#[test]
fn a_final_failure_counts_for_quarantine_and_holds_probes_off_until_its_backoff_ends() {
    let mut config = exact();
    config.quarantine_after_failures = 1;
    config.panic_threshold = 0.0;
    let mut h = Harness::new(config);
    let node = named(&mut h, "gone.example");
    h.pool.connect(h.now, node).unwrap();
    connect_fails(&mut h, Failure::NameNotFound);
    assert!(h.events.iter().any(|e| matches!(
        e,
        Event::Quarantined {
            cause: QuarantineCause::ConnectionFailures(NAME_NOT_FOUND),
            ..
        }
    )));
    let until = h.reconnect_at(node);
    // The first probe is due after 5 s, but the name was just found missing: it waits.
    h.advance(secs(5) + NS);
    assert!(
        h.take_actions().is_empty(),
        "no probe within the final backoff"
    );
    assert_eq!(h.pool.counters().probes, 0);
    h.advance_to(until);
    h.expect_open();
    assert_eq!(h.pool.counters().probes, 1);
}

#[test]
fn the_final_reason_is_forgotten_on_ready_on_a_new_epoch_and_on_readmission() {
    // Ready: a later retryable failure backs off as usual.
    let mut h = Harness::new(exact());
    let node = named(&mut h, "db.example");
    h.pool.connect(h.now, node).unwrap();
    connect_fails(&mut h, Failure::NameNotFound);
    h.advance_to(h.reconnect_at(node));
    h.pool.connect(h.now, node).unwrap();
    let (conn, _) = h.expect_open();
    h.pool.handle_connected(h.now, conn).unwrap();
    h.pool
        .handle_closed(h.now, conn, Failure::PeerClosed)
        .unwrap();
    assert_eq!(h.reconnect_at(node), h.now + ms(50));
    assert!(try_submit(&mut h, Target::Node(node)).is_ok());

    // A new epoch (a new server process): the backoff ends now, in either state.
    let mut config = exact();
    config.handshake = true;
    let mut h = Harness::new(config);
    let (a, b) = (h.add(), named(&mut h, "gone.example"));
    h.pool.connect(h.now, a).unwrap();
    handshake_fails(&mut h, HandshakeFailure::CertificateRejected);
    h.pool.connect(h.now, b).unwrap();
    connect_fails(&mut h, Failure::NameNotFound);
    h.advance(secs(1));
    for node in [a, b] {
        h.pool.set_epoch(h.now, node, 1).unwrap();
        assert_eq!(h.reconnect_at(node), h.now);
        assert!(try_submit(&mut h, Target::Node(node)).is_ok());
        h.expect_open();
    }

    // Disabled and enabled again: no more fail-fast, but the backoff still runs.
    let mut h = Harness::new(exact());
    let node = named(&mut h, "gone.example");
    h.pool.connect(h.now, node).unwrap();
    connect_fails(&mut h, Failure::NameNotFound);
    let until = h.reconnect_at(node);
    h.pool.disable_node(h.now, node).unwrap();
    h.pool.enable_node(h.now, node).unwrap();
    assert!(try_submit(&mut h, Target::Node(node)).is_ok());
    assert!(h.take_actions().is_empty());
    h.advance_to(until);
    h.expect_open();
}
