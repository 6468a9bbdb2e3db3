//! poolkeeper end to end: the whole controller, in process, against a real
//! kube-apiserver (and kube-scheduler where pods must be placed). Each test
//! starts its own control plane.

mod harness;
mod machineclass;
mod manifests;
mod placement;
mod process;
