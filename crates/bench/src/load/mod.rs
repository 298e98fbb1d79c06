//! Generating load and measuring one sweep step.
//!
//! What is sent comes from a [`RequestSource`], one per worker, so modes that vary the
//! request (sequences with their start/end flags, shared-memory inputs) plug in as new
//! sources without touching the loops. How requests are paced is the loop's business:
//! [`closed`] (fixed concurrency) or [`open`] (fixed arrival rate), both running on the
//! [`threads::ClientThreads`]. [`run_step`] drives one step from the controller: warm-up,
//! measurement windows until stable, server statistics around them.

pub mod closed;
pub mod open;
pub mod threads;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{sleep, sleep_until, timeout, Instant};

use self::threads::ClientThreads;
use crate::client::{Client, WireRequest};
use crate::progress::Progress;
use crate::stats::{is_stable, ClientSummary, Recorder, ServerStats, ServerSummary, Window};

/// A request ready to send, and how many inferences it carries.
#[derive(Clone, Debug)]
pub struct PreparedRequest {
    /// The encoded request.
    pub wire: WireRequest,
    /// Batch elements, counted by throughput.
    pub batch_size: u64,
}

/// Produces the requests of one worker (or of the whole open loop).
pub trait RequestSource: Send {
    /// The next request to send.
    fn next_request(&mut self) -> Arc<PreparedRequest>;
}

/// Makes the source of worker `i`; called once per worker per step.
pub type SourceFactory = Arc<dyn Fn(usize) -> Box<dyn RequestSource> + Send + Sync>;

/// The same request every time: the data is fixed for the run.
pub struct StaticSource(Arc<PreparedRequest>);

impl StaticSource {
    /// A factory handing every worker a source of `request`.
    pub fn factory(request: PreparedRequest) -> SourceFactory {
        let request = Arc::new(request);
        Arc::new(move |_| Box::new(StaticSource(request.clone())))
    }
}

impl RequestSource for StaticSource {
    fn next_request(&mut self) -> Arc<PreparedRequest> {
        self.0.clone()
    }
}

/// Requests that refer to shared-memory regions, one region per request. In the closed
/// loop worker `i` always sends request `i` (its own region); in the open loop each
/// dispatcher hands them out round-robin, starting at its own index.
pub struct ShmSource {
    requests: Arc<[Arc<PreparedRequest>]>,
    next: usize,
    rotate: bool,
}

impl ShmSource {
    /// A factory over `requests` (at least one): fixed per worker when `!rotate`,
    /// round-robin when `rotate`.
    pub fn factory(requests: Vec<PreparedRequest>, rotate: bool) -> SourceFactory {
        assert!(
            !requests.is_empty(),
            "a shared-memory source needs a region"
        );
        let requests: Arc<[Arc<PreparedRequest>]> = requests.into_iter().map(Arc::new).collect();
        Arc::new(move |i| {
            Box::new(ShmSource {
                next: i % requests.len(),
                requests: requests.clone(),
                rotate,
            })
        })
    }
}

impl RequestSource for ShmSource {
    fn next_request(&mut self) -> Arc<PreparedRequest> {
        let request = self.requests[self.next].clone();
        if self.rotate {
            self.next = (self.next + 1) % self.requests.len();
        }
        request
    }
}

/// Sequences: worker `i` sends the START request, then middle requests, then the END
/// request, all under its own correlation ID, and starts over (a new sequence under the
/// same ID, which the END made free).
pub struct SequenceSource {
    /// The worker's START, middle and END requests.
    steps: [Arc<PreparedRequest>; 3],
    length: usize,
    position: usize,
}

impl SequenceSource {
    /// A factory handing worker `i` the `i`-th set of (START, middle, END) requests.
    pub fn factory(requests: Vec<[PreparedRequest; 3]>, length: usize) -> SourceFactory {
        assert!(!requests.is_empty(), "a sequence source needs requests");
        let requests: Arc<[[Arc<PreparedRequest>; 3]]> = requests
            .into_iter()
            .map(|steps| steps.map(Arc::new))
            .collect();
        Arc::new(move |i| {
            Box::new(SequenceSource {
                steps: requests[i % requests.len()].clone(),
                length: length.max(1),
                position: 0,
            })
        })
    }
}

impl RequestSource for SequenceSource {
    fn next_request(&mut self) -> Arc<PreparedRequest> {
        let step = self.position;
        self.position = (self.position + 1) % self.length;
        let index = if step + 1 == self.length {
            2 // END (a one-request sequence: START and END together, built as END)
        } else if step == 0 {
            0
        } else {
            1
        };
        self.steps[index].clone()
    }
}

/// How a worker waits after a failed connection before trying again, so that a server
/// that went away is not hammered in a tight loop.
pub const RECONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// How long the end of a step waits for the requests still in flight to be answered
/// before abandoning them.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Tells a step's workers to stop sending; `true` once the step ends.
pub type StopSignal = watch::Receiver<bool>;

/// The load of one sweep step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// Closed loop with this many workers.
    Concurrency(usize),
    /// Open loop at this many requests per second.
    Rate(f64),
}

/// Measurement settings shared by all steps.
#[derive(Clone, Debug)]
pub struct StepConfig {
    /// Load before the first window.
    pub warmup: Duration,
    /// Window length.
    pub interval: Duration,
    /// Stability threshold in percent.
    pub stability_percentage: f64,
    /// Most windows.
    pub max_trials: u32,
    /// Open-loop settings.
    pub open: open::OpenLoop,
    /// Print every window on stderr.
    pub verbose: bool,
}

/// What one step measured.
#[derive(Clone, Debug)]
pub struct StepOutcome {
    /// Client-side results over the last three windows.
    pub client: ClientSummary,
    /// Server-side averages over the same windows, if the statistics could be read.
    pub server: Option<ServerSummary>,
    /// Whether the last three windows met the stability rule.
    pub stable: bool,
    /// Windows measured.
    pub trials: u32,
    /// First error message of the step.
    pub first_error: Option<String>,
}

/// Windows reported per step (and the number the stability rule looks at).
const REPORTED_WINDOWS: usize = 3;

/// Runs one step: starts the load on the client threads, warms up, measures windows until
/// the last three are stable or `max_trials` is reached, stops the load.
pub async fn run_step(
    control: &mut Client,
    threads: &ClientThreads,
    load: Load,
    sources: &SourceFactory,
    config: &StepConfig,
    progress: &Progress,
) -> anyhow::Result<StepOutcome> {
    let label = match load {
        Load::Concurrency(n) => format!("concurrency {n}"),
        Load::Rate(r) => format!("request rate {r}"),
    };
    let recorder = Arc::new(Recorder::new());
    progress.show(&format!("{label}: connecting"));
    let (stop, stop_signal) = watch::channel(false);
    let mut workers: JoinSet<()> = match load {
        Load::Concurrency(n) => {
            let connector = control.connector();
            let recorder = recorder.clone();
            closed::start(n, threads, &connector, sources, recorder, stop_signal).await?
        }
        Load::Rate(rate) => open::start(
            rate,
            &config.open,
            threads,
            &control.connector(),
            sources,
            recorder.clone(),
            stop_signal,
        ),
    };
    if !config.warmup.is_zero() {
        progress.show(&format!("{label}: warming up"));
        sleep(config.warmup).await;
    }
    recorder.take();
    let mut snapshots: Vec<Option<ServerStats>> = vec![control.stats().await.ok()];
    let mut windows: Vec<Window> = Vec::new();
    let mut stable = false;
    let mut deadline = Instant::now() + config.interval;
    for trial in 1..=config.max_trials {
        sleep_until(deadline).await;
        deadline += config.interval;
        windows.push(recorder.take());
        snapshots.push(control.stats().await.ok());
        let recent = &windows[windows.len().saturating_sub(REPORTED_WINDOWS)..];
        let throughputs: Vec<f64> = recent.iter().map(Window::throughput).collect();
        let errors = recent.last().map_or(0, |w| w.errors);
        let line = format!(
            "{label}: window {trial}/{}: {:.1} infer/s, {errors} errors",
            config.max_trials,
            throughputs.last().copied().unwrap_or_default()
        );
        if config.verbose {
            progress.clear();
            eprintln!("{line}");
        }
        progress.show(&line);
        if recent.len() == REPORTED_WINDOWS && is_stable(&throughputs, config.stability_percentage)
        {
            stable = true;
            break;
        }
    }
    // Stop sending and let the requests in flight finish, so none reaches the server
    // after the run unregisters its shared-memory regions; dropping the set then aborts
    // whatever is still stuck after the limit.
    stop.send_replace(true);
    let _ = timeout(DRAIN_LIMIT, async {
        while workers.join_next().await.is_some() {}
    })
    .await;
    drop(workers);
    let first = windows.len().saturating_sub(REPORTED_WINDOWS);
    let server = match (snapshots.get(first), snapshots.last()) {
        (Some(Some(before)), Some(Some(after))) => Some(ServerSummary::delta(before, after)),
        _ => None,
    };
    Ok(StepOutcome {
        client: ClientSummary::from_windows(&windows[first..]),
        server,
        stable,
        trials: u32::try_from(windows.len()).unwrap_or(u32::MAX),
        first_error: recorder.first_error(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::http::HttpBody;

    fn prepared(batch_size: u64) -> PreparedRequest {
        PreparedRequest {
            wire: WireRequest::Http(HttpBody {
                body: bytes::Bytes::new(),
                header_length: hyper::header::HeaderValue::from(0),
            }),
            batch_size,
        }
    }

    fn sequence(source: &mut dyn RequestSource, n: usize) -> Vec<u64> {
        (0..n).map(|_| source.next_request().batch_size).collect()
    }

    #[test]
    fn shm_source_is_fixed_per_worker_or_round_robin() {
        let requests = || (1..=3).map(prepared).collect::<Vec<_>>();
        let fixed = ShmSource::factory(requests(), false);
        assert_eq!(sequence(&mut *fixed(1), 3), vec![2, 2, 2]);
        assert_eq!(sequence(&mut *fixed(4), 2), vec![2, 2]);
        let rotating = ShmSource::factory(requests(), true);
        assert_eq!(sequence(&mut *rotating(2), 4), vec![3, 1, 2, 3]);
    }
}
