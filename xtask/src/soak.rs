//! `cargo xtask soak [--duration 10m] [--pods-per-second N] [--machines-per-second N] [--release]`:
//! the poolkeeper binary against a local control plane under steady admissions and Machine
//! churn (the `soak` example of `poolkeeper-fuzz`, which needs the Kubernetes client), with its
//! RSS, file descriptors and metrics sampled every minute; fails when they grow past 1.5x their
//! value after warm-up or any request of the load failed.

use std::process::Command;
use std::time::Duration;

use crate::run::{cargo, display};
use crate::{Error, Result, controlplane, target_dir, workspace_root};

#[derive(Debug, PartialEq)]
struct Options {
    duration: Duration,
    pods_per_second: String,
    machines_per_second: String,
    release: bool,
}

fn parse_args(args: &[String]) -> Result<Options> {
    let mut options = Options {
        duration: Duration::from_secs(600),
        pods_per_second: "5".to_owned(),
        machines_per_second: "2".to_owned(),
        release: false,
    };
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = || {
            rest.next()
                .cloned()
                .ok_or_else(|| Error::Usage(format!("soak: {arg} needs a value")))
        };
        match arg.as_str() {
            "--duration" => options.duration = crate::fuzz::parse_duration(&value()?)?,
            "--pods-per-second" => options.pods_per_second = rate(value()?)?,
            "--machines-per-second" => options.machines_per_second = rate(value()?)?,
            "--release" => options.release = true,
            other => return Err(Error::Usage(format!("soak: unknown option {other:?}"))),
        }
    }
    Ok(options)
}

fn rate(value: String) -> Result<String> {
    match value.parse::<f64>() {
        Ok(rate) if rate > 0.0 && rate <= 100.0 => Ok(value),
        _ => Err(Error::Usage(format!(
            "soak: a rate is a number of operations per second in (0, 100], got {value:?}"
        ))),
    }
}

pub fn command(args: &[String]) -> Result<()> {
    let options = parse_args(args)?;
    let root = workspace_root();
    let binaries = controlplane::ensure(&root, false)?;
    let mut build = cargo(&root);
    build.args(["build", "-j2", "-p", "poolkeeper", "--bin", "poolkeeper"]);
    build.args(["-p", "poolkeeper-fuzz", "--example", "soak"]);
    if options.release {
        build.arg("--release");
    }
    println!("$ {}", display(&build));
    crate::run::status(&mut build)?;

    let profile = if options.release { "release" } else { "debug" };
    let out = target_dir(&root).join(profile);
    let mut soak = Command::new(out.join("examples").join("soak"));
    soak.current_dir(&root)
        .env(poolkeeper_gomod::POOLKEEPER_CONTROL_PLANE, &binaries)
        .arg("--poolkeeper")
        .arg(out.join("poolkeeper"))
        .arg("--duration")
        .arg(options.duration.as_secs().to_string())
        .args(["--pods-per-second", &options.pods_per_second])
        .args(["--machines-per-second", &options.machines_per_second]);
    println!("$ {}", display(&soak));
    crate::run::status(&mut soak)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_are_read() {
        let defaults = parse_args(&[]).unwrap();
        assert_eq!(defaults.duration, Duration::from_secs(600));
        assert!(!defaults.release);
        let options = parse_args(&args(&[
            "--duration",
            "2m",
            "--pods-per-second",
            "10",
            "--release",
        ]))
        .unwrap();
        assert_eq!(options.duration, Duration::from_secs(120));
        assert_eq!(options.pods_per_second, "10");
        assert_eq!(options.machines_per_second, "2");
        assert!(options.release);
    }

    #[test]
    fn bad_options_are_refused() {
        for bad in [
            &["--duration"][..],
            &["--duration", "soon"],
            &["--pods-per-second", "0"],
            &["--machines-per-second", "many"],
            &["--fast"],
        ] {
            assert!(parse_args(&args(bad)).is_err(), "{bad:?}");
        }
    }
}
