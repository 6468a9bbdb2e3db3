//! The HTTPS serving loop, in the order it runs: wait for a certificate,
//! serve the bound listener, reload the certificate until cancelled, drain.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use axum_server::accept::NoDelayAcceptor;
use axum_server::tls_rustls::RustlsConfig;
use poolkeeper_supervisor::Context;
use tokio::task::JoinHandle;

use crate::error::WebhookError;
use crate::tls::{self, PemPair};

/// The certificate being served and what the reload loop compares against.
pub(crate) struct ServedCertificate {
    dir: PathBuf,
    tls: RustlsConfig,
    loaded: PemPair,
    /// The last pair on disk that could not be used, so that a broken pair
    /// is reported once, not at every tick.
    refused: Option<PemPair>,
}

/// Polls `dir` every `interval` until it holds a usable pair; until then
/// the readiness reason says what is missing. `None` when cancelled first.
pub(crate) async fn wait_for_certificate(
    dir: &Path,
    interval: Duration,
    ctx: &Context,
) -> Option<ServedCertificate> {
    let mut last_error = String::new();
    loop {
        match tls::load(dir).await {
            Ok((pair, config)) => {
                tracing::info!(dir = %dir.display(), "serving certificate loaded");
                return Some(ServedCertificate {
                    dir: dir.to_owned(),
                    tls: RustlsConfig::from_config(config),
                    loaded: pair,
                    refused: None,
                });
            }
            Err(error) => {
                let error = error.to_string();
                if error != last_error {
                    tracing::warn!(dir = %dir.display(), %error, "serving certificate not available yet");
                    ctx.waiting_for(format!(
                        "waiting for the serving certificate in {}: {error}",
                        dir.display()
                    ));
                    last_error = error;
                }
            }
        }
        tokio::select! {
            _ = ctx.cancelled() => return None,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

impl ServedCertificate {
    /// Swaps in the pair on disk when it changed and is usable; established
    /// connections keep the certificate they were set up with.
    async fn reload_if_changed(&mut self) {
        let pair = match tls::read_pair(&self.dir).await {
            Ok(pair) => pair,
            Err(error) => {
                tracing::warn!(%error, "cannot read the serving certificate; keeping the current one");
                return;
            }
        };
        if pair == self.loaded || self.refused.as_ref() == Some(&pair) {
            return;
        }
        match tls::server_config(&self.dir, &pair) {
            Ok(config) => {
                self.tls.reload_from_config(config);
                self.loaded = pair;
                self.refused = None;
                tracing::info!(dir = %self.dir.display(), "serving certificate reloaded");
            }
            Err(error) => {
                // Often a rotation caught half-written; the next change is tried again.
                tracing::warn!(%error, "new serving certificate is not usable; keeping the current one");
                self.refused = Some(pair);
            }
        }
    }
}

/// The server running on its own task.
pub(crate) struct Serving {
    addr: SocketAddr,
    handle: axum_server::Handle<SocketAddr>,
    task: JoinHandle<io::Result<()>>,
}

/// Serves `router` over TLS on the bound `listener`. Accepted sockets get
/// `TCP_NODELAY`: a small response must not wait for the client's delayed
/// ACK (Nagle), which stalls some requests by ~40 ms.
pub(crate) fn serve(
    listener: TcpListener,
    addr: SocketAddr,
    certificate: &ServedCertificate,
    router: Router,
) -> Result<Serving, WebhookError> {
    let server = axum_server::from_tcp_rustls(listener, certificate.tls.clone())
        .map_err(|source| WebhookError::Listen { addr, source })?
        .map(|acceptor| acceptor.acceptor(NoDelayAcceptor::new()));
    let handle = axum_server::Handle::new();
    let task = tokio::spawn(
        server
            .handle(handle.clone())
            .serve(router.into_make_service()),
    );
    Ok(Serving { addr, handle, task })
}

impl Serving {
    /// Reloads the certificate every `interval` until `ctx` is cancelled;
    /// an error when the server stops on its own before that.
    pub(crate) async fn until_cancelled(
        &mut self,
        certificate: &mut ServedCertificate,
        interval: Duration,
        ctx: &Context,
    ) -> Result<(), WebhookError> {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.reset();
        loop {
            tokio::select! {
                _ = ctx.cancelled() => return Ok(()),
                ended = &mut self.task => return Err(self.ended(ended)),
                _ = ticker.tick() => {
                    let _busy = ctx.busy("checking the serving certificate");
                    certificate.reload_if_changed().await;
                }
            }
        }
    }

    fn ended(&self, ended: Result<io::Result<()>, tokio::task::JoinError>) -> WebhookError {
        let addr = self.addr;
        match ended {
            Ok(Ok(())) => WebhookError::ServerEnded { addr },
            Ok(Err(source)) => WebhookError::Serve { addr, source },
            Err(source) => WebhookError::ServerTask { addr, source },
        }
    }

    /// Stops accepting and lets in-flight requests finish for up to `timeout`.
    pub(crate) async fn drain(self, timeout: Duration) {
        self.handle.graceful_shutdown(Some(timeout));
        match self.task.await {
            Ok(Ok(())) => tracing::info!(addr = %self.addr, "webhook server stopped"),
            Ok(Err(error)) => {
                tracing::warn!(addr = %self.addr, %error, "webhook server stopped with an error");
            }
            Err(error) => tracing::warn!(addr = %self.addr, %error, "webhook server task failed"),
        }
    }
}
