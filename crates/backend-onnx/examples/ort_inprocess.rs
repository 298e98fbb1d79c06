//! The in-process baseline for the served-vs-in-process benchmark: ONNX Runtime called
//! directly, with the same session options as the server's instances, at fixed batch
//! sizes, on as many threads (one session each) as the served model has instances.
//!
//! `ort_inprocess MODEL.onnx INPUT_NAMES(comma) FEATURES BATCHES(comma) THREADS SECONDS`
//! (every named input gets the same `[batch, FEATURES]` FP32 data: one for mlp_large, two for
//! add_sub, whose run is the floor of a served add_sub request) prints one CSV line per batch size:
//! `batch,inferences_per_sec,runs_per_sec,cpu_us_per_inference`, the last from the
//! running threads' own CPU time (ONNX Runtime runs on the calling thread with one
//! intra-op thread), the figure the served model's server CPU per inference compares with.

use std::time::{Duration, Instant};

use ort::session::builder::GraphOptimizationLevel;
use ort::session::{Session, SessionInputValue};
use ort::value::Tensor;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, inputs, features, batches, threads, seconds] = args.as_slice() else {
        return Err(
            "usage: ort_inprocess MODEL.onnx INPUT_NAMES FEATURES BATCHES THREADS SECONDS".into(),
        );
    };
    let inputs: Vec<&str> = inputs.split(',').collect();
    let features: usize = features.parse()?;
    let threads: usize = threads.parse()?;
    let window = Duration::from_secs_f64(seconds.parse()?);
    let library = nereid_backend_onnx::find_library(None).ok_or("libonnxruntime not found")?;
    let environment = ort::init_from(&library)?.with_name("bench").build()?;
    println!("batch,inferences_per_sec,runs_per_sec,cpu_us_per_inference");
    for batch in batches.split(',') {
        let batch: usize = batch.parse()?;
        let runs: Vec<(u64, f64)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| -> Result<(u64, f64), String> {
                        let text = |e: ort::Error<_>| e.to_string();
                        let mut session = Session::builder(&environment)
                            .map_err(|e| e.to_string())?
                            .with_intra_threads(1)
                            .map_err(text)?
                            .with_inter_threads(1)
                            .map_err(text)?
                            .with_optimization_level(GraphOptimizationLevel::All)
                            .map_err(text)?
                            .commit_from_file(model)
                            .map_err(|e| e.to_string())?;
                        let data: Vec<f32> =
                            (0..batch * features).map(|i| (i % 7) as f32).collect();
                        // Warm up, then count runs in the window; each run builds its input
                        // tensor, as the server does for every batch.
                        let run = |session: &mut Session| -> Result<(), String> {
                            let mut values = Vec::with_capacity(inputs.len());
                            for name in &inputs {
                                let value = Tensor::from_array(([batch, features], data.clone()))
                                    .map_err(|e| e.to_string())?;
                                values.push((name.to_string(), SessionInputValue::from(value)));
                            }
                            let outputs = session.run(values).map_err(|e| e.to_string())?;
                            let (_, out) = outputs[0]
                                .try_extract_tensor::<f32>()
                                .map_err(|e| e.to_string())?;
                            std::hint::black_box(out.to_vec());
                            Ok(())
                        };
                        for _ in 0..20 {
                            run(&mut session)?;
                        }
                        let cpu_before = thread_cpu_seconds()?;
                        let start = Instant::now();
                        let mut count = 0;
                        while start.elapsed() < window {
                            run(&mut session)?;
                            count += 1;
                        }
                        Ok((count, thread_cpu_seconds()? - cpu_before))
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .map_err(|_| "worker panicked".to_string())
                        .and_then(|r| r)
                })
                .collect::<Result<Vec<(u64, f64)>, String>>()
        })?;
        let total: u64 = runs.iter().map(|(count, _)| count).sum();
        let cpu: f64 = runs.iter().map(|(_, cpu)| cpu).sum();
        let per_sec = total as f64 / window.as_secs_f64();
        let cpu_per_inference = cpu / (total * batch as u64).max(1) as f64 * 1e6;
        println!(
            "{batch},{:.1},{:.1},{cpu_per_inference:.1}",
            per_sec * batch as f64,
            per_sec
        );
    }
    Ok(())
}

/// CPU seconds (user + system) the calling thread has used, from /proc.
fn thread_cpu_seconds() -> Result<f64, String> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").map_err(|e| e.to_string())?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| -> Result<f64, String> {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .ok_or_else(|| format!("unexpected /proc/thread-self/stat: {stat}"))
    };
    // utime and stime are the 14th and 15th fields: 12th and 13th after the name.
    // Counted in USER_HZ ticks, 100 a second on Linux.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}
