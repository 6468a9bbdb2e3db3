//! `cargo xtask chaos [--minutes N]`: leader safety under faults on the real-cluster tier. The
//! cluster test `chaos::leader_safety_under_chaos` (xtask/examples/cluster-tests/chaos.rs)
//! runs the load and the faults for N minutes (2.5 when it runs inside `cargo xtask cluster
//! test`); then the oracle ([`oracle`]) reads the API server's audit log: every write by
//! poolkeeper's ServiceAccount is attributed to a replica and checked against the leadership
//! terms the Lease's updates record in the same log.
//!
//! `cargo xtask chaos --audit-log FILE` runs the oracle alone over an audit log.
//!
//! `cargo xtask chaos --broken-leader [--minutes N]` shows that the oracle catches a deposed
//! leader's writes: the same run against a deliberately broken build (poolkeeper-supervisor's
//! feature `broken-leader-for-chaos`: a replica that loses its Lease goes on acting as leader
//! for 10 s), in its own dist directory and image tag, with the leader frozen one after the
//! other and one Machine moved from class to class (`chaos/schedule.rs`: `broken_leader`,
//! `script_step`). It succeeds only when the oracle finds at least one accepted write outside
//! its replica's term.

pub mod oracle;
/// The cluster test's fault schedule, compiled here for its unit tests.
#[cfg(test)]
mod schedule;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::cluster::{self, Layout};
use crate::dist::Variant;
use crate::{Error, Result, workspace_root};

const USAGE: &str =
    "usage: cargo xtask chaos [--broken-leader] [--minutes N] | [--broken-leader] --audit-log FILE";
/// Read by the cluster test.
const MINUTES: &str = "POOLKEEPER_CHAOS_MINUTES";
/// Read by the cluster test: `1` when the build's leader is broken on purpose; the test then
/// takes the broken leader's schedule and leaves the oracle's verdict to this command.
const BROKEN_LEADER: &str = "POOLKEEPER_CHAOS_BROKEN_LEADER";
/// The default runs: the shipped build's, and the broken leader's (long enough for four
/// freezes: three in a row, a cut-off, one more).
const MINUTES_DEFAULT: f64 = 10.0;
const BROKEN_LEADER_MINUTES_DEFAULT: f64 = 3.0;
/// poolkeeper's ServiceAccount and Lease in the kustomize installation.
const NAMESPACE: &str = "poolkeeper-system";
const LEASE: &str = "poolkeeper";
/// leaseDuration − renewDeadline of the installation's defaults: a write received that long
/// after its term is still the term's last in-flight write.
const GRACE_MICROS: oracle::Micros = 5_000_000;

#[derive(Debug, PartialEq)]
enum Options {
    Run {
        minutes: f64,
        variant: Variant,
    },
    Check {
        audit_log: PathBuf,
        variant: Variant,
    },
}

fn parse_args(args: &[String]) -> Result<Options> {
    let usage = |why: String| Error::Usage(format!("{why}\n{USAGE}"));
    let mut variant = Variant::Shipped;
    let mut minutes = None;
    let mut audit_log = None;
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--broken-leader" => variant = Variant::BrokenLeader,
            "--minutes" => {
                let value = args.next().map_or("", String::as_str);
                let parsed = value
                    .parse::<f64>()
                    .ok()
                    .filter(|m| m.is_finite() && *m > 0.0 && *m <= 120.0)
                    .ok_or_else(|| {
                        usage(format!(
                            "--minutes {value:?}: a number of minutes in (0, 120]"
                        ))
                    })?;
                minutes = Some(parsed);
            }
            "--audit-log" => {
                let value = args
                    .next()
                    .ok_or_else(|| usage("--audit-log: the audit log's path is missing".into()))?;
                audit_log = Some(PathBuf::from(value));
            }
            other => return Err(usage(format!("unknown argument {other:?}"))),
        }
    }
    match (audit_log, minutes) {
        (Some(_), Some(_)) => Err(usage(
            "--audit-log reads a log: it takes no --minutes".into(),
        )),
        (Some(audit_log), None) => Ok(Options::Check { audit_log, variant }),
        (None, minutes) => Ok(Options::Run {
            minutes: minutes.unwrap_or(match variant {
                Variant::Shipped => MINUTES_DEFAULT,
                Variant::BrokenLeader => BROKEN_LEADER_MINUTES_DEFAULT,
            }),
            variant,
        }),
    }
}

pub fn command(args: &[String]) -> Result<()> {
    let root = workspace_root();
    let layout = Layout::new(&root);
    let (audit_log, variant) = match parse_args(args)? {
        Options::Check { audit_log, variant } => (audit_log, variant),
        Options::Run { minutes, variant } => {
            let filter = ["chaos::".to_owned(), "--nocapture".to_owned()];
            cluster::suite::run(&root, &layout, &filter, variant, |command| {
                command.env(MINUTES, minutes.to_string());
                if variant == Variant::BrokenLeader {
                    command.env(BROKEN_LEADER, "1");
                }
                crate::run::status(command).map_err(|e| ((), e))
            })
            .map_err(|(_, e)| e)?;
            (layout.audit_log(), variant)
        }
    };
    check(&audit_log, variant)
}

/// The oracle over `path`, judged for `variant`: the shipped build passes when every accepted
/// write lies in its replica's term, the broken leader's only when one does not.
fn check(path: &Path, variant: Variant) -> Result<()> {
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
    let verdict = judge(&report, variant).map_err(Error::Check)?;
    if let Some(verdict) = verdict {
        println!("{verdict}");
    }
    Ok(())
}

/// The verdict on the oracle's report for a build of `variant`: `Err` says why the command
/// fails, `Ok(Some(..))` what the broken leader was caught at.
fn judge(report: &oracle::Report, variant: Variant) -> std::result::Result<Option<String>, String> {
    let overlap = report.largest_overlap() as f64 / 1e6;
    match (variant, report.passed()) {
        (Variant::Shipped, true) => Ok(None),
        (Variant::Shipped, false) => Err(format!(
            "writes outside their replica's term; largest overlap {overlap:.3} s"
        )),
        (Variant::BrokenLeader, _) if !report.outside.is_empty() => {
            let objects: BTreeSet<&str> =
                report.outside.iter().map(|o| o.object.as_str()).collect();
            let objects: Vec<&str> = objects.into_iter().collect();
            Ok(Some(format!(
                "the deliberately broken leader was caught: {} accepted writes outside their \
                 replica's term, largest overlap {overlap:.3} s, on {}",
                report.outside.len(),
                objects.join(", ")
            )))
        }
        (Variant::BrokenLeader, _) => Err(format!(
            "the deliberately broken leader (it writes for 10 s after losing its Lease) got \
             through: no accepted write outside its replica's term ({} terms, {} accepted \
             writes, {} refused)",
            report.terms.len(),
            report.writes,
            report.refused
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments() {
        let run = |minutes, variant| Options::Run { minutes, variant };
        let cases = [
            (&[][..], run(10.0, Variant::Shipped)),
            (&["--minutes", "2.5"], run(2.5, Variant::Shipped)),
            (&["--broken-leader"], run(3.0, Variant::BrokenLeader)),
            (
                &["--broken-leader", "--minutes", "4"],
                run(4.0, Variant::BrokenLeader),
            ),
            (
                &["--minutes", "4", "--broken-leader"],
                run(4.0, Variant::BrokenLeader),
            ),
            (
                &["--audit-log", "a.log"],
                Options::Check {
                    audit_log: "a.log".into(),
                    variant: Variant::Shipped,
                },
            ),
            (
                &["--broken-leader", "--audit-log", "a.log"],
                Options::Check {
                    audit_log: "a.log".into(),
                    variant: Variant::BrokenLeader,
                },
            ),
        ];
        for (given, want) in cases {
            assert_eq!(parse_args(&args(given)).unwrap(), want, "{given:?}");
        }
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        let cases = [
            (&["--minutes", "0"][..], "--minutes \"0\""),
            (&["--minutes", "soon"], "--minutes \"soon\""),
            (&["--minutes"], "--minutes \"\""),
            (&["--broken-leader", "--minutes", "121"], "(0, 120]"),
            (&["--what"], "unknown argument \"--what\""),
            (&["--audit-log"], "the audit log's path is missing"),
            (
                &["--audit-log", "a.log", "--minutes", "3"],
                "takes no --minutes",
            ),
        ];
        for (given, says) in cases {
            let error = parse_args(&args(given)).unwrap_err().to_string();
            assert!(error.contains(says), "{given:?}: {error}");
            assert!(
                error.contains("usage: cargo xtask chaos"),
                "{given:?}: {error}"
            );
        }
    }

    fn outside(object: &str, overlap: oracle::Micros) -> oracle::Outside {
        oracle::Outside {
            pod: "poolkeeper-a".into(),
            verb: "patch".into(),
            object: object.into(),
            received: 0,
            overlap,
        }
    }

    #[test]
    fn the_verdict_depends_on_the_build() {
        let clean = oracle::Report {
            writes: 12,
            refused: 3,
            ..oracle::Report::default()
        };
        let caught = oracle::Report {
            outside: vec![
                outside("machineclasses/machine-system/c1", 7_250_000),
                outside("events/machine-system/c1.1", 9_500_000),
                outside("machineclasses/machine-system/c1", 8_000_000),
            ],
            ..clean.clone()
        };
        assert_eq!(judge(&clean, Variant::Shipped), Ok(None));
        let shipped = judge(&caught, Variant::Shipped).unwrap_err();
        assert!(shipped.contains("largest overlap 9.500 s"), "{shipped}");

        let verdict = judge(&caught, Variant::BrokenLeader).unwrap().unwrap();
        assert_eq!(
            verdict,
            "the deliberately broken leader was caught: 3 accepted writes outside their \
             replica's term, largest overlap 9.500 s, on events/machine-system/c1.1, \
             machineclasses/machine-system/c1"
        );
        let through = judge(&clean, Variant::BrokenLeader).unwrap_err();
        assert!(through.contains("got through"), "{through}");
        assert!(
            through.contains("12 accepted writes, 3 refused"),
            "{through}"
        );
        // Writes that name no replica are no proof of a deposed leader's.
        let unattributed = oracle::Report {
            unattributed: 2,
            ..clean
        };
        assert!(judge(&unattributed, Variant::BrokenLeader).is_err());
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
        let error = check(&path, Variant::Shipped).unwrap_err().to_string();
        assert!(error.contains("largest overlap 10.000 s"), "{error}");
        assert!(check(&path, Variant::BrokenLeader).is_ok());
        let lines: Vec<&str> = log.lines().take(2).collect();
        std::fs::write(&path, lines.join("\n")).unwrap();
        assert!(check(&path, Variant::Shipped).is_ok());
        assert!(check(&path, Variant::BrokenLeader).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
