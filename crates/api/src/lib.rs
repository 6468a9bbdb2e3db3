//! The Kubernetes API types poolkeeper reads and writes, and the CRDs it
//! ships for clusters that do not have them yet:
//!
//! - [`MachineClass`] and [`Machine`] of gardener's machine-controller-manager
//!   (`machine.sapcloud.io/v1alpha1`, namespaced, short names `mcc` and `mc`);
//! - [`NodePool`] of OpenYurt (`apps.openyurt.io/v1beta2`, cluster-scoped);
//! - poolkeeper's own [`PlacementException`] (`poolkeeper.io/v1alpha1`,
//!   namespaced, short name `pex`).
//!
//! Fields poolkeeper does not use are kept in `extra` maps so that reading
//! and writing an object never drops what other controllers put there.

mod crd;
mod machine;
mod machine_class;
mod node_pool;
mod placement_exception;

pub use crd::{CRD_FILES, check_crd_files, crd_files, crd_yaml, crds, write_crd_files};
pub use machine::{ClassSpec, Machine, MachineSpec, MachineStatus};
pub use machine_class::MachineClass;
pub use node_pool::{NodePool, NodePoolSpec, NodePoolStatus, NodePoolType};
pub use placement_exception::{ExceptionAllowance, PlacementException, PlacementExceptionSpec};

pub use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// API group of MachineClass and Machine.
pub const MACHINE_GROUP: &str = "machine.sapcloud.io";
/// API version of MachineClass and Machine.
pub const MACHINE_VERSION: &str = "v1alpha1";
/// API group of NodePool.
pub const NODE_POOL_GROUP: &str = "apps.openyurt.io";
/// API version of NodePool.
pub const NODE_POOL_VERSION: &str = "v1beta2";
/// API group of poolkeeper's own PlacementException.
pub const POOLKEEPER_GROUP: &str = "poolkeeper.io";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing {path}: {source}")]
    Write {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is out of date with the CRD types; run `cargo xtask crds`")]
    Stale { path: std::path::PathBuf },
}
