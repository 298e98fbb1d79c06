//! The client threads: each runs a single-threaded tokio runtime that owns its workers and
//! their connections.
//!
//! A multi-threaded runtime moves a request between threads on its way out and back
//! (worker task, connection task, I/O driver), paying futex wake-ups and cache misses on
//! every request: measured on gRPC unary calls, it doubled the client's CPU time per
//! request. With one event loop per thread, a worker and its connection stay on one core,
//! as in `wrk` or perf_analyzer's worker threads. Work is spread round-robin.

use std::future::Future;

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

/// A fixed set of client threads; dropping it lets them finish.
pub struct ClientThreads {
    handles: Vec<Handle>,
    /// Dropping these ends each thread's `block_on`, and so the thread.
    _stop: Vec<oneshot::Sender<()>>,
}

impl ClientThreads {
    /// Starts `count` (at least one) threads.
    pub fn start(count: usize) -> std::io::Result<Self> {
        let mut handles = Vec::with_capacity(count.max(1));
        let mut stop = Vec::with_capacity(count.max(1));
        for i in 0..count.max(1) {
            let runtime = Builder::new_current_thread().enable_all().build()?;
            handles.push(runtime.handle().clone());
            let (tx, rx) = oneshot::channel::<()>();
            stop.push(tx);
            std::thread::Builder::new()
                .name(format!("client-{i}"))
                .spawn(move || {
                    // Runs the spawned workers until the pool is dropped.
                    let _ = runtime.block_on(rx);
                })?;
        }
        Ok(Self {
            handles,
            _stop: stop,
        })
    }

    /// Number of threads.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Spawns `task` on thread `i % len` into `set`.
    pub fn spawn<F>(&self, set: &mut JoinSet<()>, i: usize, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        set.spawn_on(task, &self.handles[i % self.handles.len()]);
    }
}
