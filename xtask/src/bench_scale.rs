//! `cargo xtask bench-scale [ARGS]`: the scale benchmark of `xtask/scale` against a local
//! control plane. Builds poolkeeper and `poolkeeper-scale` in release, then runs the benchmark
//! with the repository's CRDs and webhook configurations; ARGS go to `poolkeeper-scale` (for
//! example `--nodes 500 --machines 2000` for a quick run; `-- --help` lists them). The report
//! goes to `target/bench-scale/report.md`.
//!
//! `cargo xtask bench-kwok [ARGS]`: the same benchmark with the cluster alive — kwok (built
//! from its pinned Go module) keeps the Nodes heart-beating and moves the Pods to Running
//! (some from Deployments, through kube-controller-manager and kube-scheduler; the rest
//! created bound to a Node of their pool by parallel clients). The report goes to
//! `target/bench-kwok/report.md`.
//!
//! `cargo xtask bench-engines [ARGS]`: the two placement engines (`webhook`, then `cel`) in
//! one run against one small control plane: plain Pod creates in a bound namespace and
//! binding changes, each engine's creates/s, latency, kube-apiserver and poolkeeper CPU per
//! create and webhook calls per create. The report goes to `target/bench-engines/report.md`.

use std::process::Command;

use crate::run::{cargo, display};
use crate::{Result, controlplane, target_dir, workspace_root};

pub fn command(args: &[String]) -> Result<()> {
    run_bench(args, None)
}

pub fn kwok_command(args: &[String]) -> Result<()> {
    let kwok = controlplane::kwok(&workspace_root())?;
    let mut all = vec![
        "--kwok".to_owned(),
        kwok.display().to_string(),
        "--command".to_owned(),
        "cargo xtask bench-kwok".to_owned(),
    ];
    for arg in args {
        // The OpenReports CRDs come from their Go module, as the tests take them.
        if arg == "--reports" {
            all.push("--openreports-crds".to_owned());
            all.push(
                crate::openreports::ensure(&workspace_root())?
                    .display()
                    .to_string(),
            );
        } else {
            all.push(arg.clone());
        }
    }
    run_bench(&all, Some("bench-kwok"))
}

/// 100 Nodes in 10 pools, no MachineClass: the creates, not the cluster, are measured.
pub fn engines_command(args: &[String]) -> Result<()> {
    let mut all: Vec<String> = [
        "--engines",
        "--command",
        "cargo xtask bench-engines",
        "--nodes",
        "100",
        "--pools",
        "10",
        "--classes",
        "0",
        "--unused-classes",
        "0",
        "--machines",
        "0",
        "--pods",
        "2000",
        "--pod-concurrency",
        "8",
        "--changes",
        "30",
        "--engine-rounds",
        "2",
    ]
    .map(str::to_owned)
    .to_vec();
    all.extend(args.iter().cloned());
    run_bench(&all, Some("bench-engines"))
}

/// Builds poolkeeper and the benchmark, then runs it with `args`; the report goes to
/// target/<`out`, bench-scale by default>.
fn run_bench(args: &[String], out: Option<&str>) -> Result<()> {
    let root = workspace_root();
    let binaries = controlplane::ensure(&root, false)?;
    let mut build = cargo(&root);
    build.args([
        "build",
        "--release",
        "-j2",
        "-p",
        "poolkeeper",
        "--bin",
        "poolkeeper",
    ]);
    build.args(["-p", "poolkeeper-scale", "--bin", "poolkeeper-scale"]);
    println!("$ {}", display(&build));
    crate::run::status(&mut build)?;

    let target = target_dir(&root);
    let release = target.join("release");
    let mut bench = Command::new(release.join("poolkeeper-scale"));
    bench
        .current_dir(&root)
        .env(poolkeeper_gomod::POOLKEEPER_CONTROL_PLANE, &binaries)
        .arg("--poolkeeper")
        .arg(release.join("poolkeeper"))
        .arg("--crds")
        .arg(root.join("deploy/crds"))
        .arg("--webhooks")
        .arg(root.join("deploy/webhooks"))
        .arg("--out")
        .arg(target.join(out.unwrap_or("bench-scale")))
        .args(args);
    println!("$ {}", display(&bench));
    crate::run::status(&mut bench)
}
