//! `poolkeeper-scale --kwok`: the cluster kept alive. kube-scheduler and
//! kube-controller-manager run beside the API server, kwok keeps the 5,000 Nodes
//! heart-beating (Lease renewals, status re-stamped) and moves Pods to Running; the Pods, in
//! the bound namespaces and each through both webhooks, come from Deployments and, for the
//! bulk, from parallel clients creating them bound to a Node of their pool. Measured:
//! poolkeeper under heartbeats (before and with the Pods), the Pod creation (admission latency
//! as the API server records it, poolkeeper's CPU per admission), an audit round over every
//! Pod, a restart at that size and the memory after a churn of heartbeats and replaced Pods.

mod pods;
mod report;
mod run;
pub(crate) mod sample;
mod stages;

pub use run::run;
