//! The HTTPS serving loop, in the order it runs: wait for a certificate,
//! accept on the bound listener, reload the certificate until cancelled,
//! drain.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use poolkeeper_supervisor::Context;
use rustls::ServerConfig;
use tokio::runtime::Handle;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::connection::{Connections, Stop};
use crate::error::WebhookError;
use crate::outbox::Outbox;
use crate::settings::WebhookRuntime;
use crate::tls::{self, PemPair};

/// The TLS configuration new connections get; swapped on a rotation.
type TlsCell = Arc<RwLock<Arc<ServerConfig>>>;

/// The certificate being served and what the reload loop compares against.
pub(crate) struct ServedCertificate {
    dir: PathBuf,
    tls: TlsCell,
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
                    tls: Arc::new(RwLock::new(config)),
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
                *self.tls.write() = config;
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
    stop: Stop,
    /// One permit per connection that may be open.
    slots: Arc<Semaphore>,
    max_connections: usize,
    task: JoinHandle<()>,
    /// The thread the task runs on ([`WebhookRuntime::Dedicated`]); it ends
    /// when this is dropped, after the drain.
    _thread: Option<OwnThread>,
}

/// A single-threaded runtime driven by a thread of its own until dropped.
struct OwnThread {
    handle: Handle,
    done: CancellationToken,
    /// Batching while the thread runs, and the task handing the batches
    /// to the bus.
    outbox: Option<(Arc<Outbox>, JoinHandle<()>)>,
}

impl OwnThread {
    fn start() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let done = CancellationToken::new();
        let until = done.clone();
        // Dropping the runtime on its own thread drops the connections
        // still open there.
        std::thread::Builder::new()
            .name("webhook".to_owned())
            .spawn(move || runtime.block_on(until.cancelled()))?;
        Ok(Self {
            handle,
            done,
            outbox: None,
        })
    }

    /// Batches the decisions of the thread's connections until dropped.
    /// The batches are handed to the bus from the runtime this is called
    /// on, the one the bus's subscribers run on: from there publishing
    /// wakes them without waking a thread, and the thread is woken once per
    /// batch.
    fn batch(&mut self, outbox: Arc<Outbox>) {
        let flushing = tokio::spawn(Arc::clone(&outbox).batch());
        self.outbox = Some((outbox, flushing));
    }
}

impl Drop for OwnThread {
    fn drop(&mut self) {
        self.done.cancel();
        // What waits for a flush on the ending thread goes out now.
        if let Some((outbox, flushing)) = &self.outbox {
            flushing.abort();
            outbox.stop_batching();
        }
    }
}

/// Serves `connections` over TLS on the bound `listener`, at most
/// `max_connections` at a time: beyond that, new connections wait in the
/// listen backlog while the open ones keep being served. With
/// [`WebhookRuntime::Dedicated`] the listener, the connections and their
/// requests live on a thread of their own.
pub(crate) fn serve(
    listener: TcpListener,
    addr: SocketAddr,
    certificate: &ServedCertificate,
    connections: Connections,
    (max_connections, runtime): (usize, WebhookRuntime),
) -> Result<Serving, WebhookError> {
    let listen_failed = |source| WebhookError::Listen { addr, source };
    listener.set_nonblocking(true).map_err(listen_failed)?;
    let thread = match runtime {
        WebhookRuntime::Dedicated => {
            let mut own = OwnThread::start().map_err(|source| WebhookError::Thread { source })?;
            own.batch(connections.outbox());
            Some(own)
        }
        WebhookRuntime::Shared => None,
    };
    // The listener registers with the runtime that will poll it.
    let handle = thread
        .as_ref()
        .map_or_else(Handle::current, |own| own.handle.clone());
    let entered = handle.enter();
    let listener = tokio::net::TcpListener::from_std(listener).map_err(listen_failed)?;
    drop(entered);
    let stop = Stop::default();
    let slots = Arc::new(Semaphore::new(max_connections));
    let task = handle.spawn(accept(
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
        _thread: thread,
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
            tracing::warn!(addr = %self.addr, open, ?timeout, "connections still open after the shutdown timeout; dropping them");
            self.stop.abort.cancel();
            let _ =
                tokio::time::timeout(Duration::from_secs(1), self.slots.acquire_many(all)).await;
        }
        tracing::info!(addr = %self.addr, "webhook server stopped");
    }
}
