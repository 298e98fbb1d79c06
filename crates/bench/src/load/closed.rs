//! Closed loop: a fixed number of workers, each sending its next request as soon as the
//! previous one is answered, each on its own connection and pinned to one client thread.

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio::time::{sleep, Instant};

use super::threads::ClientThreads;
use super::{SourceFactory, StopSignal, RECONNECT_BACKOFF};
use crate::client::{Connector, InferError};
use crate::stats::Recorder;

/// Starts `concurrency` workers spread over the client threads, each opening its own
/// connection on its own thread. Returns once all are connected; fails if any connection
/// cannot be opened (the started workers are then stopped). A worker ends after its
/// current request once `stop` turns true.
pub async fn start(
    concurrency: usize,
    threads: &ClientThreads,
    connector: &Connector,
    sources: &SourceFactory,
    recorder: Arc<Recorder>,
    stop: StopSignal,
) -> Result<JoinSet<()>, InferError> {
    let mut workers = JoinSet::new();
    let mut connected = Vec::with_capacity(concurrency);
    for i in 0..concurrency {
        let (ready, ready_rx) = oneshot::channel();
        connected.push(ready_rx);
        let connector = connector.clone();
        let mut source = sources(i);
        let recorder = recorder.clone();
        let stop = stop.clone();
        threads.spawn(&mut workers, i, async move {
            let mut conn = match connector.conn().await {
                Ok(conn) => conn,
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return;
                }
            };
            let _ = ready.send(Ok(()));
            while !*stop.borrow() {
                let request = source.next_request();
                let start = Instant::now();
                match conn.infer(&request.wire).await {
                    Ok(()) => recorder.success(start.elapsed(), request.batch_size),
                    Err(e) => {
                        recorder.error(&e);
                        if matches!(e, InferError::Transport(_)) {
                            sleep(RECONNECT_BACKOFF).await;
                        }
                    }
                }
            }
        });
    }
    for ready in connected {
        match ready.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(InferError::Transport("a worker stopped".to_string())),
        }
    }
    Ok(workers)
}
