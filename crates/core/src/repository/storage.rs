//! The repository's filesystem work (scans, `config.pbtxt` reads, model loads) runs here:
//! on blocking threads, never on the async threads that answer requests, and with a time
//! limit. A read that never returns (a FIFO, a stalled NFS or FUSE mount) then costs the
//! operation that asked an error, while HTTP, gRPC and metrics keep answering.
//!
//! A blocking thread cannot be cancelled, so a timed-out operation keeps its thread until
//! the storage answers. To keep those threads from piling up (poll mode retries every few
//! seconds), each operation names what it touches; while an operation on the same thing
//! is stuck past its limit, a new one fails at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// How long the repository waits for its storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageLimits {
    /// Listing the repositories and reading one `config.pbtxt` (`--repository-timeout-secs`).
    pub scan: Duration,
    /// Loading one model: its files, its backend model and instances
    /// (`--model-load-timeout-secs`).
    pub load: Duration,
}

impl Default for StorageLimits {
    fn default() -> Self {
        Self {
            scan: Duration::from_secs(30),
            load: Duration::from_secs(600),
        }
    }
}

/// Runs filesystem work off the async threads, bounded in time; refuses new work on a
/// key while earlier work on it is stuck.
#[derive(Default)]
pub(super) struct Storage {
    // Per key, the operations that outlived their limit and have not returned yet.
    stalled: Arc<Mutex<HashMap<String, usize>>>,
}

/// Where one operation is; its thread and its waiter decide under the lock who owns the
/// result.
#[derive(PartialEq)]
enum Phase {
    Running,
    /// The thread returned and sent its result.
    Done,
    /// The waiter gave up; the thread hands its result to `abandon`.
    Abandoned,
}

impl Storage {
    /// Runs `work` on a blocking thread and waits at most `limit` for it. `what` completes
    /// "timed out after N s {what}" in the error. When the wait times out, `work` still
    /// runs to its end, and its late result goes to `abandon` (to stop what it started).
    pub(super) async fn run<T: Send + 'static>(
        &self,
        key: &str,
        what: &str,
        limit: Duration,
        work: impl FnOnce() -> T + Send + 'static,
        abandon: impl FnOnce(T) + Send + 'static,
    ) -> Result<T> {
        if self.stalled.lock().get(key).is_some_and(|n| *n > 0) {
            return Err(Error::unavailable(format!(
                "{what}: an earlier operation on the same files has not returned yet (the storage may be stalled); try again later"
            )));
        }
        let phase = Arc::new(Mutex::new(Phase::Running));
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let (thread_phase, stalled, thread_key) =
            (phase.clone(), self.stalled.clone(), key.to_string());
        tokio::task::spawn_blocking(move || {
            // A panic (a backend bug) must still settle the phase and the stalled count.
            let value = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let mut phase = thread_phase.lock();
            if *phase == Phase::Abandoned {
                drop(phase);
                release(&stalled, &thread_key);
                if let Ok(value) = value {
                    abandon(value);
                }
            } else {
                *phase = Phase::Done;
                // Without a value the sender is dropped: the waiter reports the failure.
                if let Ok(value) = value {
                    let _ = sender.send(value);
                }
            }
        });
        let mut receiver = std::pin::pin!(receiver);
        if let Ok(answer) = tokio::time::timeout(limit, &mut receiver).await {
            return answer
                .map_err(|_| Error::internal(format!("{what}: the work failed unexpectedly")));
        }
        let mut phase = phase.lock();
        if *phase == Phase::Done {
            // It returned just as the limit passed: its result is in the channel.
            return receiver
                .try_recv()
                .map_err(|_| Error::internal(format!("{what}: the work failed unexpectedly")));
        }
        *phase = Phase::Abandoned;
        *self.stalled.lock().entry(key.to_string()).or_default() += 1;
        drop(phase);
        tracing::error!(key, "timed out after {}s {what}", limit.as_secs_f64());
        Err(Error::unavailable(format!(
            "timed out after {}s {what}: the storage did not answer (a stalled mount, a FIFO?); the server keeps serving, and the operation can be retried once the storage answers",
            limit.as_secs_f64()
        )))
    }
}

/// One stuck operation on `key` returned.
fn release(stalled: &Mutex<HashMap<String, usize>>, key: &str) {
    let mut stalled = stalled.lock();
    if let Some(count) = stalled.get_mut(key) {
        *count -= 1;
        if *count == 0 {
            stalled.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_what_the_work_returns() {
        let storage = Storage::default();
        let value = storage
            .run("k", "reading", Duration::from_secs(5), || 7, drop)
            .await;
        assert_eq!(value.expect("answered"), 7);
    }

    #[tokio::test]
    async fn a_stuck_operation_times_out_blocks_its_key_and_hands_its_late_result_on() {
        let storage = Storage::default();
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let (late_sender, late) = std::sync::mpsc::channel();
        let error = storage
            .run(
                "model:m",
                "loading model 'm'",
                Duration::from_millis(50),
                move || {
                    let _ = stuck.recv();
                    "late"
                },
                move |v| {
                    let _ = late_sender.send(v);
                },
            )
            .await
            .expect_err("timed out");
        assert!(
            error
                .message()
                .starts_with("timed out after 0.05s loading model 'm'"),
            "{}",
            error.message()
        );

        // While the first read is stuck, the same key fails at once; others run.
        let again = storage
            .run(
                "model:m",
                "loading model 'm'",
                Duration::from_secs(5),
                || "x",
                drop,
            )
            .await
            .expect_err("still pending");
        assert!(
            again.message().contains("has not returned yet"),
            "{}",
            again.message()
        );
        let other = storage
            .run(
                "model:n",
                "loading model 'n'",
                Duration::from_secs(5),
                || "n",
                drop,
            )
            .await;
        assert_eq!(other.expect("independent"), "n");

        // Once the storage answers, the late result is handed on and the key is free.
        release.send(()).expect("stuck work waits");
        assert_eq!(late.recv().expect("abandoned value"), "late");
        let after = storage
            .run(
                "model:m",
                "loading model 'm'",
                Duration::from_secs(5),
                || "y",
                drop,
            )
            .await;
        assert_eq!(after.expect("key released"), "y");
    }

    #[tokio::test]
    async fn a_panicking_operation_is_an_error_and_frees_its_key() {
        let storage = Storage::default();
        let error = storage
            .run(
                "k",
                "reading",
                Duration::from_secs(5),
                || -> u8 { panic!("backend bug") },
                drop,
            )
            .await
            .expect_err("panicked");
        assert!(error.message().contains("failed unexpectedly"));
        let after = storage
            .run("k", "reading", Duration::from_secs(5), || 1, drop)
            .await;
        assert_eq!(after.expect("key released"), 1);
    }
}
