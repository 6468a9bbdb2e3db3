//! What poolkeeper reads of X.509 certificates, shared by the webhook server
//! (which describes the certificate it serves) and the certificate issuer
//! (which decides when to renew): validity, names, serial, issuer, and
//! whether one certificate signed another. Pure: PEM in, facts out.
//!
//! The serving certificate lives in a `kubernetes.io/tls` Secret (or in
//! files named after its keys): [`TLS_CERT`], [`TLS_KEY`], [`CA_CERT`], and
//! [`CA_KEY`] when poolkeeper issues it itself.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

/// The serving certificate, PEM (the leaf first, then any intermediates).
pub const TLS_CERT: &str = "tls.crt";
/// The serving certificate's private key, PEM.
pub const TLS_KEY: &str = "tls.key";
/// Every CA the API server is to trust, PEM, one after another.
pub const CA_CERT: &str = "ca.crt";
/// The private key of the CA that signs new serving certificates (source `self` only).
pub const CA_KEY: &str = "ca.key";

/// Why a PEM text gave no certificate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PkiError {
    #[error("not PEM: {0}")]
    Pem(String),
    #[error("not an X.509 certificate: {0}")]
    Certificate(String),
    #[error("no certificate in the PEM text")]
    Empty,
}

/// One parsed certificate: what poolkeeper decides and reports from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateInfo {
    /// The subject, as `CN=...`.
    pub subject: String,
    pub issuer: String,
    /// Hexadecimal, bytes separated by `:`.
    pub serial: String,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// The DNS names of its subjectAltName, in order.
    pub dns_names: Vec<String>,
    pub is_ca: bool,
    /// The DER of its SubjectPublicKeyInfo: compared with a private key's public half.
    pub public_key_der: Vec<u8>,
    der: Vec<u8>,
}

impl CertificateInfo {
    /// Every certificate of a PEM text, in order; other PEM blocks (keys) are skipped.
    pub fn parse_pem(pem: &[u8]) -> Result<Vec<CertificateInfo>, PkiError> {
        let mut certificates = Vec::new();
        for block in Pem::iter_from_buffer(pem) {
            let block = block.map_err(|e| PkiError::Pem(e.to_string()))?;
            if block.label != "CERTIFICATE" {
                continue;
            }
            certificates.push(Self::from_der(&block.contents)?);
        }
        if certificates.is_empty() {
            return Err(PkiError::Empty);
        }
        Ok(certificates)
    }

    /// The first certificate of a PEM text: a serving certificate's own.
    pub fn parse_first(pem: &[u8]) -> Result<CertificateInfo, PkiError> {
        Self::parse_pem(pem)?
            .into_iter()
            .next()
            .ok_or(PkiError::Empty)
    }

    pub fn from_der(der: &[u8]) -> Result<CertificateInfo, PkiError> {
        let (_, x509) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| PkiError::Certificate(e.to_string()))?;
        let validity = x509.validity();
        Ok(CertificateInfo {
            subject: x509.subject().to_string(),
            issuer: x509.issuer().to_string(),
            serial: x509.raw_serial_as_string(),
            not_before: system_time(validity.not_before.timestamp()),
            not_after: system_time(validity.not_after.timestamp()),
            dns_names: dns_names(&x509),
            is_ca: x509.is_ca(),
            public_key_der: x509.public_key().raw.to_vec(),
            der: der.to_vec(),
        })
    }

    /// Whether `issuer`'s key signed this certificate (and the issuer names match).
    pub fn is_signed_by(&self, issuer: &CertificateInfo) -> bool {
        if self.issuer != issuer.subject {
            return false;
        }
        let (Ok((_, child)), Ok((_, parent))) = (
            x509_parser::parse_x509_certificate(&self.der),
            x509_parser::parse_x509_certificate(&issuer.der),
        ) else {
            return false;
        };
        child.verify_signature(Some(parent.public_key())).is_ok()
    }

    /// The certificate as PEM, 64 base64 characters a line.
    pub fn to_pem(&self) -> String {
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode(&self.der);
        let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
        for line in encoded.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
        pem
    }

    /// Whether it is valid at `now` (notBefore <= now < notAfter).
    pub fn is_valid_at(&self, now: SystemTime) -> bool {
        self.not_before <= now && now < self.not_after
    }

    /// notAfter as seconds since the Unix epoch, for a metric.
    pub fn expiry_seconds(&self) -> i64 {
        match self.not_after.duration_since(UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
        }
    }

    /// One line for people: subject, serial and notAfter.
    pub fn describe(&self) -> String {
        format!(
            "{} serial {} notAfter {}",
            self.subject,
            self.serial,
            humantime::format_rfc3339_seconds(self.not_after)
        )
    }

    /// The certificate of `candidates` that signed this one, the newest first when several did.
    pub fn signer_among<'a>(
        &self,
        candidates: &'a [CertificateInfo],
    ) -> Option<&'a CertificateInfo> {
        candidates
            .iter()
            .filter(|ca| self.is_signed_by(ca))
            .max_by_key(|ca| ca.not_before)
    }
}

fn system_time(timestamp: i64) -> SystemTime {
    let seconds = Duration::from_secs(timestamp.unsigned_abs());
    if timestamp >= 0 {
        UNIX_EPOCH + seconds
    } else {
        UNIX_EPOCH - seconds
    }
}

fn dns_names(x509: &X509Certificate<'_>) -> Vec<String> {
    let Ok(Some(names)) = x509.subject_alternative_name() else {
        return Vec::new();
    };
    names
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some((*dns).to_owned()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    use time::OffsetDateTime;

    use super::*;

    fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.not_before = OffsetDateTime::from_unix_timestamp(1_000).unwrap();
        params.not_after = OffsetDateTime::from_unix_timestamp(2_000_000_000).unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), Issuer::new(params, key))
    }

    #[test]
    fn a_leaf_is_read_and_its_signer_found() {
        let (first_pem, first) = ca("first");
        let (second_pem, _) = ca("second");
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![
            "a.ns.svc".to_owned(),
            "a.ns.svc.cluster.local".to_owned(),
        ])
        .unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "a.ns.svc");
        params.not_before = OffsetDateTime::from_unix_timestamp(1_500).unwrap();
        params.not_after = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let leaf_pem = params.signed_by(&key, &first).unwrap().pem();

        let leaf = CertificateInfo::parse_first(leaf_pem.as_bytes()).unwrap();
        assert_eq!(leaf.dns_names, ["a.ns.svc", "a.ns.svc.cluster.local"]);
        assert_eq!(leaf.subject, "CN=a.ns.svc");
        assert_eq!(leaf.issuer, "CN=first");
        assert!(!leaf.is_ca);
        assert_eq!(leaf.expiry_seconds(), 1_800_000_000);
        assert_eq!(leaf.not_before, UNIX_EPOCH + Duration::from_secs(1_500));
        assert_eq!(
            leaf.public_key_der,
            rcgen::PublicKeyData::subject_public_key_info(&key)
        );
        assert!(leaf.is_valid_at(UNIX_EPOCH + Duration::from_secs(1_500)));
        assert!(!leaf.is_valid_at(UNIX_EPOCH + Duration::from_secs(1_800_000_000)));
        assert!(
            leaf.describe().starts_with("CN=a.ns.svc serial "),
            "{}",
            leaf.describe()
        );
        assert!(leaf.describe().ends_with("notAfter 2027-01-15T08:00:00Z"));

        let bundle = format!("{second_pem}{first_pem}");
        assert_eq!(
            CertificateInfo::parse_pem(bundle.as_bytes())
                .unwrap()
                .iter()
                .map(CertificateInfo::to_pem)
                .collect::<String>(),
            bundle.replace("\r\n", "\n"),
            "PEM written as rcgen writes it"
        );
        let cas = CertificateInfo::parse_pem(bundle.as_bytes()).unwrap();
        assert_eq!(cas.len(), 2);
        assert!(cas.iter().all(|ca| ca.is_ca));
        assert_eq!(
            leaf.signer_among(&cas).map(|ca| ca.subject.as_str()),
            Some("CN=first")
        );
        assert!(!leaf.is_signed_by(&cas[0]));
    }

    #[test]
    fn text_without_a_certificate_is_an_error() {
        let key = KeyPair::generate().unwrap().serialize_pem();
        for (text, want) in [("", PkiError::Empty), (key.as_str(), PkiError::Empty)] {
            assert_eq!(CertificateInfo::parse_pem(text.as_bytes()), Err(want));
        }
        let garbled = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(matches!(
            CertificateInfo::parse_pem(garbled.as_bytes()),
            Err(PkiError::Certificate(_))
        ));
    }
}
