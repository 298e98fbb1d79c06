//! `nereid-bench`: a load generator for KServe v2 inference servers, what `perf_analyzer`
//! is to Triton. It reads the model's inputs from the server, sends requests over HTTP
//! (binary tensor extension) or gRPC (unary or streaming) at a sweep of concurrencies or
//! request rates, measures until stable, and reports client latencies next to the
//! server's own statistics.

mod cli;
mod client;
mod data;
mod load;
mod metadata;
mod progress;
mod report;
mod shm;
mod stats;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser as _;

use crate::cli::{Args, Protocol, SharedMemory};
use crate::client::{Client, InferRequest, InputTensor, SequenceStep, Target};
use crate::data::Prng;
use crate::load::threads::ClientThreads;
use crate::load::{
    open::OpenLoop, Load, PreparedRequest, SequenceSource, ShmSource, SourceFactory, StaticSource,
    StepConfig,
};
use crate::progress::Progress;
use crate::report::{Report, StepReport};
use crate::shm::ShmRegions;

/// For each of `workers` correlation IDs (1, 2, ...), the START, middle and END requests
/// of a sequence of `length` requests (a one-request sequence is START and END at once).
fn sequence_requests(
    control: &Client,
    request: &InferRequest,
    workers: usize,
    length: usize,
    batch_size: u64,
) -> Vec<[PreparedRequest; 3]> {
    (1..=workers as u64)
        .map(|id| {
            let step = |start: bool, end: bool| {
                let mut r = request.clone();
                r.sequence = Some(SequenceStep { id, start, end });
                PreparedRequest {
                    wire: control.encode(&r),
                    batch_size,
                }
            };
            [
                step(true, false),
                step(false, false),
                step(length <= 1, true),
            ]
        })
        .collect()
}

fn main() -> ExitCode {
    let args = Args::parse();
    // The controller (control client, windows, statistics) runs here; the load runs on
    // the client threads (see `load::threads`).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The whole run; `Err` is a fatal problem (unreachable server, unknown model, bad shape).
async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.streaming && args.protocol != Protocol::Grpc {
        anyhow::bail!("--streaming needs --protocol grpc");
    }
    let target = Target {
        protocol: args.protocol,
        streaming: args.streaming,
        address: args.address(),
        model: args.model_name.clone(),
        version: args.model_version.clone(),
    };
    let mut control = Client::connect(target).await?;
    let info = control
        .model_info()
        .await
        .with_context(|| format!("reading metadata of model '{}'", args.model_name))?;
    let inputs = metadata::resolve_inputs(&info, args.batch_size, &args.shapes)?;

    let mut rng = Prng::new(args.seed);
    let request = InferRequest {
        inputs: inputs
            .iter()
            .map(|spec| InputTensor {
                name: spec.name.clone(),
                datatype: spec.datatype,
                shape: spec.shape.clone(),
                data: data::generate(spec.datatype, spec.elements(), args.input_data, &mut rng),
            })
            .collect(),
        outputs: info.outputs.iter().map(|o| o.name.clone()).collect(),
        shm: None,
        sequence: None,
    };
    let batch_size = u64::from(args.batch_size);

    let (mode, loads): (&'static str, Vec<Load>) =
        match (&args.request_rate_range, &args.concurrency_range) {
            (Some(rates), _) => (
                "request_rate",
                rates.values().into_iter().map(Load::Rate).collect(),
            ),
            (None, Some(range)) => (
                "concurrency",
                range.values().into_iter().map(Load::Concurrency).collect(),
            ),
            (None, None) => ("concurrency", vec![Load::Concurrency(1)]),
        };
    let config = StepConfig {
        warmup: Duration::from_secs_f64(args.warmup_secs),
        interval: Duration::from_millis(args.measurement_interval),
        stability_percentage: args.stability_percentage,
        max_trials: args.max_trials,
        open: OpenLoop {
            distribution: args.request_distribution,
            max_in_flight: args.max_in_flight as usize,
            seed: args.seed,
        },
        verbose: args.verbose,
    };

    let (sources, regions): (SourceFactory, Option<ShmRegions>) = match args.shared_memory {
        SharedMemory::None if args.sequence_length.is_some() => {
            let length = args.sequence_length.unwrap_or(1);
            let workers = loads
                .iter()
                .map(|l| match l {
                    Load::Concurrency(n) => *n,
                    Load::Rate(_) => 1,
                })
                .max()
                .unwrap_or(1);
            (
                SequenceSource::factory(
                    sequence_requests(&control, &request, workers, length, batch_size),
                    length,
                ),
                None,
            )
        }
        SharedMemory::None => (
            StaticSource::factory(PreparedRequest {
                wire: control.encode(&request),
                batch_size,
            }),
            None,
        ),
        SharedMemory::System => {
            let output_sizes =
                metadata::output_sizes(&info, args.batch_size, args.output_shared_memory_size)?;
            // Closed loop: a region per worker of the largest step. Open loop: a small
            // round-robin pool (see `shm`).
            let (count, rotate) = if mode == "request_rate" {
                (
                    (args.max_in_flight as usize).min(shm::OPEN_LOOP_REGIONS),
                    true,
                )
            } else {
                let most = loads.iter().map(|l| match l {
                    Load::Concurrency(n) => *n,
                    Load::Rate(_) => 1,
                });
                (most.max().unwrap_or(1).max(1), false)
            };
            let (regions, requests) =
                ShmRegions::create(&mut control, count, &request, &output_sizes).await?;
            let prepared = requests
                .iter()
                .map(|r| PreparedRequest {
                    wire: control.encode(r),
                    batch_size,
                })
                .collect();
            (ShmSource::factory(prepared, rotate), Some(regions))
        }
    };

    // Measure; Ctrl-C ends the run through the same path, so shared memory is released.
    let measured = tokio::select! {
        steps = measure(&args, &mut control, &loads, &sources, &config) => steps,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    if let Some(regions) = regions {
        regions.release(&mut control).await;
    }
    let steps = measured?;

    let report = Report {
        model: args.model_name.clone(),
        model_version: args.model_version.clone(),
        protocol: args.protocol,
        streaming: args.streaming,
        batch_size: args.batch_size,
        mode,
        measurement_interval_ms: args.measurement_interval,
        steps,
    };
    print!("{}", report.table());
    if let Some(path) = &args.csv {
        report.write_csv(path)?;
    }
    if let Some(path) = &args.json {
        report.write_json(path)?;
    }
    // A run in which nothing succeeded measured nothing: say so in the exit code.
    let succeeded = report.steps.iter().any(|s| s.client.requests > 0);
    Ok(if succeeded {
        ExitCode::SUCCESS
    } else {
        eprintln!("error: no request succeeded");
        ExitCode::FAILURE
    })
}

/// Runs every step of the sweep on fresh client threads.
async fn measure(
    args: &Args,
    control: &mut Client,
    loads: &[Load],
    sources: &SourceFactory,
    config: &StepConfig,
) -> anyhow::Result<Vec<StepReport>> {
    let threads =
        ClientThreads::start(args.client_threads as usize).context("starting client threads")?;
    let progress = Progress::new(args.quiet);
    let mut steps = Vec::with_capacity(loads.len());
    for &load in loads {
        let outcome = load::run_step(control, &threads, load, sources, config, &progress).await;
        progress.clear();
        let outcome = outcome?;
        warn_about(load, &outcome, args.quiet);
        steps.push(StepReport::new(load, outcome));
    }
    Ok(steps)
}

/// Warnings for a finished step on stderr: unstable measurement, errors, a delayed open loop.
fn warn_about(load: Load, outcome: &load::StepOutcome, quiet: bool) {
    let label = match load {
        Load::Concurrency(n) => format!("concurrency {n}"),
        Load::Rate(r) => format!("request rate {r}"),
    };
    if !outcome.stable && !quiet {
        eprintln!(
            "warning: {label}: throughput not stable after {} windows; reporting the last 3",
            outcome.trials
        );
    }
    if let Some(e) = &outcome.first_error {
        eprintln!(
            "warning: {label}: {} failed requests in the reported windows; first error: {e}",
            outcome.client.errors
        );
    }
    if outcome.client.delayed_fraction > 0.1 && !quiet {
        eprintln!(
            "warning: {label}: {:.0}% of requests were sent late (all --max-in-flight slots busy); \
             the server cannot sustain this rate",
            outcome.client.delayed_fraction * 100.0
        );
    }
}
