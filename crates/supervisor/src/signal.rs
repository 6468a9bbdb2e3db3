/// Completes on the first SIGTERM or SIGINT (Ctrl-C elsewhere than Unix).
/// Pass it to [`crate::Supervisor::run`].
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut terminate), Ok(mut interrupt)) => {
                tokio::select! {
                    _ = terminate.recv() => tracing::info!("received SIGTERM"),
                    _ = interrupt.recv() => tracing::info!("received SIGINT"),
                }
                return;
            }
            (Err(error), _) | (_, Err(error)) => {
                tracing::warn!(
                    "cannot listen for SIGTERM/SIGINT ({error}); waiting for Ctrl-C only"
                );
            }
        }
    }
    match tokio::signal::ctrl_c().await {
        Ok(()) => tracing::info!("received Ctrl-C"),
        Err(error) => {
            tracing::error!(
                "cannot listen for Ctrl-C ({error}); only a component failure ends the process"
            );
            std::future::pending::<()>().await;
        }
    }
}
