//! The cluster's certificates, made with rcgen: one CA, the API server's serving certificate, a
//! client certificate per component, the service-account signing key, and a kubeconfig per
//! identity. EC P-256 keys (rcgen's default): quick to make, and accepted everywhere Kubernetes
//! takes a key. Generating is pure ([`Pki::generate`]); [`create`] writes the files.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::OffsetDateTime;

use super::{KUBERNETES_SERVICE_IP, Layout, NODE_IP, NODE_NAME, configs};
use crate::{Error, Result};

/// Short-lived: the cluster lives for a test run.
const VALIDITY: time::Duration = time::Duration::days(7);

/// The names the API server is reached by: the node's address, the `kubernetes` Service's
/// ClusterIP and DNS names, and loopback.
const APISERVER_DNS_NAMES: [&str; 5] = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "localhost",
];

/// Components that get a kubeconfig of their own (the admin's is the user's).
pub const KUBECONFIGS: [&str; 4] = [
    "kubelet",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
];

/// A client identity: its files' name, and the user (common name) and group (organization)
/// Kubernetes reads from its certificate.
struct Client {
    name: &'static str,
    organization: Option<&'static str>,
    common_name: String,
}

fn clients() -> [Client; 6] {
    let client = |name, organization, common_name: &str| Client {
        name,
        organization,
        common_name: common_name.to_owned(),
    };
    [
        client("admin", Some("system:masters"), "poolkeeper-cluster-admin"),
        client(
            "kubelet",
            Some("system:nodes"),
            &format!("system:node:{NODE_NAME}"),
        ),
        client(
            "kube-controller-manager",
            None,
            "system:kube-controller-manager",
        ),
        client("kube-scheduler", None, "system:kube-scheduler"),
        client("kube-proxy", None, "system:kube-proxy"),
        // The API server's identity towards kubelets (logs, exec).
        client(
            "apiserver-kubelet-client",
            Some("system:masters"),
            "kube-apiserver-kubelet-client",
        ),
    ]
}

/// A certificate and its private key, in PEM.
struct KeyAndCert {
    cert_pem: String,
    key_pem: String,
}

/// Every certificate and key of the cluster, in PEM, named as the files they are written to.
pub struct Pki {
    ca_pem: String,
    /// `apiserver` and each client, by name.
    leaves: Vec<(&'static str, KeyAndCert)>,
    service_account_key_pem: String,
    service_account_pub_pem: String,
}

impl Pki {
    /// Fresh keys and certificates, valid from `now` for [`VALIDITY`].
    pub fn generate(now: OffsetDateTime) -> Result<Self> {
        let validity = (now, now + VALIDITY);
        let ca_key = KeyPair::generate().map_err(certificate_error)?;
        let mut ca = params(validity, "poolkeeper-cluster-ca", None)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_pem = ca.self_signed(&ca_key).map_err(certificate_error)?.pem();
        let issuer = Issuer::new(ca, ca_key);

        let mut apiserver = params(validity, "kube-apiserver", None)?;
        apiserver.subject_alt_names = apiserver_names()?;
        let mut leaves = vec![(
            "apiserver",
            sign(apiserver, ExtendedKeyUsagePurpose::ServerAuth, &issuer)?,
        )];
        for client in clients() {
            let params = params(validity, &client.common_name, client.organization)?;
            let signed = sign(params, ExtendedKeyUsagePurpose::ClientAuth, &issuer)?;
            leaves.push((client.name, signed));
        }
        let service_account = KeyPair::generate().map_err(certificate_error)?;
        Ok(Self {
            ca_pem,
            leaves,
            service_account_key_pem: service_account.serialize_pem(),
            service_account_pub_pem: service_account.public_key_pem(),
        })
    }

    /// `ca.crt`, `NAME.crt` and `NAME.key` for the API server and each client,
    /// `service-account.key` and `service-account.pub`.
    fn files(&self) -> Vec<(String, &str)> {
        let mut files = vec![("ca.crt".to_owned(), self.ca_pem.as_str())];
        for (name, leaf) in &self.leaves {
            files.push((format!("{name}.crt"), &leaf.cert_pem));
            files.push((format!("{name}.key"), &leaf.key_pem));
        }
        files.push((
            "service-account.key".to_owned(),
            &self.service_account_key_pem,
        ));
        files.push((
            "service-account.pub".to_owned(),
            &self.service_account_pub_pem,
        ));
        files
    }
}

pub fn create(layout: &Layout) -> Result<()> {
    let dir = layout.pki();
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| Error::Check(format!("the clock is before 1970: {e}")))?;
    let now = i64::try_from(since_epoch.as_secs())
        .ok()
        .and_then(|secs| OffsetDateTime::from_unix_timestamp(secs).ok())
        .ok_or_else(|| Error::Check("the clock is past any certificate's validity".to_owned()))?;
    for (name, contents) in Pki::generate(now)?.files() {
        write(&dir.join(name), contents)?;
    }
    write_kubeconfigs(layout)
}

/// A certificate's subject and validity.
fn params(
    (not_before, not_after): (OffsetDateTime, OffsetDateTime),
    common_name: &str,
    organization: Option<&str>,
) -> Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(certificate_error)?;
    let mut subject = DistinguishedName::new();
    if let Some(organization) = organization {
        subject.push(DnType::OrganizationName, organization);
    }
    subject.push(DnType::CommonName, common_name);
    params.distinguished_name = subject;
    params.not_before = not_before;
    params.not_after = not_after;
    Ok(params)
}

fn apiserver_names() -> Result<Vec<SanType>> {
    let mut names = Vec::new();
    for ip in [NODE_IP, KUBERNETES_SERVICE_IP, "127.0.0.1"] {
        let ip = ip
            .parse()
            .map_err(|e| Error::Check(format!("the address {ip:?}: {e}")))?;
        names.push(SanType::IpAddress(ip));
    }
    for dns in APISERVER_DNS_NAMES {
        names.push(SanType::DnsName(dns.try_into().map_err(certificate_error)?));
    }
    Ok(names)
}

/// A new key and its certificate for `usage`, signed by the CA.
fn sign(
    mut params: CertificateParams,
    usage: ExtendedKeyUsagePurpose,
    issuer: &Issuer<'_, KeyPair>,
) -> Result<KeyAndCert> {
    let key = KeyPair::generate().map_err(certificate_error)?;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, issuer).map_err(certificate_error)?;
    Ok(KeyAndCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn certificate_error(error: rcgen::Error) -> Error {
    Error::Check(format!("generating the cluster's certificates: {error}"))
}

fn write(path: &Path, contents: &str) -> Result<()> {
    std::fs::write(path, contents).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

fn write_kubeconfigs(layout: &Layout) -> Result<()> {
    let pki = layout.pki();
    let server = layout.server();
    let ca = pki.join("ca.crt");
    let identities = KUBECONFIGS
        .iter()
        .map(|name| (*name, layout.component_kubeconfig(name)))
        .chain([("admin", layout.kubeconfig())]);
    for (name, path) in identities {
        let text = configs::kubeconfig(
            &server,
            &ca.to_string_lossy(),
            &pki.join(format!("{name}.crt")).to_string_lossy(),
            &pki.join(format!("{name}.key")).to_string_lossy(),
        );
        write(&path, &text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
