//! The floor of Nereid's HTTP stack: tokio and hyper's HTTP/1.1 connection, configured as
//! `nereid` runs them (one I/O worker per two cores, `TCP_NODELAY`), answering every
//! request with a fixed 200 of the given body — no routing, no JSON, no core. Beside
//! nginx's fixed 200 under the same load it separates what the libraries cost per request
//! from what Nereid's own request path adds (BENCHMARKS.md §18).
//!
//! With `--handoff`, each request first makes the round trip a served model's request makes
//! (BENCHMARKS.md §21): into a bounded crossbeam channel to one worker thread, as the
//! default scheduler hands a job to its instance thread, and back through a tokio oneshot
//! that wakes the connection's task, as the instance replies. The worker does nothing else,
//! so the difference to the plain floor is what the two crossings cost.
//!
//! `cargo run --release -p nereid-http --example hyper_floor -- PORT BODY_FILE [--handoff]`

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::{header, Request, Response};
use hyper_util::rt::TokioIo;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: hyper_floor PORT BODY_FILE [--handoff]";
    let port: u16 = args.next().ok_or(usage)?.parse()?;
    let body = Bytes::from(std::fs::read(args.next().ok_or(usage)?)?);
    let worker = match args.next().as_deref() {
        None => None,
        Some("--handoff") => Some(start_worker()),
        Some(_) => return Err(usage.into()),
    };
    let runtime = nereid_net::io_runtime(nereid_net::default_io_threads())?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let body = body.clone();
            let worker = worker.clone();
            let answer =
                hyper::service::service_fn(move |_request: Request<hyper::body::Incoming>| {
                    let body = body.clone();
                    let crossing = worker.as_ref().map(|jobs| {
                        let (reply, replied) = tokio::sync::oneshot::channel();
                        // The worker lives as long as the process; a full queue only waits.
                        let _ = jobs.send(reply);
                        replied
                    });
                    async move {
                        if let Some(replied) = crossing {
                            let _ = replied.await;
                        }
                        let mut response = Response::new(Full::new(body));
                        response.headers_mut().insert(
                            header::CONTENT_TYPE,
                            header::HeaderValue::from_static("application/json"),
                        );
                        Ok::<_, Infallible>(response)
                    }
                });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), answer));
        }
    })
}

/// One thread answering every job at once: a model instance whose compute costs nothing.
fn start_worker() -> crossbeam_channel::Sender<tokio::sync::oneshot::Sender<()>> {
    let (jobs, queue) = crossbeam_channel::bounded::<tokio::sync::oneshot::Sender<()>>(4096);
    std::thread::spawn(move || {
        for reply in queue {
            let _ = reply.send(());
        }
    });
    jobs
}
