//! `cargo xtask`: the project's automation. Run `cargo xtask help` for the commands.

mod bench_scale;
mod chaos;
mod checks;
mod cluster;
mod controlplane;
mod crds;
mod dev;
mod dist;
mod fuzz;
mod image;
mod oci;
mod openreports;
mod pipeline;
mod run;
mod soak;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  control-plane [--force]   build etcd, kube-apiserver, kube-controller-manager, kube-scheduler
                            and kubectl from the pinned Go
                            modules if missing or stale, and print their directory
  test [-p PACKAGE]...      fmt check, source checks, clippy, CRD check, unit tests, control
                            plane, end-to-end and doc tests (of the whole workspace, or of the
                            named packages)
  checks [-p PACKAGE]...    the source checks alone: no function over 80 lines, no default for a
                            tunable (`*Settings`, `Retries`) outside crates/config, and the
                            event catalog held to the code
  dev [--no-controller] [-- ARGS]
                            control plane + CRDs + sample objects + webhooks, with poolkeeper
                            running against it (ARGS are appended to `poolkeeper run`); Ctrl-C stops
  crds [--check]            write deploy/crds/*.yaml from poolkeeper_api::crds(), or check them
  dist [--glibc]            target/dist/poolkeeper, the release binary linked statically (musl;
                            glibc with --glibc or where musl can't be built), and
                            target/dist/manifests.yaml, deploy/ rendered by kustomize (built from
                            its pinned Go module); then runs the binary's check-config and ldd
  image [--glibc] [--oci-archive]
                            dist, then the OCI image poolkeeper:<version> of the Dockerfile with
                            buildah or podman (FROM scratch: no base image is pulled); with
                            --oci-archive, written by xtask itself as target/dist/poolkeeper-
                            <version>.oci.tar, no builder needed
  cluster up|down|status|build|exec|test
                            a real one-node cluster (containerd, runc, CNI bridge, kube-proxy,
                            kubelet) in the network namespace poolkeeper-cluster; `test` runs
                            the install tests against it (kustomize, Helm); needs root
  bench [CARGO BENCH ARGS]  run the benchmarks (all, or those selected by the arguments); the
                            webhook load benchmark needs wrk (`apt-get install wrk`)
  bench-webhook             the one-core webhook benchmark: server and load generator (vegeta,
                            built from its Go module) pinned to one core each, fixed rates
  bench-scale [ARGS]        the scale benchmark: a local control plane loaded with 5,000 Nodes,
                            500 NodePools, 2,000 MachineClasses and 20,000 Machines, then the
                            release binary measured against it (ARGS go to poolkeeper-scale;
                            report in target/bench-scale/report.md)
  bench-kwok [ARGS]         the living cluster: kwok (built from its Go module) keeps the 5,000
                            Nodes heart-beating and moves 150,000 Deployment Pods to Running;
                            steady-state CPU/RSS, Pod creation through the webhooks, an audit
                            round, a restart and churn (report in target/bench-kwok/report.md);
                            --reports turns on audit.reports with the OpenReports CRDs and
                            --violating-percent P places P% of the Pods outside their pool
  bench-engines [ARGS]      the two placement engines (webhook, then cel; twice) in one run:
                            2,000 plain Pod creates in a bound namespace, 8 in flight, and 30
                            binding changes each (report in target/bench-engines/report.md)
  fuzz [TARGET]... [--time 10m]
                            run the libFuzzer targets of fuzz/ (all, or those named) one after
                            the other with cargo-fuzz (nightly; installed when missing), then
                            minimise fuzz/corpus/; fails on a crash
  chaos [--minutes N] | --audit-log FILE
                            leader safety on the real cluster (`cluster test`'s tier, needs
                            root): load, leader deleted / frozen / cut off from the API server,
                            both replicas deleted, for N minutes (10); then the end state and
                            the oracle: no accepted write outside its replica's term in the API
                            server's audit log (or the oracle alone over FILE)
  soak [--duration 10m] [--pods-per-second 5] [--machines-per-second 2] [--release]
                            poolkeeper against a local control plane under steady admissions and
                            Machine churn; samples RSS, fds and /metrics every minute and fails
                            when they grow past 1.5x or a request fails
";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status})")]
    CommandFailed { command: String, status: String },
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    ControlPlane(String),
    #[error("{0}")]
    Check(String),
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
        .to_owned()
}

/// The cargo target directory (honours CARGO_TARGET_DIR).
pub fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, rest) = match args.split_first() {
        Some((command, rest)) => (command.as_str(), rest),
        None => ("help", &[][..]),
    };
    let result = match command {
        "control-plane" => controlplane::command(rest),
        "cluster" => cluster::command(rest),
        "checks" => checks::command(rest),
        "test" => pipeline::command(rest),
        "dev" => dev::command(rest),
        "dist" => dist::command(rest),
        "image" => image::command(rest),
        "crds" => crds::command(rest),
        "bench" => bench(rest),
        "bench-webhook" => bench_webhook(rest),
        "bench-scale" => bench_scale::command(rest),
        "bench-kwok" => bench_scale::kwok_command(rest),
        "bench-engines" => bench_scale::engines_command(rest),
        "fuzz" => fuzz::command(rest),
        "soak" => soak::command(rest),
        "chaos" => chaos::command(rest),
        "help" | "-h" | "--help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => Err(Error::Usage(format!(
            "unknown command {other:?}\n\n{USAGE}"
        ))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask {command}: error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The package whose load benchmark drives the webhook server with `wrk`.
const WRK_PACKAGE: &str = "poolkeeper-webhook";

fn bench(args: &[String]) -> Result<()> {
    let root = workspace_root();
    let selects_packages = args
        .iter()
        .any(|a| a == "-p" || a.starts_with("--package") || a.starts_with("-p"));
    let names_webhook = args.iter().any(|a| a.contains(WRK_PACKAGE));
    let excludes = args.iter().any(|a| a.starts_with("--exclude"));
    let runs_webhook = if selects_packages {
        names_webhook
    } else {
        !(excludes && names_webhook)
    };
    if runs_webhook && !wrk_installed() {
        return Err(Error::Usage(format!(
            "the webhook load benchmark ({WRK_PACKAGE}, bench `load`) needs `wrk` on the PATH: \
             install it with `apt-get install wrk` (Debian/Ubuntu), or leave it out with \
             `cargo xtask bench --exclude {WRK_PACKAGE}`"
        )));
    }
    let mut command = run::cargo(&root);
    command.arg("bench");
    if !selects_packages {
        command.args(["--workspace", "--benches"]);
    }
    command.args(args);
    run::status(&mut command)
}

/// The one-core benchmark of the webhook server (`crates/webhook/benches/one_core.rs`).
fn bench_webhook(args: &[String]) -> Result<()> {
    let root = workspace_root();
    let mut command = run::cargo(&root);
    command.args(["bench", "-j2", "-p", WRK_PACKAGE, "--bench", "one_core"]);
    command.args(args);
    run::status(&mut command)
}

/// `wrk` starts (it exits non-zero on `--version`, so only starting counts).
fn wrk_installed() -> bool {
    std::process::Command::new("wrk")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok()
}
