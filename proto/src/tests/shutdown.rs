//! Shutting a pool down: at once (every request ends, every connection closes) and
//! gracefully (ready connections drain, the rest close at once).

use alloc::vec;
use core::time::Duration;

use bytes::Bytes;

use super::{Harness, exact, secs};
use crate::{Action, CloseReason, Failure, NodeState, Outcome, Phase, SubmitError, Target};

// --- Shutdown -------------------------------------------------------------------------------

#[test]
fn shutdown_ends_every_request_and_closes_every_connection() {
    let mut h = Harness::new(exact());
    let a_node = h.add();
    let b_node = h.add();
    let conn = h.ready(a_node);
    let a = h.submit(a_node, 10, secs(5));
    h.flush(conn);
    let b = h.submit(b_node, 10, secs(5));
    h.take_actions();
    h.pool.shutdown(h.now);
    h.collect();
    let lost = Some(Outcome::ConnectionLost(CloseReason::Shutdown));
    assert_eq!((h.outcome(a), h.outcome(b)), (lost.clone(), lost));
    assert_eq!(h.pool.node_state(a_node), Some(NodeState::Closed));
    assert_eq!(h.pool.node_state(b_node), Some(NodeState::Closed));
    assert_eq!(h.pool.poll_timeout(), None);
    let err = h
        .pool
        .submit(h.now, Target::Best, h.now + secs(1), Bytes::new());
    assert_eq!(
        err,
        Err(SubmitError::NodeUnavailable(crate::Unavailable::Shutdown))
    );
}

// --- Graceful shutdown -------------------------------------------------------------------------

#[test]
fn graceful_shutdown_drains_ready_connections_and_closes_the_rest_at_once() {
    let mut h = Harness::new(exact());
    let [busy, idle, unconnected] = [h.add(), h.add(), h.add()];
    let conn = h.ready(busy);
    let idle_conn = h.ready(idle);
    let written = h.submit(busy, 10, secs(60));
    h.flush(conn);
    let queued = h.submit(busy, 20, secs(60));
    let waiting = h.submit(unconnected, 10, secs(60));
    h.take_actions();
    h.pool.shutdown_gracefully(h.now);
    h.collect();
    assert_eq!(h.pool.node_state(busy), Some(NodeState::Closing));
    assert_eq!(h.pool.node_state(idle), Some(NodeState::Closed));
    assert_eq!(h.pool.node_state(unconnected), Some(NodeState::Closed));
    assert_eq!(
        h.outcome(waiting),
        Some(Outcome::ConnectionLost(CloseReason::Shutdown))
    );
    let actions = h.take_actions();
    assert!(actions.contains(&Action::Close {
        conn: idle_conn,
        reason: CloseReason::Shutdown
    }));
    let refused = h
        .pool
        .submit(h.now, Target::Node(busy), h.now + secs(1), Bytes::new());
    assert_eq!(
        refused,
        Err(SubmitError::NodeUnavailable(crate::Unavailable::Shutdown))
    );
    // The draining connection still writes and answers what it holds...
    assert_eq!(h.flush(conn), 20);
    h.respond(conn, written);
    assert_eq!(h.pool.node_state(busy), Some(NodeState::Closing));
    h.respond(conn, queued);
    // ...then closes.
    assert!(matches!(h.outcome(queued), Some(Outcome::Response(_))));
    assert_eq!(h.pool.node_state(busy), Some(NodeState::Closed));
    assert_eq!(
        h.take_actions(),
        vec![Action::Close {
            conn,
            reason: CloseReason::Shutdown
        }]
    );
    assert_eq!(h.pool.poll_timeout(), None);
}

#[test]
fn a_drain_does_not_wait_for_an_answer_past_its_deadline() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let a = h.submit(node, 10, secs(2));
    h.flush(conn);
    h.pool.shutdown_gracefully(h.now);
    h.advance(secs(2) + Duration::from_nanos(1));
    assert_eq!(
        h.outcome(a),
        Some(Outcome::DeadlineExceeded {
            phase: Phase::InFlight
        })
    );
    assert_eq!(h.pool.node_state(node), Some(NodeState::Closed));
    assert!(h.take_actions().contains(&Action::Close {
        conn,
        reason: CloseReason::Shutdown
    }));
}

#[test]
fn a_draining_connection_that_fails_ends_closed_not_reconnecting() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let a = h.submit(node, 10, secs(60));
    h.flush(conn);
    h.pool.shutdown_gracefully(h.now);
    h.pool.handle_closed(h.now, conn, Failure::Reset).unwrap();
    h.collect();
    assert_eq!(
        h.outcome(a),
        Some(Outcome::ConnectionLost(CloseReason::Io(Failure::Reset)))
    );
    assert_eq!(h.pool.node_state(node), Some(NodeState::Closed));
    assert_eq!(h.pool.poll_timeout(), None);
}
