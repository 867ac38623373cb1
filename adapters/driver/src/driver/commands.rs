//! The commands client handles send the driver ([`Command`]), and how a round runs them:
//! a send inline, framed and submitted to the pool; every other command out of line.
//!
//! A child of the driver module, like [`conn_io`](super::conn_io): the driver's state stays
//! private to the two of them.

use bytes::Bytes;
use keepwire_proto::{Counters, Endpoint, HandleError, Instant, NodeId, RequestId, Target};

use super::{COMMANDS_PER_ROUND, Conn, Driver, Waiting};
use crate::client::{NodeInfo, SocketInfo};
use crate::error::SendError;
use crate::ready::TargetState;
use crate::sync::{ReplySender, answer};

/// A request from a client handle to the driver.
#[derive(Debug)]
pub(crate) enum Command {
    Send {
        target: Target,
        payload: Bytes,
        /// The send's timeout in nanoseconds, saturated at `u64::MAX` (as `Instant` adds a
        /// `Duration`): a command 8 bytes smaller than with the `Duration`, and copied a few
        /// times on its way.
        timeout: u64,
        reply: ReplySender<Result<Bytes, SendError>>,
    },
    /// The caller of a send stopped waiting: cancel the request the driver bound to its reply,
    /// if it still runs.
    Abandon(RequestId),
    AddNode(Endpoint, ReplySender<NodeId>),
    Node {
        node: NodeId,
        op: NodeOp,
        reply: ReplySender<Result<(), HandleError>>,
    },
    Counters(ReplySender<Counters>),
    NodeInfo(NodeId, ReplySender<Option<NodeInfo>>),
    /// Stop now. The reply is always there (a client's drop queues no shutdown: the dropped
    /// outbox stops the driver); it stays an `Option` because with a plain sender here the
    /// enum's layout changed and a send's path through the driver ran about 90 more
    /// instructions (`scripts/client-instructions.sh ct 1 A`: 7,492 against 7,403).
    Shutdown(Option<ReplySender<()>>),
    /// A graceful shutdown: refuse new requests, let the ones held finish, then stop.
    Drain(ReplySender<()>),
    /// A service starts watching `target`'s readiness: its current state, computed now.
    Watch(Target, ReplySender<TargetState>),
}

/// A node command.
#[derive(Clone, Copy, Debug)]
pub(crate) enum NodeOp {
    Remove,
    Enable,
    Disable,
    SetEpoch(u64),
    Evict,
    Connect,
}

impl Driver {
    /// If the inbox woke the driver (or the last round left commands in it): runs the queued
    /// commands, one by one, until the inbox is empty (a command queued after that wakes the
    /// driver again: the [`Outbox`](crate::sync::Outbox) does it for every command) or
    /// [`COMMANDS_PER_ROUND`] ran (then the rest waits for the next round). A round that a
    /// socket or the timer woke leaves the inbox alone.
    pub(super) fn take_commands(&mut self) {
        if !self.wakeups.take_inbox() {
            return;
        }
        // Read before the queue: see `Inbox::orphaned`.
        let orphaned = self.inbox.orphaned();
        // One at a time, straight off the queue: staging them in a vector first cost a
        // command's move in and out and the vector's push and drain.
        for _ in 0..COMMANDS_PER_ROUND {
            // A send is taken apart as it comes off the queue, its fields read where the pop
            // put them rather than from a copy of the command.
            match self.inbox.next() {
                Some(Command::Send {
                    target,
                    payload,
                    timeout,
                    reply,
                }) => {
                    let now = self.now();
                    self.submit(now, target, &payload, timeout, reply);
                }
                Some(other) => {
                    let now = self.now();
                    self.execute_other(now, other);
                }
                None => {
                    if self.inbox.closed(orphaned) {
                        // Every client is gone (the last one's drop dropped the outbox, which
                        // woke the driver): stop, as a shutdown would.
                        self.stopping = true;
                    }
                    return;
                }
            }
            self.settle();
        }
        self.wakeups.mark_inbox();
        self.follow_up.commands = true;
    }

    /// Runs every command but a send (which [`take_commands`](Self::take_commands) runs
    /// itself): out of line, so that the round's loop over the commands inlines a send's path
    /// whole (with the rare commands in it, it called out to a few of the send's steps).
    ///
    /// A send never reaches it. Running one here too would give `submit` and `frame` a second
    /// caller, and the compiler then made them calls on the send's path (measured: +27 to +52
    /// instructions per request, `submit` inlined by force still left `frame` a call).
    #[cold]
    #[inline(never)]
    fn execute_other(&mut self, now: Instant, command: Command) {
        match command {
            Command::Send { .. } => unreachable!("a send is executed inline"),
            Command::Abandon(id) => {
                // Already ended (answered meanwhile, or its slot reused by a newer request:
                // the generation differs) is fine: nothing to cancel.
                let _ = self.pool.cancel(now, id);
            }
            Command::AddNode(endpoint, reply) => {
                let node = self.pool.add_node(now, endpoint);
                self.telemetry.node_added(&self.pool, node);
                answer(reply, node);
            }
            Command::Node { node, op, reply } => {
                let result = match op {
                    NodeOp::Remove => self.pool.remove_node(now, node),
                    NodeOp::Enable => self.pool.enable_node(now, node),
                    NodeOp::Disable => self.pool.disable_node(now, node),
                    NodeOp::SetEpoch(epoch) => self.pool.set_epoch(now, node, epoch),
                    NodeOp::Evict => self.pool.evict(now, node),
                    NodeOp::Connect => self.pool.connect(now, node),
                };
                if result.is_ok() {
                    match op {
                        NodeOp::Disable => {
                            self.disabled.insert(node);
                        }
                        NodeOp::Enable => {
                            self.disabled.remove(&node);
                        }
                        NodeOp::Remove => {
                            self.disabled.remove(&node);
                            // The events of the removal first, then the node's telemetry goes.
                            self.settle();
                            self.telemetry.node_removed(node);
                        }
                        _ => {}
                    }
                    self.telemetry.touched(node);
                    // A caller that awaited the command sees its effect on readiness at once.
                    self.settle();
                    self.refresh_readiness();
                }
                answer(reply, result);
            }
            Command::Counters(reply) => answer(reply, self.pool.counters()),
            Command::NodeInfo(node, reply) => answer(reply, self.node_info(node)),
            Command::Shutdown(reply) => {
                self.pool.shutdown(now);
                self.stopping = true;
                self.shutdown_replies.extend(reply);
            }
            Command::Drain(reply) => {
                self.pool.shutdown_gracefully(now);
                self.draining = true;
                self.shutdown_replies.push(reply);
            }
            Command::Watch(target, reply) => {
                let state = self.watch(now, target);
                answer(reply, state);
            }
        }
    }

    /// Frames the payload with the id the pool will give the request, then submits it: both
    /// here, in the driver's single task, so nothing can take the id in between.
    fn submit(
        &mut self,
        now: Instant,
        target: Target,
        payload: &[u8],
        timeout: u64,
        reply: ReplySender<Result<Bytes, SendError>>,
    ) {
        if reply.is_closed() {
            // The caller already left; its abandonment, queued behind this, finds no request.
            return;
        }
        let framed = self.frame(payload.len(), |codec, id, dst| {
            codec.encode(payload, id, dst)
        });
        let (frame, protocol_id) = match framed {
            Ok(framed) => framed,
            Err(e) => return refuse(reply, e.into()),
        };
        let deadline = Instant::from_nanos(now.as_nanos().saturating_add(timeout));
        match self.pool.submit(now, target, deadline, frame) {
            Ok(submitted) => {
                if let Some(protocol_id) = protocol_id {
                    self.ids.insert(protocol_id, submitted);
                }
                let bound = reply.bind(submitted);
                let waiting = Waiting { reply, protocol_id };
                self.waiting.insert(submitted, waiting);
                if !bound {
                    // The caller left after the check above: nobody will name the request.
                    let _ = self.pool.cancel(now, submitted);
                }
            }
            Err(e) => refuse(reply, e.into()),
        }
        if let Target::Node(node) = target {
            self.telemetry.touched(node);
        }
    }

    fn node_info(&self, node: NodeId) -> Option<NodeInfo> {
        let conn = self.pool.current_conn(node);
        let stream_held = match conn.and_then(|conn| self.conns.get(&conn)) {
            Some(Conn::Open(open)) => open.stream.held(),
            _ => 0,
        };
        let socket = conn.and_then(|conn| match self.conns.get(&conn) {
            Some(Conn::Open(open)) => {
                let socket = open.stream.socket();
                Some(SocketInfo {
                    conn,
                    local_addr: socket.local_addr().ok(),
                    peer_addr: socket.peer_addr().ok(),
                    readback: socket.read_back(),
                    report: open.report.clone(),
                })
            }
            _ => None,
        });
        Some(NodeInfo {
            state: self.pool.node_state(node)?,
            endpoint: self.pool.node_endpoint(node)?.clone(),
            addr: self.pool.node_addr(node),
            conn,
            pending_bytes: self.pool.pending_bytes(node).unwrap_or(0),
            writable: self.pool.is_writable(node).unwrap_or(false),
            in_flight: self.pool.in_flight(node).unwrap_or(0),
            stream_held,
            socket,
        })
    }
}

/// Answers a send that could not be submitted: out of the send's way, so that its path keeps
/// the code it runs together.
#[cold]
#[inline(never)]
fn refuse(reply: ReplySender<Result<Bytes, SendError>>, error: SendError) {
    answer(reply, Err(error));
}
