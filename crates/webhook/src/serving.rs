//! The HTTPS serving loop, in the order it runs: wait for a certificate,
//! accept on the bound listener, reload the certificate until cancelled,
//! drain.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use poolkeeper_supervisor::Context;
use rustls::ServerConfig;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::connection::{Connections, Stop};
use crate::error::WebhookError;
use crate::source::CertificateSource;
use crate::tls::{self, PemPair};

/// The TLS configuration new connections get; swapped on a rotation.
type TlsCell = Arc<RwLock<Arc<ServerConfig>>>;

/// The certificate being served and what the reload loop compares against.
pub(crate) struct ServedCertificate {
    source: CertificateSource,
    tls: TlsCell,
    loaded: PemPair,
    /// The last pair that could not be used, so that a broken pair is
    /// reported once, not at every tick.
    refused: Option<PemPair>,
}

/// Takes pairs from `source` until one is usable; until then the readiness
/// reason says what is missing. `None` when cancelled first.
pub(crate) async fn wait_for_certificate(
    mut source: CertificateSource,
    ctx: &Context,
) -> Option<ServedCertificate> {
    let origin = source.origin().display().to_string();
    let mut last_error = String::new();
    ctx.waiting_for(format!("waiting for the serving certificate in {origin}"));
    loop {
        let next = tokio::select! {
            _ = ctx.cancelled() => return None,
            next = source.next() => next,
        };
        let loaded = next.and_then(|pair| {
            tls::server_config(source.origin(), &pair)
                .map(|config| (pair, config))
                .map_err(|e| e.to_string())
        });
        match loaded {
            Ok((pair, config)) => {
                tracing::info!(origin = %origin, certificate = %pair.describe(), "serving certificate loaded");
                return Some(ServedCertificate {
                    source,
                    tls: Arc::new(RwLock::new(config)),
                    loaded: pair,
                    refused: None,
                });
            }
            Err(error) => {
                if error != last_error {
                    tracing::warn!(origin = %origin, %error, "serving certificate not available yet");
                    ctx.waiting_for(format!(
                        "waiting for the serving certificate in {origin}: {error}"
                    ));
                    last_error = error;
                }
            }
        }
    }
}

impl ServedCertificate {
    /// What `/readyz?verbose` and the log say is served.
    pub(crate) fn describe(&self) -> String {
        self.loaded.describe()
    }

    /// The `CertificateServed` event of what is served.
    pub(crate) fn served_event(&self) -> Option<poolkeeper_bus::Event> {
        self.loaded.served_event()
    }

    /// Swaps in `next` when it changed and is usable; established
    /// connections keep the certificate they were set up with. Whether it
    /// was swapped in.
    fn offer(&mut self, next: Result<PemPair, String>) -> bool {
        let pair = match next {
            Ok(pair) => pair,
            Err(error) => {
                tracing::warn!(%error, "cannot read the serving certificate; keeping the current one");
                return false;
            }
        };
        if pair == self.loaded || self.refused.as_ref() == Some(&pair) {
            return false;
        }
        match tls::server_config(self.source.origin(), &pair) {
            Ok(config) => {
                *self.tls.write() = config;
                self.loaded = pair;
                self.refused = None;
                tracing::info!(origin = %self.source.origin().display(), certificate = %self.describe(), "serving certificate reloaded");
                true
            }
            Err(error) => {
                // Often a rotation caught half-written; the next change is tried again.
                tracing::warn!(%error, "new serving certificate is not usable; keeping the current one");
                self.refused = Some(pair);
                false
            }
        }
    }
}

/// The server running on its own task.
pub(crate) struct Serving {
    addr: SocketAddr,
    stop: Stop,
    /// One permit per connection that may be open.
    slots: Arc<Semaphore>,
    max_connections: usize,
    task: JoinHandle<()>,
}

/// Serves `connections` over TLS on the bound `listener`, at most
/// `max_connections` at a time: beyond that, new connections wait in the
/// listen backlog while the open ones keep being served.
pub(crate) fn serve(
    listener: TcpListener,
    addr: SocketAddr,
    certificate: &ServedCertificate,
    connections: Connections,
    max_connections: usize,
) -> Result<Serving, WebhookError> {
    let listen_failed = |source| WebhookError::Listen { addr, source };
    listener.set_nonblocking(true).map_err(listen_failed)?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(listen_failed)?;
    let stop = Stop::default();
    let slots = Arc::new(Semaphore::new(max_connections));
    let task = tokio::spawn(accept(
        listener,
        Arc::clone(&certificate.tls),
        Arc::new(connections),
        Arc::clone(&slots),
        stop.clone(),
    ));
    Ok(Serving {
        addr,
        stop,
        slots,
        max_connections,
        task,
    })
}

/// Accepts until `stop.graceful`, each connection on a task of its own.
/// Accepted sockets get `TCP_NODELAY`: a small response must not wait for
/// the client's delayed ACK (Nagle), which stalls some requests by ~40 ms.
async fn accept(
    listener: tokio::net::TcpListener,
    tls: TlsCell,
    connections: Arc<Connections>,
    slots: Arc<Semaphore>,
    stop: Stop,
) {
    loop {
        let permit = tokio::select! {
            biased;
            () = stop.graceful.cancelled() => return,
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let accepted = tokio::select! {
            biased;
            () = stop.graceful.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(error) => {
                // Out of file descriptors, most likely: let some close.
                tracing::warn!(%error, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        let acceptor = TlsAcceptor::from(Arc::clone(&tls.read()));
        tokio::spawn(Arc::clone(&connections).serve(tcp, acceptor, stop.clone(), permit));
    }
}

impl Serving {
    /// Takes every new certificate of its source until `ctx` is cancelled,
    /// calling `swapped` after each one served; an error when the server
    /// stops on its own before that.
    pub(crate) async fn until_cancelled(
        &mut self,
        certificate: &mut ServedCertificate,
        ctx: &Context,
        mut swapped: impl FnMut(&ServedCertificate),
    ) -> Result<(), WebhookError> {
        loop {
            tokio::select! {
                _ = ctx.cancelled() => return Ok(()),
                ended = &mut self.task => return Err(self.ended(ended)),
                next = certificate.source.next() => {
                    let _busy = ctx.busy("checking the serving certificate");
                    if certificate.offer(next) {
                        swapped(certificate);
                    }
                }
            }
        }
    }

    fn ended(&self, ended: Result<(), tokio::task::JoinError>) -> WebhookError {
        let addr = self.addr;
        match ended {
            Ok(()) => WebhookError::ServerEnded { addr },
            Err(source) => WebhookError::ServerTask { addr, source },
        }
    }

    /// Stops accepting (the listener closes) and lets in-flight requests
    /// finish for up to `timeout`; connections still open then are dropped.
    pub(crate) async fn drain(self, timeout: Duration) {
        self.stop.graceful.cancel();
        if let Err(error) = self.task.await {
            tracing::warn!(addr = %self.addr, %error, "webhook accept task failed");
        }
        let all = u32::try_from(self.max_connections).unwrap_or(u32::MAX);
        let closed = tokio::time::timeout(timeout, self.slots.acquire_many(all)).await;
        if closed.is_err() {
            let open = self.max_connections - self.slots.available_permits();
            tracing::warn!(addr = %self.addr, open, timeout_ms = timeout.as_millis(), "connections still open after the shutdown timeout; dropping them");
            self.stop.abort.cancel();
            let _ =
                tokio::time::timeout(Duration::from_secs(1), self.slots.acquire_many(all)).await;
        }
        tracing::info!(addr = %self.addr, "webhook server stopped");
    }
}
