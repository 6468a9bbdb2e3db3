//! `poolkeeper-scale --kwok`: the cluster kept alive. kube-scheduler and
//! kube-controller-manager run beside the API server, kwok keeps the 5,000 Nodes
//! heart-beating (Lease renewals, status re-stamped) and moves Pods to Running; the Pods come
//! from Deployments in the bound namespaces, each through both webhooks. Measured: poolkeeper
//! under heartbeats (before and with the Pods), the Pod creation (admission latency as the API
//! server records it, poolkeeper's CPU per admission), an audit round over every Pod, a
//! restart at that size and the memory after the churn.

mod pods;
mod report;
mod run;
mod sample;
mod stages;

pub use run::run;
