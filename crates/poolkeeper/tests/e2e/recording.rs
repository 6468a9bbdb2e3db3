//! A Kubernetes client that records what passes through it: the path and
//! `Accept` header of every request, and every byte of every response body
//! (lists, watch streams, patch answers) as the process receives it.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use hyper::body::{Body as HttpBody, Bytes, Frame};
use kube::Client;
use kube::client::Body;

/// What a [`recording`] client saw.
#[derive(Clone, Default)]
pub struct Recorded {
    bytes: Arc<Mutex<Vec<u8>>>,
    requests: Arc<Mutex<Vec<(String, String)>>>,
}

impl Recorded {
    /// Whether `needle` occurs in the response bytes received so far.
    pub fn received(&self, needle: &str) -> bool {
        let bytes = self.bytes.lock().unwrap();
        bytes
            .windows(needle.len())
            .any(|window| window == needle.as_bytes())
    }

    pub fn received_bytes(&self) -> usize {
        self.bytes.lock().unwrap().len()
    }

    /// `(path, Accept header)` of every request whose path starts with
    /// `prefix`.
    pub fn requests_to(&self, prefix: &str) -> Vec<(String, String)> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(path, _)| path.starts_with(prefix))
            .cloned()
            .collect()
    }
}

/// `inner` with every request and response recorded.
pub fn recording(inner: Client, namespace: &str) -> (Client, Recorded) {
    let recorded = Recorded::default();
    let service = Recording {
        inner,
        recorded: recorded.clone(),
    };
    (Client::new(service, namespace), recorded)
}

#[derive(Clone)]
struct Recording {
    inner: Client,
    recorded: Recorded,
}

impl tower_service::Service<http::Request<Body>> for Recording {
    type Response = http::Response<Tee>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let accept = request
            .headers()
            .get(http::header::ACCEPT)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        self.recorded
            .requests
            .lock()
            .unwrap()
            .push((request.uri().path().to_owned(), accept));
        let inner = self.inner.clone();
        let sink = Arc::clone(&self.recorded.bytes);
        Box::pin(async move {
            let response = inner.send(request).await?;
            Ok(response.map(|body| Tee { body, sink }))
        })
    }
}

/// A response body that copies each data frame into `sink` as it passes.
pub struct Tee {
    body: Body,
    sink: Arc<Mutex<Vec<u8>>>,
}

impl HttpBody for Tee {
    type Data = Bytes;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.sink.lock().unwrap().extend_from_slice(data);
        }
        polled
    }
}
