/// Completes on the first SIGTERM or SIGINT (Ctrl-C elsewhere than Unix).
/// Pass it to [`crate::Supervisor::run`].
///
/// Graceful shutdown may take up to the grace period; a second signal ends
/// the process at once (exit code 130), for an operator who does not want
/// to wait.
pub async fn shutdown_signal() {
    let first = next_signal().await;
    tracing::info!(
        signal = first,
        "shutting down; a second signal exits at once"
    );
    tokio::spawn(async {
        let second = next_signal().await;
        tracing::warn!(
            signal = second,
            "second signal: exiting without a graceful shutdown"
        );
        std::process::exit(130);
    });
}

/// The name of the next termination signal received. Never completes when
/// no signal can be listened for (only a component failure then ends the
/// process).
async fn next_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut terminate), Ok(mut interrupt)) => {
                return tokio::select! {
                    _ = terminate.recv() => "SIGTERM",
                    _ = interrupt.recv() => "SIGINT",
                };
            }
            (Err(error), _) | (_, Err(error)) => {
                tracing::warn!(%error, "cannot listen for SIGTERM/SIGINT; waiting for Ctrl-C only");
            }
        }
    }
    match tokio::signal::ctrl_c().await {
        Ok(()) => "Ctrl-C",
        Err(error) => {
            tracing::error!(%error, "cannot listen for Ctrl-C; only a component failure ends the process");
            std::future::pending().await
        }
    }
}
