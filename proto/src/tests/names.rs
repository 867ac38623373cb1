//! Nodes by name: proto never resolves; every `Open` carries the name, so the adapter
//! resolves it afresh for each attempt, and reports the address it reached.

use core::net::SocketAddr;

use super::Harness;
use crate::{Action, Endpoint, Failure, HandleError, NodeId};

fn db() -> Endpoint {
    Endpoint::name("db.example", 5432).unwrap()
}

fn peer(last: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, last], 5432))
}

/// Asks for a connection and returns its handle, checking that its `Open` carries `endpoint`.
fn opens_to(h: &mut Harness, node: NodeId, endpoint: &Endpoint) -> crate::ConnId {
    h.pool.connect(h.now, node).unwrap();
    let actions = h.take_actions();
    match &actions[..] {
        [
            Action::Open {
                conn, endpoint: e, ..
            },
        ] if e == endpoint => *conn,
        other => panic!("expected one Open to {endpoint}, got {other:?}"),
    }
}

#[test]
fn every_open_carries_the_name_and_node_addr_follows_the_address_reached() {
    let mut h = Harness::new(super::exact());
    let node = h.pool.add_node(h.now, db());
    assert_eq!(h.pool.node_endpoint(node), Some(&db()));
    assert_eq!(h.pool.node_addr(node), None, "nothing reached yet");

    let conn = opens_to(&mut h, node, &db());
    h.pool.handle_connected_to(h.now, conn, peer(1)).unwrap();
    assert_eq!(h.pool.node_addr(node), Some(peer(1)));
    h.pool
        .handle_closed(h.now, conn, Failure::PeerClosed)
        .unwrap();

    // The server moved: the next attempt carries the name again, never the old address.
    h.advance_to(h.reconnect_at(node));
    let conn = opens_to(&mut h, node, &db());
    assert_eq!(
        h.pool.node_addr(node),
        Some(peer(1)),
        "the last one reached"
    );
    h.pool.handle_connected_to(h.now, conn, peer(2)).unwrap();
    assert_eq!(h.pool.node_addr(node), Some(peer(2)));
    assert_eq!(h.pool.node_endpoint(node), Some(&db()));
}

#[test]
fn an_address_node_keeps_its_address_whatever_the_adapter_reports() {
    let mut h = Harness::new(super::exact());
    let addr = Harness::addr(9000);
    let node = h.pool.add_node(h.now, addr); // a SocketAddr, as before names
    assert_eq!(h.pool.node_endpoint(node), Some(&Endpoint::Addr(addr)));
    let conn = opens_to(&mut h, node, &Endpoint::Addr(addr));
    h.pool.handle_connected_to(h.now, conn, peer(9)).unwrap();
    assert_eq!(h.pool.node_addr(node), Some(addr));
}

#[test]
fn handle_connected_to_is_handle_connected_for_stale_and_wrong_state_reports() {
    let mut h = Harness::new(super::exact());
    let node = h.pool.add_node(h.now, db());
    let conn = opens_to(&mut h, node, &db());
    h.pool.handle_connected_to(h.now, conn, peer(1)).unwrap();
    assert_eq!(
        h.pool.handle_connected_to(h.now, conn, peer(2)),
        Err(HandleError::WrongState)
    );
    h.pool
        .handle_closed(h.now, conn, Failure::PeerClosed)
        .unwrap();
    assert_eq!(
        h.pool.handle_connected_to(h.now, conn, peer(3)),
        Err(HandleError::StaleConn)
    );
    assert_eq!(
        h.pool.node_addr(node),
        Some(peer(1)),
        "refused reports change nothing"
    );
}

#[test]
fn a_removed_node_has_no_endpoint() {
    let mut h = Harness::new(super::exact());
    let node = h.pool.add_node(h.now, db());
    h.pool.remove_node(h.now, node).unwrap();
    assert_eq!(h.pool.node_endpoint(node), None);
    assert_eq!(h.pool.node_addr(node), None);
}
