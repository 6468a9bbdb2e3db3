//! The admin kubeconfig of a control plane, with every credential embedded so the file can be
//! copied elsewhere, and the client it gives.

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::TestEnvError;
use crate::certs::ClusterPki;

pub(crate) const CONTEXT: &str = "poolkeeper-testenv";

pub(crate) fn render(server: &str, pki: &ClusterPki) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {CONTEXT}
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {CONTEXT}-admin
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: {CONTEXT}
  context:
    cluster: {CONTEXT}
    user: {CONTEXT}-admin
    namespace: default
current-context: {CONTEXT}
",
        ca = base64(pki.ca_pem.as_bytes()),
        cert = base64(pki.admin.cert_pem.as_bytes()),
        key = base64(pki.admin.key_pem.as_bytes()),
    )
}

pub(crate) async fn client_for(kubeconfig: &Kubeconfig) -> Result<Client, TestEnvError> {
    let config =
        Config::from_custom_kubeconfig(kubeconfig.clone(), &KubeConfigOptions::default()).await?;
    Client::try_from(config).map_err(|e| TestEnvError::kube("building the admin client", e))
}

/// Standard base64 with padding (RFC 4648 §4), as kubeconfig's `*-data` fields expect.
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let symbols = chunk.len() + 1;
        for i in 0..4 {
            if i < symbols {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 0x3f) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, expected) in cases {
            assert_eq!(base64(input.as_bytes()), expected, "{input:?}");
        }
        assert_eq!(base64(&[0xff, 0xfe, 0xfd]), "//79");
    }

    #[test]
    fn rendered_kubeconfig_parses_with_embedded_credentials() {
        let pki = ClusterPki::generate().unwrap();
        let text = render("https://127.0.0.1:6443", &pki);
        let config = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(config.current_context.as_deref(), Some(CONTEXT));
        let cluster = config.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority_data.as_deref(),
            Some(base64(pki.ca_pem.as_bytes()).as_str())
        );
        let user = config.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.client_certificate_data.is_some());
        assert!(user.client_key_data.is_some());
    }
}
