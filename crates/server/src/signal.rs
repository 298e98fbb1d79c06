//! SIGINT and SIGTERM: the binary's shutdown future.

/// Installs SIGINT and SIGTERM handlers now; the returned future resolves on either.
pub fn signal_listener() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
