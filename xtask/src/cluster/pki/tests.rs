//! The generated certificates read back with an X.509 parser: subjects, names, usages, issuer
//! and signatures, validity, and keys that match their certificates.

use std::net::IpAddr;

use rcgen::PublicKeyData;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::{Pem, parse_x509_pem};

use super::*;

/// 2027-01-15T08:00:00Z.
const NOW: i64 = 1_800_000_000;

fn generated() -> Pki {
    Pki::generate(OffsetDateTime::from_unix_timestamp(NOW).unwrap()).unwrap()
}

fn pem(text: &str) -> Pem {
    let (rest, pem) = parse_x509_pem(text.as_bytes()).unwrap();
    assert!(rest.is_empty());
    pem
}

fn leaf<'a>(pki: &'a Pki, name: &str) -> &'a KeyAndCert {
    pki.leaves
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, leaf)| leaf)
        .unwrap_or_else(|| panic!("no certificate {name}"))
}

fn strings<'a>(
    attributes: impl Iterator<Item = &'a x509_parser::x509::AttributeTypeAndValue<'a>>,
) -> Vec<String> {
    attributes
        .map(|attribute| attribute.as_str().unwrap().to_owned())
        .collect()
}

/// Organizations and common names of a subject.
fn subject(cert: &X509Certificate<'_>) -> (Vec<String>, Vec<String>) {
    (
        strings(cert.subject().iter_organization()),
        strings(cert.subject().iter_common_name()),
    )
}

/// (serverAuth, clientAuth).
fn usages(cert: &X509Certificate<'_>) -> (bool, bool) {
    let eku = cert
        .extended_key_usage()
        .unwrap()
        .expect("extended key usage");
    (eku.value.server_auth, eku.value.client_auth)
}

fn names(cert: &X509Certificate<'_>) -> Vec<String> {
    let Some(san) = cert.subject_alternative_name().unwrap() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .map(|name| match name {
            GeneralName::DNSName(dns) => format!("DNS:{dns}"),
            GeneralName::IPAddress(bytes) => {
                let octets: [u8; 4] = (*bytes).try_into().unwrap();
                format!("IP:{}", IpAddr::from(octets))
            }
            other => panic!("unexpected name {other:?}"),
        })
        .collect()
}

#[test]
fn every_file_is_named_as_the_daemons_read_it() {
    let pki = generated();
    let files: Vec<String> = pki.files().into_iter().map(|(name, _)| name).collect();
    let mut expected = vec!["ca.crt".to_owned()];
    for name in [
        "apiserver",
        "admin",
        "kubelet",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-proxy",
        "apiserver-kubelet-client",
    ] {
        expected.push(format!("{name}.crt"));
        expected.push(format!("{name}.key"));
    }
    expected.extend([
        "service-account.key".to_owned(),
        "service-account.pub".to_owned(),
    ]);
    assert_eq!(files, expected);
    for name in KUBECONFIGS {
        assert!(files.contains(&format!("{name}.crt")), "{name}");
    }
}

#[test]
fn the_ca_is_a_self_signed_ca() {
    let pki = generated();
    let ca_pem = pem(&pki.ca_pem);
    let ca = ca_pem.parse_x509().unwrap();
    assert_eq!(
        subject(&ca),
        (vec![], vec!["poolkeeper-cluster-ca".to_owned()])
    );
    assert_eq!(ca.issuer(), ca.subject());
    assert!(ca.basic_constraints().unwrap().unwrap().value.ca);
    let key_usage = ca.key_usage().unwrap().unwrap().value;
    assert!(key_usage.key_cert_sign() && key_usage.crl_sign());
    ca.verify_signature(None).unwrap();
}

#[test]
fn the_apiserver_serves_every_name_it_is_reached_by() {
    let pki = generated();
    let ca_pem = pem(&pki.ca_pem);
    let ca = ca_pem.parse_x509().unwrap();
    let cert_pem = pem(&leaf(&pki, "apiserver").cert_pem);
    let cert = cert_pem.parse_x509().unwrap();
    assert_eq!(subject(&cert), (vec![], vec!["kube-apiserver".to_owned()]));
    assert_eq!(
        names(&cert),
        [
            "IP:10.240.0.1",
            "IP:10.96.0.1",
            "IP:127.0.0.1",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
            "DNS:localhost",
        ]
    );
    assert_eq!(usages(&cert), (true, false));
    assert!(!cert.is_ca());
    assert_eq!(cert.issuer(), ca.subject());
    cert.verify_signature(Some(ca.public_key())).unwrap();
}

#[test]
fn each_client_carries_its_user_and_group() {
    let pki = generated();
    let ca_pem = pem(&pki.ca_pem);
    let ca = ca_pem.parse_x509().unwrap();
    let cases: [(&str, &[&str], &str); 6] = [
        ("admin", &["system:masters"], "poolkeeper-cluster-admin"),
        ("kubelet", &["system:nodes"], "system:node:poolkeeper-node"),
        (
            "kube-controller-manager",
            &[],
            "system:kube-controller-manager",
        ),
        ("kube-scheduler", &[], "system:kube-scheduler"),
        ("kube-proxy", &[], "system:kube-proxy"),
        (
            "apiserver-kubelet-client",
            &["system:masters"],
            "kube-apiserver-kubelet-client",
        ),
    ];
    for (name, organizations, common_name) in cases {
        let cert_pem = pem(&leaf(&pki, name).cert_pem);
        let cert = cert_pem.parse_x509().unwrap();
        let organizations: Vec<String> = organizations.iter().map(|o| (*o).to_owned()).collect();
        assert_eq!(
            subject(&cert),
            (organizations, vec![common_name.to_owned()]),
            "{name}"
        );
        assert_eq!(usages(&cert), (false, true), "{name}");
        assert!(names(&cert).is_empty(), "{name}");
        assert_eq!(cert.issuer(), ca.subject(), "{name}");
        cert.verify_signature(Some(ca.public_key())).unwrap();
    }
}

#[test]
fn certificates_last_seven_days_and_keys_match_them() {
    let pki = generated();
    for (name, leaf) in &pki.leaves {
        let cert_pem = pem(&leaf.cert_pem);
        let cert = cert_pem.parse_x509().unwrap();
        assert_eq!(cert.validity().not_before.timestamp(), NOW, "{name}");
        assert_eq!(
            cert.validity().not_after.timestamp(),
            NOW + 7 * 24 * 3600,
            "{name}"
        );
        assert!(
            leaf.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"),
            "{name}"
        );
        let key = KeyPair::from_pem(&leaf.key_pem).unwrap();
        assert_eq!(
            key.subject_public_key_info(),
            cert.public_key().raw,
            "{name}"
        );
    }
    let service_account = KeyPair::from_pem(&pki.service_account_key_pem).unwrap();
    assert_eq!(
        service_account.public_key_pem(),
        pki.service_account_pub_pem
    );
    assert!(
        pki.service_account_pub_pem
            .starts_with("-----BEGIN PUBLIC KEY-----")
    );
}
