//! Open loop: requests leave on a schedule (constant spacing or a Poisson process),
//! whether or not earlier ones were answered.
//!
//! Every client thread runs a dispatcher with its share of the rate (Poisson processes
//! add up to a Poisson process; constant schedules are interleaved by a phase offset).
//! Each request in flight holds one connection from its dispatcher's pool, which grows on
//! demand up to its share of `max_in_flight`. A request due while all slots are busy waits
//! for one and is counted as delayed; the schedule itself does not slip, so later
//! requests catch up.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::{sleep, sleep_until, Instant};

use super::threads::ClientThreads;
use super::{RequestSource, SourceFactory, StopSignal, RECONNECT_BACKOFF};
use crate::cli::Distribution;
use crate::client::{Conn, Connector};
use crate::data::Prng;
use crate::stats::Recorder;

/// Open-loop settings.
#[derive(Clone, Debug)]
pub struct OpenLoop {
    /// Arrival process.
    pub distribution: Distribution,
    /// Most requests in flight at once.
    pub max_in_flight: usize,
    /// Seed of the Poisson gaps.
    pub seed: u64,
}

/// The gap before the next request at `rate` per second.
pub fn next_gap(rate: f64, distribution: Distribution, rng: &mut Prng) -> Duration {
    let mean = 1.0 / rate;
    let secs = match distribution {
        Distribution::Constant => mean,
        // Inverse transform sampling of the exponential distribution; 1 - u is in (0, 1].
        Distribution::Poisson => -(1.0 - rng.next_f64()).ln() * mean,
    };
    Duration::from_secs_f64(secs.max(0.0))
}

/// Starts one dispatcher per client thread. Once `stop` turns true a dispatcher sends
/// nothing more and ends when its requests in flight are answered; dropping the returned
/// set stops them and every request in flight at once.
pub fn start(
    rate: f64,
    settings: &OpenLoop,
    threads: &ClientThreads,
    connector: &Connector,
    sources: &SourceFactory,
    recorder: Arc<Recorder>,
    stop: StopSignal,
) -> JoinSet<()> {
    let n = threads.len();
    let mut set = JoinSet::new();
    let start = Instant::now();
    for i in 0..n {
        let share = Dispatcher {
            rate: rate / n as f64,
            distribution: settings.distribution,
            max_in_flight: (settings.max_in_flight / n).max(1),
            seed: settings.seed.wrapping_add(i as u64),
            // Constant schedules interleave: dispatcher i starts i/rate seconds in.
            first: start + Duration::from_secs_f64(i as f64 / rate),
        };
        let task = dispatch(
            share,
            connector.clone(),
            sources(i),
            recorder.clone(),
            stop.clone(),
        );
        threads.spawn(&mut set, i, task);
    }
    set
}

/// One dispatcher's share of the open loop.
struct Dispatcher {
    rate: f64,
    distribution: Distribution,
    max_in_flight: usize,
    seed: u64,
    first: Instant,
}

async fn dispatch(
    settings: Dispatcher,
    connector: Connector,
    mut source: Box<dyn RequestSource>,
    recorder: Arc<Recorder>,
    mut stop: StopSignal,
) {
    // Idle connections; a std-style mutex held only to push or pop.
    let pool: Arc<Mutex<Vec<Conn>>> = Arc::new(Mutex::new(Vec::new()));
    let slots = Arc::new(Semaphore::new(settings.max_in_flight));
    // Owned here so that aborting the dispatcher aborts its requests too.
    let mut in_flight = JoinSet::new();
    let mut rng = Prng::new(settings.seed);
    let mut due = settings.first;
    let rate = settings.rate;
    while !*stop.borrow() {
        tokio::select! {
            () = sleep_until(due) => {}
            // A closed channel means the step is gone too.
            _ = stop.changed() => break,
        }
        while in_flight.try_join_next().is_some() {}
        let (permit, delayed) = match slots.clone().try_acquire_owned() {
            Ok(permit) => (permit, false),
            Err(_) => match slots.clone().acquire_owned().await {
                Ok(permit) => (permit, true),
                // The semaphore is never closed; nothing more can be sent if it were.
                Err(_) => return,
            },
        };
        recorder.scheduled(delayed);
        let request = source.next_request();
        let idle = pool.lock().pop();
        let (pool, connector, recorder) = (pool.clone(), connector.clone(), recorder.clone());
        in_flight.spawn(async move {
            let _permit = permit;
            let mut conn = match idle {
                Some(conn) => conn,
                None => match connector.conn().await {
                    Ok(conn) => conn,
                    Err(e) => {
                        recorder.error(&e);
                        sleep(RECONNECT_BACKOFF).await;
                        return;
                    }
                },
            };
            let start = Instant::now();
            match conn.infer(&request.wire).await {
                Ok(()) => recorder.success(start.elapsed(), request.batch_size),
                Err(e) => recorder.error(&e),
            }
            pool.lock().push(conn);
        });
        due += next_gap(rate, settings.distribution, &mut rng);
    }
    while in_flight.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_average_to_the_rate() {
        let mut rng = Prng::new(42);
        let constant = next_gap(200.0, Distribution::Constant, &mut rng);
        assert_eq!(constant, Duration::from_millis(5));
        let n = 20_000;
        let total: f64 = (0..n)
            .map(|_| next_gap(200.0, Distribution::Poisson, &mut rng).as_secs_f64())
            .sum();
        let mean = total / f64::from(n);
        assert!((mean - 0.005).abs() < 0.0002, "mean gap {mean}");
    }
}
