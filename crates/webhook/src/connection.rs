//! One accepted connection: the TLS handshake within its timeout, then
//! HTTP/1.1 or HTTP/2 (as ALPN chose) under a watchdog that closes it when
//! the client is too slow to send a request or leaves it idle.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::service::HttpService;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use poolkeeper_supervisor::BoxError;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::activity::{ConnectionActivity, ConnectionLimits, Verdict, Watched};
use crate::admission::AdmissionService;
use crate::settings::WebhookSettings;

/// What every connection shares: the service, the protocol builders and
/// the limits.
#[derive(Debug)]
pub(crate) struct Connections {
    admission: Arc<AdmissionService>,
    limits: ConnectionLimits,
    tls_handshake_timeout: Duration,
    /// Either protocol, read from the first bytes (no ALPN).
    detect: auto::Builder<TokioExecutor>,
    http1: auto::Builder<TokioExecutor>,
    http2: auto::Builder<TokioExecutor>,
}

/// How the server asks its connections to stop: `graceful` lets in-flight
/// requests finish (HTTP/2: GOAWAY), `abort` drops the connection.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stop {
    pub(crate) graceful: CancellationToken,
    pub(crate) abort: CancellationToken,
}

impl Connections {
    pub(crate) fn new(settings: &WebhookSettings, admission: AdmissionService) -> Self {
        let builder = || {
            let mut builder = auto::Builder::new(TokioExecutor::new());
            // The watchdog enforces the header timeout, apart from the idle one.
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(None)
                .keep_alive(true);
            builder.http2().timer(TokioTimer::new());
            builder
        };
        Self {
            admission: Arc::new(admission),
            limits: ConnectionLimits {
                header_read_timeout: settings.header_read_timeout,
                idle_timeout: settings.idle_timeout,
            },
            tls_handshake_timeout: settings.tls_handshake_timeout,
            detect: builder(),
            http1: builder().http1_only(),
            http2: builder().http2_only(),
        }
    }

    /// Serves `tcp` until the client closes it, the watchdog does, or
    /// `stop` says so; `permit` is its place under `maxConnections`.
    pub(crate) async fn serve(
        self: Arc<Self>,
        tcp: TcpStream,
        acceptor: TlsAcceptor,
        stop: Stop,
        permit: OwnedSemaphorePermit,
    ) {
        let _permit = permit;
        let handshake = tokio::time::timeout(self.tls_handshake_timeout, acceptor.accept(tcp));
        let tls = tokio::select! {
            biased;
            () = stop.graceful.cancelled() => return,
            handshake = handshake => match handshake {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    tracing::debug!(%error, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(timeout_ms = self.tls_handshake_timeout.as_millis(), "TLS handshake timed out");
                    return;
                }
            },
        };
        let http2 = match tls.get_ref().1.alpn_protocol() {
            Some(b"h2") => Some(true),
            Some(_) => Some(false),
            None => None,
        };
        let builder = match http2 {
            Some(true) => &self.http2,
            Some(false) => &self.http1,
            None => &self.detect,
        };
        let activity = Arc::new(ConnectionActivity::new());
        let io = TokioIo::new(Watched::new(tls, Arc::clone(&activity)));
        let service = self.admission.for_connection(Arc::clone(&activity));
        let connection = builder.serve_connection(io, service);
        let closing = Closing {
            activity: &activity,
            limits: self.limits,
            hard_close_when_slow: http2 != Some(true),
        };
        closing.watch(connection, &stop).await;
    }
}

/// The watchdog of one connection.
struct Closing<'a> {
    activity: &'a ConnectionActivity,
    limits: ConnectionLimits,
    /// HTTP/1.1: a request that arrives too slowly is cut off at once. HTTP/2
    /// closes with GOAWAY, as bytes on an idle connection may be a PING.
    hard_close_when_slow: bool,
}

/// The connection future of either protocol, with its graceful close.
trait GracefulConnection: Future {
    fn close_gracefully(self: Pin<&mut Self>);
}

impl<I, S, B> GracefulConnection for auto::Connection<'_, I, S, TokioExecutor>
where
    S: HttpService<Incoming, ResBody = B>,
    S::Error: Into<BoxError>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
    B: Body + 'static,
    B::Error: Into<BoxError>,
    TokioExecutor: auto::HttpServerConnExec<S::Future, B>,
    Self: Future,
{
    fn close_gracefully(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl Closing<'_> {
    async fn watch<C, E>(&self, connection: C, stop: &Stop)
    where
        C: GracefulConnection<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        let mut connection = std::pin::pin!(connection);
        // Once closing gracefully: when to give up and drop the connection.
        let mut closing_until: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let deadline = match (closing_until, self.activity.verdict(now, self.limits)) {
                (Some(until), _) if now >= until => return,
                (Some(until), _) => until,
                (None, Verdict::WaitUntil(at)) => at,
                (None, Verdict::TooSlow) if self.hard_close_when_slow => {
                    tracing::debug!(
                        timeout_ms = self.limits.header_read_timeout.as_millis(),
                        "request headers too slow; closing the connection"
                    );
                    return;
                }
                (None, verdict) => {
                    tracing::debug!(?verdict, "closing the connection");
                    connection.as_mut().close_gracefully();
                    let until = now + self.limits.header_read_timeout;
                    closing_until = Some(until);
                    until
                }
            };
            tokio::select! {
                ended = connection.as_mut() => {
                    if let Err(error) = ended {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                    return;
                }
                () = stop.abort.cancelled() => return,
                () = stop.graceful.cancelled(), if closing_until.is_none() => {
                    connection.as_mut().close_gracefully();
                    // Until the server's drain ends it (`abort`).
                    closing_until = Some(Instant::now() + Duration::from_secs(365 * 24 * 3600));
                }
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}
