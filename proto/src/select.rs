//! Node selection (Kafka KIP-601's `leastLoadedNode`, as DESIGN.md states it).

mod index;

pub(crate) use index::{Class, Placement, SelectIndex, Standing};

use crate::config::SelectionRule;
use crate::event::NodeState;
use crate::ids::NodeId;
use crate::node::Node;
use crate::pool::Pool;
use crate::time::Instant;

/// The node a request should go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Selection {
    /// A ready, writable node with free capacity and the fewest requests in flight.
    Ready(NodeId),
    /// No such node; this one is connecting or handshaking.
    Connecting(NodeId),
    /// No such node either; this one is disconnected and past its backoff: submitting to it
    /// opens a connection.
    Connect(NodeId),
    /// No node can take a request now.
    None {
        /// Only because every ready node is at its in-flight limit (a response will free one).
        all_full: bool,
    },
}

/// Node slots up to which a pick scans them instead of asking the index: the index's
/// upkeep (placing the nodes an input touched, then a descent of its trees) costs more than
/// a scan of this many. A routed lifecycle over 1 and 8 busy nodes ran 1,262 and 1,310
/// instructions through the index, 1,043 and 1,381 by the scan, which grows by about 48 a
/// node where the index grows by about 7: the two meet between 6 and 7 (BENCHMARKS.md, "A
/// descent without recursion"). Either gives the same node: the scan is the rule's
/// reference, and the index is tested against it.
pub(crate) const SCAN_UP_TO: usize = 6;

impl Pool {
    /// The rule: by a scan of at most [`SCAN_UP_TO`] node slots, else through the index,
    /// O(log n) in the number of nodes.
    pub(crate) fn pick(&mut self, now: Instant) -> Selection {
        let count = self.node_slots();
        if count == 0 {
            return Selection::None { all_full: false };
        }
        let offset = self.draw_below(count);
        if count <= SCAN_UP_TO {
            // The nodes touched meanwhile stay listed in the index, to be placed anew when
            // the pool outgrows the scan.
            return self.scan_from(now, offset);
        }
        self.pick_from(now, offset)
    }

    /// [`Pool::select`]'s rule by a linear scan of every node, O(n): the reference the index
    /// is tested against, and the baseline of its benchmark. Draws its random offset as
    /// `select` does.
    pub fn select_by_scan(&mut self, now: Instant) -> Selection {
        let count = self.node_slots();
        if count == 0 {
            return Selection::None { all_full: false };
        }
        let offset = self.draw_below(count);
        self.scan_from(now, offset)
    }

    /// The rule through the index, from the node slot `offset` on.
    pub(crate) fn pick_from(&mut self, now: Instant, offset: usize) -> Selection {
        let offset = offset as u32;
        let cap = self.config().max_in_flight as usize;
        let panic = self.in_panic();
        let index = self.select_index(now);
        let chosen = match index.ready(offset, cap, panic) {
            Ok(slot) => Ok((Selection::Ready as fn(NodeId) -> Selection, slot)),
            Err(all_full) => match index.connecting(offset, panic) {
                Some(slot) => Ok((Selection::Connecting as fn(NodeId) -> Selection, slot)),
                None => match index.reconnectable(offset, panic) {
                    Some(slot) => Ok((Selection::Connect as fn(NodeId) -> Selection, slot)),
                    None => Err(all_full),
                },
            },
        };
        match chosen {
            Ok((make, slot)) => self
                .node_at(slot as usize)
                .map_or(Selection::None { all_full: false }, |n| make(n.id())),
            Err(all_full) => Selection::None { all_full },
        }
    }

    /// The rule by a linear scan, from the node slot `offset` on.
    pub(crate) fn scan_from(&self, now: Instant, offset: usize) -> Selection {
        let count = self.node_slots();
        let max_in_flight = self.config().max_in_flight as usize;
        let rule = self.config().selection;
        let mut ready: Option<(usize, NodeId)> = None;
        let mut connecting: Option<NodeId> = None;
        let mut disconnected: Option<(u32, Option<Instant>, NodeId)> = None;
        let (mut ready_seen, mut ready_full) = (0, 0);
        let candidates = (0..count).filter_map(|i| self.node_at((offset + i) % count));
        let panic = self.in_panic();
        for node in candidates.filter(|n| n.selectable(now, panic)) {
            let load = node.requests();
            match node.state() {
                NodeState::Ready => {
                    ready_seen += 1;
                    if !node.outbound.is_writable() {
                        continue;
                    }
                    if load >= max_in_flight {
                        ready_full += 1;
                        continue;
                    }
                    if load == 0 {
                        return Selection::Ready(node.id());
                    }
                    if ready.is_none_or(|(best, _)| load < best) {
                        ready = Some((load, node.id()));
                    }
                }
                NodeState::Connecting | NodeState::Handshaking => {
                    connecting.get_or_insert(node.id());
                }
                _ => {
                    let Some(key) = reconnect_rank(node, now, rule) else {
                        continue;
                    };
                    if disconnected.is_none_or(|(a, t, _)| key < (a, t)) {
                        disconnected = Some((key.0, key.1, node.id()));
                    }
                }
            }
        }
        if let Some((_, id)) = ready {
            Selection::Ready(id)
        } else if let Some(id) = connecting {
            Selection::Connecting(id)
        } else if let Some((_, _, id)) = disconnected {
            Selection::Connect(id)
        } else {
            Selection::None {
                all_full: ready_seen > 0 && ready_full == ready_seen,
            }
        }
    }
}

/// The rank of a disconnected node past its backoff (lower is better): with KIP-601's rule,
/// fewest failed attempts then least recently attempted; with Kafka's shipped rule, least
/// recently attempted. A node never attempted counts as least recently attempted.
fn reconnect_rank(
    node: &Node,
    now: Instant,
    rule: SelectionRule,
) -> Option<(u32, Option<Instant>)> {
    let reconnect_at = node.reconnect_at()?;
    if now < reconnect_at {
        return None;
    }
    Some(rank(node, rule))
}

fn rank(node: &Node, rule: SelectionRule) -> index::Rank {
    let (failed, last) = node.attempts();
    match rule {
        SelectionRule::LeastRecentlyAttempted => (0, last),
        _ => (failed, last),
    }
}

impl Node {
    /// Where this node stands for selection at `now` (the index keeps it up to date).
    pub(crate) fn placement(&self, now: Instant, rule: SelectionRule) -> Placement {
        let quarantined = self.is_quarantined();
        if !self.admission.enabled || self.state() == NodeState::Closed {
            return Placement {
                class: Class::Out,
                quarantined,
            };
        }
        let standing = match self.state() {
            NodeState::Ready => Standing::Ready {
                load: self.requests(),
                writable: self.outbound.is_writable(),
            },
            NodeState::Connecting | NodeState::Handshaking => Standing::Connecting,
            NodeState::Disconnected { reconnect_at } | NodeState::AuthFailed { reconnect_at } => {
                Standing::Disconnected {
                    reconnect_at,
                    rank: rank(self, rule),
                }
            }
            _ => Standing::Other,
        };
        let until = self.admission.throttled_until;
        let class = if now < until {
            Class::Throttled {
                until,
                then: standing,
            }
        } else {
            Class::In(standing)
        };
        Placement { class, quarantined }
    }
}
