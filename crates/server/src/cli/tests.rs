//! The command line's tests: Triton's syntax and messages, flag by flag.

use std::time::Duration;

use clap::Parser;
use nereid_core::metrics::MetricsConfig;
use nereid_core::restricted::ApiGroup;
use nereid_core::ControlMode;

use super::config::BackendSetting;
use super::*;

/// The configuration from `args` after `--model-repository .`, with no environment.
fn parse(args: &[&str]) -> anyhow::Result<Config> {
    parse_with_env(args, &[])
}

/// [`parse`] with the environment variables `env`.
fn parse_with_env(args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Config> {
    let mut all = vec!["nereid", "--model-repository", "."];
    all.extend_from_slice(args);
    let cli = Cli::try_parse_from(all)
        .map_err(|e| anyhow::anyhow!("{}", errors::triton_message(&e).unwrap_or_default()))?;
    Config::from_cli_with_env(cli, &|name| {
        env.iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_string())
    })
}

/// The message a refused command line prints.
fn refusal(args: &[&str]) -> String {
    parse(args).expect_err("refused").to_string()
}

#[test]
fn io_threads_default_to_half_the_cores_and_refuse_zero() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(parse(&[]).expect("valid").io_threads(), (cores / 2).max(1));
    assert_eq!(
        parse(&["--io-threads", "3"]).expect("valid").io_threads(),
        3
    );
    assert!(parse(&["--io-threads", "0"]).is_err());
}

#[test]
fn backend_config_is_per_backend_or_global_with_tritons_messages() {
    let c = parse(&[
        "--backend-config=python,shm-default-byte-size=2097152",
        "--backend-config=default-max-batch-size=8",
    ])
    .expect("valid");
    let settings: Vec<_> = c
        .backend_settings
        .iter()
        .map(|s| (s.backend.as_str(), s.key.as_str(), s.value.as_str()))
        .collect();
    assert_eq!(
        settings,
        [
            ("python", "shm-default-byte-size", "2097152"),
            ("", "default-max-batch-size", "8")
        ]
    );
    let Err(error) = parse(&["--backend-config=,k=v"]) else {
        panic!("a leading comma names no backend");
    };
    assert!(
        error.to_string().starts_with("No backend specified."),
        "{error}"
    );
    for bad in ["python,k", "python,=v", "python,k="] {
        let Err(error) = parse(&[&format!("--backend-config={bad}")]) else {
            panic!("{bad} is malformed");
        };
        assert_eq!(
            error.to_string(),
            format!(
                "--backend-config option format is '<backend name>,<setting>=<value>'. Got {bad}"
            )
        );
    }
}

#[test]
fn triton_defaults_and_both_syntaxes() {
    let c = parse(&[]).expect("valid");
    let port = |at: Option<std::net::SocketAddr>| at.expect("served").port();
    assert_eq!(
        (port(c.http), port(c.grpc), c.cli.metrics_port),
        (8000, 8001, 8002)
    );
    assert_eq!(c.control_mode, ControlMode::None);
    let c = parse(&[
        "--http-port=9000",
        "--grpc-port",
        "9001",
        "--allow-metrics=false",
    ])
    .expect("valid");
    assert_eq!((port(c.http), port(c.grpc)), (9000, 9001));
    assert!(!c.cli.allow_metrics);
}

#[test]
fn metrics_flags() {
    let c = parse(&[]).expect("valid");
    assert_eq!(c.metrics_interval(), Duration::from_secs(2));
    assert_eq!(c.metrics_config, MetricsConfig::default());
    let c = parse(&[
        "--metrics-interval-ms=250",
        "--metrics-config",
        "summary_latencies=true",
        "--metrics-config=summary_quantiles=0.5:0.05,0.9:0.01",
    ])
    .expect("valid");
    assert_eq!(c.metrics_interval(), Duration::from_millis(250));
    assert!(c.metrics_config.summary_latencies);
    assert_eq!(c.metrics_config.summary_quantiles.len(), 2);
    let e = parse(&["--metrics-config", "summary_quantiles=abc"]).expect_err("bad");
    assert_eq!(
        e.to_string(),
        "--metrics-config summary_quantiles=abc: 'abc' is not <quantile>:<error>"
    );
    let e = parse(&["--metrics-interval-ms=0"]).expect_err("zero");
    assert!(e.to_string().contains("--metrics-interval-ms"), "{e}");
    assert!(parse(&["--metrics-interval-ms=soon"]).is_err());
}

#[test]
fn bad_values_are_refused() {
    assert!(parse(&["--http-port", "abc"]).is_err());
    assert!(parse(&["--no-such-flag"]).is_err());
    assert!(parse(&["--model-control-mode", "sometimes"]).is_err());
    assert!(parse(&["--backend-config", "onnxruntime"]).is_err());
    assert!(parse(&["--load-model", "m"]).is_err());
    assert!(parse(&["--max-connections", "0"]).is_err());
    assert!(parse(&["--grpc-max-input-size", "0"]).is_err());
    assert!(parse(&["--grpc-max-decompressed-size", "0"]).is_err());
    assert!(parse(&["--grpc-keepalive-time", "0"]).is_err());
    let e = refusal(&["--cuda-virtual-address-size", "0"]);
    assert!(
        e.starts_with("Bad option: \"--cuda-virtual-address-size\".\nCannot parse pair option"),
        "{e}"
    );
    assert_eq!(
        refusal(&["--cuda-virtual-address-size=0:big"]),
        "Bad option: \"--cuda-virtual-address-size\".\nInvalid option value. Got big"
    );
}

#[test]
fn flags_of_tritons_scripts_are_accepted() {
    let c = parse(&[
        "--backend-directory=/opt/tritonserver/backends",
        "--cuda-virtual-address-size",
        "0:1073741824",
        "--backend-config=python,shm-default-byte-size=1",
    ])
    .expect("valid");
    assert_eq!(c.http_max_input_size(), 64 << 20);
    assert_eq!(c.cli.grpc_max_input_size, i32::MAX as usize);
    assert_eq!(c.cli.grpc_max_decompressed_size, c.http_max_input_size());
}

#[test]
fn connection_limits_default_like_a_reverse_proxy_and_zero_turns_a_timeout_off() {
    let c = parse(&[]).expect("valid");
    let http = c.http_limits(7);
    assert_eq!(http.max_connections, 7);
    assert_eq!(http.header_timeout, Some(Duration::from_secs(60)));
    assert_eq!(http.body_timeout, Some(Duration::from_secs(60)));
    assert_eq!(http.idle_timeout, Some(Duration::from_secs(300)));
    let grpc = c.grpc_options(7).expect("no TLS files to read");
    assert_eq!(grpc.message_limits, nereid_grpc::MessageLimits::default());
    assert_eq!(grpc.http2.keepalive_time, Duration::from_secs(7200));
    let c = parse(&[
        "--http-idle-timeout-secs=0",
        "--grpc-idle-timeout-secs",
        "2",
    ])
    .expect("valid");
    assert_eq!(c.http_limits(1).idle_timeout, None);
    assert_eq!(
        c.grpc_options(1).expect("no TLS").limits.idle_timeout,
        Some(Duration::from_secs(2))
    );
}

#[test]
fn client_shm_is_off_unless_asked_for_in_either_syntax() {
    assert!(!parse(&[]).expect("valid").shm_limits().allow_clients);
    for on in [&["--allow-client-shm"][..], &["--allow-client-shm=true"]] {
        assert!(parse(on).expect("valid").shm_limits().allow_clients);
    }
    assert!(
        !parse(&["--allow-client-shm", "false"])
            .expect("valid")
            .shm_limits()
            .allow_clients
    );
}

#[test]
fn restricted_groups_are_parsed_per_frontend_with_tritons_messages() {
    let c = parse(&[
        "--http-restricted-api=shared-memory,model-repository:admin=s3",
        "--grpc-restricted-protocol",
        "health:k=v",
    ])
    .expect("valid");
    let http = c
        .http_restrictions
        .get(ApiGroup::SharedMemory)
        .expect("set");
    assert_eq!((http.header.as_str(), http.value.as_str()), ("admin", "s3"));
    assert!(c.http_restrictions.get(ApiGroup::Health).is_none());
    let grpc = c.grpc_restrictions.get(ApiGroup::Health).expect("set");
    assert_eq!(grpc.header, "triton-grpc-protocol-k");
    assert!(c.grpc_restrictions.get(ApiGroup::SharedMemory).is_none());
    let error = |args: &[&str]| parse(args).expect_err("refused").to_string();
    assert_eq!(
        error(&["--grpc-restricted-protocol=health"]),
        "--grpc-restricted-protocol option format is '<config name>:<setting>=<value>'. Got health"
    );
    assert_eq!(
        error(&["--http-restricted-api=helth:k=v"]),
        "unknown restricted api 'helth' "
    );
    assert_eq!(
        error(&[
            "--grpc-restricted-protocol=trace:k=v",
            "--grpc-restricted-protocol=logging,trace:k=w"
        ]),
        "restricted protocol 'trace' can not be specified in multiple config groups"
    );
}

#[test]
fn header_forward_patterns_compile_or_stop_start_up() {
    let c = parse(&[]).expect("valid");
    assert!(c.http_header_forward.is_none() && c.grpc_header_forward.is_none());
    let c = parse(&[
        "--http-header-forward-pattern=.*",
        "--grpc-header-forward-pattern",
        "(?-i)MY_HEADER.*",
    ])
    .expect("valid");
    let http = c.http_header_forward.as_ref().expect("http pattern");
    assert!(http.matches("anything"));
    let grpc = c
        .grpc_options(1)
        .expect("no TLS")
        .header_forward
        .expect("grpc pattern");
    assert!(grpc.matches("MY_HEADER_1") && !grpc.matches("my_header_1"));
    let err = parse(&["--grpc-header-forward-pattern=(unclosed"])
        .expect_err("invalid")
        .to_string();
    assert!(
        err.starts_with(
            "--grpc-header-forward-pattern: invalid header forward pattern '(unclosed'"
        ),
        "{err}"
    );
}

#[test]
fn backend_settings_are_parsed() {
    let c = parse(&["--backend-config=onnxruntime,default-max-batch-size=8"]).expect("valid");
    assert_eq!(
        c.backend_settings,
        [BackendSetting {
            backend: "onnxruntime".into(),
            key: "default-max-batch-size".into(),
            value: "8".into(),
        }]
    );
}

#[test]
fn values_triton_accepts_are_accepted() {
    let c = parse(&[
        "--log-verbose=true",
        "--model-control-mode=POLL",
        "--http-address=ipv6:[::1]",
        "--rate-limit=EXECUTION_COUNT",
        "--rate-limit-resource=R1:4:0",
        "--rate-limit-resource=r2:1",
        "--grpc-infer-response-compression-level=High",
    ])
    .expect("valid");
    assert_eq!(c.cli.log_verbose, 1);
    assert_eq!(c.control_mode, ControlMode::Poll);
    let ipv6_loopback = "::1".parse::<std::net::IpAddr>().expect("ip");
    assert_eq!(c.http.expect("served").ip(), ipv6_loopback);
    assert_eq!(
        c.metrics_address, ipv6_loopback,
        "metrics follow --http-address"
    );
    assert_eq!(c.cli.rate_limit, RateLimitMode::ExecutionCount);
    assert_eq!(
        c.cli.rate_limit_resource,
        [
            RateLimitResource {
                name: "R1".into(),
                count: 4,
                device: Some(0)
            },
            RateLimitResource {
                name: "r2".into(),
                count: 1,
                device: None
            },
        ]
    );
    assert_eq!(
        c.cli.grpc_infer_response_compression_level,
        GrpcCompressionLevel::High
    );
}

#[test]
fn refused_values_carry_tritons_messages() {
    let cases: &[(&[&str], &str)] = &[
        (&["--model-control-mode=sometimes"], "Bad option: \"--model-control-mode\".\ninvalid argument for --model-control-mode"),
        (&["--log-format=json"], "Bad option: \"--log-format\".\ninvalid argument for --log-format"),
        (&["--rate-limit-resource=R"], "Bad option: \"--rate-limit-resource\".\n--rate-limit-resource option format is '<resource_name>:<count>:<device>' or '<resource_name>:<count>'. Got R"),
        (&["--grpc-infer-thread-count=1"], "Bad option: \"--grpc-infer-thread-count\".\ninvalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128."),
        (&["--grpc-max-response-pool-size=0"], "Bad option: \"--grpc-max-response-pool-size\".\nError: --grpc-max-response-pool-size must be greater than 0."),
        (&["--http-max-input-size=0"], "Bad option: \"--http-max-input-size\".\nError: --http-max-input-size must be greater than 0."),
        (&["--model-config-name="], "Bad option: \"--model-config-name\".\nError: empty argument for --model-config-name"),
        (&["--min-supported-compute-capability=high"], "Bad option: \"--min-supported-compute-capability\".\nInvalid option value. Got high"),
        (&["--model-load-thread-count=-1"], "Bad option: \"--model-load-thread-count\".\nProvided option value is out of bound. Got -1"),
        (&["--host-policy=numa-node=1"], "Bad option: \"--host-policy\".\n--host-policy option format is '<policy name>,<setting>=<value>'. Got numa-node=1"),
        (&["--load-model=m"], "Error: Use of '--load-model' requires setting '--model-control-mode=explicit' as well."),
    ];
    for (args, message) in cases {
        assert_eq!(refusal(args), *message, "{args:?}");
    }
}

#[test]
fn ports_may_not_collide_nor_leave_the_sagemaker_range() {
    assert_eq!(
        refusal(&["--http-port=9000", "--grpc-address=0.0.0.0", "--grpc-port=9000"]),
        "The server cannot listen to HTTP requests and GRPC requests at the same address and port 0.0.0.0:9000"
    );
    assert_eq!(
        refusal(&["--allow-sagemaker=true", "--sagemaker-safe-port-range=8000-8001"]),
        "The server cannot listen to metrics requests at port 8002, allowed port range is [8000, 8001]"
    );
    // Port 0 is a free port chosen at bind: it never collides.
    assert!(parse(&["--http-port=0", "--grpc-port=0", "--metrics-port=0"]).is_ok());
    assert!(parse(&["--allow-sagemaker", "--sagemaker-safe-port-range=8000-8002"]).is_ok());
}

#[test]
fn vertex_ai_environment_sets_defaults() {
    let c = parse_with_env(
        &[],
        &[("AIP_MODE", "PREDICTION"), ("AIP_HTTP_PORT", "9090")],
    )
    .expect("valid");
    assert!(c.allow_vertex_ai && c.http.is_none() && c.grpc.is_none());
    assert_eq!(c.vertex_ai_port, 9090);
    let c = parse_with_env(
        &["--allow-http=true", "--vertex-ai-port=7070"],
        &[("AIP_MODE", "PREDICTION")],
    )
    .expect("valid");
    assert!(c.http.is_some() && c.grpc.is_none());
    assert_eq!(c.vertex_ai_port, 7070);
    let c = parse(&[]).expect("valid");
    assert!(!c.allow_vertex_ai && c.http.is_some() && c.grpc.is_some());
    let e = parse_with_env(&[], &[("AIP_MODE", "PREDICTION"), ("AIP_HTTP_PORT", "x")])
        .expect_err("bad port");
    assert_eq!(e.to_string(), "AIP_HTTP_PORT: Invalid option value. Got x");
}

#[test]
fn the_repository_may_come_from_aip_storage_uri() {
    let cli = |args: &[&str]| {
        let mut all = vec!["nereid"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).expect("parses")
    };
    let c = Config::from_cli_with_env(cli(&[]), &|name| {
        (name == "AIP_STORAGE_URI").then(|| ".".to_string())
    })
    .expect("valid");
    assert_eq!(c.model_repositories, [std::path::PathBuf::from(".")]);
    let e = Config::from_cli_with_env(cli(&[]), &|_| None).expect_err("no repository");
    assert_eq!(
        e.to_string(),
        "creating server: Invalid argument - --model-repository must be specified"
    );
    let c = Config::from_cli_with_env(cli(&["--model-repository=.", "--model-store=."]), &|_| None)
        .expect("valid");
    assert_eq!(c.model_repositories.len(), 1, "a repeat counts once");
}

#[test]
fn thread_counts_size_the_shared_network_threads() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let c = parse(&["--http-thread-count=1"]).expect("valid");
    assert_eq!(c.io_threads(), 1);
    let c = parse(&["--http-thread-count=64", "--grpc-infer-thread-count=2"]).expect("valid");
    assert_eq!(c.io_threads(), cores);
    let c = parse(&["--http-thread-count=64", "--io-threads=3"]).expect("valid");
    assert_eq!(c.io_threads(), 3);
}

#[test]
fn grpc_policy_flags_map_to_the_frontend_and_negatives_mean_grpc_defaults() {
    let c = parse(&[
        "--grpc-keepalive-permit-without-calls=true",
        "--grpc-http2-max-pings-without-data=0",
        "--grpc-http2-min-recv-ping-interval-without-data=1000",
        "--grpc-http2-max-ping-strikes=5",
        "--grpc-max-connection-age=60000",
        "--grpc-max-connection-age-grace=0",
        "--grpc-infer-response-compression-level=HIGH",
        "--grpc-max-response-pool-size=3",
    ])
    .expect("valid");
    let grpc = c.grpc_options(1).expect("no TLS");
    assert_eq!(grpc.response_pool_size, 3);
    assert!(grpc.http2.permit_without_calls);
    assert_eq!(grpc.http2.max_pings_without_data, 0);
    assert_eq!(grpc.http2.min_recv_ping_interval, Duration::from_secs(1));
    assert_eq!(grpc.http2.max_ping_strikes, 5);
    assert_eq!(grpc.http2.max_connection_age, Some(Duration::from_secs(60)));
    assert_eq!(
        grpc.http2.max_connection_age_grace, None,
        "Triton passes a grace of 0 to gRPC as no grace limit"
    );
    assert_eq!(grpc.compression_level, nereid_grpc::CompressionLevel::High);
    let c = parse(&[
        "--grpc-http2-max-pings-without-data=-1",
        "--grpc-http2-min-recv-ping-interval-without-data=-1",
        "--grpc-http2-max-ping-strikes=-1",
        "--grpc-max-connection-age=-5",
    ])
    .expect("valid");
    let grpc = c.grpc_options(1).expect("no TLS");
    assert_eq!(grpc.http2, nereid_grpc::Http2Policy::default());
    assert_eq!(
        grpc.response_pool_size,
        nereid_core::response_stream::RESPONSES_BUFFERED
    );
    assert!(grpc.tls.is_none());
}

#[test]
fn grpc_tls_files_are_read_when_ssl_is_on() {
    let c = parse(&[
        "--grpc-use-ssl-mutual=true",
        "--grpc-server-cert=/nonexistent/cert.pem",
    ])
    .expect("the flags parse");
    let e = c.grpc_options(1).expect_err("the file is missing");
    assert!(
        e.to_string()
            .starts_with("failed to start GRPC service: cannot read --grpc-server-cert file '/nonexistent/cert.pem'"),
        "{e}"
    );
    let c = parse(&["--grpc-server-cert=/nonexistent/cert.pem"]).expect("valid");
    assert!(c
        .grpc_options(1)
        .expect("TLS off: no file is read")
        .tls
        .is_none());
}

#[test]
fn a_repeated_flag_keeps_its_last_value_and_a_long_prefix_names_its_flag() {
    // getopt_long's rules, which Triton's QA launch lines rely on (L0_vertex_ai,
    // L0_secure_grpc, L0_client_timeout: repeated flags; L0_logging: `--log-warn`).
    let c = parse(&["--log-verbose=1", "--log-verbose=2", "--log-warn=false"]).expect("valid");
    assert_eq!(c.cli.log_verbose, 2);
    assert!(!c.cli.log_warning);
    let c = parse(&["--allow-http", "true", "--allow-http=false"]).expect("valid");
    assert!(c.http.is_none());
}

#[test]
fn a_disabled_endpoints_address_and_port_are_not_checked() {
    // L0_socket: tritonserver starts with these, the endpoint off.
    for args in [
        ["--http-port", "-47", "--allow-http", "0"],
        ["--grpc-port", "-47", "--allow-grpc", "0"],
        ["--http-address", "-47", "--allow-http", "0"],
        ["--grpc-address", "-47", "--allow-grpc", "0"],
    ] {
        let c = parse(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert!(c.http.is_none() || c.grpc.is_none(), "{args:?}");
    }
    // Metrics cannot follow an HTTP address that is none: every interface.
    let c = parse(&["--http-address", "-47", "--allow-http", "0"]).expect("valid");
    assert_eq!(c.metrics_address, std::net::IpAddr::from([0, 0, 0, 0]));
    // Served, the same values are refused (tritonserver binds port 70000 as 4464 and an
    // address it cannot parse as 255.255.255.255).
    for (args, message) in [
        (
            &["--http-port", "-47"],
            "Bad option: \"--http-port\".\nProvided option value is out of bound. Got -47",
        ),
        (
            &["--grpc-port", "70000"],
            "Bad option: \"--grpc-port\".\nProvided option value is out of bound. Got 70000",
        ),
        (
            &["--grpc-address", "-47"],
            "Bad option: \"--grpc-address\".\ncannot resolve address '-47'",
        ),
    ] {
        let e = parse(args).expect_err("refused");
        assert_eq!(e.to_string(), message, "{args:?}");
    }
    // A port no `int` holds is refused at once, served or not, as by std::stoi.
    assert!(parse(&["--http-port", "99999999999", "--allow-http", "0"]).is_err());
}
