//! The pure core: from the Secret's contents and the time, what to issue,
//! what to drop from the bundle, and when to look again. No I/O, no
//! randomness (issuing is `issue.rs`'s).
//!
//! - No CA whose key the Secret holds (a first start, a Secret of another
//!   origin): a new CA, and a serving certificate at once when the current
//!   one is unusable.
//! - The CA that signs expires within `leafValidity + renewBefore`: a new
//!   CA joins the bundle; the serving certificate stays until it is due.
//! - The serving certificate is missing, unreadable, does not match its
//!   key, names other DNS names, has expired or was signed by no CA of the
//!   bundle: a new one at once.
//! - It expires within `renewBefore`: a new one, signed by the newest CA —
//!   but only once that CA has been published in the caBundle and has
//!   settled there ([`Lifetimes::settle`]); until then the current one,
//!   still valid, is served. So the API server trusts every certificate a
//!   replica serves.
//! - A CA is kept in the bundle until it expires. No serving certificate
//!   outlives the CA that signed it, so every certificate it signed has
//!   expired by then.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use poolkeeper_pki::{CA_CERT, CA_KEY, CertificateInfo, TLS_CERT, TLS_KEY};

use crate::settings::Lifetimes;

/// How far back notBefore is set, so that an API server whose clock is
/// somewhat behind the leader's accepts a certificate at once.
pub const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// What the Secret holds, read and checked.
#[derive(Clone, Debug)]
pub struct Stored {
    /// Every readable CA of `ca.crt`, in order.
    pub cas: Vec<CertificateInfo>,
    /// The index in `cas` of the CA whose key is `ca.key`.
    pub signer: Option<usize>,
    /// The serving certificate, or why it cannot be served.
    pub leaf: Result<CertificateInfo, LeafProblem>,
}

/// Why the stored serving certificate must be replaced at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafProblem {
    Missing,
    Unreadable,
    KeyMismatch,
    OtherNames,
    Expired,
    UnknownSigner,
}

impl LeafProblem {
    pub fn as_str(self) -> &'static str {
        match self {
            LeafProblem::Missing => "no serving certificate",
            LeafProblem::Unreadable => "the serving certificate or its key does not parse",
            LeafProblem::KeyMismatch => "tls.key is not the serving certificate's key",
            LeafProblem::OtherNames => "the serving certificate names other DNS names",
            LeafProblem::Expired => "the serving certificate has expired",
            LeafProblem::UnknownSigner => "no CA of ca.crt signed the serving certificate",
        }
    }
}

impl Stored {
    /// Reads a Secret's `data` at `now`, for a serving certificate of `dns_names`.
    pub fn read(data: &BTreeMap<String, Vec<u8>>, dns_names: &[String], now: SystemTime) -> Self {
        let cas: Vec<CertificateInfo> = data
            .get(CA_CERT)
            .and_then(|pem| CertificateInfo::parse_pem(pem).ok())
            .unwrap_or_default()
            .into_iter()
            .filter(|ca| ca.is_ca)
            .collect();
        let signer = data
            .get(CA_KEY)
            .and_then(|pem| public_key_of(pem))
            .and_then(|key| cas.iter().rposition(|ca| ca.public_key_der == key));
        let leaf = read_leaf(data, dns_names, now, &cas);
        Stored { cas, signer, leaf }
    }

    pub fn signer(&self) -> Option<&CertificateInfo> {
        self.signer.and_then(|i| self.cas.get(i))
    }
}

fn read_leaf(
    data: &BTreeMap<String, Vec<u8>>,
    dns_names: &[String],
    now: SystemTime,
    cas: &[CertificateInfo],
) -> Result<CertificateInfo, LeafProblem> {
    let (Some(cert), Some(key)) = (data.get(TLS_CERT), data.get(TLS_KEY)) else {
        return Err(LeafProblem::Missing);
    };
    let leaf = CertificateInfo::parse_first(cert).map_err(|_| LeafProblem::Unreadable)?;
    let key = public_key_of(key).ok_or(LeafProblem::Unreadable)?;
    if key != leaf.public_key_der {
        return Err(LeafProblem::KeyMismatch);
    }
    let (mut have, mut want) = (leaf.dns_names.clone(), dns_names.to_vec());
    have.sort();
    want.sort();
    if have != want {
        return Err(LeafProblem::OtherNames);
    }
    if now >= leaf.not_after {
        return Err(LeafProblem::Expired);
    }
    let trusted: Vec<CertificateInfo> = cas
        .iter()
        .filter(|ca| now < ca.not_after)
        .cloned()
        .collect();
    if leaf.signer_among(&trusted).is_none() {
        return Err(LeafProblem::UnknownSigner);
    }
    Ok(leaf)
}

/// The SubjectPublicKeyInfo of a PEM private key.
pub(crate) fn public_key_of(pem: &[u8]) -> Option<Vec<u8>> {
    let pem = std::str::from_utf8(pem).ok()?;
    let key = rcgen::KeyPair::from_pem(pem).ok()?;
    Some(rcgen::PublicKeyData::subject_public_key_info(&key))
}

/// Why a new CA is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaReason {
    /// None of ca.crt's CAs is the one of ca.key (or it has expired).
    NoSigner,
    /// The signing CA expires within `leafValidity + renewBefore`.
    Expiring,
}

impl CaReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CaReason::NoSigner => "no valid CA whose key the Secret holds",
            CaReason::Expiring => "the CA expires within leafValidity + renewBefore",
        }
    }
}

/// Why a new serving certificate is issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafReason {
    Unusable(LeafProblem),
    /// It expires within `renewBefore`.
    Renewal,
}

impl LeafReason {
    pub fn as_str(self) -> &'static str {
        match self {
            LeafReason::Unusable(problem) => problem.as_str(),
            LeafReason::Renewal => "the serving certificate expires within renewBefore",
        }
    }
}

/// What to do with the Secret now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub new_ca: Option<CaReason>,
    pub new_leaf: Option<LeafReason>,
    /// The CAs of `ca.crt` that stay (by index in [`Stored::cas`], in order):
    /// every one not expired.
    pub kept_cas: Vec<usize>,
    /// When to look again if nothing changes meanwhile (after a write, the
    /// written Secret is planned again at once).
    pub next_check: SystemTime,
}

impl Plan {
    /// Whether the Secret is to be written.
    pub fn writes(&self, stored: &Stored) -> bool {
        self.new_ca.is_some() || self.new_leaf.is_some() || self.kept_cas.len() != stored.cas.len()
    }
}

/// What to do with `stored` at `now`. `published`: the webhook
/// configurations' caBundle is the Secret's `ca.crt` already.
pub fn plan(stored: &Stored, now: SystemTime, lifetimes: &Lifetimes, published: bool) -> Plan {
    let kept_cas: Vec<usize> = (0..stored.cas.len())
        .filter(|&i| now < stored.cas[i].not_after)
        .collect();
    let signer = stored.signer().filter(|ca| now < ca.not_after);
    let lead = lifetimes.ca_rotation_lead();
    let new_ca = match signer {
        None => Some(CaReason::NoSigner),
        Some(ca) if now + lead >= ca.not_after => Some(CaReason::Expiring),
        Some(_) => None,
    };
    let mut wake = Vec::new();
    let new_leaf = match &stored.leaf {
        Err(problem) => Some(LeafReason::Unusable(*problem)),
        Ok(leaf) => {
            let due = leaf
                .not_after
                .checked_sub(lifetimes.renew_before)
                .unwrap_or(now);
            // The CA that would sign now; none settled while a new one is on its way.
            let settled_at = match (new_ca, signer) {
                (None, Some(ca)) if published => Some(settled_at(ca, lifetimes)),
                _ => None,
            };
            match settled_at {
                Some(at) if now >= due && now >= at => Some(LeafReason::Renewal),
                Some(at) => {
                    wake.push(due.max(at));
                    None
                }
                None => {
                    wake.push(due.max(now + lifetimes.settle()));
                    None
                }
            }
        }
    };
    if let Some(ca) = signer.filter(|_| new_ca.is_none()) {
        wake.push(ca.not_after.checked_sub(lead).unwrap_or(now));
    }
    wake.extend(kept_cas.iter().map(|&i| stored.cas[i].not_after));
    let next_check = wake.into_iter().min().unwrap_or(now).max(now);
    Plan {
        new_ca,
        new_leaf,
        kept_cas,
        next_check,
    }
}

/// When `ca` may sign: [`Lifetimes::settle`] after it was made (notBefore
/// is backdated by [`BACKDATE`]).
fn settled_at(ca: &CertificateInfo, lifetimes: &Lifetimes) -> SystemTime {
    ca.not_before + BACKDATE + lifetimes.settle()
}
