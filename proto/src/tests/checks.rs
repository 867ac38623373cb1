//! The consistency checks the fuzz model and the property tests rely on notice what they
//! claim to: a check that always passes would let every session pass.

use super::{Harness, exact};
use crate::NodeId;
use crate::node::Node;

#[test]
fn a_node_that_miscounts_its_requests_fails_its_check() {
    let config = exact();
    let id = NodeId::new(0, 0);
    let node = Node::new(id, Harness::addr(9000).into());
    assert_eq!(node.check_invariants(&config, 0), Ok(()));
    let err = node.check_invariants(&config, 1).unwrap_err();
    assert!(err.contains("holds 1 requests, counted 0"), "{err}");
}

#[test]
fn a_pool_whose_timer_heap_disagrees_with_its_owners_fails_its_check() {
    use crate::timers::TimerKey;
    let mut h = Harness::new(exact());
    let node = h.add();
    h.ready(node);
    let id = h.submit(node, 10, super::secs(30));
    assert_eq!(h.pool.check_invariants(), Ok(()));
    let deadline = h.pool.requests().get(id).unwrap().deadline;
    let due = deadline.expiry_after(core::time::Duration::ZERO);
    let key = TimerKey::Request(id);
    // An entry at an instant the request does not hold is stale.
    h.pool.timer_heap_mut().schedule(due + super::secs(1), key);
    let err = h.pool.check_invariants().unwrap_err();
    assert!(err.contains("stale timer entry"), "{err}");
    h.pool.timer_heap_mut().schedule(due, key);
    assert_eq!(h.pool.check_invariants(), Ok(()));
    // A live deadline without its entry would never fire.
    h.pool.timer_heap_mut().cancel(key);
    let err = h.pool.check_invariants().unwrap_err();
    assert!(err.contains("timer entries for"), "{err}");
}

#[test]
fn a_node_timer_entry_at_another_instant_than_its_node_holds_fails_the_check() {
    use crate::timers::{NodeTimer, TimerKey};
    let mut h = Harness::new(exact());
    let node = h.add();
    h.ready(node);
    h.submit(node, 10, super::secs(30));
    // The queued frame's write timer: the node holds it armed at the entry's instant.
    let key = TimerKey::Node(node, NodeTimer::WriteTimeout);
    let (at, _) = h
        .pool
        .timer_heap()
        .iter()
        .find(|&(_, k)| k == key)
        .expect("the write timer's entry");
    assert_eq!(h.pool.check_invariants(), Ok(()));
    // Moved in the heap alone: as many entries as armed timers, but one the node would not
    // recognise when it fires.
    h.pool.timer_heap_mut().schedule(at + super::secs(1), key);
    let err = h.pool.check_invariants().unwrap_err();
    assert!(err.contains("stale timer entry"), "{err}");
    h.pool.timer_heap_mut().schedule(at, key);
    assert_eq!(h.pool.check_invariants(), Ok(()));
}

#[test]
fn a_written_request_missing_from_its_nodes_awaited_list_fails_the_check() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let written = h.submit(node, 10, super::secs(30));
    h.flush(conn);
    let queued = h.submit(node, 10, super::secs(30));
    assert_eq!(h.pool.check_invariants(), Ok(()));
    // The queued request marked written, as the one before it, but never put in the list.
    let sent = h.pool.requests().get(written).unwrap().stage;
    let r = h.pool.requests_mut().get_mut(queued).unwrap();
    let stage = core::mem::replace(&mut r.stage, sent);
    let err = h.pool.check_invariants().unwrap_err();
    assert!(err.contains("1 awaited of 2 sent"), "{err}");
    h.pool.requests_mut().get_mut(queued).unwrap().stage = stage;
    assert_eq!(h.pool.check_invariants(), Ok(()));
}
