//! A TCP proxy in front of the apiserver that a test can cut and restore: the clients that go
//! through it lose every connection and are refused new ones (as if the apiserver were gone
//! for them), while the test keeps writing through the apiserver directly.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kube::Client;
use kube::config::Kubeconfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

use crate::TestEnvError;

/// Binding the port again after a cut: attempts, and the pause between them.
const REBIND_ATTEMPTS: usize = 50;
const REBIND_PAUSE: Duration = Duration::from_millis(20);

/// A proxy on `127.0.0.1` forwarding to the apiserver; see [`crate::TestEnv::proxy`].
/// Dropping it drops every connection through it.
pub struct ApiProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    kubeconfig: Kubeconfig,
    client: Client,
    accepted: Arc<AtomicUsize>,
    accepting: Mutex<Option<Accepting>>,
}

/// The accept loop while the proxy is open.
struct Accepting {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for ApiProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .field("severed", &self.is_severed())
            .finish_non_exhaustive()
    }
}

impl ApiProxy {
    /// Listens on a free port of 127.0.0.1; `kubeconfig` (the admin one) is pointed at it.
    pub(crate) async fn start(
        upstream: SocketAddr,
        mut kubeconfig: Kubeconfig,
    ) -> Result<Self, TestEnvError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|e| TestEnvError::io("binding the apiserver proxy", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| TestEnvError::io("the apiserver proxy's address", e))?;
        // The apiserver's certificate names 127.0.0.1, whatever the port.
        for cluster in &mut kubeconfig.clusters {
            if let Some(cluster) = cluster.cluster.as_mut() {
                cluster.server = Some(format!("https://{addr}"));
            }
        }
        let client = crate::kubeconfig::client_for(&kubeconfig).await?;
        let accepted = Arc::new(AtomicUsize::new(0));
        let accepting = spawn_accepting(listener, upstream, Arc::clone(&accepted));
        Ok(Self {
            addr,
            upstream,
            kubeconfig,
            client,
            accepted,
            accepting: Mutex::new(Some(accepting)),
        })
    }

    /// A client (admin identity) whose requests go through the proxy.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The admin kubeconfig pointed at the proxy.
    pub fn kubeconfig(&self) -> Kubeconfig {
        self.kubeconfig.clone()
    }

    /// `https://127.0.0.1:PORT` of the proxy.
    pub fn server_url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Connections accepted so far (a reconnecting client shows up here).
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }

    pub fn is_severed(&self) -> bool {
        self.accepting
            .lock()
            .map(|accepting| accepting.is_none())
            .unwrap_or(true)
    }

    /// Closes the port (new connections are refused) and drops every open connection; returns
    /// once both are done. Does nothing when already severed.
    pub async fn sever(&self) {
        let accepting = self.accepting.lock().ok().and_then(|mut a| a.take());
        if let Some(Accepting { stop, task }) = accepting {
            let _ = stop.send(());
            let _ = task.await;
        }
    }

    /// Listens on the same port again. Does nothing when not severed.
    pub async fn restore(&self) -> Result<(), TestEnvError> {
        if !self.is_severed() {
            return Ok(());
        }
        let mut attempt = 1;
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(error) if attempt < REBIND_ATTEMPTS => {
                    tracing::debug!(%error, attempt, "the proxy port is not free yet");
                    attempt += 1;
                    tokio::time::sleep(REBIND_PAUSE).await;
                }
                Err(error) => {
                    return Err(TestEnvError::io(
                        format!("binding the apiserver proxy to {} again", self.addr),
                        error,
                    ));
                }
            }
        };
        let accepting = spawn_accepting(listener, self.upstream, Arc::clone(&self.accepted));
        if let Ok(mut slot) = self.accepting.lock() {
            *slot = Some(accepting);
        }
        Ok(())
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        // Aborting the loop drops its JoinSet, which aborts every connection task.
        if let Some(accepting) = self.accepting.lock().ok().and_then(|mut a| a.take()) {
            accepting.task.abort();
        }
    }
}

fn spawn_accepting(
    listener: TcpListener,
    upstream: SocketAddr,
    accepted: Arc<AtomicUsize>,
) -> Accepting {
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(accept_loop(listener, upstream, stopped, accepted));
    Accepting { stop, task }
}

/// Forwards every accepted connection until `stop` fires (or its sender is gone), then closes
/// the listener and every connection.
async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mut stop: oneshot::Receiver<()>,
    accepted: Arc<AtomicUsize>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            next = listener.accept() => match next {
                Ok((inbound, _)) => {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    connections.spawn(forward(inbound, upstream));
                }
                // Out of file descriptors and the like: try again shortly.
                Err(_) => tokio::time::sleep(REBIND_PAUSE).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.shutdown().await;
}

async fn forward(mut inbound: TcpStream, upstream: SocketAddr) {
    let _ = inbound.set_nodelay(true);
    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
        let _ = outbound.set_nodelay(true);
        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
    }
}
