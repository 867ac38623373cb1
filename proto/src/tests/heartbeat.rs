//! Heartbeats on idle connections: a ping after `interval` of idleness, with its own deadline;
//! its response consumed silently (by id or in order, keeping its place); a missed one closes
//! the connection as a failure, even for an adapter that never sent it.

use alloc::vec::Vec;
use core::time::Duration;

use bytes::Bytes;

use super::{Harness, exact, secs};
use crate::{
    Action, CloseReason, Config, ConnId, Event, HandleError, Heartbeat, NodeId, NodeState, Outcome,
    QuarantineCause, RequestId, Sent, Target,
};

const NS: Duration = Duration::from_nanos(1);
const INTERVAL: Duration = Duration::from_secs(10);
const TIMEOUT: Duration = Duration::from_secs(2);
const PING: &[u8] = b"PING";

fn heartbeats() -> Config {
    let mut c = exact();
    c.heartbeat = Some(Heartbeat {
        interval: INTERVAL,
        timeout: TIMEOUT,
    });
    c
}

/// The heartbeats asked for since the last look.
fn asked(h: &mut Harness) -> Vec<(ConnId, RequestId)> {
    h.take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Heartbeat { conn, id } => Some((conn, id)),
            _ => None,
        })
        .collect()
}

/// Waits out the interval on an idle connection: exactly one ping is asked for, one
/// nanosecond past it, on `conn`.
fn ping_due(h: &mut Harness, conn: ConnId) -> RequestId {
    let due = h.pool.poll_timeout().expect("a heartbeat is scheduled");
    h.advance_to(due - NS);
    assert_eq!(asked(h), [], "not at the interval itself");
    h.advance_to(due);
    let pings = asked(h);
    assert!(
        matches!(pings[..], [(c, _)] if c == conn),
        "one ping on {conn:?}: {pings:?}"
    );
    pings[0].1
}

/// Hands the ping over and lets the kernel take it.
fn send_ping(h: &mut Harness, conn: ConnId, id: RequestId) {
    h.pool
        .submit_heartbeat(h.now, id, Bytes::from_static(PING))
        .unwrap();
    h.flush(conn);
}

fn request_dones(h: &Harness) -> usize {
    h.events
        .iter()
        .filter(|e| matches!(e, Event::RequestDone { .. }))
        .count()
}

fn closes(h: &mut Harness) -> Vec<CloseReason> {
    h.take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Close { reason, .. } => Some(reason),
            _ => None,
        })
        .collect()
}

fn ready(config: Config) -> (Harness, NodeId, ConnId) {
    let mut h = Harness::new(config);
    let node = h.add();
    let conn = h.ready(node);
    (h, node, conn)
}

#[test]
fn an_idle_ready_connection_gets_a_ping_one_nanosecond_past_the_interval() {
    let (mut h, node, conn) = ready(heartbeats());
    let became_ready = h.now;
    let id = ping_due(&mut h, conn);
    assert_eq!(h.now, became_ready + INTERVAL + NS);
    assert_eq!(h.pool.counters().heartbeats_sent, 1);
    assert!(h.pool.holds(id), "the adapter keeps its protocol id mapped");
    assert_eq!(
        h.pool.in_flight(node),
        Some(0),
        "not one of the node's requests"
    );
    assert_eq!(
        h.pool.poll_timeout(),
        Some(h.now + TIMEOUT + NS),
        "its own deadline"
    );
}

#[test]
fn without_the_setting_no_ping_is_ever_asked_for() {
    let (mut h, _, _) = ready(exact());
    assert_eq!(h.pool.poll_timeout(), None);
    h.advance(secs(3600));
    assert_eq!(asked(&mut h), []);
}

#[test]
fn a_ping_answered_by_id_is_consumed_silently_and_the_idle_clock_restarts() {
    let (mut h, node, conn) = ready(heartbeats());
    let id = ping_due(&mut h, conn);
    h.pool
        .submit_heartbeat(h.now, id, Bytes::from_static(PING))
        .unwrap();
    let written = h.transmit(conn).expect("the ping is queued like any frame");
    assert_eq!(&written[..], PING);
    h.pool.handle_written(h.now, conn, written.len()).unwrap();
    h.advance(secs(1));
    h.respond(conn, id);
    assert_eq!(request_dones(&h), 0, "no RequestDone for a ping");
    assert!(!h.pool.holds(id));
    assert_eq!(h.pool.node_state(node), Some(NodeState::Ready));
    let answered = h.now;
    let next = ping_due(&mut h, conn);
    assert_ne!(next, id);
    assert_eq!(h.now, answered + INTERVAL + NS, "idle since the answer");
    assert_eq!(h.pool.counters().heartbeats_sent, 2);
    assert_eq!(h.pool.counters().responses, 0);
}

#[test]
fn in_order_a_ping_keeps_its_place_in_the_response_order() {
    let (mut h, node, conn) = ready(heartbeats());
    // Ping written first, then a request: the first response is the ping's.
    let ping = ping_due(&mut h, conn);
    send_ping(&mut h, conn, ping);
    let req = h.submit(node, 10, secs(30));
    h.flush(conn);
    let first = h
        .pool
        .handle_next_response(h.now, conn, Bytes::from_static(b"PONG"));
    assert_eq!(first, Ok(None), "consumed: the ping's answer");
    let second = h
        .pool
        .handle_next_response(h.now, conn, Bytes::from_static(b"ok"));
    assert_eq!(second, Ok(Some(req)));
    h.collect();
    assert_eq!(
        h.outcome(req),
        Some(Outcome::Response(Bytes::from_static(b"ok")))
    );
    assert_eq!(request_dones(&h), 1);

    // A request submitted after the ping was asked for but before it was handed over goes
    // first: the ping queues behind it.
    let ping = ping_due(&mut h, conn);
    let req = h.submit(node, 10, secs(30));
    send_ping(&mut h, conn, ping);
    let first = h
        .pool
        .handle_next_response(h.now, conn, Bytes::from_static(b"ok"));
    assert_eq!(first, Ok(Some(req)));
    let second = h
        .pool
        .handle_next_response(h.now, conn, Bytes::from_static(b"PONG"));
    assert_eq!(second, Ok(None));
    assert!(!h.pool.holds(ping));
    h.collect();
    assert_eq!(request_dones(&h), 2);
    assert_eq!(h.pool.node_state(node), Some(NodeState::Ready));
}

#[test]
fn a_missed_ping_closes_the_connection_as_a_failure_that_counts_for_quarantine() {
    let mut config = heartbeats();
    config.quarantine_after_failures = 1;
    config.panic_threshold = 0.0;
    let (mut h, node, conn) = ready(config);
    let id = ping_due(&mut h, conn);
    send_ping(&mut h, conn, id);
    h.advance(TIMEOUT);
    assert_eq!(h.pool.node_state(node), Some(NodeState::Ready), "not at it");
    h.advance(NS);
    assert_eq!(closes(&mut h), [CloseReason::HeartbeatTimeout]);
    assert!(h.events.iter().any(|e| matches!(
        e,
        Event::StateChanged {
            from: NodeState::Ready,
            reason: crate::Reason::Closed(CloseReason::HeartbeatTimeout),
            ..
        }
    )));
    assert!(h.events.iter().any(|e| matches!(
        e,
        Event::Quarantined {
            cause: QuarantineCause::ConnectionFailures(CloseReason::HeartbeatTimeout),
            ..
        }
    )));
    assert_eq!(h.pool.counters().heartbeat_timeouts, 1);
    assert_eq!(request_dones(&h), 0);
    assert!(!h.pool.holds(id));
    assert_eq!(
        h.pool
            .handle_response(h.now, conn, id, Bytes::from_static(b"late")),
        Err(HandleError::StaleConn)
    );
}

#[test]
fn a_lazy_adapter_that_never_sends_the_ping_still_sees_the_connection_closed_at_the_deadline() {
    let (mut h, node, conn) = ready(heartbeats());
    let asked_at = {
        ping_due(&mut h, conn); // asked for, never handed over
        h.now
    };
    // The adapter sleeps until poll_timeout and nothing else.
    let due = h.pool.poll_timeout().unwrap();
    assert_eq!(due, asked_at + TIMEOUT + NS);
    h.advance_to(due);
    assert_eq!(closes(&mut h), [CloseReason::HeartbeatTimeout]);
    assert!(matches!(
        h.pool.node_state(node),
        Some(NodeState::Disconnected { .. })
    ));
}

#[test]
fn the_requests_on_a_connection_whose_ping_is_missed_end_as_on_any_close() {
    let mut config = heartbeats();
    config.retry_unsent = true;
    let (mut h, node, conn) = ready(config);
    let id = ping_due(&mut h, conn);
    send_ping(&mut h, conn, id);
    let written = h.submit(node, 10, secs(30));
    h.flush(conn);
    let unsent = h.submit(node, 10, secs(30));
    h.advance(TIMEOUT + NS);
    assert_eq!(
        h.outcome(written),
        Some(Outcome::ConnectionLost(CloseReason::HeartbeatTimeout))
    );
    assert!(h.events.iter().any(|e| matches!(
        e,
        Event::RequestDone { id, sent: Sent::Fully, .. } if *id == written
    )));
    assert_eq!(h.outcome(unsent), None, "retried on a fresh connection");
    assert_eq!(h.pool.counters().transparent_retries, 1);
}

#[test]
fn no_ping_while_the_connection_holds_a_request() {
    let (mut h, node, conn) = ready(heartbeats());
    h.advance(secs(5));
    let req = h.submit(node, 10, secs(60));
    h.flush(conn);
    let deadline = h.now + secs(60) + NS;
    assert_eq!(
        h.pool.poll_timeout(),
        Some(deadline),
        "no heartbeat wake meanwhile"
    );
    h.advance(secs(30)); // a slow answer, far past the interval
    assert_eq!(asked(&mut h), []);
    h.respond(conn, req);
    let answered = h.now;
    ping_due(&mut h, conn);
    assert_eq!(h.now, answered + INTERVAL + NS);
}

#[test]
fn a_ping_never_counts_against_the_in_flight_limit_or_selection() {
    let mut config = heartbeats();
    config.max_in_flight = 1;
    let (mut h, node, conn) = ready(config);
    let id = ping_due(&mut h, conn);
    send_ping(&mut h, conn, id);
    assert_eq!(h.pool.select(h.now), crate::Selection::Ready(node));
    let req = h
        .pool
        .submit(
            h.now,
            Target::Best,
            h.now + secs(5),
            Bytes::from_static(b"q"),
        )
        .expect("the ping takes no slot");
    assert_eq!(h.pool.in_flight(node), Some(1));
    h.collect();
    assert!(h.pool.holds(req));
}

/// A request that comes and goes while a connection is idle restarts both idle clocks, the
/// ping's and the idle close's: each runs from the request's end, not from when the
/// connection first went idle (the timers armed then must not survive the request), whether
/// it was answered or cancelled before a byte of it was written.
#[test]
fn a_short_request_restarts_the_idle_clocks() {
    for answered in [true, false] {
        let mut config = heartbeats();
        config.idle_timeout = secs(15);
        let (mut h, node, conn) = ready(config);
        h.advance(secs(5));
        let id = h.submit(node, 10, secs(30));
        if answered {
            h.flush(conn);
        }
        h.advance(secs(2));
        if answered {
            h.respond(conn, id);
        } else {
            h.pool.cancel(h.now, id).unwrap();
        }
        let ended = h.now;
        let ping = ping_due(&mut h, conn);
        assert_eq!(h.now, ended + INTERVAL + NS, "answered: {answered}");
        send_ping(&mut h, conn, ping);
        h.respond(conn, ping);
        h.advance_to(ended + secs(15));
        assert_eq!(h.pool.node_state(node), Some(NodeState::Ready));
        h.advance(NS);
        assert_eq!(closes(&mut h), [CloseReason::Idle], "answered: {answered}");
    }
}

#[test]
fn a_ping_never_keeps_an_idle_connection_open() {
    let mut config = heartbeats();
    config.idle_timeout = secs(15);
    // Answered: the idle close still comes 15 s after the connection went idle.
    let (mut h, node, conn) = ready(config.clone());
    let idle_since = h.now;
    let id = ping_due(&mut h, conn);
    send_ping(&mut h, conn, id);
    h.respond(conn, id);
    h.advance_to(idle_since + secs(15));
    assert_eq!(h.pool.node_state(node), Some(NodeState::Ready));
    h.advance(NS);
    assert_eq!(closes(&mut h), [CloseReason::Idle]);

    // Outstanding at the idle deadline: the connection closes as idle, the ping ends silently.
    config.heartbeat = Some(Heartbeat {
        interval: INTERVAL,
        timeout: secs(20),
    });
    let (mut h, _, conn) = ready(config);
    let id = ping_due(&mut h, conn);
    send_ping(&mut h, conn, id);
    h.advance(secs(30));
    assert_eq!(closes(&mut h), [CloseReason::Idle]);
    assert_eq!(h.pool.counters().heartbeat_timeouts, 0);
    assert_eq!(request_dones(&h), 0);
    assert!(!h.pool.holds(id));
}

#[test]
fn an_answered_ping_resets_the_consecutive_connection_failures() {
    let mut config = heartbeats();
    config.quarantine_after_failures = 2;
    config.panic_threshold = 0.0;
    let (mut h, node, conn) = ready(config);
    let id = ping_due(&mut h, conn);
    h.advance(TIMEOUT + NS); // missed: one failure
    assert_eq!(closes(&mut h), [CloseReason::HeartbeatTimeout]);
    h.advance_to(h.reconnect_at(node));
    let conn = h.ready(node);
    let answered = ping_due(&mut h, conn);
    send_ping(&mut h, conn, answered);
    h.respond(conn, answered); // the server is alive: the count starts over
    let id2 = ping_due(&mut h, conn);
    h.advance(TIMEOUT + NS);
    assert_eq!(closes(&mut h), [CloseReason::HeartbeatTimeout]);
    assert_eq!(h.pool.is_quarantined(node), Some(false));
    assert_ne!(id, id2);
}

#[test]
fn a_stale_or_repeated_submit_is_refused_and_changes_nothing() {
    let (mut h, node, conn) = ready(heartbeats());
    let id = ping_due(&mut h, conn);
    assert_eq!(
        h.pool.cancel(h.now, id),
        Err(HandleError::UnknownRequest),
        "a ping is not the application's to cancel"
    );
    h.pool
        .submit_heartbeat(h.now, id, Bytes::from_static(PING))
        .unwrap();
    assert_eq!(
        h.pool.submit_heartbeat(h.now, id, Bytes::from_static(PING)),
        Err(HandleError::WrongState)
    );
    assert_eq!(h.pool.pending_bytes(node), Some(PING.len() as u64 + 96));
    // An ordinary request's id is not a heartbeat's.
    let req = h.submit(node, 10, secs(30));
    assert_eq!(
        h.pool
            .submit_heartbeat(h.now, req, Bytes::from_static(PING)),
        Err(HandleError::UnknownRequest)
    );

    // The connection closed between the ask and the submit.
    h.flush(conn);
    h.respond(conn, req);
    h.respond(conn, id);
    let id = ping_due(&mut h, conn);
    h.pool
        .handle_closed(h.now, conn, crate::Failure::Reset)
        .unwrap();
    h.collect();
    let events = h.events.len();
    assert_eq!(
        h.pool.submit_heartbeat(h.now, id, Bytes::from_static(PING)),
        Err(HandleError::UnknownRequest)
    );
    assert_eq!(h.pool.pending_bytes(node), Some(0));
    assert_eq!(h.transmit(conn), None);
    h.collect();
    assert_eq!(h.events.len(), events);
}

#[test]
fn a_response_to_a_ping_never_handed_over_breaks_the_protocol() {
    let (mut h, _, conn) = ready(heartbeats());
    let id = ping_due(&mut h, conn);
    assert_eq!(
        h.pool
            .handle_response(h.now, conn, id, Bytes::from_static(b"PONG")),
        Err(HandleError::UnknownRequest)
    );
    h.collect();
    assert!(matches!(
        closes(&mut h)[..],
        [CloseReason::Protocol(crate::Violation::UnknownRequest(_))]
    ));
}

#[test]
fn shutdown_eviction_and_a_graceful_drain_end_a_ping_silently() {
    // A hard shutdown.
    let (mut h, _, conn) = ready(heartbeats());
    let id = ping_due(&mut h, conn);
    send_ping(&mut h, conn, id);
    h.pool.shutdown(h.now);
    h.collect();
    assert_eq!(request_dones(&h), 0);
    assert!(!h.pool.holds(id));
    assert_eq!(h.pool.poll_timeout(), None);

    // An eviction.
    let (mut h, node, conn) = ready(heartbeats());
    let id = ping_due(&mut h, conn);
    send_ping(&mut h, conn, id);
    h.pool.evict(h.now, node).unwrap();
    h.collect();
    assert_eq!(request_dones(&h), 0);
    assert!(!h.pool.holds(id));

    // A graceful drain with the ping written: the drain neither waits for it nor closes for
    // its deadline, and a late answer is consumed.
    let (mut h, node, conn) = ready(heartbeats());
    let id = ping_due(&mut h, conn);
    send_ping(&mut h, conn, id);
    let req = h.submit(node, 10, secs(60));
    h.flush(conn);
    h.pool.shutdown_gracefully(h.now);
    h.advance(secs(10)); // far past the ping's deadline
    assert_eq!(h.pool.node_state(node), Some(NodeState::Closing));
    assert_eq!(closes(&mut h), []);
    let ping_answer = h
        .pool
        .handle_next_response(h.now, conn, Bytes::from_static(b"PONG"));
    assert_eq!(ping_answer, Ok(None));
    assert_eq!(
        h.pool
            .handle_next_response(h.now, conn, Bytes::from_static(b"ok")),
        Ok(Some(req))
    );
    assert_eq!(closes(&mut h), [CloseReason::Shutdown]);
    assert_eq!(request_dones(&h), 1);

    // A graceful drain with the ping asked for and not handed over: it is never sent.
    let (mut h, node, conn) = ready(heartbeats());
    let id = ping_due(&mut h, conn);
    h.pool
        .submit_heartbeat(h.now, id, Bytes::from_static(PING))
        .unwrap();
    let req = h.submit(node, 10, secs(60));
    h.pool.shutdown_gracefully(h.now);
    assert!(!h.pool.holds(id));
    let first = h.transmit(conn).expect("the request");
    assert_ne!(&first[..], PING, "the ping was dropped unsent");
    h.pool.handle_written(h.now, conn, first.len()).unwrap();
    assert_eq!(h.transmit(conn), None);
    h.respond(conn, req);
    assert_eq!(closes(&mut h), [CloseReason::Shutdown]);
}
