//! End-to-end tests of the `nereid-bench` binary against a small mock KServe v2 HTTP
//! server run in the test: a fixed-shape batching model that checks each binary-extension
//! body and keeps Triton-shaped statistics, and a model whose every request fails.

mod mock;

use std::process::{Command, Output};

use mock::MockServer;

/// Runs the binary with `args`, off the async runtime so the mock keeps serving.
async fn bench(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_nereid-bench"))
            .args(&args)
            .output()
            .expect("the nereid-bench binary runs")
    })
    .await
    .expect("the blocking task completes")
}

/// Like [`bench`], also returning the child's process id (which names its regions).
async fn bench_with_pid(args: Vec<String>) -> (Output, u32) {
    tokio::task::spawn_blocking(move || {
        let child = Command::new(env!("CARGO_BIN_EXE_nereid-bench"))
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the nereid-bench binary runs");
        let pid = child.id();
        (child.wait_with_output().expect("it finishes"), pid)
    })
    .await
    .expect("the blocking task completes")
}

/// Short measurement settings: a 50 ms warm-up and exactly three 50 ms windows, so that
/// each sweep step takes about 0.2 s (what the tests assert needs no more).
fn quick(extra: &[&str]) -> Vec<String> {
    windows(50, extra)
}

/// A 50 ms warm-up and exactly three windows of `ms` milliseconds.
fn windows(ms: u32, extra: &[&str]) -> Vec<String> {
    let ms = ms.to_string();
    let mut args: Vec<String> = ["--warmup-secs", "0.05", "-p", &ms, "-r", "3", "--quiet"]
        .iter()
        .map(ToString::to_string)
        .collect();
    args.extend(extra.iter().map(ToString::to_string));
    args
}

fn json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("the JSON report was written");
    serde_json::from_str(&text).expect("the JSON report parses")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_measures_and_reads_server_stats() {
    let server = MockServer::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let report = dir.path().join("report.json");
    let csv = dir.path().join("report.csv");
    let out = bench(quick(&[
        "-m",
        "batched",
        "-u",
        &server.address,
        "-b",
        "4",
        "--concurrency-range",
        "1:2",
        "--json",
        report.to_str().expect("utf-8 path"),
        "--csv",
        csv.to_str().expect("utf-8 path"),
    ]))
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("Concurrency"), "table: {stdout}");
    assert_eq!(stdout.lines().count(), 3);
    assert_eq!(server.bad_bodies(), 0, "every body matched its header");

    let report = json(&report);
    let steps = report["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 2);
    for (step, concurrency) in steps.iter().zip([1, 2]) {
        assert_eq!(step["concurrency"], concurrency);
        assert!(step["requests"].as_u64().unwrap_or(0) > 0);
        assert_eq!(step["errors"], 0);
        assert!(step["throughput"].as_f64().unwrap_or(0.0) > 0.0);
        assert!(step["p99_us"].as_f64().unwrap_or(0.0) >= step["p50_us"].as_f64().unwrap_or(0.0));
        assert_eq!(step["server"]["avg_batch_size"], 4.0);
        assert_eq!(step["server"]["queue_us"], 10.0);
    }
    let csv = std::fs::read_to_string(&csv).expect("the CSV report was written");
    assert_eq!(csv.lines().count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_shared_memory_regions_are_registered_used_and_released() {
    let server = MockServer::start().await;
    let (out, pid) = bench_with_pid(quick(&[
        "-m",
        "batched",
        "-u",
        &server.address,
        "-b",
        "2",
        "--concurrency-range",
        "1:3:2",
        "--shared-memory",
        "system",
    ]))
    .await;
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(server.bad_bodies(), 0, "every request matched its regions");
    let (registered, unregistered, served) = server.shm_counts();
    assert_eq!(registered, 3, "one region per worker of the largest step");
    assert_eq!(unregistered, 3);
    assert_eq!(server.registered_regions(), 0);
    assert!(served > 0);
    // Every object was unlinked again.
    let prefix = format!("nereid_bench_{pid}_");
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_keeps_the_rate() {
    let server = MockServer::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let report = dir.path().join("report.json");
    // 1000/s over three 100 ms windows: about 300 requests, so the ±50 % band below is
    // wider in standard deviations than it was with 200/s over 0.6 s. A stall the
    // schedule catches up on weighs twice what it did over 0.6 s, still well inside it.
    let out = bench(windows(
        100,
        &[
            "-m",
            "batched",
            "-u",
            &server.address,
            "--request-rate-range",
            "1000",
            "--request-distribution",
            "poisson",
            "-s",
            "50",
            "--json",
            report.to_str().expect("utf-8 path"),
        ],
    ))
    .await;
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&report);
    let step = &report["steps"][0];
    assert_eq!(step["request_rate"], 1000.0);
    let throughput = step["throughput"].as_f64().unwrap_or(0.0);
    assert!(
        (500.0..1500.0).contains(&throughput),
        "throughput {throughput}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_counted_not_timed() {
    let server = MockServer::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let report = dir.path().join("report.json");
    let out = bench(quick(&[
        "-m",
        "failing",
        "-u",
        &server.address,
        "--json",
        report.to_str().expect("utf-8 path"),
    ]))
    .await;
    // Nothing succeeded, so the run fails, but the report is still written.
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("always fails"), "stderr: {stderr}");
    let step = &json(&report)["steps"][0];
    assert_eq!(step["requests"], 0);
    assert!(step["errors"].as_u64().unwrap_or(0) > 0);
}

#[tokio::test]
async fn refused_connection_is_a_clear_error() {
    let address = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").to_string()
    };
    let out = bench(vec![
        "-m".into(),
        "batched".into(),
        "-u".into(),
        address.clone(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot reach the HTTP server at {address}")),
        "stderr: {stderr}"
    );
}

#[tokio::test]
async fn variable_shape_without_override_names_the_flag() {
    let server = MockServer::start().await;
    let out = bench(vec![
        "-m".into(),
        "ragged".into(),
        "-u".into(),
        server.address.clone(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--shape IN:"), "stderr: {stderr}");
}
