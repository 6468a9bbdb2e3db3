//! Where the serving certificate comes from: files in `certDir`, polled
//! every `certReloadInterval`, or a Secret, watched by name (a field
//! selector, so that RBAC's `resourceNames` holds) and served as soon as the
//! API server reports a change, without waiting for a mounted volume.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::watcher;
use kube::{Api, Client};
use poolkeeper_kube::watch::retrying;
use poolkeeper_pki::{CA_CERT, TLS_CERT, TLS_KEY};
use poolkeeper_supervisor::error_chain;

use crate::tls::{self, PemPair};

type Pairs = Pin<Box<dyn Stream<Item = Result<PemPair, String>> + Send>>;

/// The source of the serving certificate.
pub(crate) enum CertificateSource {
    Files {
        dir: PathBuf,
        interval: Duration,
        /// The first read happens at once, the others after `interval`.
        read_once: bool,
    },
    Secret {
        /// `Secret <namespace>/<name>`, for messages.
        origin: PathBuf,
        pairs: Pairs,
    },
}

impl CertificateSource {
    pub(crate) fn files(dir: PathBuf, interval: Duration) -> Self {
        CertificateSource::Files {
            dir,
            interval,
            read_once: false,
        }
    }

    pub(crate) fn secret(client: Client, namespace: &str, name: &str) -> Self {
        let api = Api::<Secret>::namespaced(client.clone(), namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let pairs = retrying(client, move || watcher(api.clone(), config.clone())).filter_map(
            |event| async move {
                match event {
                    Ok(watcher::Event::Apply(secret) | watcher::Event::InitApply(secret)) => {
                        Some(pair_of(&secret))
                    }
                    // A deleted Secret: the certificate served stays until a new one comes.
                    Ok(_) => None,
                    Err(error) => Some(Err(format!(
                        "watching the Secret failed: {}",
                        error_chain(&error)
                    ))),
                }
            },
        );
        CertificateSource::Secret {
            origin: PathBuf::from(format!("Secret {namespace}/{name}")),
            pairs: Box::pin(pairs),
        }
    }

    /// Where the certificate is read from, for messages and errors.
    pub(crate) fn origin(&self) -> &std::path::Path {
        match self {
            CertificateSource::Files { dir, .. } => dir,
            CertificateSource::Secret { origin, .. } => origin,
        }
    }

    /// The next pair to consider: the files, at once the first time and
    /// then every interval; the Secret, whenever it changes.
    pub(crate) async fn next(&mut self) -> Result<PemPair, String> {
        match self {
            CertificateSource::Files {
                dir,
                interval,
                read_once,
            } => {
                if *read_once {
                    tokio::time::sleep(*interval).await;
                }
                *read_once = true;
                tls::read_pair(dir).await.map_err(|e| e.to_string())
            }
            CertificateSource::Secret { pairs, .. } => match pairs.next().await {
                Some(pair) => pair,
                None => futures::future::pending().await,
            },
        }
    }
}

fn pair_of(secret: &Secret) -> Result<PemPair, String> {
    let empty = BTreeMap::new();
    let data = secret.data.as_ref().unwrap_or(&empty);
    let get = |key: &str| data.get(key).map(|value| value.0.clone());
    match (get(TLS_CERT), get(TLS_KEY)) {
        (Some(cert), Some(key)) => Ok(PemPair {
            cert,
            key,
            ca: get(CA_CERT),
        }),
        _ => Err(format!("the Secret has no {TLS_CERT} and {TLS_KEY} yet")),
    }
}
