//! Hostile clients against the real server on 127.0.0.1: oversized bodies
//! over HTTP/1.1 and HTTP/2, slow handshakes, slowloris headers, slow
//! bodies, idle keep-alives, a flood of connections, and HTTP/2 streams whose
//! bodies pause or stop beside others on their connection. Meanwhile a
//! well-behaved keep-alive client keeps being answered: its p99 during each
//! attack is printed beside its p99 without one and must stay under
//! max(10 x idle p99, 50 ms). Every attack is bounded in connections and
//! time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use poolkeeper_bus::Bus;
use poolkeeper_config::Config;
use poolkeeper_index::Index;
use poolkeeper_placement::PolicyCache;
use poolkeeper_supervisor::testing::{Running, spawn};
use poolkeeper_webhook::{CERT_FILE, KEY_FILE, WebhookServer, WebhookSettings};
use rustls::pki_types::ServerName;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

mod common;

use common::Ca;

const PATIENCE: Duration = Duration::from_secs(20);
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(300);
const HEADER_READ_TIMEOUT: Duration = Duration::from_millis(300);
const BODY_READ_TIMEOUT: Duration = Duration::from_millis(300);
const IDLE_TIMEOUT: Duration = Duration::from_millis(800);
const MAX_CONNECTIONS: usize = 32;
const MAX_BODY_BYTES: usize = 64 * 1024;
/// Requests of the well-behaved client per measurement.
const PROBES: usize = 200;

struct Served {
    addr: SocketAddr,
    ca: Ca,
    running: Running,
    _dir: tempfile::TempDir,
}

impl Served {
    async fn start() -> Self {
        let ca = Ca::new();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, _) = ca.leaf("hostile");
        std::fs::write(dir.path().join(KEY_FILE), key).unwrap();
        std::fs::write(dir.path().join(CERT_FILE), cert).unwrap();
        let settings = WebhookSettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            cert_dir: dir.path().to_owned(),
            max_body_bytes: MAX_BODY_BYTES,
            tls_handshake_timeout: TLS_HANDSHAKE_TIMEOUT,
            header_read_timeout: HEADER_READ_TIMEOUT,
            body_read_timeout: BODY_READ_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            ..WebhookSettings::from(&Config::default())
        };
        let bus = Bus::default();
        bus.start();
        let mut server = WebhookServer::new(
            settings,
            &bus,
            Arc::new(Index::new("pool")),
            PolicyCache::from(&Config::default().placement),
        );
        let addr = server.bind().unwrap();
        let mut running = spawn(Box::new(server));
        running.wait_ready(PATIENCE).await;
        Self {
            addr,
            ca,
            running,
            _dir: dir,
        }
    }

    fn connector(&self, alpn: &[&[u8]]) -> TlsConnector {
        self.ca
            .client(&[&rustls::version::TLS13, &rustls::version::TLS12], alpn)
    }

    async fn tls(&self, alpn: &[&[u8]]) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(self.addr).await.unwrap();
        // As the API server's Go client does: no Nagle delay on the probes.
        tcp.set_nodelay(true).unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        self.connector(alpn).connect(name, tcp).await.unwrap()
    }

    /// An HTTP/2 connection, driven by a task of its own.
    async fn h2<B>(&self) -> hyper::client::conn::http2::SendRequest<B>
    where
        B: hyper::body::Body + Send + Unpin + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let tls = self.tls(&[b"h2"]).await;
        let (sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .unwrap();
        tokio::spawn(connection);
        sender
    }

    async fn stop(self) {
        let result = tokio::time::timeout(PATIENCE, self.running.stop())
            .await
            .unwrap();
        assert!(result.is_ok(), "{result:?}");
    }
}

fn review_body() -> Bytes {
    Bytes::from(
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "probe",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "namespace": "default",
                "operation": "CREATE",
                "object": {"metadata": {"name": "p"},
                           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
            }
        }))
        .unwrap(),
    )
}

fn post(body: impl Into<Bytes>) -> hyper::Request<Full<Bytes>> {
    hyper::Request::post("https://localhost/validate-pods")
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .unwrap()
}

/// A well-behaved client: one HTTP/2 keep-alive connection, as the API
/// server keeps.
struct Client {
    sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
}

impl Client {
    async fn connect(served: &Served) -> Self {
        Self {
            sender: served.h2().await,
        }
    }

    /// p99 of `PROBES` sequential admissions, each answered 200.
    async fn p99(&mut self) -> Duration {
        let mut latencies = Vec::with_capacity(PROBES);
        for _ in 0..PROBES {
            let started = Instant::now();
            let response = self.sender.send_request(post(review_body())).await.unwrap();
            assert_eq!(response.status(), 200);
            response.into_body().collect().await.unwrap();
            latencies.push(started.elapsed());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        latencies.sort_unstable();
        latencies[PROBES * 99 / 100]
    }
}

/// The well-behaved client's p99 while `attack` runs, against the bound.
async fn during<F: Future<Output = ()>>(
    name: &str,
    client: &mut Client,
    idle: Duration,
    attack: F,
) {
    let (measured, ()) =
        tokio::time::timeout(PATIENCE, async { tokio::join!(client.p99(), attack) })
            .await
            .unwrap();
    let bound = (idle * 10).max(Duration::from_millis(50));
    println!("{name}: well-behaved p99 {measured:?} (idle {idle:?}, bound {bound:?})");
    assert!(measured < bound, "{name}: p99 {measured:?} over {bound:?}");
}

/// Reads until the server closes `stream`; how long that took.
async fn closed_after<S: AsyncReadExt + Unpin>(stream: &mut S) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(PATIENCE, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
            Err(_) => panic!("the server never closed the connection"),
        }
    }
}

#[tokio::test]
async fn oversized_bodies_get_413_over_http1_and_http2() {
    let served = Served::start().await;
    let big = Bytes::from(vec![b' '; 5 * 1024 * 1024]);

    // HTTP/1.1: the declared length is refused before any of the body is
    // read, and the connection closed (its unread body cannot be skipped).
    // Only the head is sent: a client still writing the body when the
    // server closes sees a broken pipe before it reads the answer.
    let mut tls = served.tls(&[b"http/1.1"]).await;
    let head = format!(
        "POST /validate-pods HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        big.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, tls.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 413"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");

    let mut h2 = Client::connect(&served).await;
    let response = h2.sender.send_request(post(big)).await.unwrap();
    assert_eq!(response.status(), 413);
    let text = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(text, "request body is larger than 65536 bytes");
    // The connection still serves the next request.
    let response = h2.sender.send_request(post(review_body())).await.unwrap();
    assert_eq!(response.status(), 200);

    // Without a declared length, the limit applies while reading.
    let chunks = futures::stream::iter((0..100).map(|_| {
        Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(Bytes::from(vec![
            b' ';
            16 * 1024
        ])))
    }));
    let request = hyper::Request::post("https://localhost/validate-pods")
        .body(http_body_util::StreamBody::new(chunks))
        .unwrap();
    let mut streaming = served.h2().await;
    let response = streaming.send_request(request).await.unwrap();
    assert_eq!(response.status(), 413);
    served.stop().await;
}

#[tokio::test]
async fn slow_clients_are_timed_out() {
    let served = Served::start().await;
    let mut client = Client::connect(&served).await;
    let idle = client.p99().await;

    // A TCP connection that never starts its handshake.
    let mut silent = TcpStream::connect(served.addr).await.unwrap();
    let took = closed_after(&mut silent).await;
    println!("silent TLS handshake closed after {took:?}");
    assert!(took >= TLS_HANDSHAKE_TIMEOUT - Duration::from_millis(50) && took < PATIENCE);

    // Slowloris: headers one byte every 50 ms, never finished.
    let slowloris = async {
        let mut tls = served.tls(&[b"http/1.1"]).await;
        let started = Instant::now();
        let header = b"POST /validate-pods HTTP/1.1\r\nhost: localhost\r\nx-slow: ";
        for byte in header.iter().chain([b'a'; 200].iter()) {
            if tls.write_all(&[*byte]).await.is_err() || tls.flush().await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let took = started.elapsed().max(closed_after(&mut tls).await);
        println!("slowloris cut off after {took:?}");
        assert!(took < HEADER_READ_TIMEOUT * 4, "{took:?}");
    };
    during("slowloris", &mut client, idle, slowloris).await;

    // A body that never completes: 408.
    let mut tls = served.tls(&[b"http/1.1"]).await;
    tls.write_all(b"POST /validate-pods HTTP/1.1\r\nhost: localhost\r\ncontent-length: 1000\r\n\r\n{\"apiVersion\"")
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(PATIENCE, tls.read_to_string(&mut answer))
        .await
        .unwrap()
        .ok();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");

    // An idle keep-alive connection is closed after the idle timeout.
    let mut idle_connection = served.tls(&[b"http/1.1"]).await;
    let took = closed_after(&mut idle_connection).await;
    println!("idle keep-alive closed after {took:?}");
    assert!(took >= IDLE_TIMEOUT - Duration::from_millis(50), "{took:?}");
    served.stop().await;
}

#[tokio::test]
async fn a_flood_of_connections_is_bounded() {
    let served = Served::start().await;
    let mut client = Client::connect(&served).await;
    let idle = client.p99().await;

    // Four times the limit, none of which ever sends a byte.
    let flood = async {
        let mut open = Vec::new();
        for _ in 0..MAX_CONNECTIONS * 4 {
            open.push(TcpStream::connect(served.addr).await.unwrap());
        }
        // A new well-behaved connection waits for a free slot, then works.
        let started = Instant::now();
        let mut late = Client::connect(&served).await;
        let waited = started.elapsed();
        let response = late.sender.send_request(post(review_body())).await.unwrap();
        assert_eq!(response.status(), 200);
        println!("new connection during the flood served after {waited:?}");
        assert!(waited < PATIENCE);
        tokio::time::sleep(TLS_HANDSHAKE_TIMEOUT).await;
        drop(open);
    };
    during("connection flood", &mut client, idle, flood).await;
    served.stop().await;
}

/// A request body sent as a stream of frames.
type StreamedBody = http_body_util::StreamBody<
    futures::stream::BoxStream<
        'static,
        Result<hyper::body::Frame<Bytes>, std::convert::Infallible>,
    >,
>;

/// An HTTP/2 stream whose body arrives in two parts.
async fn send_in_two_parts(
    sender: &mut hyper::client::conn::http2::SendRequest<StreamedBody>,
    pause: Duration,
    second_part: bool,
) -> (u16, Bytes) {
    let body = review_body();
    let (first, second) = (body.slice(..body.len() / 2), body.slice(body.len() / 2..));
    let parts = futures::stream::unfold(0, move |part| {
        let (first, second) = (first.clone(), second.clone());
        async move {
            match part {
                0 => Some((Ok(hyper::body::Frame::data(first)), 1)),
                1 => {
                    tokio::time::sleep(pause).await;
                    if second_part {
                        Some((Ok(hyper::body::Frame::data(second)), 2))
                    } else {
                        // Stay open past the server's body timeout.
                        tokio::time::sleep(PATIENCE).await;
                        None
                    }
                }
                _ => None,
            }
        }
    });
    let request = hyper::Request::post("https://localhost/validate-pods")
        .header("content-type", "application/json")
        .body(http_body_util::StreamBody::new(futures::StreamExt::boxed(
            parts,
        )))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    (
        status,
        response.into_body().collect().await.unwrap().to_bytes(),
    )
}

/// A stream whose body is still arriving waits on its own: the other
/// streams of its connection are answered meanwhile, it is answered once
/// its body is in, and one whose body stops is answered 408.
#[tokio::test]
async fn an_http2_stream_waiting_for_its_body_holds_back_no_other() {
    let served = Served::start().await;
    let sender: hyper::client::conn::http2::SendRequest<StreamedBody> = served.h2().await;
    let pause = BODY_READ_TIMEOUT / 2;

    let mut waiting = sender.clone();
    let slow = tokio::spawn(async move { send_in_two_parts(&mut waiting, pause, true).await });
    let mut stopped = sender.clone();
    let stalled = tokio::spawn(async move { send_in_two_parts(&mut stopped, pause, false).await });

    // Answered on the same connection while both wait for their bodies.
    let mut quick = sender.clone();
    let full = hyper::Request::post("https://localhost/validate-pods")
        .header("content-type", "application/json")
        .body(http_body_util::StreamBody::new(futures::StreamExt::boxed(
            futures::stream::iter([Ok(hyper::body::Frame::data(review_body()))]),
        )))
        .unwrap();
    let started = Instant::now();
    let response = quick.send_request(full).await.unwrap();
    let answered_after = started.elapsed();
    assert_eq!(response.status(), 200);
    assert!(
        answered_after < pause,
        "answered after {answered_after:?}, behind a stream waiting {pause:?} for its body"
    );

    let (status, answer) = tokio::time::timeout(PATIENCE, slow).await.unwrap().unwrap();
    assert_eq!(status, 200, "{answer:?}");
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["response"]["uid"], "probe");
    assert_eq!(answer["response"]["allowed"], true);

    let (status, answer) = tokio::time::timeout(PATIENCE, stalled)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, 408, "{answer:?}");
    served.stop().await;
}
