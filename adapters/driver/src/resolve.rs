//! Nodes by name: the [`Resolver`] that turns a node's host name into addresses on every
//! connect attempt, and the connect that tries those addresses in turn.
//!
//! A node added as `host:port` ([`Endpoint::Name`](keepwire_proto::Endpoint)) is resolved
//! again on *every* connect attempt, so a server that moved (a pod restarted on another
//! address) is found by the next reconnect without removing and re-adding the node. The
//! lookup runs under the attempt's setup deadline, as the TCP connect and the handshake do.
//!
//! When the name has several addresses, they are tried in the order the resolver gave them,
//! one at a time, each with a share of what is left of the setup deadline (Go's `net.Dialer`
//! rule): an address that fails or does not answer in its share moves
//! the attempt on to the next one before the node's backoff applies. The first that connects
//! is the connection's peer; the last one gets all the time that is left.
//!
//! What a failed lookup means for the node:
//!
//! - [`ResolveError::NotFound`] (the name does not exist, or has no address) is *final*:
//!   `Failure::NameNotFound` ends every request waiting on the node at once, and the node
//!   waits [`Config::final_failure_backoff`](keepwire_proto::Config::final_failure_backoff)
//!   before it tries again.
//! - [`ResolveError::Failed`] (the resolver could not be reached, a temporary failure) is
//!   retryable, like a refused connect: `Failure::ResolveFailed`, then the reconnect backoff.

use std::future::{Future, poll_fn};
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use keepwire_proto::SocketOptions;

use crate::runtime::{BoxFuture, IoStream, Runtime};
use crate::socket::{OptionReport, PreparedSocket};

/// Resolves a node's host name to the addresses to connect to, on every connect attempt.
///
/// Each runtime has a default ([`Runtime::resolve`]: tokio's blocking pool, smol's and
/// async-std's, std's resolver, which follows the system's configuration: `/etc/hosts`, DNS,
/// ...). Replace it with [`ClientBuilder::resolver`](crate::ClientBuilder::resolver) to use
/// another resolver (an async DNS client, a service registry) or, in tests, to answer what
/// the test needs without touching the system's hosts file.
///
/// Any `Fn(&str, u16) -> impl Future<Output = Result<Vec<SocketAddr>, ResolveError>>` closure
/// that is `Send + Sync` implements it.
///
/// The addresses are tried in the order given. Each is a full socket address, normally with
/// the port asked for (a registry may answer with other ports). No answer is the same as
/// [`ResolveError::NotFound`].
///
/// # Example
///
/// A resolver that answers from a table the application updates (a service registry's
/// latest view), and says "not found" for any other name:
///
/// ```
/// use std::collections::HashMap;
/// use std::net::SocketAddr;
/// use std::sync::{Arc, Mutex};
///
/// use keepwire_driver::{BoxFuture, ClientBuilder, Config, Endpoint, ResolveError, Resolver};
///
/// #[derive(Debug, Default)]
/// struct Registry {
///     services: Mutex<HashMap<String, Vec<SocketAddr>>>,
/// }
///
/// impl Resolver for Registry {
///     fn resolve(
///         &self,
///         host: &str,
///         _port: u16,
///     ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
///         let found = self.services.lock().unwrap().get(host).cloned();
///         Box::pin(async move { found.ok_or(ResolveError::NotFound) })
///     }
/// }
///
/// let registry = Arc::new(Registry::default());
/// registry
///     .services
///     .lock()
///     .unwrap()
///     .insert("orders".into(), vec!["10.0.0.7:5432".parse().unwrap()]);
/// let builder = ClientBuilder::new(Config::default())
///     .node(Endpoint::name("orders", 5432).unwrap())
///     .resolver(registry.clone());
/// # drop(builder);
/// ```
pub trait Resolver: Send + Sync + 'static {
    /// The addresses of `host`, for a connection to `port`.
    ///
    /// The driver drops the returned future when the connect attempt's setup deadline
    /// passes, so a resolver needs no timeout of its own.
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>>;
}

impl<F, Fut> Resolver for F
where
    F: Fn(&str, u16) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<SocketAddr>, ResolveError>> + Send + 'static,
{
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
        Box::pin(self(host, port))
    }
}

/// Why a name could not be resolved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The name does not exist or has no address (NXDOMAIN, `EAI_NONAME`, `EAI_NODATA`, an
    /// empty answer). Final: the requests waiting on the node end at once with
    /// `Failure::NameNotFound`, and the node waits its final-failure backoff.
    #[error("the name does not exist or has no address")]
    NotFound,
    /// The lookup failed for another reason (no resolver reachable, a temporary failure):
    /// retryable, as `Failure::ResolveFailed`.
    #[error("name resolution failed: {0}")]
    Failed(#[source] io::Error),
}

impl ResolveError {
    /// Classifies an error of std's resolver (`ToSocketAddrs`, which tokio's `lookup_host`
    /// and async-std's resolver run too): "no such name" and "no address for it" are
    /// [`NotFound`](Self::NotFound), anything else is [`Failed`](Self::Failed).
    ///
    /// std reports `getaddrinfo`'s errors as text only (`failed to lookup address
    /// information: Name or service not known`), so the classification reads the text that
    /// the C library gives `EAI_NONAME` and `EAI_NODATA` (glibc, musl and the BSDs' wording).
    pub fn from_lookup(error: io::Error) -> Self {
        const NOT_FOUND: [&str; 5] = [
            "Name or service not known",           // glibc EAI_NONAME
            "No address associated with hostname", // glibc EAI_NODATA
            "Name does not resolve",               // musl EAI_NONAME
            "nodename nor servname provided",      // BSD, macOS EAI_NONAME
            "No address associated with nodename", // BSD EAI_NODATA
        ];
        let text = error.to_string();
        if NOT_FOUND.iter().any(|known| text.contains(known)) {
            Self::NotFound
        } else {
            Self::Failed(error)
        }
    }

    /// Whether the name does not exist ([`NotFound`](Self::NotFound)).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound)
    }
}

/// Resolves `host` with std's resolver, blocking the calling thread: what the runtimes'
/// default resolvers run on their blocking pools. An empty answer is
/// [`ResolveError::NotFound`].
pub fn resolve_blocking(host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(ResolveError::from_lookup)?
        .collect();
    if addrs.is_empty() {
        return Err(ResolveError::NotFound);
    }
    Ok(addrs)
}

/// [`resolve_blocking`] on a thread of its own: the default of [`Runtime::resolve`] for a
/// runtime without a blocking pool.
pub(crate) fn resolve_on_thread(
    host: &str,
    port: u16,
) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    let name = host.to_owned();
    let spawned = std::thread::Builder::new()
        .name("keepwire-resolve".into())
        .spawn(move || {
            let _ = answer.send(resolve_blocking(&name, port));
        });
    Box::pin(async move {
        spawned.map_err(ResolveError::Failed)?;
        answered.await.unwrap_or_else(|_| {
            Err(ResolveError::Failed(io::Error::other(
                "the resolver thread ended without an answer",
            )))
        })
    })
}

/// The runtime's own resolver ([`Runtime::resolve`]) as a [`Resolver`]: the default of a
/// client that was given none.
#[derive(Debug)]
pub(crate) struct RuntimeResolver(pub(crate) Arc<dyn Runtime>);

impl Resolver for RuntimeResolver {
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
        self.0.resolve(host, port)
    }
}

/// The share of the setup deadline one address gets: what is left divided by the addresses
/// left, but at least 2 s (or all that is left, if less) — the rule of Go's `net.Dialer`
/// (`partialDeadline`). So a dead first address does not eat the whole attempt when there is
/// time for both, and a long list does not leave each address too little time to connect.
pub(crate) fn address_budget(remaining: Duration, addresses_left: usize) -> Duration {
    const SANE_MINIMUM: Duration = Duration::from_secs(2);
    let left = u32::try_from(addresses_left.max(1)).unwrap_or(u32::MAX);
    (remaining / left).max(SANE_MINIMUM.min(remaining))
}

/// A connect that reached an address: the stream, the options that could not be applied to
/// its socket, and the address.
pub(crate) struct Reached {
    pub(crate) stream: Box<dyn IoStream>,
    pub(crate) report: OptionReport,
    pub(crate) peer: SocketAddr,
}

/// Why a connect to a name failed.
#[derive(Debug)]
pub(crate) enum NameError {
    /// The lookup failed.
    Resolve(ResolveError),
    /// Every address failed; this is the last one's error.
    Connect(io::Error),
}

/// Resolves `host` and connects to its addresses in turn (see the module's documentation),
/// until `deadline` (on `runtime`'s clock), after which the driver drops this future.
pub(crate) async fn connect_to_name(
    runtime: Arc<dyn Runtime>,
    resolver: Arc<dyn Resolver>,
    host: Arc<str>,
    port: u16,
    options: SocketOptions,
    deadline: Instant,
) -> Result<Reached, NameError> {
    let addrs = resolver
        .resolve(&host, port)
        .await
        .map_err(NameError::Resolve)?;
    if addrs.is_empty() {
        return Err(NameError::Resolve(ResolveError::NotFound));
    }
    let mut last = None;
    for (i, &addr) in addrs.iter().enumerate() {
        let left = addrs.len() - i;
        let (socket, report) = match PreparedSocket::new(addr, &options) {
            Ok(prepared) => prepared,
            Err(e) => {
                last = Some(e);
                continue;
            }
        };
        let connect = runtime.connect(socket, addr);
        // The last address has all that is left: the setup deadline itself ends it (the
        // pool's, which closes the connection as a setup timeout).
        let until = (left > 1).then(|| {
            let now = runtime.now();
            now + address_budget(deadline.saturating_duration_since(now), left)
        });
        match before(&*runtime, until, connect).await {
            Some(Ok(stream)) => {
                return Ok(Reached {
                    stream,
                    report,
                    peer: addr,
                });
            }
            Some(Err(e)) => last = Some(e),
            None => {
                last = Some(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{addr} did not answer within its share of the setup timeout"),
                ));
            }
        }
    }
    Err(NameError::Connect(last.unwrap_or_else(|| {
        io::Error::other("no address could be tried")
    })))
}

/// `future`'s output, or `None` if `until` (on `runtime`'s clock) passes first; with no
/// `until`, the output whenever it comes.
async fn before<F: Future>(
    runtime: &dyn Runtime,
    until: Option<Instant>,
    future: F,
) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut timer = until.map(|at| runtime.new_timer(at));
    poll_fn(|cx| {
        if let Poll::Ready(output) = future.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        let fired = timer
            .as_mut()
            .is_some_and(|timer| timer.as_mut().poll_fire(cx).is_ready());
        if fired {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_gets_its_share_but_at_least_two_seconds() {
        let s = Duration::from_secs;
        // Time for both: half each.
        assert_eq!(address_budget(s(10), 2), s(5));
        // Three addresses in 9 s: 3 s, then 3 s of the 6 s left, then the rest.
        assert_eq!(address_budget(s(9), 3), s(3));
        // Too little for an equal share: 2 s each, taken from the end of the list.
        assert_eq!(address_budget(s(4), 4), s(2));
        assert_eq!(address_budget(s(3), 2), s(2));
        // Less than 2 s left: all of it.
        assert_eq!(
            address_budget(Duration::from_millis(1500), 3),
            Duration::from_millis(1500)
        );
        assert_eq!(address_budget(Duration::ZERO, 2), Duration::ZERO);
        // The last address: everything.
        assert_eq!(address_budget(s(7), 1), s(7));
        assert_eq!(address_budget(s(7), 0), s(7), "never divides by zero");
    }

    #[test]
    fn getaddrinfo_errors_are_classified_by_their_text() {
        let std_error = |detail: &str| {
            io::Error::other(format!("failed to lookup address information: {detail}"))
        };
        for not_found in [
            "Name or service not known",
            "No address associated with hostname",
            "Name does not resolve",
            "nodename nor servname provided, or not known",
        ] {
            assert!(
                ResolveError::from_lookup(std_error(not_found)).is_not_found(),
                "{not_found}"
            );
        }
        for failed in [
            "Temporary failure in name resolution",
            "System error",
            "Try again",
        ] {
            let error = ResolveError::from_lookup(std_error(failed));
            assert!(matches!(error, ResolveError::Failed(_)), "{failed}");
            assert!(!error.is_not_found(), "{failed}");
            assert!(error.to_string().contains(failed), "{error}");
        }
    }

    /// `localhost` is in every hosts file (and resolving it sends nothing on the network).
    #[test]
    fn localhost_resolves_with_the_port_asked_for() {
        let addrs = resolve_blocking("localhost", 4321).unwrap();
        assert!(!addrs.is_empty());
        assert!(
            addrs
                .iter()
                .all(|a| a.port() == 4321 && a.ip().is_loopback()),
            "{addrs:?}"
        );
        let addrs = resolve_blocking("127.0.0.1", 9).unwrap();
        assert_eq!(addrs, ["127.0.0.1:9".parse::<SocketAddr>().unwrap()]);
    }

    #[test]
    fn the_thread_resolver_answers_like_the_blocking_one() {
        let addrs = futures_lite::future::block_on(resolve_on_thread("localhost", 80)).unwrap();
        assert_eq!(addrs, resolve_blocking("localhost", 80).unwrap());
    }

    #[test]
    fn closures_are_resolvers() {
        let fixed: SocketAddr = "10.1.2.3:5432".parse().unwrap();
        let resolver: Arc<dyn Resolver> = Arc::new(move |host: &str, port: u16| {
            let found = (host == "db" && port == 5432).then_some(vec![fixed]);
            async move { found.ok_or(ResolveError::NotFound) }
        });
        let found = futures_lite::future::block_on(resolver.resolve("db", 5432)).unwrap();
        assert_eq!(found, [fixed]);
        let missing = futures_lite::future::block_on(resolver.resolve("other", 5432));
        assert!(missing.unwrap_err().is_not_found());
    }
}
