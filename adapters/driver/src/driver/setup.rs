//! Setting connections up: the TCP connect the pool asks for ([`Action::Open`]), to an
//! address or to a name resolved on every attempt, then the optional handshake, each polled
//! until it reports to the pool. The pool owns the setup deadline and closes the connection
//! when it passes; the driver then drops whatever was still running (lookup, connect or
//! handshake).
//!
//! A child of the driver module (so the driver's state stays private to the two of them).
//!
//! [`Action::Open`]: keepwire_proto::Action::Open

use std::mem;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use keepwire_proto::{ConnId, Endpoint, Failure, HandshakeFailure, Instant, SocketOptions};

use super::{Conn, Driver, contain};
use crate::client::ClientEvent;
use crate::driver::conn_io::OpenConn;
use crate::error::failure_of;
use crate::handshake::{HandshakeError, HandshakeErrorKind, HandshakeIo};
use crate::resolve::{NameError, ResolveError, connect_to_name};
use crate::runtime::{BoxFuture, IoStream};
use crate::socket::{OptionReport, PreparedSocket};

/// A connect in progress: its stream once connected, or the failure to report.
pub(super) type Connecting = BoxFuture<'static, Result<Connected, Failure>>;

/// A connected stream, the options its socket could not take, and, for a node added by
/// name, the address it reached.
pub(super) struct Connected {
    stream: Box<dyn IoStream>,
    report: OptionReport,
    reached: Option<SocketAddr>,
}

impl Driver {
    /// Starts the connect the pool asked for with `Action::Open`.
    pub(super) fn open(
        &mut self,
        now: Instant,
        conn: ConnId,
        endpoint: &Endpoint,
        options: &SocketOptions,
        deadline: Instant,
    ) {
        let connect: Connecting = match endpoint {
            Endpoint::Addr(addr) => {
                let addr = *addr;
                let (socket, report) = match PreparedSocket::new(addr, options) {
                    Ok(prepared) => prepared,
                    Err(e) => {
                        let _ = self.pool.handle_connect_failed(now, conn, failure_of(&e));
                        return;
                    }
                };
                if !report.is_empty() {
                    self.publish(ClientEvent::SocketOptions {
                        conn,
                        report: report.clone(),
                    });
                }
                let connect = self.runtime.connect(socket, addr);
                Box::pin(async move {
                    let stream = connect.await.map_err(|e| failure_of(&e))?;
                    Ok(Connected {
                        stream,
                        report,
                        reached: None,
                    })
                })
            }
            Endpoint::Name { host, port } => {
                // Beyond the clock's range: no share of it for any address either.
                let deadline = self
                    .origin
                    .checked_add(Duration::from_nanos(deadline.as_nanos()))
                    .unwrap_or_else(|| self.runtime.now() + Duration::from_secs(86_400 * 365));
                let connect = connect_to_name(
                    Arc::clone(&self.runtime),
                    Arc::clone(&self.resolver),
                    Arc::clone(host),
                    *port,
                    *options,
                    deadline,
                );
                Box::pin(async move {
                    match connect.await {
                        Ok(reached) => Ok(Connected {
                            stream: reached.stream,
                            report: reached.report,
                            reached: Some(reached.peer),
                        }),
                        Err(NameError::Resolve(ResolveError::NotFound)) => {
                            Err(Failure::NameNotFound)
                        }
                        Err(NameError::Resolve(_)) => Err(Failure::ResolveFailed),
                        Err(NameError::Connect(e)) => Err(failure_of(&e)),
                    }
                })
            }
            // An endpoint of a newer keepwire-proto: nothing this driver knows to connect to.
            #[allow(unreachable_patterns)]
            _ => {
                let _ = self
                    .pool
                    .handle_connect_failed(now, conn, Failure::Unreachable);
                return;
            }
        };
        self.conns.insert(conn, Conn::Connecting(connect));
        self.setups.push(conn);
        self.follow_up.setup = true;
    }

    /// Runs the handshake hook on `conn`, as the pool asked with `Action::Handshake`.
    pub(super) fn handshake(&mut self, now: Instant, conn: ConnId) {
        match (self.conns.remove(&conn), &self.hook) {
            (Some(Conn::Open(open)), Some(hook)) => {
                let host = match self.pool.node_endpoint(conn.node()) {
                    Some(Endpoint::Name { host, .. }) => Some(Arc::clone(host)),
                    _ => None,
                };
                let io = HandshakeIo::new(conn, open.stream).with_host(host);
                match contain(|| hook.handshake(io)) {
                    Ok(handshake) => {
                        self.conns.insert(
                            conn,
                            Conn::Handshaking {
                                handshake,
                                report: open.report,
                            },
                        );
                        self.setups.push(conn);
                    }
                    Err(message) => self.handshake_failed(now, conn, hook_panicked(&message)),
                }
            }
            (Some(other), None) => {
                // Config::handshake without a hook is refused at build time; should the
                // pool ask anyway, there is nothing to run.
                self.conns.insert(conn, other);
                let _ = self.pool.handle_handshake_done(now, conn);
            }
            (Some(other), Some(_)) => {
                self.conns.insert(conn, other);
            }
            (None, _) => {}
        }
    }

    /// Polls connects and handshakes; reports each that finished.
    pub(super) fn poll_setups(&mut self, cx: &mut Context<'_>) -> bool {
        // Polled here, each of them: only a connect started after this needs another round
        // (a handshake starts only here, when its connect finishes, and that is one anyway).
        self.follow_up.setup = false;
        self.conn_ids.clear();
        mem::swap(&mut self.conn_ids, &mut self.setups);
        let mut moved = false;
        for i in 0..self.conn_ids.len() {
            let conn = self.conn_ids[i];
            let Some(Conn::Connecting(_) | Conn::Handshaking { .. }) = self.conns.get(&conn) else {
                continue;
            };
            let Some(entry) = self.conns.remove(&conn) else {
                continue;
            };
            let now = self.now();
            match entry {
                Conn::Connecting(mut connect) => match connect.as_mut().poll(cx) {
                    Poll::Pending => {
                        self.conns.insert(conn, Conn::Connecting(connect));
                        self.setups.push(conn);
                        continue;
                    }
                    Poll::Ready(Ok(connected)) => self.connected(now, conn, connected),
                    Poll::Ready(Err(failure)) => {
                        let _ = self.pool.handle_connect_failed(now, conn, failure);
                    }
                },
                Conn::Handshaking {
                    mut handshake,
                    report,
                } => match contain(|| handshake.as_mut().poll(cx))
                    .unwrap_or_else(|message| Poll::Ready(Err(hook_panicked(&message))))
                {
                    Poll::Pending => {
                        self.conns
                            .insert(conn, Conn::Handshaking { handshake, report });
                        self.setups.push(conn);
                        continue;
                    }
                    Poll::Ready(Ok(io)) => {
                        let Some(decoder) = self.decoder_for(now, conn) else {
                            continue;
                        };
                        let open =
                            OpenConn::new(io.into_stream(), report, decoder, &self.wakeups, conn);
                        self.conns.insert(conn, Conn::Open(open));
                        if self.pool.handle_handshake_done(now, conn).is_err() {
                            self.conns.remove(&conn);
                        }
                    }
                    Poll::Ready(Err(error)) => self.handshake_failed(now, conn, error),
                },
                Conn::Open(open) => {
                    self.conns.insert(conn, Conn::Open(open));
                    continue;
                }
            }
            moved = true;
            self.settle();
        }
        moved
    }

    /// The TCP connect of `conn` succeeded: the connection is open, and the pool learns which
    /// address a node added by name reached.
    fn connected(&mut self, now: Instant, conn: ConnId, connected: Connected) {
        let Connected {
            stream,
            report,
            reached,
        } = connected;
        if reached.is_some() && !report.is_empty() {
            // A node added by name: the socket was made for the address that answered.
            self.publish(ClientEvent::SocketOptions {
                conn,
                report: report.clone(),
            });
        }
        let Some(decoder) = self.decoder_for(now, conn) else {
            return;
        };
        self.conns.insert(
            conn,
            Conn::Open(OpenConn::new(stream, report, decoder, &self.wakeups, conn)),
        );
        let reported = match reached {
            Some(peer) => self.pool.handle_connected_to(now, conn, peer),
            None => self.pool.handle_connected(now, conn),
        };
        if reported.is_err() {
            self.conns.remove(&conn);
        }
    }

    pub(super) fn handshake_failed(&mut self, now: Instant, conn: ConnId, error: HandshakeError) {
        let failure = match error.kind() {
            HandshakeErrorKind::Auth => HandshakeFailure::AuthRefused,
            HandshakeErrorKind::Certificate => HandshakeFailure::CertificateRejected,
            _ => HandshakeFailure::Failed,
        };
        let _ = self.pool.handle_handshake_failed(now, conn, failure);
        self.publish(ClientEvent::HandshakeFailed { conn, error });
    }
}

fn hook_panicked(message: &str) -> HandshakeError {
    HandshakeError::failed(format!("the handshake hook panicked: {message}"))
}
