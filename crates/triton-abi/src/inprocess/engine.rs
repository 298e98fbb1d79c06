//! The Nereid server behind a `TRITONSERVER_Server`: started through `nereid_embed` (as
//! the binary does) on a tokio runtime the server object owns (C callers have no runtime
//! of their own), or attached to a server running elsewhere; and the bridge from the
//! C API's synchronous calls to that runtime.

use std::sync::Arc;
use std::time::Duration;

use nereid_core::{Error, Result, Server};
use nereid_embed::{Nereid, Options, SystemMetrics};

/// Which system gauges an in-process server polls, and how often.
pub struct PolledMetrics {
    /// `SetMetricsInterval`.
    pub interval: Duration,
    /// `SetCpuMetrics`.
    pub cpu: bool,
    /// `SetGpuMetrics`.
    pub gpu: bool,
}

/// A running server and the runtime its tasks run on.
pub struct Engine {
    /// Owns every task of a server started here; `None` for a server attached from
    /// outside, and while [`Drop`] shuts it down.
    runtime: Option<tokio::runtime::Runtime>,
    /// Kept for the server's lifetime: dropping it ends the poll task (`None` when
    /// attached).
    _nereid: Option<Nereid>,
    server: Arc<Server>,
    handle: tokio::runtime::Handle,
    /// The CPU and GPU gauges, polled on the runtime every `SetMetricsInterval` (`None`
    /// with `SetCpuMetrics(false)` and `SetGpuMetrics(false)`, and when attached: the
    /// host serves its own).
    system: Option<Arc<SystemMetrics>>,
}

impl Engine {
    /// Starts a server as `options` describe (see `super::start`, which builds them
    /// from `TRITONSERVER_ServerOptions`) on a runtime of its own; `polled` says at which
    /// interval the system gauges are polled and which of them (`None`: neither).
    pub fn start(options: Options, polled: Option<PolledMetrics>) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name("nereid")
            .enable_all()
            .build()
            .map_err(|e| Error::internal(format!("failed to start the runtime: {e}")))?;
        let started = {
            let _inside = runtime.enter();
            futures::executor::block_on(Nereid::start(options))
        };
        let nereid = started?;
        let server = nereid.server().clone();
        let system = polled.map(|polled| {
            let system = Arc::new(SystemMetrics::new(polled.cpu, polled.gpu));
            // Triton registers its gauges at start: a scrape right after start shows them.
            system.poll_now();
            let poll = system.clone().poll_every(polled.interval);
            // Ends with the runtime.
            runtime.spawn(poll);
            system
        });
        Ok(Self {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
            _nereid: Some(nereid),
            server,
            system,
        })
    }

    /// An engine on a server that runs elsewhere (the nereid binary's, for the backends
    /// it hosts): calls go to `server` on the runtime behind `handle`; it owns neither.
    pub fn attach(server: Arc<Server>, handle: tokio::runtime::Handle) -> Self {
        Self {
            runtime: None,
            _nereid: None,
            server,
            handle,
            system: None,
        }
    }

    /// The Prometheus text `TRITONSERVER_ServerMetrics` answers: the server's metrics,
    /// then the CPU gauges as of their latest poll.
    pub fn metrics_text(&self) -> String {
        let mut text = self.server.metrics_text();
        if let Some(system) = &self.system {
            system.render(&mut text);
        }
        // Custom metrics are process-wide, as in Triton's one registry.
        crate::metrics::render(&mut text);
        text
    }

    /// The core facade.
    pub fn server(&self) -> &Arc<Server> {
        &self.server
    }

    /// Runs `future` to completion for the synchronous calls, on the calling thread but
    /// inside the server's runtime, so that it also works from a response or release
    /// callback (which run on the runtime's threads, where tokio's own `block_on` panics).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        let _inside = self.handle.enter();
        futures::executor::block_on(future)
    }

    /// Runs `future` in the background on the server's runtime.
    pub fn spawn(&self, future: impl std::future::Future<Output = ()> + Send + 'static) {
        self.handle.spawn(future);
    }

    /// A handle on the runtime, for tasks that start more work.
    pub fn handle(&self) -> tokio::runtime::Handle {
        self.handle.clone()
    }

    /// Admits `request` now (inside the runtime, which the core's queues need) and
    /// returns its answer to come.
    pub fn submit(
        &self,
        request: nereid_core::request::InferRequest,
    ) -> nereid_core::request::Answer {
        let _inside = self.handle.enter();
        self.server.submit(request)
    }

    /// Admits a request of a decoupled model now (inside the runtime) and returns the
    /// stream of its answers.
    pub fn submit_stream(
        &self,
        request: nereid_core::request::InferRequest,
    ) -> Result<nereid_core::response_stream::ResponseStream> {
        let _inside = self.handle.enter();
        self.server.submit_stream(request)
    }

    /// Stops the server: readiness turns false, then the models stop, waiting at most
    /// `timeout` for them. False when they had not stopped by then.
    ///
    /// It may be called while the process exits (a caller's static destructor deleting
    /// the server, as perf_analyzer's in-process mode does), when the calling thread's
    /// thread-locals, tokio's runtime context among them, are already gone: the wait then
    /// runs on a thread of its own.
    pub fn stop(&self, timeout: Duration) -> bool {
        self.server.begin_shutdown();
        let repository = self.server.repository().clone();
        let stop = self.handle.spawn_blocking(move || repository.stop_all());
        let handle = self.handle.clone();
        let wait = move || {
            // The timer must be created inside the runtime.
            let _inside = handle.enter();
            futures::executor::block_on(tokio::time::timeout(timeout, stop)).is_ok()
        };
        match tokio::runtime::Handle::try_current() {
            Err(e) if e.is_thread_local_destroyed() => {
                std::thread::spawn(wait).join().unwrap_or(false)
            }
            _ => wait(),
        }
    }
}

impl Drop for Engine {
    /// Shuts the runtime down without waiting when dropped on one of its own threads (a
    /// server deleted from a callback), else waits briefly for its tasks.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                runtime.shutdown_background();
            } else {
                runtime.shutdown_timeout(Duration::from_secs(5));
            }
        }
    }
}
