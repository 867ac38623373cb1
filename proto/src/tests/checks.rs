//! The consistency checks the fuzz model and the property tests rely on notice what they
//! claim to: a check that always passes would let every session pass.

use super::{Harness, exact};
use crate::NodeId;
use crate::node::Node;

#[test]
fn a_node_that_miscounts_its_requests_fails_its_check() {
    let config = exact();
    let id = NodeId {
        index: 0,
        generation: 0,
    };
    let node = Node::new(id, Harness::addr(9000).into());
    assert_eq!(node.check_invariants(&config, 0), Ok(()));
    let err = node.check_invariants(&config, 1).unwrap_err();
    assert!(err.contains("holds 1 requests, counted 0"), "{err}");
}
