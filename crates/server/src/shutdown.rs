//! Shutdown signalling: SIGINT/SIGTERM wait, and one trigger that every listener watches.

use tokio::sync::watch;

/// Fan-out of the shutdown moment to every frontend.
pub struct Shutdown {
    sender: watch::Sender<bool>,
}

impl Shutdown {
    /// Not yet triggered.
    pub fn new() -> Self {
        Self {
            sender: watch::channel(false).0,
        }
    }

    /// A future that resolves once [`Self::trigger`] is called.
    pub fn signal(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut receiver = self.sender.subscribe();
        async move {
            // An error means the sender is gone, which also means shutting down.
            let _ = receiver.wait_for(|stop| *stop).await;
        }
    }

    /// Starts the shutdown.
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }
}

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
