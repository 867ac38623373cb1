//! [`ClientService`]: a [`Client`] bound to one target and timeout, whose readiness is
//! keepwire's own back-pressure. With the `tower` feature it is a `tower::Service<Bytes>`, so
//! load-shedding, buffering, timeout and retry layers compose with it.
//!
//! # Example
//!
//! ```no_run
//! # async fn demo(client: keepwire_driver::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use std::future::poll_fn;
//! use std::time::Duration;
//! use keepwire_driver::{Backpressure, Target};
//!
//! let mut service = client.service(Target::Best, Duration::from_secs(1)).await?;
//! // Waits while every node is backed up, full or unavailable; a load-shedding layer would
//! // refuse the request instead.
//! poll_fn(|cx| service.poll_ready(cx)).await?;
//! let reply = service.call(&b"ping"[..]).await?;
//! # let _ = reply;
//! if service.backpressure() == Some(Backpressure::NotWritable) {
//!     // every ready node's connection is above its high watermark
//! }
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use keepwire_proto::Target;
use tokio::sync::futures::OwnedNotified;

use crate::client::Client;
use crate::error::SendError;
use crate::ready::{Readiness, TargetState};
use crate::runtime::BoxFuture;

/// Why a [`ClientService`] is not ready: the back-pressure keepwire itself applies, which a
/// send would meet as an immediate refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backpressure {
    /// The connection is above its high watermark and not yet back below the low one
    /// ([`SendError::NotWritable`]); for [`Target::Best`], every ready node's is and no other
    /// node can take the request.
    NotWritable,
    /// The node holds `max_in_flight` requests ([`SendError::InFlightLimit`]); for
    /// [`Target::Best`], every ready node does (a response frees one).
    InFlightLimit,
    /// No node can take a request: for [`Target::Node`], the node is disabled, quarantined or
    /// backing off from a final failure ([`SendError::NodeUnavailable`]); for [`Target::Best`], no node is ready, connecting or
    /// past its reconnect backoff ([`SendError::NoNode`]).
    NoNode,
}

impl fmt::Display for Backpressure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotWritable => "not writable",
            Self::InFlightLimit => "in-flight limit reached",
            Self::NoNode => "no node available",
        })
    }
}

/// A [`Client`] bound to one target and one timeout, with a readiness that reports keepwire's
/// back-pressure ([`Backpressure`]), from [`Client::service`].
///
/// [`poll_ready`](Self::poll_ready) is `Pending` while a send to the target would be refused
/// at once (not writable, in-flight limit, no node), and wakes the task when that changes. So
/// a load-shedding layer refuses requests instead of queuing them behind a stalled
/// connection, and a buffering layer holds them until keepwire can take them. Readiness is the
/// driver's view after its last poll: a send can still be refused (typed, as
/// [`Client::send`] is) if another caller took the last room first.
///
/// With the `tower` feature, `ClientService` implements `tower::Service<Bytes>` with
/// `Response = Bytes` and `Error = SendError`; [`SendError::is_retryable`] tells a retry
/// policy whether nothing of a request can have reached the server. Cloning is cheap; every
/// clone shares the client.
pub struct ClientService {
    client: Client,
    readiness: Arc<Readiness>,
    target: Target,
    timeout: Duration,
    notified: Option<Pin<Box<OwnedNotified>>>,
}

impl ClientService {
    /// A service of `target`, registered with `readiness`.
    pub(crate) fn new(
        client: Client,
        readiness: Arc<Readiness>,
        target: Target,
        timeout: Duration,
    ) -> Self {
        readiness.add_service(target);
        Self {
            client,
            readiness,
            target,
            timeout,
            notified: None,
        }
    }

    /// The target every call goes to.
    pub fn target(&self) -> Target {
        self.target
    }

    /// The timeout every call gets.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The back-pressure a call would meet now, or `None` if it would be accepted (as far as
    /// the driver could tell after its last poll).
    pub fn backpressure(&self) -> Option<Backpressure> {
        match self.readiness.state(self.target) {
            Some(TargetState::Blocked(why)) => Some(why),
            _ => None,
        }
    }

    /// `Ready(Ok)` when a call would be accepted; `Pending` while keepwire would refuse it at
    /// once (the task is woken when that changes); `Ready(Err)` when no call can ever succeed:
    /// the client is shut down ([`SendError::Shutdown`]) or the target node was removed
    /// ([`SendError::StaleNode`]).
    pub fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), SendError>> {
        loop {
            match self.readiness.state(self.target) {
                None => return Poll::Ready(Err(SendError::Shutdown)),
                Some(TargetState::Gone) => return Poll::Ready(Err(SendError::StaleNode)),
                Some(TargetState::Ready) => {
                    self.notified = None;
                    return Poll::Ready(Ok(()));
                }
                Some(TargetState::Blocked(_)) => {}
            }
            match &mut self.notified {
                None => {
                    // Register first, then look again: a change in between wakes us.
                    let mut notified = Box::pin(self.readiness.notified());
                    notified.as_mut().enable();
                    self.notified = Some(notified);
                }
                Some(notified) => match notified.as_mut().poll(cx) {
                    Poll::Ready(()) => self.notified = None,
                    Poll::Pending => return Poll::Pending,
                },
            }
        }
    }

    /// Sends `payload` to the target with the service's timeout, as [`Client::send`] does
    /// (dropping the future cancels the request). It does not wait for readiness.
    pub fn call(
        &mut self,
        payload: impl Into<Bytes>,
    ) -> BoxFuture<'static, Result<Bytes, SendError>> {
        let client = self.client.clone();
        let (target, timeout, payload) = (self.target, self.timeout, payload.into());
        Box::pin(async move { client.send(target, payload, timeout).await })
    }
}

impl Clone for ClientService {
    fn clone(&self) -> Self {
        Self::new(
            self.client.clone(),
            Arc::clone(&self.readiness),
            self.target,
            self.timeout,
        )
    }
}

impl Drop for ClientService {
    fn drop(&mut self) {
        self.readiness.remove_service(self.target);
    }
}

impl fmt::Debug for ClientService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientService")
            .field("target", &self.target)
            .field("timeout", &self.timeout)
            .field("backpressure", &self.backpressure())
            .finish()
    }
}

#[cfg(feature = "tower")]
impl tower_service::Service<Bytes> for ClientService {
    type Response = Bytes;
    type Error = SendError;
    type Future = BoxFuture<'static, Result<Bytes, SendError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), SendError>> {
        ClientService::poll_ready(self, cx)
    }

    fn call(&mut self, payload: Bytes) -> Self::Future {
        ClientService::call(self, payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backpressure_displays_what_a_send_would_meet() {
        assert_eq!(Backpressure::NotWritable.to_string(), "not writable");
        assert_eq!(
            Backpressure::InFlightLimit.to_string(),
            "in-flight limit reached"
        );
        assert_eq!(Backpressure::NoNode.to_string(), "no node available");
    }

    /// The driver recomputes readiness only while a service lives, and only for the targets
    /// live services watch: the last service of a target to go takes the target off the
    /// list (a new one starts from "ready" until the driver says otherwise), and the last
    /// service of all ends the work.
    #[test]
    fn dropped_services_are_no_longer_watched() {
        let client = crate::ClientBuilder::new(keepwire_proto::Config::default())
            .build(Arc::new(crate::runtime::DriverNeverRuns))
            .unwrap();
        let readiness = Arc::new(Readiness::default());
        let service = |target| {
            ClientService::new(
                client.clone(),
                Arc::clone(&readiness),
                target,
                Duration::from_secs(1),
            )
        };
        let (first, second) = (service(Target::Best), service(Target::Best));
        readiness.set(
            Target::Best,
            TargetState::Blocked(Backpressure::NotWritable),
        );
        drop(first);
        assert!(readiness.watched());
        assert_eq!(second.backpressure(), Some(Backpressure::NotWritable));
        drop(second);
        assert!(!readiness.watched(), "no service is alive");
        assert_eq!(service(Target::Best).backpressure(), None, "a fresh entry");
    }
}
