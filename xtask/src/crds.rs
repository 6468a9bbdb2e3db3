//! `cargo xtask crds [--check]`: deploy/crds/*.yaml and deploy/chart/crds/*.yaml generated from
//! crates/api.
//!
//! Generating needs poolkeeper-api (kube, k8s-openapi), which the other commands do not; so the
//! plain xtask re-runs itself with the `api` feature for this command only.

use crate::{Error, Result};

fn parse_args(args: &[String]) -> Result<bool> {
    let mut check = false;
    for arg in args {
        match arg.as_str() {
            "--check" => check = true,
            other => return Err(Error::Usage(format!("crds: unknown option {other:?}"))),
        }
    }
    Ok(check)
}

#[cfg(not(feature = "api"))]
pub fn command(args: &[String]) -> Result<()> {
    parse_args(args)?;
    let root = crate::workspace_root();
    let mut command = crate::run::cargo(&root);
    command.args([
        "run",
        "--quiet",
        "-j2",
        "--package",
        "xtask",
        "--features",
        "api",
        "--",
        "crds",
    ]);
    command.args(args);
    crate::run::status(&mut command)
}

#[cfg(feature = "api")]
pub fn command(args: &[String]) -> Result<()> {
    /// kustomize's and the chart's copies (Helm installs a chart's crds/ before its templates).
    const OUTPUT_DIRS: [&str; 2] = ["deploy/crds", "deploy/chart/crds"];
    let check = parse_args(args)?;
    for output in OUTPUT_DIRS {
        let dir = crate::workspace_root().join(output);
        if check {
            poolkeeper_api::check_crd_files(&dir).map_err(|e| {
                Error::Check(format!("{e}; run `cargo xtask crds` and commit the result"))
            })?;
            println!(
                "{output}: {} CRDs up to date",
                poolkeeper_api::CRD_FILES.len()
            );
        } else {
            let written =
                poolkeeper_api::write_crd_files(&dir).map_err(|e| Error::Check(e.to_string()))?;
            for path in written {
                println!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}
