//! Flags accepted so that a tritonserver launch line starts unchanged, but that change
//! nothing here — GPU settings whose machinery Nereid does not have (peer access, compute
//! capability checks, per-GPU load limits, growable state memory) or other machinery it
//! does not have
//! (Triton's gRPC object pools, its buffer-manager threads, host policies). Each one
//! given is said once at start-up, with the reason, so nobody believes it took effect.
//! Their values are still checked at parse like Triton's.

use super::Config;

/// One line per flag given that has no effect, or less effect than in tritonserver.
pub fn notes(config: &Config) -> Vec<String> {
    let cli = &config.cli;
    // (given, flag, why) for each flag that changes nothing here.
    let without_effect = [
        (
            !cli.cuda_virtual_address_size.is_empty(),
            "cuda-virtual-address-size",
            "implicit state is kept in host memory",
        ),
        (
            cli.min_supported_compute_capability.is_some(),
            "min-supported-compute-capability",
            "every GPU the CUDA driver shows is used, whatever its compute capability",
        ),
        (
            cli.enable_peer_access.is_some(),
            "enable-peer-access",
            "Nereid enables no peer access between GPUs (backends manage their own)",
        ),
        (
            !cli.model_load_gpu_limit.is_empty(),
            "model-load-gpu-limit",
            "GPU memory is not measured while models load",
        ),
        (
            cli.buffer_manager_thread_count.is_some(),
            "buffer-manager-thread-count",
            "tensors are read in place from the request or shared memory, never copied by a buffer manager",
        ),
        (
            cli.grpc_infer_allocation_pool_size.is_some(),
            "grpc-infer-allocation-pool-size",
            "gRPC request and response state is not pooled",
        ),
        (
            !cli.host_policy.is_empty(),
            "host-policy",
            "host policies (numa-node, cpu-cores) are not applied: no instance is bound to a NUMA node or to cores",
        ),
    ];
    let mut notes: Vec<String> = without_effect
        .iter()
        .filter(|(given, _, _)| *given)
        .map(|(_, flag, why)| format!("--{flag} has no effect: {why}"))
        .collect();
    let thread_flags = [
        ("http-thread-count", cli.http_thread_count),
        ("grpc-infer-thread-count", cli.grpc_infer_thread_count),
        ("sagemaker-thread-count", cli.sagemaker_thread_count),
        ("vertex-ai-thread-count", cli.vertex_ai_thread_count),
    ];
    for (flag, count) in thread_flags {
        if count.is_some() {
            notes.push(format!(
                "--{flag}: all endpoints share {} network threads (the largest thread count given, at most the cores; --io-threads overrides)",
                config.io_threads()
            ));
        }
    }
    notes
}

/// tritonserver's warnings for deprecated spellings it still honours.
pub fn deprecations(config: &Config) -> Vec<String> {
    let cli = &config.cli;
    let mut warnings = Vec::new();
    if cli.strict_model_config.is_some() {
        warnings.push("Warning: '--strict-model-config' has been deprecated! Please use '--disable-auto-complete-config' instead.".to_string());
    }
    if cli.disable_auto_complete_config && cli.strict_model_config == Some(false) {
        warnings.push("Warning: Overriding deprecated '--strict-model-config' from False to True in favor of '--disable-auto-complete-config'!".to_string());
    }
    let trace_flags = [
        (
            "trace-file",
            "triton,file=<filepath>",
            usize::from(cli.trace_file.is_some()),
        ),
        (
            "trace-level",
            "level=<OFF|TIMESTAMPS|TENSORS>",
            cli.trace_level.len(),
        ),
        (
            "trace-rate",
            "rate=<rate value>",
            usize::from(cli.trace_rate.is_some()),
        ),
        (
            "trace-count",
            "count=<count value>",
            usize::from(cli.trace_count.is_some()),
        ),
        (
            "trace-log-frequency",
            "triton,log-frequency=<log frequency value>",
            usize::from(cli.trace_log_frequency.is_some()),
        ),
    ];
    for (flag, replacement, times) in trace_flags {
        for _ in 0..times {
            warnings.push(format!("Warning: '--{flag}' has been deprecated and will be removed in future releases. Please use '--trace-config {replacement} instead."));
        }
    }
    if let Some(size) = cli.response_cache_byte_size {
        warnings.push(format!("Warning: '--response-cache-byte-size' has been deprecated! This will default to the 'local' cache implementation with the provided byte size for its config. Please use '--cache-config' instead. The equivalent --cache-config CLI args would be: '--cache-config=local,size={size}'"));
    }
    warnings
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Cli;

    fn config(args: &[&str]) -> Config {
        let mut all = vec!["nereid", "--model-repository", "."];
        all.extend_from_slice(args);
        Config::from_cli_with_env(Cli::try_parse_from(all).expect("parses"), &|_| None)
            .expect("valid")
    }

    #[test]
    fn each_flag_given_is_said_once_and_defaults_say_nothing() {
        assert!(notes(&config(&[])).is_empty());
        let said = notes(&config(&[
            "--pinned-memory-pool-byte-size=268435456",
            "--cuda-memory-pool-byte-size=0:67108864",
            "--host-policy=gpu_0,numa-node=0",
            "--rate-limit=execution_count",
            "--enable-peer-access=false",
        ]));
        // The rate limiter and the two pools take effect: nothing is said of them.
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[0].starts_with("--enable-peer-access has no effect"));
        assert!(said.iter().all(|s| !s.contains("cuda-memory")), "{said:?}");
        assert!(said.iter().all(|s| !s.contains("rate-limit")), "{said:?}");
        assert!(said.iter().all(|s| !s.contains("pinned")), "{said:?}");
    }

    #[test]
    fn deprecated_spellings_warn_as_triton() {
        let warnings = deprecations(&config(&["--strict-model-config=false"]));
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].starts_with("Warning: '--strict-model-config' has been deprecated!"));
        let warnings = deprecations(&config(&[
            "--trace-file=/tmp/t.json",
            "--trace-level=TIMESTAMPS",
            "--trace-level=TENSORS",
        ]));
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert_eq!(warnings[0], "Warning: '--trace-file' has been deprecated and will be removed in future releases. Please use '--trace-config triton,file=<filepath> instead.");
        assert!(warnings[2].starts_with("Warning: '--trace-level' has been deprecated"));
        let warnings = deprecations(&config(&[
            "--disable-auto-complete-config",
            "--strict-model-config=false",
        ]));
        assert_eq!(
            warnings[1],
            "Warning: Overriding deprecated '--strict-model-config' from False to True in favor of '--disable-auto-complete-config'!"
        );
    }
}
