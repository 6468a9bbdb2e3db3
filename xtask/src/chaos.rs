//! `cargo xtask chaos [--minutes N]`: leader safety under faults on the real-cluster tier. The
//! cluster test `chaos::leader_safety_under_chaos` (xtask/examples/cluster-tests/chaos.rs)
//! runs the load and the faults for N minutes (2.5 when it runs inside `cargo xtask cluster
//! test`); then the oracle ([`oracle`]) reads the API server's audit log: every write by
//! poolkeeper's ServiceAccount is attributed to a replica and checked against the leadership
//! terms the Lease's updates record in the same log.
//!
//! `cargo xtask chaos --audit-log FILE` runs the oracle alone over an audit log.

pub mod oracle;
/// The cluster test's fault schedule, compiled here for its unit tests.
#[cfg(test)]
mod schedule;

use std::path::{Path, PathBuf};

use crate::cluster::{self, Layout};
use crate::{Error, Result, workspace_root};

const USAGE: &str = "usage: cargo xtask chaos [--minutes N] | --audit-log FILE";
/// Read by the cluster test.
const MINUTES: &str = "POOLKEEPER_CHAOS_MINUTES";
/// poolkeeper's ServiceAccount and Lease in the kustomize installation.
const NAMESPACE: &str = "poolkeeper-system";
const LEASE: &str = "poolkeeper";
/// leaseDuration − renewDeadline of the installation's defaults: a write received that long
/// after its term is still the term's last in-flight write.
const GRACE_MICROS: oracle::Micros = 5_000_000;

#[derive(Debug, PartialEq)]
enum Options {
    Run { minutes: f64 },
    Check { audit_log: PathBuf },
}

fn parse_args(args: &[String]) -> Result<Options> {
    match args {
        [] => Ok(Options::Run { minutes: 10.0 }),
        [flag, value] if flag == "--minutes" => value
            .parse::<f64>()
            .ok()
            .filter(|m| m.is_finite() && *m > 0.0 && *m <= 120.0)
            .map(|minutes| Options::Run { minutes })
            .ok_or_else(|| {
                Error::Usage(format!(
                    "--minutes {value:?}: a number of minutes in (0, 120]\n{USAGE}"
                ))
            }),
        [flag, value] if flag == "--audit-log" => Ok(Options::Check {
            audit_log: PathBuf::from(value),
        }),
        _ => Err(Error::Usage(USAGE.to_owned())),
    }
}

pub fn command(args: &[String]) -> Result<()> {
    let root = workspace_root();
    let layout = Layout::new(&root);
    let audit_log = match parse_args(args)? {
        Options::Check { audit_log } => audit_log,
        Options::Run { minutes } => {
            let filter = ["chaos::".to_owned(), "--nocapture".to_owned()];
            cluster::suite::run(&root, &layout, &filter, |command| {
                command.env(MINUTES, minutes.to_string());
                crate::run::status(command).map_err(|e| ((), e))
            })
            .map_err(|(_, e)| e)?;
            layout.audit_log()
        }
    };
    check(&audit_log)
}

/// The oracle over `path`: an error unless every accepted write lies in its replica's term.
fn check(path: &Path) -> Result<()> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("reading the audit log {}", path.display()), e))?;
    let requests = oracle::parse_log(&text).map_err(Error::Check)?;
    let report = oracle::check(
        &requests,
        &oracle::Scope {
            username: format!("system:serviceaccount:{NAMESPACE}:poolkeeper"),
            lease_namespace: NAMESPACE.to_owned(),
            lease_name: LEASE.to_owned(),
            grace: GRACE_MICROS,
        },
    );
    println!("audit oracle ({}): {report}", path.display());
    if report.passed() {
        Ok(())
    } else {
        Err(Error::Check(format!(
            "writes outside their replica's term; largest overlap {:.3} s",
            report.largest_overlap() as f64 / 1e6
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_args(&args(&[])).unwrap(),
            Options::Run { minutes: 10.0 }
        );
        assert_eq!(
            parse_args(&args(&["--minutes", "2.5"])).unwrap(),
            Options::Run { minutes: 2.5 }
        );
        assert_eq!(
            parse_args(&args(&["--audit-log", "a.log"])).unwrap(),
            Options::Check {
                audit_log: "a.log".into()
            }
        );
        for bad in [&["--minutes", "0"][..], &["--minutes", "soon"], &["--what"]] {
            assert!(parse_args(&args(bad)).is_err(), "{bad:?}");
        }
    }

    /// A leader that kept writing 10 s past the takeover fails the check.
    #[test]
    fn a_violation_in_a_log_fails_the_command() {
        let dir = std::env::temp_dir().join(format!("chaos-oracle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let event = |at: &str, pod: &str, resource: &str, holder: Option<&str>| {
            let body = holder.map_or(String::new(), |h| {
                format!(r#","requestObject":{{"spec":{{"holderIdentity":"{h}"}}}}"#)
            });
            format!(
                r#"{{"stage":"ResponseComplete","verb":"update","user":{{"username":"system:serviceaccount:poolkeeper-system:poolkeeper","extra":{{"authentication.kubernetes.io/pod-name":["{pod}"]}}}},"objectRef":{{"resource":"{resource}","namespace":"poolkeeper-system","name":"poolkeeper"}},"responseStatus":{{"code":200}},"requestReceivedTimestamp":"2026-12-06T10:00:{at}Z"{body}}}"#
            )
        };
        let log = [
            event("00.000000", "a", "leases", Some("a_1")),
            event("20.000000", "b", "leases", Some("b_2")),
            event("30.000000", "a", "mutatingwebhookconfigurations", None),
        ]
        .join("\n");
        let path = dir.join("audit.log");
        std::fs::write(&path, &log).unwrap();
        let error = check(&path).unwrap_err().to_string();
        assert!(error.contains("largest overlap 10.000 s"), "{error}");
        let lines: Vec<&str> = log.lines().take(2).collect();
        std::fs::write(&path, lines.join("\n")).unwrap();
        assert!(check(&path).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
