//! Tests of the installation on a real node: the README's kustomize and Helm installations of
//! poolkeeper's image, day-two operations, leader safety under faults (`chaos`, judged by the
//! API server's audit log), and the Helm chart's lint and rendering. They need
//! the cluster of `cargo xtask cluster`, so they are not among the workspace's test targets:
//! `cargo xtask cluster test` (a step of `cargo xtask test`) builds what they need, brings the
//! cluster up, runs them with `cargo test -p xtask --example cluster-tests`, and takes the
//! cluster down.

#[cfg(test)]
mod chaos;
#[cfg(test)]
mod chart;
#[cfg(test)]
mod gitops;
#[cfg(test)]
mod helm;
#[cfg(test)]
mod kustomize;
#[cfg(test)]
mod monitoring;
#[cfg(test)]
mod operations;
/// The chaos run's oracle, shared with `cargo xtask chaos`.
#[cfg(test)]
#[path = "../../src/chaos/oracle.rs"]
mod oracle;
/// How the tier starts and restarts its daemons: the chaos test restarts the API server.
#[cfg(test)]
#[path = "../../src/cluster/process.rs"]
mod process;
#[cfg(test)]
mod rotation;
#[cfg(test)]
mod same_objects;
#[cfg(test)]
mod scenario;
/// The chaos test's fault schedule, tested with xtask's own tests.
#[cfg(test)]
#[path = "../../src/chaos/schedule.rs"]
mod schedule;
#[cfg(test)]
mod support;

fn main() {
    eprintln!("these are tests: run them with `cargo xtask cluster test` (they need its cluster)");
    std::process::exit(2);
}
