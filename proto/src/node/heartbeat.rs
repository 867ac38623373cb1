//! Heartbeats on idle connections ([`Config::heartbeat`](crate::Config::heartbeat)): a ping
//! on a ready connection idle for longer than the interval, with its own deadline.

use bytes::Bytes;

use super::{Conn, Node, Sink};
use crate::event::HandleError;
use crate::ids::RequestId;

impl Node {
    /// A connection is going: its outstanding heartbeat ends silently, its slot freed (its
    /// frame, if queued, goes with the connection's other frames).
    pub(super) fn forget_heartbeat(sink: &mut Sink<'_>, conn: Option<Conn>) {
        if let Some(id) = conn.and_then(|c| c.heartbeat) {
            sink.requests.remove(id);
        }
    }

    /// The heartbeat timer fired.
    pub(super) fn heartbeat_due(&mut self, _sink: &mut Sink<'_>) {}

    /// The adapter handed over the ping frame of heartbeat `id`.
    pub(crate) fn submit_heartbeat(
        &mut self,
        _sink: &mut Sink<'_>,
        _id: RequestId,
        _frame: Bytes,
    ) -> Result<(), HandleError> {
        Err(HandleError::UnknownRequest)
    }
}
