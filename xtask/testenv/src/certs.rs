//! Certificates for the control plane (CA, apiserver serving cert, admin client identity,
//! service-account signing key) and for webhook servers run by tests.

use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::TestEnvError;

/// A CA able to sign leaf certificates.
struct CertificateAuthority {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl CertificateAuthority {
    fn generate(common_name: &str) -> Result<Self, TestEnvError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    fn sign(&self, leaf: Leaf<'_>) -> Result<KeyAndCert, TestEnvError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(
            leaf.subject_alt_names
                .iter()
                .map(|s| (*s).to_owned())
                .collect::<Vec<_>>(),
        )?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, leaf.common_name);
        if let Some(organization) = leaf.organization {
            params
                .distinguished_name
                .push(DnType::OrganizationName, organization);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![leaf.usage];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(KeyAndCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

struct Leaf<'a> {
    common_name: &'a str,
    organization: Option<&'a str>,
    subject_alt_names: &'a [&'a str],
    usage: ExtendedKeyUsagePurpose,
}

#[derive(Clone)]
pub(crate) struct KeyAndCert {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
}

/// Everything the apiserver and its clients need, generated fresh for each control plane.
pub(crate) struct ClusterPki {
    pub(crate) ca_pem: String,
    pub(crate) apiserver: KeyAndCert,
    pub(crate) admin: KeyAndCert,
    pub(crate) service_account_private_pem: String,
    pub(crate) service_account_public_pem: String,
}

impl ClusterPki {
    pub(crate) fn generate() -> Result<Self, TestEnvError> {
        let ca = CertificateAuthority::generate("poolkeeper-testenv-ca")?;
        let apiserver = ca.sign(Leaf {
            common_name: "kube-apiserver",
            organization: None,
            subject_alt_names: &[
                "127.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            usage: ExtendedKeyUsagePurpose::ServerAuth,
        })?;
        // system:masters bypasses RBAC, so the admin identity works before the bootstrap roles exist.
        let admin = ca.sign(Leaf {
            common_name: "poolkeeper-testenv-admin",
            organization: Some("system:masters"),
            subject_alt_names: &[],
            usage: ExtendedKeyUsagePurpose::ClientAuth,
        })?;
        let service_account = KeyPair::generate()?;
        Ok(Self {
            ca_pem: ca.cert_pem,
            apiserver,
            admin,
            service_account_private_pem: service_account.serialize_pem(),
            service_account_public_pem: service_account.public_key_pem(),
        })
    }
}

/// A CA and a serving certificate for `127.0.0.1` and `localhost`, for webhook servers that
/// tests (or `cargo xtask dev`) run on the local machine.
#[derive(Clone)]
pub struct WebhookCert {
    /// PEM of the CA that signed `cert_pem`: the `caBundle` of the webhook configurations.
    pub ca_pem: String,
    /// PEM of the serving certificate.
    pub cert_pem: String,
    /// PEM (PKCS#8) of the serving certificate's private key.
    pub key_pem: String,
}

impl std::fmt::Debug for WebhookCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookCert")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl WebhookCert {
    pub fn generate() -> Result<Self, TestEnvError> {
        let ca = CertificateAuthority::generate("poolkeeper-testenv-webhook-ca")?;
        let serving = ca.sign(Leaf {
            common_name: "poolkeeper-testenv-webhook",
            organization: None,
            subject_alt_names: &["127.0.0.1", "localhost"],
            usage: ExtendedKeyUsagePurpose::ServerAuth,
        })?;
        Ok(Self {
            ca_pem: ca.cert_pem,
            cert_pem: serving.cert_pem,
            key_pem: serving.key_pem,
        })
    }

    /// A rustls server configuration (ring provider, HTTP/1.1) serving this certificate.
    pub fn rustls_server_config(&self) -> Result<Arc<rustls::ServerConfig>, TestEnvError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let certs = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TestEnvError::Tls(e.to_string()))?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| TestEnvError::Tls(e.to_string()))?;
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| TestEnvError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TestEnvError::Tls(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Writes `tls.crt`, `tls.key` and `ca.crt` (controller-runtime's file names) into `dir`,
    /// creating it if needed.
    pub fn write_to_dir(&self, dir: &Path) -> Result<(), TestEnvError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| TestEnvError::io(format!("creating {}", dir.display()), e))?;
        for (name, contents) in [
            ("tls.crt", &self.cert_pem),
            ("tls.key", &self.key_pem),
            ("ca.crt", &self.ca_pem),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, contents)
                .map_err(|e| TestEnvError::io(format!("writing {}", path.display()), e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_pki_has_every_piece_in_pem() {
        let pki = ClusterPki::generate().unwrap();
        for pem in [&pki.ca_pem, &pki.apiserver.cert_pem, &pki.admin.cert_pem] {
            assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        }
        for pem in [
            &pki.apiserver.key_pem,
            &pki.admin.key_pem,
            &pki.service_account_private_pem,
        ] {
            assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{pem}");
        }
        assert!(
            pki.service_account_public_pem
                .starts_with("-----BEGIN PUBLIC KEY-----")
        );
    }

    #[test]
    fn webhook_cert_loads_into_rustls_and_is_written_with_standard_names() {
        let cert = WebhookCert::generate().unwrap();
        cert.rustls_server_config().unwrap();
        let dir = tempfile::tempdir().unwrap();
        cert.write_to_dir(&dir.path().join("certs")).unwrap();
        let read =
            |name: &str| std::fs::read_to_string(dir.path().join("certs").join(name)).unwrap();
        assert_eq!(read("tls.crt"), cert.cert_pem);
        assert_eq!(read("tls.key"), cert.key_pem);
        assert_eq!(read("ca.crt"), cert.ca_pem);
    }

    #[test]
    fn debug_output_hides_the_private_key() {
        let cert = WebhookCert::generate().unwrap();
        assert!(!format!("{cert:?}").contains("PRIVATE KEY"));
    }
}
