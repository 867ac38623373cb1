//! A [`Resolver`] for tests: it answers from a table the test changes as it goes (a name
//! whose address moves, a name that does not exist, a resolver that fails) and counts the
//! lookups, so no test touches the system's hosts file or sends a DNS query.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use keepwire_driver::{BoxFuture, ResolveError, Resolver};

/// Names and their answers; a name not in the table is not found.
#[derive(Debug, Default)]
pub struct Names {
    table: Mutex<HashMap<String, Answer>>,
    lookups: AtomicUsize,
    /// While set, lookups wait until it is dropped ([`Names::pause`]).
    gate: Mutex<Option<(smol::channel::Sender<()>, smol::channel::Receiver<()>)>>,
}

/// What a name resolves to.
#[derive(Clone, Debug)]
enum Answer {
    Addrs(Vec<SocketAddr>),
    NotFound,
    Failed,
}

impl Names {
    /// An empty table: every name is not found.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// `host` resolves to `addrs`, in this order, from now on.
    pub fn set(&self, host: &str, addrs: &[SocketAddr]) {
        self.answer(host, Answer::Addrs(addrs.to_vec()));
    }

    /// `host` does not exist from now on ([`ResolveError::NotFound`]).
    pub fn remove(&self, host: &str) {
        self.answer(host, Answer::NotFound);
    }

    /// Looking `host` up fails from now on, as when no resolver answers
    /// ([`ResolveError::Failed`]).
    pub fn fail(&self, host: &str) {
        self.answer(host, Answer::Failed);
    }

    /// From now on, lookups wait (each answers what the table says when it is released)
    /// until [`resume`](Self::resume): a slow resolver, so that requests pile up behind a
    /// connect attempt.
    pub fn pause(&self) {
        *self.gate.lock().unwrap_or_else(PoisonError::into_inner) = Some(smol::channel::bounded(1));
    }

    /// Releases the lookups waiting since [`pause`](Self::pause).
    pub fn resume(&self) {
        self.gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    /// Lookups so far, of any name (counted when they start).
    pub fn lookups(&self) -> usize {
        self.lookups.load(Ordering::SeqCst)
    }

    fn answer(&self, host: &str, answer: Answer) {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(host.to_owned(), answer);
    }
}

impl Resolver for Names {
    fn resolve(
        &self,
        host: &str,
        _port: u16,
    ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        let gate = self
            .gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(_, released)| released.clone());
        let answer = self
            .table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(host)
            .cloned()
            .unwrap_or(Answer::NotFound);
        Box::pin(async move {
            if let Some(released) = gate {
                // Ends with an error once the sender is dropped.
                let _ = released.recv().await;
            }
            match answer {
                Answer::Addrs(addrs) => Ok(addrs),
                Answer::NotFound => Err(ResolveError::NotFound),
                Answer::Failed => Err(ResolveError::Failed(io::Error::other(
                    "Temporary failure in name resolution (a test's resolver)",
                ))),
            }
        })
    }
}
