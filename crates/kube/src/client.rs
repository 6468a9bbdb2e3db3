//! The Kubernetes client of every subcommand, found as kubectl finds its own.

use std::path::{Path, PathBuf};

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no Kubernetes client configuration (in-cluster or $KUBECONFIG): {0}")]
    InferConfig(#[source] kube::config::InferConfigError),
    #[error("cannot build the Kubernetes client: {0}")]
    Build(#[source] kube::Error),
}

/// Builds the client from `kubeconfig`, or else in-cluster / `$KUBECONFIG`
/// / `~/.kube/config` as kubectl does.
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client, ClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let unreadable = |source| ClientError::Kubeconfig {
                path: path.to_owned(),
                source,
            };
            let kubeconfig = Kubeconfig::read_from(path).map_err(unreadable)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(unreadable)?
        }
        None => kube::Config::infer()
            .await
            .map_err(ClientError::InferConfig)?,
    };
    tracing::info!(server = %config.cluster_url, "using the Kubernetes API server");
    Client::try_from(config).map_err(ClientError::Build)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443
users:
- name: admin
  user:
    token: secret
contexts:
- name: local
  context:
    cluster: local
    user: admin
current-context: local
";

    #[tokio::test]
    async fn a_kubeconfig_names_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, KUBECONFIG).unwrap();
        let client = client(Some(&path)).await.unwrap();
        assert_eq!(
            client.default_namespace(),
            "default",
            "a context without a namespace works in default"
        );
    }

    #[tokio::test]
    async fn a_bad_kubeconfig_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "apiVersion: v1\nkind: Config\n").unwrap();
        let garbled = dir.path().join("garbled");
        std::fs::write(&garbled, "clusters: [\n").unwrap();
        for path in [missing, empty, garbled] {
            let Err(error) = client(Some(&path)).await else {
                panic!("{} gave a client", path.display());
            };
            assert!(
                matches!(&error, ClientError::Kubeconfig { path: named, .. } if *named == path),
                "{error:?}"
            );
            let message = error.to_string();
            assert!(
                message.starts_with(&format!("cannot read kubeconfig {}: ", path.display())),
                "{message}"
            );
        }
    }
}
