//! The three runtimes under test, behind one trait, so every real-socket test body is written
//! once and instantiated for each.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use keepwire_async_std::AsyncStdRuntime;
use keepwire_driver::{BoxFuture, IoStream, PreparedSocket, ResolveError, Runtime, Timer};
use keepwire_smol::SmolRuntime;
use keepwire_tokio::TokioRuntime;
use smol::Executor;

/// A runtime a test body can run on.
pub trait TestRuntime {
    /// Runs `body` to completion on a fresh instance of the runtime, as an application would
    /// (tasks may run on the runtime's worker threads).
    fn run<F, Fut>(body: F) -> Fut::Output
    where
        F: FnOnce(Arc<dyn Runtime>) -> Fut,
        Fut: Future;

    /// Runs `body` with every spawned task (the driver included) polled on the calling
    /// thread, so every socket is created there: in its network namespace.
    fn run_on_this_thread<F, Fut>(body: F) -> Fut::Output
    where
        F: FnOnce(Arc<dyn Runtime>) -> Fut,
        Fut: Future;
}

/// tokio, multi-threaded (two workers) or current-thread.
#[derive(Debug)]
pub struct Tokio;

impl TestRuntime for Tokio {
    fn run<F, Fut>(body: F) -> Fut::Output
    where
        F: FnOnce(Arc<dyn Runtime>) -> Fut,
        Fut: Future,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let handle = Arc::new(TokioRuntime::from_handle(runtime.handle().clone()));
        runtime.block_on(body(handle))
    }

    fn run_on_this_thread<F, Fut>(body: F) -> Fut::Output
    where
        F: FnOnce(Arc<dyn Runtime>) -> Fut,
        Fut: Future,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let handle = Arc::new(TokioRuntime::from_handle(runtime.handle().clone()));
        runtime.block_on(body(handle))
    }
}

/// smol, on its global executor or on an executor run by the calling thread.
#[derive(Debug)]
pub struct Smol;

impl TestRuntime for Smol {
    fn run<F, Fut>(body: F) -> Fut::Output
    where
        F: FnOnce(Arc<dyn Runtime>) -> Fut,
        Fut: Future,
    {
        smol::block_on(body(Arc::new(SmolRuntime::new())))
    }

    fn run_on_this_thread<F, Fut>(body: F) -> Fut::Output
    where
        F: FnOnce(Arc<dyn Runtime>) -> Fut,
        Fut: Future,
    {
        let executor = Arc::new(Executor::new());
        let runtime = Arc::new(SmolRuntime::with_executor(Arc::clone(&executor)));
        smol::block_on(executor.run(body(runtime)))
    }
}

/// async-std (legacy), on its executor or with tasks polled on the calling thread.
#[derive(Debug)]
pub struct AsyncStd;

impl TestRuntime for AsyncStd {
    fn run<F, Fut>(body: F) -> Fut::Output
    where
        F: FnOnce(Arc<dyn Runtime>) -> Fut,
        Fut: Future,
    {
        async_std::task::block_on(body(Arc::new(AsyncStdRuntime)))
    }

    fn run_on_this_thread<F, Fut>(body: F) -> Fut::Output
    where
        F: FnOnce(Arc<dyn Runtime>) -> Fut,
        Fut: Future,
    {
        let executor = Arc::new(Executor::new());
        let runtime = Arc::new(SpawnHere {
            inner: AsyncStdRuntime,
            executor: Arc::clone(&executor),
        });
        async_std::task::block_on(executor.run(body(runtime)))
    }
}

/// async-std's runtime with tasks spawned on an executor the calling thread runs (async-std
/// offers no thread-local spawn on stable).
struct SpawnHere {
    inner: AsyncStdRuntime,
    executor: Arc<Executor<'static>>,
}

impl fmt::Debug for SpawnHere {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpawnHere")
            .field("inner", &self.inner)
            .finish()
    }
}

impl Runtime for SpawnHere {
    fn now(&self) -> Instant {
        self.inner.now()
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        self.inner.new_timer(deadline)
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        self.executor.spawn(future).detach();
    }

    fn connect(
        &self,
        socket: PreparedSocket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, std::io::Result<Box<dyn IoStream>>> {
        self.inner.connect(socket, addr)
    }

    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
        self.inner.resolve(host, port)
    }
}
