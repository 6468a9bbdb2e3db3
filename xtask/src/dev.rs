//! `cargo xtask dev`: a local control plane with poolkeeper running against it.
//!
//! xtask builds what is missing, then replaces itself (exec) with `poolkeeper-testenv up`, so
//! Ctrl-C reaches that process directly and it stops the controller and the control plane.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

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
        .env(poolkeeper_gomod::POOLKEEPER_CONTROL_PLANE, &binaries)
        .arg("up")
        .arg("--kubeconfig-out")
        .arg(target_dir(&root).join("dev").join("kubeconfig"));
    for (flag, relative) in DEV_INPUTS {
        up.arg(flag).arg(required(&root, relative)?);
    }
    let config = required(&root, DEV_CONFIG)?;
    up.arg("--config").arg(&config);
    if run_controller {
        up.arg("--")
            .arg(debug.join("poolkeeper"))
            .arg("run")
            .arg("--config")
            .arg(&config)
            .args(["--kubeconfig", "{kubeconfig}"])
            .args(&controller_args);
    }
    println!("$ {}", display(&up));
    let error = up.exec();
    Err(Error::io(format!("starting `{}`", display(&up)), error))
}

/// What the dev cluster holds, named one by one: `config/examples/` also keeps fixtures for
/// `poolkeeper admit` and `explain` (Pods of namespaces the dev cluster does not have, a second
/// placement policy) that are not part of it.
const DEV_INPUTS: [(&str, &str); 3] = [
    ("--crds", "deploy/crds"),
    ("--objects", "config/examples/cluster.yaml"),
    ("--webhooks", "deploy/webhooks"),
];
/// poolkeeper's configuration for the dev cluster (local ports, text logs).
const DEV_CONFIG: &str = "config/dev.yaml";

fn required(root: &Path, relative: &str) -> Result<PathBuf> {
    let path = root.join(relative);
    if path.exists() {
        Ok(path)
    } else {
        Err(Error::Usage(format!(
            "dev: {relative} is missing from the workspace"
        )))
    }
}
