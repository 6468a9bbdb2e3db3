//! `cargo xtask cluster test` and the pipeline's real-cluster step: lint the tests, build what
//! they need (the release binary and its image archive, the node's binaries, helm, promtool), bring the
//! cluster up, run them (`cargo test -p xtask --example cluster-tests`), and take the cluster
//! down again whatever happened.
//!
//! The tests are an example target with `test = false`, so neither a plain `cargo test` nor the
//! workspace's test steps run them without their cluster, and the workspace's clippy sees only
//! their stub `main`: they are linted here, in the test profile.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Binaries, Layout, NETNS, NODE_NAME, host, teardown};
use crate::dist::Variant;
use crate::run::{cargo, display};
use crate::{Error, Result, dist, image};

const EXAMPLE: &str = "cluster-tests";
/// Read by the tests: where the cluster and its tools are.
const ENV: [&str; 16] = [
    "POOLKEEPER_CLUSTER_NETNS",
    "POOLKEEPER_CLUSTER_KUBECONFIG",
    "POOLKEEPER_CLUSTER_CONTAINERD",
    "POOLKEEPER_CLUSTER_NODE",
    "POOLKEEPER_CLUSTER_IMAGE_ARCHIVE",
    "POOLKEEPER_CLUSTER_IMAGE",
    "POOLKEEPER_CLUSTER_WORKLOAD_IMAGE",
    "POOLKEEPER_CLUSTER_PATH",
    "POOLKEEPER_HELM",
    "POOLKEEPER_BINARY",
    "POOLKEEPER_KUSTOMIZE",
    "POOLKEEPER_CLUSTER_AUDIT_LOG",
    "POOLKEEPER_PROMTOOL",
    "POOLKEEPER_CLUSTER_PIDS",
    "POOLKEEPER_CLUSTER_LOGS",
    "POOLKEEPER_CLUSTER_KUBECTL_IMAGE",
];

/// `cargo xtask cluster test [FILTER]...`: the tests with libtest's output as it comes.
pub fn command(root: &Path, layout: &Layout, filter: &[String]) -> Result<()> {
    run(root, layout, filter, Variant::Shipped, |command| {
        crate::run::status(command).map_err(|e| ((), e))
    })
    .map_err(|(_, e)| e)
}

/// Lints, builds, brings the cluster up, runs the tests with `run_tests` against the image of
/// `variant`, takes the cluster down. Whatever keeps the tests from running is an error naming
/// the reason: they are never skipped.
pub fn run<T: Default>(
    root: &Path,
    layout: &Layout,
    filter: &[String],
    variant: Variant,
    run_tests: impl FnOnce(&mut Command) -> Result<T, (T, Error)>,
) -> Result<T, (T, Error)> {
    let (host, mut test) = prepare(root, layout, filter, variant).map_err(|e| (T::default(), e))?;
    let outcome = run_tests(&mut test);
    let down = teardown::cleanup(layout, &host.cgroups);
    match (outcome, down) {
        (Ok(counts), Ok(())) => Ok(counts),
        (Ok(counts), Err(e)) => Err((counts, e)),
        (Err(failed), _) => Err(failed),
    }
}

/// Everything up to a running cluster, and the test command for it.
fn prepare(
    root: &Path,
    layout: &Layout,
    filter: &[String],
    variant: Variant,
) -> Result<(host::Host, Command)> {
    // First the checks that take seconds: a machine that cannot run the cluster, or tests
    // that do not pass clippy, say so before the long builds.
    let host = host::check()?;
    lint(root)?;
    let binaries = super::build(root, true)?;
    let dist = dist::build(root, false, variant)?;
    let archive = image::write_archive(root, &dist, variant)?;
    if super::netns_exists() {
        eprintln!("cluster: taking down the cluster that is up, to test on a fresh one");
        teardown::down(layout)?;
    }
    super::up(layout, &host, &binaries)?;
    let binary = dist.join("poolkeeper");
    let image = Image {
        archive,
        tag: image::tag(variant),
        binary,
    };
    Ok((host, test_command(root, layout, &binaries, &image, filter)))
}

fn lint(root: &Path) -> Result<()> {
    let mut clippy = cargo(root);
    clippy
        .args([
            "clippy",
            "-j2",
            "-p",
            "xtask",
            "--example",
            EXAMPLE,
            "--profile",
            "test",
        ])
        .args(["--", "-D", "warnings"]);
    println!("$ {}", display(&clippy));
    crate::run::status(&mut clippy)
}

/// poolkeeper as the tests run it: its image's archive and tag, and the binary in it.
struct Image {
    archive: PathBuf,
    tag: String,
    binary: PathBuf,
}

fn test_command(
    root: &Path,
    layout: &Layout,
    binaries: &Binaries,
    image: &Image,
    filter: &[String],
) -> Command {
    let kustomize = &binaries.kustomize;
    let mut test = cargo(root);
    test.args(["test", "-j2", "-p", "xtask", "--example", EXAMPLE, "--"])
        .args(filter)
        // One cluster: one installation at a time (the tests also take a lock).
        .arg("--test-threads=1");
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let helm: PathBuf = binaries.helm.clone().unwrap_or_default();
    let promtool: PathBuf = binaries.promtool.clone().unwrap_or_default();
    let values = [
        NETNS.to_owned(),
        path(&layout.kubeconfig()),
        path(&layout.containerd_socket()),
        NODE_NAME.to_owned(),
        path(&image.archive),
        image.tag.clone(),
        binaries.pause_image.clone(),
        super::tool_path(binaries),
        path(&helm),
        path(&image.binary),
        path(kustomize),
        path(&layout.audit_log()),
        path(&promtool),
        path(&layout.pids_file()),
        path(&layout.logs()),
        binaries.kubectl_image.clone(),
    ];
    test.envs(ENV.iter().zip(values));
    test
}
