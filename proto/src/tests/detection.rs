//! The README's worst-case detection table, under the defaults: every figure that proto itself
//! decides (setup timeout, reconnect and final backoffs, write timeout, frame timeout, a
//! request's own deadline, heartbeats) asserted on a simulated clock with `Config::default()`,
//! jitter included, over many seeds. The rows the kernel decides (keepalive and
//! TCP_USER_TIMEOUT) are asserted on real kernels in `tests/tests/real_kernel_faults.rs`.

use alloc::vec::Vec;
use core::time::Duration;

use bytes::Bytes;

use super::{Harness, ms, secs};
use crate::{
    Action, CloseReason, Config, ConnId, Event, Failure, Heartbeat, Instant, NodeId, NodeState,
    Outcome, Phase, Violation,
};

const SEEDS: u64 = 200;
const NS: Duration = Duration::from_nanos(1);

/// The defaults, with a seed (the jitter draws differ per seed).
fn defaults(seed: u64) -> Config {
    Config {
        seed: Some(seed),
        ..Config::default()
    }
}

/// Runs the clock from one scheduled instant to the next until proto closes a connection;
/// returns when and why.
fn next_close(h: &mut Harness, give_up: Instant) -> (Instant, CloseReason) {
    loop {
        let closes: Vec<_> = h
            .take_actions()
            .into_iter()
            .filter_map(|a| match a {
                Action::Close { reason, .. } => Some(reason),
                _ => None,
            })
            .collect();
        if let [reason] = closes[..] {
            return (h.now, reason);
        }
        assert!(closes.is_empty(), "{closes:?}");
        let at = h.pool.poll_timeout().expect("something is scheduled");
        assert!(at <= give_up, "no close by {give_up:?}");
        h.advance_to(at);
    }
}

/// A ready connection (after one connect) with the defaults and `seed`.
fn ready(config: Config) -> (Harness, NodeId, ConnId) {
    let mut h = Harness::new(config);
    let node = h.add();
    let conn = h.ready(node);
    (h, node, conn)
}

/// A fresh node whose first connect, made for a request waiting on it, fails with `failure`:
/// checks that the request ended at that instant, with that failure.
fn fail_the_connect_under_a_request(seed: u64, failure: Failure) -> (Harness, NodeId) {
    let mut h = Harness::new(defaults(seed));
    let node = h.add();
    let id = h.submit(node, 16, secs(5));
    let (conn, _) = h.expect_open();
    h.pool.handle_connect_failed(h.now, conn, failure).unwrap();
    h.collect();
    assert_eq!(
        h.outcome(id),
        Some(Outcome::ConnectionLost(CloseReason::ConnectFailed(failure))),
        "ended at the failure's instant"
    );
    (h, node)
}

/// Unreachable host at connect: each attempt is given up at its setup timeout, 10 s ± 20 %
/// (at most 12 s) for the first, doubling to at most 30 s (the jitter never takes a timeout
/// past `setup_timeout_max`).
#[test]
fn an_unreachable_host_is_given_up_within_12_s_growing_to_30_s() {
    let (mut first, mut later) = ((Duration::MAX, Duration::ZERO), Duration::ZERO);
    for seed in 0..SEEDS {
        let mut h = Harness::new(defaults(seed));
        let node = h.add();
        for attempt in 0..5 {
            let (_, deadline) = h.open(node);
            let opened = h.now;
            let (closed, reason) = next_close(&mut h, opened + secs(40));
            assert_eq!(reason, CloseReason::SetupTimeout);
            assert!(closed > deadline - NS && closed <= deadline + NS, "{seed}");
            let took = closed - opened;
            if attempt == 0 {
                first = (first.0.min(took), first.1.max(took));
            } else {
                later = later.max(took);
            }
        }
    }
    assert!(first.0 >= secs(8) && first.1 <= secs(12) + NS, "{first:?}");
    assert!(
        first.1 > ms(11_500),
        "the jitter reaches its top: {first:?}"
    );
    assert_eq!(later, secs(30) + NS, "capped at the maximum, reached");
}

/// Refused port: the request waiting on the connect ends at once (same instant); the next
/// attempt waits the reconnect backoff, 50 ms ± 20 % doubling to at most 1 s (the jitter
/// never takes it past `reconnect_backoff_max`).
#[test]
fn a_refused_port_ends_waiting_requests_at_once_then_backs_off_up_to_1_s() {
    let mut worst = Duration::ZERO;
    for seed in 0..SEEDS {
        let (mut h, node) = fail_the_connect_under_a_request(seed, Failure::Refused);
        let first = h.reconnect_at(node) - h.now;
        assert!(first >= ms(40) && first <= ms(60), "{first:?}");
        for _ in 0..8 {
            h.refuse(node);
            worst = worst.max(h.reconnect_at(node) - h.now);
        }
    }
    assert_eq!(worst, secs(1), "capped at the maximum, reached");
}

/// A name that does not exist is final: the request waiting on it ends at once, and the node
/// waits its final backoff, 30 s ± 20 %, before it looks the name up again.
#[test]
fn a_missing_name_ends_waiting_requests_at_once_then_waits_24_to_36_s() {
    let (mut least, mut most) = (Duration::MAX, Duration::ZERO);
    for seed in 0..SEEDS {
        let (h, node) = fail_the_connect_under_a_request(seed, Failure::NameNotFound);
        let backoff = h.reconnect_at(node) - h.now;
        least = least.min(backoff);
        most = most.max(backoff);
    }
    assert!(least >= secs(24) && most <= secs(36), "{least:?}..{most:?}");
}

/// Dead or stalled peer whose kernel takes nothing more (its window and our send buffer are
/// full): the write timeout closes the connection 10 s after the frame was queued, for an
/// adapter that never writes at all as for one that keeps trying.
#[test]
fn a_frame_the_kernel_never_takes_closes_the_connection_at_10_s() {
    for seed in 0..SEEDS / 10 {
        let (mut h, node, _) = ready(defaults(seed));
        let queued = h.now;
        h.submit(node, 16, secs(60));
        let (closed, reason) = next_close(&mut h, queued + secs(11));
        assert_eq!(reason, CloseReason::WriteTimeout);
        assert_eq!(closed - queued, secs(10) + NS, "strictly after 10 s");
    }
}

/// A peer dripping a response: the frame timeout closes the connection 10 s after the
/// response began to arrive.
#[test]
fn a_dripping_response_closes_the_connection_at_10_s() {
    let (mut h, node, conn) = ready(defaults(1));
    h.submit(node, 16, secs(60));
    h.flush(conn);
    let began = h.now;
    h.pool.handle_received(h.now, conn, true).unwrap();
    let (closed, reason) = next_close(&mut h, began + secs(11));
    assert!(
        matches!(reason, CloseReason::Protocol(Violation::TooSlow { .. })),
        "{reason:?}"
    );
    assert!(closed - began <= secs(10) + NS && closed - began >= secs(10));
}

/// A hung server process behind an idle connection, without heartbeats: its kernel answers
/// keepalive, so nothing is found until a request pays its own deadline (and the connection
/// stays: a request timeout is not a connection failure).
#[test]
fn without_heartbeats_a_hung_server_costs_the_first_request_its_deadline() {
    let (mut h, node, conn) = ready(defaults(1));
    h.advance(secs(3_600));
    let sent = h.now;
    let id = h.submit(node, 16, secs(5));
    h.flush(conn);
    h.advance_to(sent + secs(5));
    assert_eq!(h.outcome(id), None, "not before its deadline");
    h.advance(NS);
    assert_eq!(
        h.outcome(id),
        Some(Outcome::DeadlineExceeded {
            phase: Phase::InFlight
        })
    );
    assert_eq!(h.pool.node_state(node), Some(NodeState::Ready));
}

/// With heartbeats (opt-in), the same hung server is found with no request paying for it:
/// the connection closes `HeartbeatTimeout` `interval + timeout` after it went idle (each
/// timer fires strictly after its limit, so two nanoseconds later).
#[test]
fn with_heartbeats_a_hung_server_is_found_within_interval_plus_timeout() {
    let mut config = defaults(1);
    config.heartbeat = Some(Heartbeat {
        interval: secs(30),
        timeout: secs(5),
    });
    let (mut h, _, conn) = ready(config);
    let idle_since = h.now;
    let (closed, reason) = loop {
        let actions = h.take_actions();
        for action in &actions {
            if let Action::Heartbeat { conn: c, id } = action {
                assert_eq!(*c, conn);
                h.pool
                    .submit_heartbeat(h.now, *id, Bytes::from_static(b"PING"))
                    .unwrap();
                h.flush(conn);
            }
        }
        if let Some(reason) = actions.iter().find_map(|a| match a {
            Action::Close { reason, .. } => Some(*reason),
            _ => None,
        }) {
            break (h.now, reason);
        }
        let at = h.pool.poll_timeout().expect("a heartbeat is scheduled");
        assert!(at <= idle_since + secs(36), "no close by 36 s");
        h.advance_to(at);
    };
    assert_eq!(reason, CloseReason::HeartbeatTimeout);
    assert_eq!(closed - idle_since, secs(35) + NS + NS);
    assert!(
        !h.events
            .iter()
            .any(|e| matches!(e, Event::RequestDone { .. })),
        "no request paid for it"
    );
}
