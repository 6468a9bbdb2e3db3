//! A loopback TCP balancer standing in for a Service and kube-proxy: it
//! accepts on `127.0.0.1:PORT` and forwards each connection to the next
//! backend whose `/readyz` answered 200 at its last poll, the way endpoints
//! follow readiness (and, like kube-proxy, without trying another backend
//! when the chosen one refuses). It copies bytes both ways and never looks inside
//! (the TLS session runs end to end between the apiserver and a replica).
//!
//! Everything is bounded: a probe gives up after [`PROBE_TIMEOUT`], a
//! backend connect after [`CONNECT_TIMEOUT`], at most [`MAX_CONNECTIONS`]
//! connections are forwarded at once, and dropping the [`Balancer`] stops
//! its listener, its probes and every connection it forwards.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::harness::try_http_get;

/// How often each backend's `/readyz` is polled: well below the replicas'
/// `shutdown.drainDelay`, so a draining replica leaves before it stops.
pub const POLL_INTERVAL: Duration = Duration::from_millis(150);
/// A probe that has not answered by then counts as not ready.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest wait for a backend to accept a forwarded connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Connections forwarded at the same time; more are closed at once.
pub const MAX_CONNECTIONS: usize = 256;

/// One replica as the balancer sees it: where its readiness is probed and
/// where its webhook server listens.
#[derive(Clone, Copy, Debug)]
pub struct Backend {
    pub admin: SocketAddr,
    pub webhook: SocketAddr,
}

/// A change of a backend's readiness as the balancer's probe saw it.
#[derive(Clone, Copy, Debug)]
pub struct Transition {
    pub at: Instant,
    pub backend: usize,
    pub ready: bool,
}

struct Endpoint {
    backend: Backend,
    ready: AtomicBool,
    /// Connections sent to this backend so far.
    forwarded: AtomicU64,
}

struct Shared {
    endpoints: Vec<Endpoint>,
    next: AtomicUsize,
    /// Connections closed at once because no backend was ready.
    unroutable: AtomicU64,
    /// Connections closed at once because the chosen backend did not accept.
    refused: AtomicU64,
    transitions: parking_lot::Mutex<Vec<Transition>>,
}

/// The running balancer; dropping it stops everything it runs.
pub struct Balancer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _tasks: JoinSet<()>,
}

impl Balancer {
    /// Binds `127.0.0.1:0`, starts probing every backend and forwarding.
    /// No backend is ready before its first successful probe.
    pub async fn start(backends: &[Backend]) -> Self {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("the balancer binds a loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let shared = Arc::new(Shared {
            endpoints: backends
                .iter()
                .map(|backend| Endpoint {
                    backend: *backend,
                    ready: AtomicBool::new(false),
                    forwarded: AtomicU64::new(0),
                })
                .collect(),
            next: AtomicUsize::new(0),
            unroutable: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            transitions: parking_lot::Mutex::new(Vec::new()),
        });
        let mut tasks = JoinSet::new();
        for index in 0..backends.len() {
            tasks.spawn(probe(shared.clone(), index));
        }
        tasks.spawn(accept(listener, shared.clone()));
        Self {
            addr,
            shared,
            _tasks: tasks,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Whether backend `index` passed its last probe.
    pub fn is_ready(&self, index: usize) -> bool {
        self.shared.endpoints[index].ready.load(Ordering::SeqCst)
    }

    /// Waits until the balancer's view of backend `index` is `ready`.
    pub async fn wait_backend(&self, index: usize, ready: bool, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.is_ready(index) != ready {
            assert!(
                tokio::time::Instant::now() < deadline,
                "backend {index} not {} in the balancer within {timeout:?}",
                if ready { "ready" } else { "unready" }
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Connections sent to backend `index` so far (refused ones included).
    pub fn forwarded(&self, index: usize) -> u64 {
        self.shared.endpoints[index]
            .forwarded
            .load(Ordering::SeqCst)
    }

    /// Connections that found no ready backend, or more than
    /// [`MAX_CONNECTIONS`] open.
    pub fn unroutable(&self) -> u64 {
        self.shared.unroutable.load(Ordering::SeqCst)
    }

    /// Connections whose backend refused them (or did not accept within
    /// [`CONNECT_TIMEOUT`]).
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::SeqCst)
    }

    /// Every readiness change seen so far, in order.
    pub fn transitions(&self) -> Vec<Transition> {
        self.shared.transitions.lock().clone()
    }

    /// The readiness changes as `+SECONDS backend ready|unready`, counted
    /// from `since`.
    pub fn history(&self, since: Instant) -> String {
        self.transitions()
            .iter()
            .map(|t| {
                let at = t.at.saturating_duration_since(since).as_secs_f64();
                let state = if t.ready { "ready" } else { "unready" };
                format!("+{at:.2}s backend {} {state}", t.backend)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Polls one backend's `/readyz` every [`POLL_INTERVAL`] for as long as the
/// balancer lives.
async fn probe(shared: Arc<Shared>, index: usize) {
    let endpoint = &shared.endpoints[index];
    let mut ticker = tokio::time::interval(POLL_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let ready = matches!(
            try_http_get(endpoint.backend.admin, "/readyz", PROBE_TIMEOUT).await,
            Ok((200, _))
        );
        if endpoint.ready.swap(ready, Ordering::SeqCst) != ready {
            shared.transitions.lock().push(Transition {
                at: Instant::now(),
                backend: index,
                ready,
            });
        }
    }
}

/// Accepts connections and forwards each on its own task; the tasks end
/// with this one (their set is dropped with it).
async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((inbound, _)) = accepted else {
                    // Out of descriptors, say: let some connections end first.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    shared.unroutable.fetch_add(1, Ordering::SeqCst);
                    continue;
                };
                let shared = shared.clone();
                connections.spawn(async move {
                    forward(inbound, &shared).await;
                    drop(slot);
                });
            }
            // Reaps finished connections so the set stays small.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Connects `inbound` to the next ready backend and copies bytes both ways
/// until both sides are done. Like kube-proxy, it picks one endpoint and
/// does not try another when that one refuses: the client sees the failure.
async fn forward(mut inbound: TcpStream, shared: &Shared) {
    let count = shared.endpoints.len();
    let start = shared.next.fetch_add(1, Ordering::SeqCst);
    let Some(endpoint) = (0..count)
        .map(|offset| &shared.endpoints[(start + offset) % count])
        .find(|endpoint| endpoint.ready.load(Ordering::SeqCst))
    else {
        shared.unroutable.fetch_add(1, Ordering::SeqCst);
        return;
    };
    endpoint.forwarded.fetch_add(1, Ordering::SeqCst);
    let connect = TcpStream::connect(endpoint.backend.webhook);
    let Ok(Ok(mut outbound)) = tokio::time::timeout(CONNECT_TIMEOUT, connect).await else {
        shared.refused.fetch_add(1, Ordering::SeqCst);
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
}
