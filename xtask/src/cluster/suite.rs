//! `cargo xtask cluster test` and the pipeline's real-cluster step: build what the tests need
//! (the release binary and its image archive, the node's binaries, helm), bring the cluster up,
//! run the test targets that need it (`cargo test -p xtask --features cluster --test cluster
//! --test chart`), and take it down again whatever happened.

use std::path::Path;
use std::process::Command;

use super::{Binaries, Layout, NETNS, NODE_NAME, host, teardown};
use crate::run::cargo;
use crate::{Error, Result, dist, image};

/// The test targets that run against the cluster (and helm's lint and template checks).
const TEST_TARGETS: [&str; 2] = ["cluster", "chart"];
/// Read by the tests: where the cluster and its tools are.
pub const ENV: [&str; 9] = [
    "POOLKEEPER_CLUSTER_NETNS",
    "POOLKEEPER_CLUSTER_KUBECONFIG",
    "POOLKEEPER_CLUSTER_CONTAINERD",
    "POOLKEEPER_CLUSTER_NODE",
    "POOLKEEPER_CLUSTER_IMAGE_ARCHIVE",
    "POOLKEEPER_CLUSTER_IMAGE",
    "POOLKEEPER_CLUSTER_WORKLOAD_IMAGE",
    "POOLKEEPER_CLUSTER_PATH",
    "POOLKEEPER_HELM",
];

/// `cargo xtask cluster test [TESTNAME]`: the tests with libtest's output as it comes.
pub fn command(root: &Path, layout: &Layout, args: &[String]) -> Result<()> {
    run(root, layout, args, |command| {
        crate::run::status(command).map_err(|e| ((), e))
    })
    .map_err(|(_, e)| e)
}

/// Builds, brings the cluster up, runs the tests with `run_tests`, takes the cluster down.
/// Anything that keeps the tests from running is an error naming the reason: they are never
/// skipped.
pub fn run<T: Default>(
    root: &Path,
    layout: &Layout,
    filter: &[String],
    run_tests: impl FnOnce(&mut Command) -> Result<T, (T, Error)>,
) -> Result<T, (T, Error)> {
    let prepared = prepare(root, layout);
    let (host, binaries, archive) = prepared.map_err(|e| (T::default(), e))?;
    let mut test = cargo(root);
    test.args(["test", "-j2", "-p", "xtask", "--features", "cluster"]);
    for target in TEST_TARGETS {
        test.args(["--test", target]);
    }
    test.arg("--").args(filter).arg("--test-threads=1");
    let image = image::tag();
    let values = [
        NETNS.to_owned(),
        layout.kubeconfig().to_string_lossy().into_owned(),
        layout.containerd_socket().to_string_lossy().into_owned(),
        NODE_NAME.to_owned(),
        archive.to_string_lossy().into_owned(),
        image,
        binaries.pause_image.clone(),
        super::tool_path(&binaries),
        binaries
            .helm
            .as_ref()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
    ];
    test.envs(ENV.iter().zip(values));
    let outcome = run_tests(&mut test);
    let down = teardown::cleanup(layout, &host.cgroups);
    match (outcome, down) {
        (Ok(counts), Ok(())) => Ok(counts),
        (Ok(counts), Err(e)) => Err((counts, e)),
        (Err(failed), _) => Err(failed),
    }
}

/// Everything up to a running cluster: the image archive, the binaries, the host's
/// prerequisites, then `up` (after taking down a cluster left running).
fn prepare(root: &Path, layout: &Layout) -> Result<(host::Host, Binaries, std::path::PathBuf)> {
    // Before the long builds, so a machine that cannot run the cluster says so at once.
    let host = host::check()?;
    let binaries = super::build(root, true)?;
    let dist = dist::build(root, false)?;
    let archive = image::write_archive(root, &dist)?;
    if super::netns_exists() {
        eprintln!("cluster: taking down the cluster that is up, to test on a fresh one");
        teardown::down(layout)?;
    }
    super::up(layout, &host, &binaries)?;
    Ok((host, binaries, archive))
}
