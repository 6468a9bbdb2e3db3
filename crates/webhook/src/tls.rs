//! The serving certificate: read from `tls.crt` / `tls.key` in the cert
//! directory (as cert-manager writes a `kubernetes.io/tls` Secret), turned
//! into a rustls configuration with the ring provider, TLS 1.2 and 1.3.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::WebhookError;

pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";

/// The PEM contents of one certificate/key pair, and the CAs beside it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct PemPair {
    pub(crate) cert: Vec<u8>,
    pub(crate) key: Vec<u8>,
    /// `ca.crt`, when there is one: only described, never served.
    pub(crate) ca: Option<Vec<u8>>,
}

impl PemPair {
    /// When the serving certificate and the CA of `ca.crt` that signed it
    /// expire, as the `CertificateServed` event carries them.
    pub(crate) fn served_event(&self) -> Option<poolkeeper_bus::Event> {
        use poolkeeper_pki::CertificateInfo;
        let leaf = CertificateInfo::parse_first(&self.cert).ok()?;
        let cas = self
            .ca
            .as_deref()
            .and_then(|ca| CertificateInfo::parse_pem(ca).ok())
            .unwrap_or_default();
        Some(poolkeeper_bus::Event::CertificateServed {
            leaf_not_after: leaf.expiry_seconds(),
            ca_not_after: leaf.signer_among(&cas).map(CertificateInfo::expiry_seconds),
        })
    }

    /// What `/readyz?verbose` says is served: the serving certificate and
    /// the CA of `ca.crt` that signed it.
    pub(crate) fn describe(&self) -> String {
        use poolkeeper_pki::CertificateInfo;
        let Ok(leaf) = CertificateInfo::parse_first(&self.cert) else {
            return "serving an unreadable certificate".to_owned();
        };
        let cas = self
            .ca
            .as_deref()
            .and_then(|ca| CertificateInfo::parse_pem(ca).ok())
            .unwrap_or_default();
        match leaf.signer_among(&cas) {
            Some(ca) => format!("serving {}; CA {}", leaf.describe(), ca.describe()),
            None => format!(
                "serving {}; CA {} (not in ca.crt)",
                leaf.describe(),
                leaf.issuer
            ),
        }
    }
}

pub(crate) fn cert_path(dir: &Path) -> PathBuf {
    dir.join(CERT_FILE)
}

pub(crate) fn key_path(dir: &Path) -> PathBuf {
    dir.join(KEY_FILE)
}

pub(crate) async fn read_pair(dir: &Path) -> Result<PemPair, WebhookError> {
    let read = |path: PathBuf| async move {
        tokio::fs::read(&path)
            .await
            .map_err(|source| WebhookError::ReadCertificate { path, source })
    };
    Ok(PemPair {
        cert: read(cert_path(dir)).await?,
        key: read(key_path(dir)).await?,
        ca: tokio::fs::read(dir.join(poolkeeper_pki::CA_CERT))
            .await
            .ok(),
    })
}

/// A server configuration for `pair`; fails when the PEM does not parse or
/// the key does not belong to the certificate.
pub(crate) fn server_config(dir: &Path, pair: &PemPair) -> Result<Arc<ServerConfig>, WebhookError> {
    let certs = CertificateDer::pem_slice_iter(&pair.cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| WebhookError::Pem {
            path: cert_path(dir),
            source,
        })?;
    if certs.is_empty() {
        return Err(WebhookError::NoCertificate {
            path: cert_path(dir),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&pair.key).map_err(|source| WebhookError::Pem {
        path: key_path(dir),
        source,
    })?;
    let unusable = |source| WebhookError::UnusableCertificate {
        dir: dir.to_owned(),
        source,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(unusable)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(unusable)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
