//! Issuing what a [`Plan`] calls for, with rcgen: ECDSA P-256 keys, the CA
//! and the serving certificate backdated by [`BACKDATE`], no serving
//! certificate outliving its CA.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use poolkeeper_pki::{CA_CERT, CA_KEY, TLS_CERT, TLS_KEY};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use time::OffsetDateTime;

use crate::plan::{BACKDATE, Plan, Stored};
use crate::settings::Lifetimes;

/// Why nothing could be issued.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error("cannot issue a certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("a time outside what a certificate can hold")]
    Time,
    #[error("no CA to sign the serving certificate with")]
    NoSigner,
}

/// The Secret's new `data`: `data` with what `plan` calls for issued at `now`.
pub fn issue(
    data: &BTreeMap<String, Vec<u8>>,
    stored: &Stored,
    plan: &Plan,
    now: SystemTime,
    lifetimes: &Lifetimes,
    dns_names: &[String],
) -> Result<BTreeMap<String, Vec<u8>>, IssueError> {
    let mut out = data.clone();
    let mut bundle: String = plan
        .kept_cas
        .iter()
        .map(|&i| stored.cas[i].to_pem())
        .collect();
    // The CA that signs, as PEM and key.
    let mut signer: Option<(String, KeyPair)> = match (stored.signer(), data.get(CA_KEY)) {
        (Some(ca), Some(key)) => std::str::from_utf8(key)
            .ok()
            .and_then(|key| KeyPair::from_pem(key).ok())
            .map(|key| (ca.to_pem(), key)),
        _ => None,
    };
    if plan.new_ca.is_some() {
        let (pem, key) = new_ca(now, lifetimes)?;
        bundle.push_str(&pem);
        out.insert(CA_KEY.to_owned(), key.serialize_pem().into_bytes());
        signer = Some((pem, key));
    }
    out.insert(CA_CERT.to_owned(), bundle.into_bytes());
    if plan.new_leaf.is_some() {
        let (ca_pem, ca_key) = signer.ok_or(IssueError::NoSigner)?;
        let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key)?;
        let ca_not_after = poolkeeper_pki::CertificateInfo::parse_first(ca_pem.as_bytes())
            .map(|ca| ca.not_after)
            .map_err(|_| IssueError::NoSigner)?;
        let (cert, key) = new_leaf(now, lifetimes, dns_names, &issuer, ca_not_after)?;
        out.insert(TLS_CERT.to_owned(), cert.into_bytes());
        out.insert(TLS_KEY.to_owned(), key.into_bytes());
    }
    Ok(out)
}

fn new_ca(now: SystemTime, lifetimes: &Lifetimes) -> Result<(String, KeyPair), IssueError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    // A name of its own per CA, so that two CAs of the bundle are told apart.
    let made = now
        .duration_since(UNIX_EPOCH)
        .map_err(|_| IssueError::Time)?;
    params.distinguished_name.push(
        DnType::CommonName,
        format!("poolkeeper-webhook-ca-{}", made.as_secs()),
    );
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = datetime(now - BACKDATE)?;
    params.not_after = datetime(now + lifetimes.ca)?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key))
}

fn new_leaf(
    now: SystemTime,
    lifetimes: &Lifetimes,
    dns_names: &[String],
    issuer: &Issuer<'_, KeyPair>,
    ca_not_after: SystemTime,
) -> Result<(String, String), IssueError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(dns_names.to_vec())?;
    if let Some(first) = dns_names.first() {
        params.distinguished_name.push(DnType::CommonName, first);
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = datetime(now - BACKDATE)?;
    params.not_after = datetime((now + lifetimes.leaf).min(ca_not_after))?;
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn datetime(at: SystemTime) -> Result<OffsetDateTime, IssueError> {
    let seconds = at
        .duration_since(UNIX_EPOCH)
        .map_err(|_| IssueError::Time)?
        .as_secs();
    OffsetDateTime::from_unix_timestamp(i64::try_from(seconds).map_err(|_| IssueError::Time)?)
        .map_err(|_| IssueError::Time)
}
