//! The pure core over time: plans and what issuing them gives, without a
//! cluster.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use poolkeeper_pki::{CA_CERT, CA_KEY, CertificateInfo, TLS_CERT, TLS_KEY};

use crate::{CaReason, LeafProblem, LeafReason, Lifetimes, Stored, issue, plan};

type Data = BTreeMap<String, Vec<u8>>;

const LIFETIMES: Lifetimes = Lifetimes {
    ca: Duration::from_secs(100),
    leaf: Duration::from_secs(40),
    renew_before: Duration::from_secs(10),
};

fn names() -> Vec<String> {
    crate::service_dns_names("poolkeeper-webhook", "poolkeeper-system")
}

fn start() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn at(seconds: u64) -> SystemTime {
    start() + Duration::from_secs(seconds)
}

/// Plans `data` at `now` and issues the plan: the new data and the plan.
fn step(data: &Data, now: SystemTime, published: bool) -> (Data, crate::Plan) {
    let stored = Stored::read(data, &names(), now);
    let plan = plan(&stored, now, &LIFETIMES, published);
    let written = if plan.writes(&stored) {
        issue(data, &stored, &plan, now, &LIFETIMES, &names()).unwrap()
    } else {
        data.clone()
    };
    (written, plan)
}

fn leaf(data: &Data) -> CertificateInfo {
    CertificateInfo::parse_first(&data[TLS_CERT]).unwrap()
}

fn cas(data: &Data) -> Vec<CertificateInfo> {
    CertificateInfo::parse_pem(&data[CA_CERT]).unwrap()
}

fn fresh() -> Data {
    step(&Data::new(), at(0), false).0
}

#[test]
fn an_empty_secret_gets_a_ca_and_a_serving_certificate_for_the_service() {
    let (data, plan) = step(&Data::new(), at(0), false);
    assert_eq!(plan.new_ca, Some(CaReason::NoSigner));
    assert_eq!(
        plan.new_leaf,
        Some(LeafReason::Unusable(LeafProblem::Missing))
    );
    let leaf = leaf(&data);
    assert_eq!(
        leaf.dns_names,
        [
            "poolkeeper-webhook.poolkeeper-system.svc",
            "poolkeeper-webhook.poolkeeper-system.svc.cluster.local"
        ]
    );
    let cas = cas(&data);
    assert_eq!(cas.len(), 1);
    assert!(leaf.is_signed_by(&cas[0]));
    assert_eq!(leaf.not_after, at(40));
    assert_eq!(cas[0].not_after, at(100));
    assert_eq!(leaf.not_before, at(0) - crate::BACKDATE);
    assert!(data.contains_key(CA_KEY) && data.contains_key(TLS_KEY));

    // Nothing to do until the serving certificate is due (40 - 10).
    let (again, plan) = step(&data, at(1), true);
    assert!(!plan.writes(&Stored::read(&data, &names(), at(1))));
    assert_eq!(again, data);
    assert_eq!(plan.next_check, at(30));
}

#[test]
fn a_serving_certificate_is_renewed_renew_before_it_expires_once_the_bundle_is_published() {
    let data = fresh();
    // (seconds, published, renewed?, next check)
    let cases = [
        (29, true, false, at(30)),
        (30, false, false, at(30) + Duration::from_millis(2_500)),
        (30, true, true, at(50)),
    ];
    for (seconds, published, renewed, next) in cases {
        let (written, plan) = step(&data, at(seconds), published);
        assert_eq!(
            plan.new_leaf.is_some(),
            renewed,
            "at {seconds}s, published {published}"
        );
        assert_eq!(plan.new_ca, None);
        if renewed {
            assert_eq!(plan.new_leaf, Some(LeafReason::Renewal));
            assert_eq!(leaf(&written).not_after, at(seconds + 40));
            assert_eq!(cas(&written), cas(&data), "the same CA signs");
            let (_, after) = step(&written, at(seconds), true);
            assert_eq!(after.next_check, next);
        } else {
            assert_eq!(written, data);
            assert_eq!(plan.next_check, next, "at {seconds}s");
        }
    }
}

#[test]
fn a_ca_is_rotated_a_leaf_lifetime_and_renew_before_ahead_and_signs_only_once_settled() {
    // Renewed at 30: the leaf's notAfter is 70, due at 60.
    let (data, _) = step(&fresh(), at(30), true);
    // The CA (notAfter 100) signs its last full-lifetime leaf at 50.
    let (rotated, plan) = step(&data, at(50), true);
    assert_eq!(plan.new_ca, Some(CaReason::Expiring));
    assert_eq!(plan.new_leaf, None);
    let bundle = cas(&rotated);
    assert_eq!(bundle.len(), 2, "the old CA stays");
    assert_eq!(bundle[0], cas(&data)[0]);
    assert_eq!(leaf(&rotated), leaf(&data), "the serving certificate stays");
    let (same, plan) = step(&rotated, at(60), false);
    assert_eq!(plan.new_leaf, None, "not while unpublished");
    assert_eq!(same, rotated);
    let (renewed, plan) = step(&rotated, at(60), true);
    assert_eq!(plan.new_leaf, Some(LeafReason::Renewal));
    let new_ca = &cas(&rotated)[1];
    assert!(leaf(&renewed).is_signed_by(new_ca), "signed by the new CA");
    assert_eq!(cas(&renewed).len(), 2);

    // The old CA leaves the bundle when it expires, and no leaf it signed outlives it.
    let (pruned, plan) = step(&renewed, at(100), true);
    assert_eq!(plan.kept_cas, [1]);
    assert_eq!(
        plan.new_ca,
        Some(CaReason::Expiring),
        "the next rotation is due too"
    );
    assert_eq!(cas(&pruned)[0], *new_ca);
    assert_eq!(cas(&pruned).len(), 2);
}

#[test]
fn a_new_ca_waits_to_sign_until_it_settled() {
    let data = fresh();
    let (rotated, _) = step(&data, at(50), true);
    // Make the leaf due during the settling: a leaf of 40 s renewed at 12 is due at 42 <
    // rotation... instead plan the rotated Secret at the second after the rotation with a leaf
    // that is due: the data of the rotation with an old, due leaf.
    let mut old_leaf = rotated.clone();
    let (at_30, _) = step(&data, at(30), true); // leaf notAfter 70, due at 60
    old_leaf.insert(TLS_CERT.to_owned(), at_30[TLS_CERT].clone());
    old_leaf.insert(TLS_KEY.to_owned(), at_30[TLS_KEY].clone());
    // At 60 the new CA (made at 50) has settled: renewed at once.
    let (_, plan) = step(&old_leaf, at(60), true);
    assert_eq!(plan.new_leaf, Some(LeafReason::Renewal));
    // A CA made one second before the leaf is due waits 2.5 s.
    let (late, _) = step(&at_30, at(59), true);
    let stored = Stored::read(&late, &names(), at(60));
    assert_eq!(stored.cas.len(), 2, "rotated at 59");
    let plan = crate::plan(&stored, at(60), &LIFETIMES, true);
    assert_eq!(plan.new_leaf, None);
    assert_eq!(plan.next_check, at(59) + Duration::from_millis(2_500));
    let plan = crate::plan(&stored, at(62), &LIFETIMES, true);
    assert_eq!(plan.new_leaf, Some(LeafReason::Renewal));
}

#[test]
fn an_unusable_serving_certificate_is_replaced_at_once() {
    let data = fresh();
    let other = fresh();
    let mut cases: Vec<(&str, Data, LeafProblem)> = Vec::new();
    let mut missing = data.clone();
    missing.remove(TLS_KEY);
    cases.push(("no key", missing, LeafProblem::Missing));
    let mut garbled = data.clone();
    garbled.insert(TLS_CERT.to_owned(), b"not PEM".to_vec());
    cases.push(("garbled", garbled, LeafProblem::Unreadable));
    let mut mismatched = data.clone();
    mismatched.insert(TLS_KEY.to_owned(), other[TLS_KEY].clone());
    cases.push(("another key", mismatched, LeafProblem::KeyMismatch));
    let mut foreign = data.clone();
    foreign.insert(TLS_CERT.to_owned(), other[TLS_CERT].clone());
    foreign.insert(TLS_KEY.to_owned(), other[TLS_KEY].clone());
    cases.push(("signed by another CA", foreign, LeafProblem::UnknownSigner));
    for (what, broken, problem) in cases {
        let (fixed, plan) = step(&broken, at(1), true);
        assert_eq!(plan.new_leaf, Some(LeafReason::Unusable(problem)), "{what}");
        assert_eq!(plan.new_ca, None, "{what}");
        assert!(leaf(&fixed).is_signed_by(&cas(&data)[0]), "{what}");
    }
    // Another Service: other names.
    let stored = Stored::read(
        &data,
        &crate::service_dns_names("hooks", "poolkeeper-system"),
        at(1),
    );
    assert_eq!(stored.leaf.unwrap_err(), LeafProblem::OtherNames);
    // Expired.
    let stored = Stored::read(&data, &names(), at(40));
    assert_eq!(stored.leaf.unwrap_err(), LeafProblem::Expired);
}

#[test]
fn a_secret_of_another_origin_keeps_its_ca_while_a_new_one_settles() {
    let adopted = fresh();
    let mut without_key = adopted.clone();
    without_key.remove(CA_KEY);
    let (data, plan) = step(&without_key, at(1), true);
    assert_eq!(plan.new_ca, Some(CaReason::NoSigner));
    assert_eq!(plan.new_leaf, None, "its serving certificate is still good");
    assert_eq!(cas(&data).len(), 2);
    assert_eq!(leaf(&data), leaf(&adopted));
}

/// Runs the leader's loop second by second for `seconds`, publishing after each write, and
/// checks at every second that the leaf served is valid and signed by a CA published at least
/// a settling time before the leaf was written. Returns (leaf rotations, CA rotations).
fn simulate(seconds: u64, lifetimes: &Lifetimes) -> (usize, usize) {
    let mut data = Data::new();
    let mut published: Vec<(SystemTime, Vec<CertificateInfo>)> = Vec::new();
    let (mut leaves, mut rotations) = (0, 0);
    for second in 0..seconds {
        let now = at(second);
        let stored = Stored::read(&data, &names(), now);
        let plan = crate::plan(&stored, now, lifetimes, true);
        if plan.writes(&stored) {
            data = issue(&data, &stored, &plan, now, lifetimes, &names()).unwrap();
            leaves += usize::from(plan.new_leaf.is_some() && second > 0);
            rotations += usize::from(plan.new_ca == Some(CaReason::Expiring));
            if let Some(leaf_write) = plan.new_leaf.filter(|_| second > 0) {
                let signer = leaf(&data).signer_among(&cas(&data)).cloned().unwrap();
                let since = published
                    .iter()
                    .find(|(_, bundle)| bundle.contains(&signer))
                    .map(|(when, _)| *when)
                    .unwrap();
                assert!(
                    now >= since + lifetimes.settle(),
                    "{leaf_write:?} at {second}s signed by a CA published at {since:?}"
                );
            }
            published.push((now, cas(&data)));
        }
        let served = leaf(&data);
        assert!(
            served.is_valid_at(now),
            "at {second}s: {}",
            served.describe()
        );
        assert!(served.signer_among(&cas(&data)).is_some(), "at {second}s");
        assert!(
            cas(&data).iter().all(|ca| ca.is_valid_at(now)),
            "at {second}s"
        );
    }
    (leaves, rotations)
}

#[test]
fn over_many_lifetimes_every_served_certificate_is_trusted() {
    let (leaves, rotations) = simulate(400, &LIFETIMES);
    // Leaves every 30 s, CAs every 50 s.
    assert!(leaves >= 12, "{leaves} leaf rotations");
    assert!(rotations >= 7, "{rotations} CA rotations");
}
