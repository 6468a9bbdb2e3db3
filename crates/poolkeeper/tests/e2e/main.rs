//! poolkeeper end to end: the whole controller, in process, against a real
//! kube-apiserver (and kube-scheduler where pods must be placed). Each test
//! starts its own control plane.

mod audit;
mod balancer;
mod bindings;
mod blast_radius;
mod certificates;
mod enqueue;
mod faults;
mod harness;
mod machineclass;
mod manifests;
mod modes;
mod objects;
mod placement;
mod privilege;
mod process;
mod recording;
mod replicas;
mod secrets;
mod workloads;
