//! The counters that no other test reads: each counts what its documentation says.

use bytes::Bytes;

use super::{Harness, exact, secs};
use crate::{SubmitError, Target};

#[test]
fn accepted_submits_are_counted_and_refused_ones_are_not() {
    let mut config = exact();
    config.high_watermark = 100;
    config.low_watermark = 50;
    config.per_frame_overhead = 0;
    let mut h = Harness::new(config);
    let node = h.add();
    h.ready(node);
    h.submit(node, 10, secs(60));
    h.submit(node, 200, secs(60)); // accepted whole, crossing the high watermark
    let refused = h.pool.submit(
        h.now,
        Target::Node(node),
        h.now + secs(60),
        Bytes::from_static(b"x"),
    );
    assert_eq!(refused, Err(SubmitError::NotWritable));
    assert_eq!(h.pool.counters().submitted, 2);
}

#[test]
fn a_response_to_nothing_in_flight_counts_as_a_protocol_violation() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let stranger = crate::RequestId::new(77, 0);
    let refused = h
        .pool
        .handle_response(h.now, conn, stranger, Bytes::from_static(b"?"));
    assert_eq!(refused, Err(crate::HandleError::UnknownRequest));
    assert_eq!(h.pool.counters().protocol_violations, 1, "by id");
    let (conn, _) = h.open(node);
    h.pool.handle_connected(h.now, conn).unwrap();
    let refused = h
        .pool
        .handle_next_response(h.now, conn, Bytes::from_static(b"?"));
    assert_eq!(refused, Err(crate::HandleError::UnknownRequest));
    assert_eq!(h.pool.counters().protocol_violations, 2, "in order");
}
