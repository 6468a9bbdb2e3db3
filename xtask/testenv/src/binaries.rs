//! Where the control-plane executables (etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler) and kubectl come from.

use std::path::{Path, PathBuf};

use poolkeeper_gomod::{
    CONTROL_PLANE_BINARIES, KUBEBUILDER_ASSETS, POOLKEEPER_CONTROL_PLANE,
    POOLKEEPER_OPENREPORTS_CRDS, required_version,
};

use crate::TestEnvError;

/// The Go module that pins the Kubernetes release; its `require` line is the one place the version is written.
const KUBERNETES_GO_MOD: &str = include_str!("../../controlplane/kubernetes/go.mod");

/// The Kubernetes release the control plane is built from, e.g. `v1.36.3`.
pub fn kubernetes_version() -> &'static str {
    required_version(KUBERNETES_GO_MOD, "k8s.io/kubernetes").unwrap_or("unknown")
}

/// The workspace's root directory.
pub(crate) fn workspace_root() -> &'static Path {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    // xtask/testenv -> the workspace root
    manifest_dir.ancestors().nth(2).unwrap_or(manifest_dir)
}

/// The installation's manifests: `<workspace>/deploy`.
pub fn deploy_dir() -> PathBuf {
    workspace_root().join("deploy")
}

/// The directory `cargo xtask control-plane` builds into: `<workspace>/target/control-plane/<version>`.
pub fn default_binaries_dir() -> PathBuf {
    workspace_root()
        .join("target")
        .join("control-plane")
        .join(kubernetes_version())
}

/// Resolved paths of the control-plane executables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kube_scheduler: PathBuf,
    /// The client a user types; the walk-through of the README runs it.
    pub kubectl: PathBuf,
}

impl Binaries {
    /// `KUBEBUILDER_ASSETS` if set, else `POOLKEEPER_CONTROL_PLANE` if set, else [`default_binaries_dir`].
    pub fn discover() -> Result<Self, TestEnvError> {
        let from_env = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(|v| (name.to_owned(), PathBuf::from(v)))
        };
        let (source, dir) = from_env(KUBEBUILDER_ASSETS)
            .or_else(|| from_env(POOLKEEPER_CONTROL_PLANE))
            .unwrap_or_else(|| ("the default location".to_owned(), default_binaries_dir()));
        Self::in_dir(&dir).map_err(|missing| TestEnvError::BinariesNotFound {
            dir,
            source_of_dir: source,
            missing,
        })
    }

    /// The executables in `dir`, or the names of those that are missing.
    pub fn in_dir(dir: &Path) -> Result<Self, Vec<String>> {
        let missing: Vec<String> = CONTROL_PLANE_BINARIES
            .iter()
            .filter(|name| !dir.join(name).is_file())
            .map(|name| (*name).to_owned())
            .collect();
        if !missing.is_empty() {
            return Err(missing);
        }
        Ok(Self {
            etcd: dir.join("etcd"),
            kube_apiserver: dir.join("kube-apiserver"),
            kube_controller_manager: dir.join("kube-controller-manager"),
            kube_scheduler: dir.join("kube-scheduler"),
            kubectl: dir.join("kubectl"),
        })
    }
}

/// The OpenReports CRD files (Report, ClusterReport) the tests install:
/// from `$POOLKEEPER_OPENREPORTS_CRDS`, else the directory `cargo xtask
/// control-plane` fetched them into beside the control plane's binaries.
pub fn openreports_crds() -> Vec<PathBuf> {
    let fetched = |dir: &Path| {
        std::fs::read_dir(dir)
            .ok()?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .find(|path| path.join("openreports.io_reports.yaml").is_file())
    };
    let dir = std::env::var_os(POOLKEEPER_OPENREPORTS_CRDS)
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            let binaries = PathBuf::from(std::env::var_os(POOLKEEPER_CONTROL_PLANE)?);
            fetched(binaries.parent()?)
        })
        .or_else(|| fetched(default_binaries_dir().parent()?))
        .unwrap_or_else(|| {
            panic!(
                "no OpenReports CRDs: set {POOLKEEPER_OPENREPORTS_CRDS} or run `cargo xtask control-plane`"
            )
        });
    [
        "openreports.io_reports.yaml",
        "openreports.io_clusterreports.yaml",
    ]
    .iter()
    .map(|file| dir.join(file))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_is_read_from_the_pinned_go_mod() {
        assert!(
            kubernetes_version().starts_with("v1."),
            "{}",
            kubernetes_version()
        );
    }

    #[test]
    fn missing_binaries_are_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("etcd"), b"").unwrap();
        assert_eq!(
            Binaries::in_dir(dir.path()),
            Err(vec![
                "kube-apiserver".to_owned(),
                "kube-controller-manager".to_owned(),
                "kube-scheduler".to_owned(),
                "kubectl".to_owned(),
            ])
        );
    }
}
