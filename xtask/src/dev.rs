//! `cargo xtask dev`: a local control plane with poolkeeper running against it.
//!
//! xtask builds what is missing, then replaces itself (exec) with `poolkeeper-testenv up`, so
//! Ctrl-C reaches that process directly and it stops the controller and the control plane.

use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::run::{cargo, display};
use crate::{Error, Result, controlplane, target_dir, workspace_root};

pub fn command(args: &[String]) -> Result<()> {
    let mut run_controller = true;
    let mut controller_args: Vec<String> = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--no-controller" => run_controller = false,
            "--" => {
                controller_args.extend(rest.by_ref().cloned());
            }
            other => return Err(Error::Usage(format!("dev: unknown option {other:?}"))),
        }
    }

    let root = workspace_root();
    let binaries = controlplane::ensure(&root, false)?;

    let mut build = cargo(&root);
    build.args([
        "build",
        "-j2",
        "-p",
        "poolkeeper-testenv",
        "--bin",
        "poolkeeper-testenv",
    ]);
    if run_controller {
        build.args(["-p", "poolkeeper", "--bin", "poolkeeper"]);
    }
    println!("$ {}", display(&build));
    crate::run::status(&mut build)?;

    let debug = target_dir(&root).join("debug");
    let mut up = std::process::Command::new(debug.join("poolkeeper-testenv"));
    up.current_dir(&root)
        .env("POOLKEEPER_CONTROL_PLANE", &binaries)
        .arg("up")
        .arg("--kubeconfig-out")
        .arg(target_dir(&root).join("dev").join("kubeconfig"));
    let existing = |relative: &str| Some(root.join(relative)).filter(|p| p.exists());
    for (flag, relative) in [
        ("--crds", "deploy/crds"),
        ("--objects", "config/examples"),
        ("--webhooks", "deploy/webhooks"),
    ] {
        if let Some(path) = existing(relative).filter(|p| has_yaml(p)) {
            up.arg(flag).arg(path);
        }
    }
    let config = existing("config/dev.yaml");
    if let Some(config) = &config {
        up.arg("--config").arg(config);
    }
    if run_controller {
        up.arg("--").arg(debug.join("poolkeeper")).arg("run");
        if let Some(config) = &config {
            up.arg("--config").arg(config);
        }
        up.args(["--kubeconfig", "{kubeconfig}"])
            .args(&controller_args);
    }
    println!("$ {}", display(&up));
    let error = up.exec();
    Err(Error::io(format!("starting `{}`", display(&up)), error))
}

fn has_yaml(path: &Path) -> bool {
    if path.is_file() {
        return true;
    }
    std::fs::read_dir(path).is_ok_and(|entries| {
        entries.flatten().any(|entry| {
            matches!(
                entry.path().extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            )
        })
    })
}
