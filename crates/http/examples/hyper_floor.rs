//! The floor of Nereid's HTTP stack: tokio and hyper's HTTP/1.1 connection, configured as
//! `nereid` runs them (one I/O worker per two cores, `TCP_NODELAY`), answering every
//! request with a fixed 200 of the given body — no routing, no JSON, no core. Beside
//! nginx's fixed 200 under the same load it separates what the libraries cost per request
//! from what Nereid's own request path adds (BENCHMARKS.md §18).
//!
//! `cargo run --release -p nereid-http --example hyper_floor -- PORT BODY_FILE`

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::{header, Request, Response};
use hyper_util::rt::TokioIo;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: hyper_floor PORT BODY_FILE";
    let port: u16 = args.next().ok_or(usage)?.parse()?;
    let body = Bytes::from(std::fs::read(args.next().ok_or(usage)?)?);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads((cores / 2).max(1))
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let body = body.clone();
            let answer =
                hyper::service::service_fn(move |_request: Request<hyper::body::Incoming>| {
                    let mut response = Response::new(Full::new(body.clone()));
                    response.headers_mut().insert(
                        header::CONTENT_TYPE,
                        header::HeaderValue::from_static("application/json"),
                    );
                    std::future::ready(Ok::<_, Infallible>(response))
                });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), answer));
        }
    })
}
