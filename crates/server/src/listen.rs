//! Listening sockets and the file-descriptor budget behind them: the listen backlog is
//! the system's maximum (tokio's `TcpListener::bind` uses 128, which dropped connects
//! when 10,000 clients arrived at once, BENCHMARKS.md §7), RLIMIT_NOFILE is raised to its
//! hard limit at start-up (the usual soft limit, 1,024, is below the connection cap), and
//! the connection cap is kept below what that limit allows.

use std::net::SocketAddr;

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use tokio::net::{TcpListener, TcpSocket};

/// Backlog when /proc/sys/net/core/somaxconn cannot be read (Linux's default since 5.4).
const DEFAULT_BACKLOG: u32 = 4096;
/// File descriptors kept for everything but client connections: model files, backend
/// libraries and their threads, log and metrics files, the listeners themselves.
const FD_HEADROOM: u64 = 256;

/// The most pending connections the kernel will queue for one listener.
pub fn max_backlog() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_BACKLOG)
}

/// A listener on `address` with `backlog`, with SO_REUSEADDR as tokio's `bind` sets it (a
/// restarted server can bind while old connections linger in TIME_WAIT), and with
/// SO_REUSEPORT when `reuse_port` (`--reuse-http-port`, `--reuse-grpc-port`): several
/// servers with it set share the port and the kernel spreads connections among them.
pub fn listen(address: SocketAddr, backlog: u32, reuse_port: bool) -> std::io::Result<TcpListener> {
    let socket = match address {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    if reuse_port {
        socket.set_reuseport(true)?;
    }
    socket.bind(address)?;
    socket.listen(backlog)
}

/// Raises the soft RLIMIT_NOFILE to the hard limit (or, when that is unlimited, to the
/// kernel's per-process maximum). Called first thing, before models open their files.
pub fn raise_fd_limit() {
    let limit = getrlimit(Resource::Nofile);
    let hard = limit.maximum.unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1 << 20)
    });
    let current = limit.current.unwrap_or(u64::MAX);
    if current >= hard {
        return;
    }
    let raised = Rlimit {
        current: Some(hard),
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            tracing::info!("raised the open file limit (RLIMIT_NOFILE) from {current} to {hard}")
        }
        Err(e) => tracing::warn!(
            "cannot raise the open file limit (RLIMIT_NOFILE) from {current} to {hard}: {e}"
        ),
    }
}

/// `--max-connections`, lowered (with a warning) to fit the open file limit now in effect.
pub fn fitted_connection_cap(requested: usize) -> usize {
    let fd_limit = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    let cap = connection_cap(requested, fd_limit);
    if cap < requested {
        tracing::warn!(
            "--max-connections {requested} lowered to {cap}: the open file limit is {fd_limit}, and {FD_HEADROOM} descriptors are kept for models and logs"
        );
    }
    cap
}

/// The connection cap of a port: `requested`, lowered to stay [`FD_HEADROOM`]
/// descriptors below `fd_limit` (never below 1). Each port may use that many: the HTTP,
/// gRPC and metrics ports are seldom all full at once, and if they are, the accept
/// errors (EMFILE) are logged and retried, not silent.
fn connection_cap(requested: usize, fd_limit: u64) -> usize {
    let available = fd_limit.saturating_sub(FD_HEADROOM);
    requested.min(usize::try_from(available).unwrap_or(usize::MAX).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_headroom_below_the_fd_limit() {
        assert_eq!(connection_cap(10_000, 1_048_576), 10_000);
        assert_eq!(connection_cap(10_000, 1_024), 1_024 - 256);
        assert_eq!(connection_cap(10_000, 100), 1, "never zero");
        assert_eq!(connection_cap(5, 1_024), 5);
    }

    #[tokio::test]
    async fn the_listener_takes_the_backlog() {
        let listener = listen(
            "127.0.0.1:0".parse().expect("address"),
            max_backlog(),
            false,
        )
        .expect("listen");
        assert!(listener.local_addr().expect("bound").port() > 0);
    }

    #[tokio::test]
    async fn two_listeners_share_a_port_only_when_both_reuse_it() {
        let first = listen("127.0.0.1:0".parse().expect("address"), 16, true).expect("listen");
        let address = first.local_addr().expect("bound");
        let second = listen(address, 16, true).expect("both reuse the port");
        assert_eq!(second.local_addr().expect("bound"), address);
        assert!(
            listen(address, 16, false).is_err(),
            "a third without reuse is refused"
        );
    }
}
