//! In-order correlation (PostgreSQL, memcached, Redis, HTTP/1.1): a response answers the
//! oldest request written on its connection and not yet answered, and a request that ended
//! early keeps its place so the stream never shifts by one.

use bytes::Bytes;

use super::{Harness, exact, secs};
use crate::{CloseReason, HandleError, Outcome, Phase, Violation};

fn answer(h: &mut Harness, conn: crate::ConnId, body: &'static [u8]) -> Option<crate::RequestId> {
    let got = h
        .pool
        .handle_next_response(h.now, conn, Bytes::from_static(body))
        .unwrap();
    h.collect();
    got
}

#[test]
fn responses_answer_the_requests_in_the_order_they_were_written() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let (a, b, c) = (
        h.submit(node, 10, secs(5)),
        h.submit(node, 10, secs(5)),
        h.submit(node, 10, secs(5)),
    );
    h.flush(conn);
    assert_eq!(answer(&mut h, conn, b"A"), Some(a));
    assert_eq!(answer(&mut h, conn, b"B"), Some(b));
    assert_eq!(answer(&mut h, conn, b"C"), Some(c));
    assert_eq!(
        h.outcome(b),
        Some(Outcome::Response(Bytes::from_static(b"B")))
    );
    assert_eq!(h.pool.in_flight(node), Some(0));
}

#[test]
fn a_request_that_timed_out_keeps_its_place_and_its_late_response_is_dropped() {
    // A slow query with a short deadline, and requests pipelined behind it.
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let slow = h.submit(node, 10, secs(1));
    let behind: [_; 3] = core::array::from_fn(|_| h.submit(node, 10, secs(10)));
    h.flush(conn);
    h.advance(secs(2));
    assert_eq!(
        h.outcome(slow),
        Some(Outcome::DeadlineExceeded {
            phase: Phase::InFlight
        })
    );
    // The slow query's answer finally comes: consumed, not given to the next request.
    assert_eq!(answer(&mut h, conn, b"slow"), None);
    assert_eq!(h.pool.counters().late_responses, 1);
    for (i, id) in behind.into_iter().enumerate() {
        let body: &'static [u8] = [&b"0"[..], b"1", b"2"][i];
        assert_eq!(answer(&mut h, conn, body), Some(id));
        assert_eq!(
            h.outcome(id),
            Some(Outcome::Response(Bytes::from_static(body)))
        );
    }
}

#[test]
fn a_cancelled_request_keeps_its_place_too() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let cancelled = h.submit(node, 10, secs(5));
    let next = h.submit(node, 10, secs(5));
    h.flush(conn);
    h.pool.cancel(h.now, cancelled).unwrap();
    assert_eq!(answer(&mut h, conn, b"for the cancelled one"), None);
    assert_eq!(answer(&mut h, conn, b"next"), Some(next));
}

#[test]
fn a_partly_written_request_is_the_oldest_when_nothing_was_written_whole() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let a = h.submit(node, 10, secs(5));
    let _ = h.transmit(conn).unwrap();
    h.pool.handle_written(h.now, conn, 4).unwrap();
    assert_eq!(answer(&mut h, conn, b"A"), Some(a));
    assert_eq!(
        h.flush(conn),
        6,
        "its frame is still finished: the stream stays aligned"
    );
}

#[test]
fn a_partly_written_request_that_was_cancelled_consumes_its_late_response() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let cancelled = h.submit(node, 10, secs(5));
    let _ = h.transmit(conn).unwrap();
    h.pool.handle_written(h.now, conn, 4).unwrap();
    h.pool.cancel(h.now, cancelled).unwrap();
    assert_eq!(answer(&mut h, conn, b"late"), None, "not a live request's");
    assert_eq!(h.pool.counters().late_responses, 1);
    assert_eq!(h.flush(conn), 6, "its frame is still finished");
}

#[test]
fn a_response_with_nothing_in_flight_closes_only_that_connection() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let queued = h.submit(node, 10, secs(5)); // queued, not a byte written
    let err = h
        .pool
        .handle_next_response(h.now, conn, Bytes::from_static(b"?"));
    assert_eq!(err, Err(HandleError::UnknownRequest));
    h.collect();
    assert_eq!(h.pool.current_conn(node), None);
    assert_eq!(
        h.outcome(queued),
        Some(Outcome::ConnectionLost(CloseReason::Protocol(
            Violation::UnexpectedResponse
        )))
    );
}

#[test]
fn requests_from_an_earlier_connection_never_take_a_new_connections_response() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let old = h.ready(node);
    let lost = h.submit(node, 10, secs(5));
    h.flush(old);
    h.pool.evict(h.now, node).unwrap(); // written on `old`: ends Evicted
    h.collect();
    assert!(matches!(h.outcome(lost), Some(Outcome::Evicted(_))));
    let fresh = h.ready(node);
    let id = h.submit(node, 10, secs(5));
    h.flush(fresh);
    assert_eq!(answer(&mut h, fresh, b"new"), Some(id));
}

#[test]
fn a_request_that_timed_out_in_flight_is_held_until_its_late_response() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let id = h.submit(node, 10, secs(1));
    h.flush(conn);
    h.advance(secs(2));
    assert!(h.outcome(id).is_some(), "ended");
    assert!(h.pool.holds(id), "still held for its late response");
    assert_eq!(answer(&mut h, conn, b"late"), None);
    assert!(!h.pool.holds(id));
}
