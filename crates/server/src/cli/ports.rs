//! tritonserver's check that no two endpoints share an address and port, and that with
//! `--sagemaker-safe-port-range` every other endpoint on SageMaker's address stays in
//! the range; the messages are Triton's. Port 0 (a free port chosen at bind, Nereid's
//! test convention) never collides.

use std::net::{IpAddr, Ipv4Addr};

use super::Config;

/// Where SageMaker and Vertex AI listen: tritonserver has no flag for their address.
pub const ENDPOINT_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

/// One enabled endpoint: its name in Triton's messages, address, port and, for
/// SageMaker, the range the others must keep to.
struct Endpoint {
    name: &'static str,
    address: IpAddr,
    port: u16,
    safe_range: Option<(i32, i32)>,
}

/// The endpoints the flags enable, in tritonserver's order.
fn endpoints(config: &Config) -> Vec<Endpoint> {
    let cli = &config.cli;
    let endpoint = |name, address, port| Endpoint {
        name,
        address,
        port,
        safe_range: None,
    };
    let mut all = Vec::new();
    if let Some(http) = config.http {
        all.push(endpoint("HTTP", http.ip(), http.port()));
    }
    if let Some(grpc) = config.grpc {
        all.push(endpoint("GRPC", grpc.ip(), grpc.port()));
    }
    if cli.allow_metrics {
        all.push(endpoint(
            "metrics",
            config.metrics_address,
            cli.metrics_port,
        ));
    }
    if cli.allow_sagemaker {
        all.push(Endpoint {
            safe_range: cli.sagemaker_safe_port_range,
            ..endpoint("SageMaker", ENDPOINT_ADDRESS, cli.sagemaker_port)
        });
    }
    if config.allow_vertex_ai {
        all.push(endpoint(
            "Vertex AI",
            ENDPOINT_ADDRESS,
            config.vertex_ai_port,
        ));
    }
    if let Some(port) = cli.openai.openai_port {
        all.push(endpoint("OpenAI", cli.openai.openai_address, port));
    }
    all
}

/// Fails with tritonserver's message on the first collision or out-of-range port.
pub fn check_collisions(config: &Config) -> anyhow::Result<()> {
    let all = endpoints(config);
    for (i, current) in all.iter().enumerate() {
        // An endpoint with a safe range checks every other; the rest check later ones.
        let start = if current.safe_range.is_some() {
            0
        } else {
            i + 1
        };
        for (j, other) in all.iter().enumerate().skip(start) {
            if i == j || current.address != other.address || other.port == 0 {
                continue;
            }
            if let Some((low, high)) = current.safe_range {
                let port = i32::from(other.port);
                if port < low || port > high {
                    anyhow::bail!(
                        "The server cannot listen to {} requests at port {}, allowed port range is [{low}, {high}]",
                        other.name,
                        other.port
                    );
                }
            }
            if current.port == other.port {
                anyhow::bail!(
                    "The server cannot listen to {} requests and {} requests at the same address and port {}:{}",
                    current.name,
                    other.name,
                    current.address,
                    current.port
                );
            }
        }
    }
    Ok(())
}
