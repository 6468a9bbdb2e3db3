//! `cargo xtask test`: everything CI checks, in the order that fails fastest.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use poolkeeper_gomod::POOLKEEPER_CONTROL_PLANE;

use crate::run::{cargo, display, elapsed};
use crate::{Error, Result, controlplane, workspace_root};

/// The kustomize executable, read by the deploy/ manifest check.
const POOLKEEPER_KUSTOMIZE: &str = "POOLKEEPER_KUSTOMIZE";

/// Totals of libtest's `test result:` lines.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }
}

/// Parses `test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; ...`.
fn parse_test_result(line: &str) -> Option<Counts> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let (_, numbers) = rest.split_once(". ")?;
    let mut counts = Counts::default();
    for part in numbers.split(';') {
        let mut words = part.split_whitespace();
        let (Some(n), Some(label)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else {
            continue;
        };
        match label {
            "passed" => counts.passed = n,
            "failed" => counts.failed = n,
            "ignored" => counts.ignored = n,
            _ => {}
        }
    }
    Some(counts)
}

struct Pipeline {
    started: Instant,
    steps: Vec<(String, String)>,
    /// None until a test step has run.
    tests: Option<Counts>,
}

impl Pipeline {
    fn step<T>(&mut self, name: &str, run: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        println!("\n==> {name}");
        let started = Instant::now();
        let result = run(self);
        let took = elapsed(started.elapsed());
        match &result {
            Ok(_) => self.steps.push((name.to_owned(), format!("ok in {took}"))),
            Err(_) => self
                .steps
                .push((name.to_owned(), format!("FAILED after {took}"))),
        }
        result
    }

    /// Adds a test step's counts (also those of a failed run) to the totals.
    fn add_tests(&mut self, run: Result<Counts, (Counts, Error)>) -> Result<Counts> {
        let (counts, result) = match run {
            Ok(counts) => (counts, Ok(counts)),
            Err((counts, error)) => (counts, Err(error)),
        };
        self.tests.get_or_insert_with(Counts::default).add(counts);
        result
    }

    fn report(&self, outcome: &str) {
        println!(
            "\n==> xtask test {outcome} in {}",
            elapsed(self.started.elapsed())
        );
        for (name, result) in &self.steps {
            println!("    {name:<52} {result}");
        }
        if let Some(Counts {
            passed,
            failed,
            ignored,
        }) = self.tests
        {
            println!("summary: {passed} passed, {failed} failed, {ignored} skipped");
        }
    }
}

/// Runs `cargo test ...`, streaming its output and adding up the test counts; on failure the
/// counts seen so far come with the error.
fn cargo_test(command: &mut Command) -> Result<Counts, (Counts, Error)> {
    let shown = display(command);
    println!("$ {shown}");
    let mut counts = Counts::default();
    let mut child = match command.stdout(Stdio::piped()).spawn() {
        Ok(child) => child,
        Err(e) => return Err((counts, Error::io(format!("starting `{shown}`"), e))),
    };
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut out = std::io::stdout().lock();
    for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
        let _ = writeln!(out, "{line}");
        if let Some(result) = parse_test_result(&line) {
            counts.add(result);
        }
    }
    drop(out);
    match child.wait() {
        Ok(status) if status.success() => Ok(counts),
        Ok(status) => Err((
            counts,
            Error::CommandFailed {
                command: shown,
                status: status.to_string(),
            },
        )),
        Err(e) => Err((counts, Error::io(format!("waiting for `{shown}`"), e))),
    }
}

fn checked(command: &mut Command) -> Result<()> {
    println!("$ {}", display(command));
    crate::run::status(command)
}

pub fn command(args: &[String]) -> Result<()> {
    let scope = Scope::parse(args)?;
    let root = workspace_root();
    let mut pipeline = Pipeline {
        started: Instant::now(),
        steps: Vec::new(),
        tests: None,
    };
    let result = run_all(&root, &scope, &mut pipeline);
    pipeline.report(if result.is_ok() { "passed" } else { "FAILED" });
    result
}

/// The whole workspace (CI), or the packages named with `-p` (a quicker local loop).
#[derive(Debug, PartialEq, Eq)]
struct Scope {
    packages: Vec<String>,
}

impl Scope {
    fn parse(args: &[String]) -> Result<Self> {
        let mut packages = Vec::new();
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            match arg.as_str() {
                "-p" | "--package" => match rest.next() {
                    Some(name) => packages.push(name.clone()),
                    None => return Err(Error::Usage(format!("test: {arg} needs a package name"))),
                },
                other => return Err(Error::Usage(format!("test: unknown option {other:?}"))),
            }
        }
        Ok(Self { packages })
    }

    /// Whether the package's tests run: all do without `-p`.
    fn includes(&self, package: &str) -> bool {
        self.packages.is_empty() || self.packages.iter().any(|p| p == package)
    }

    /// `--workspace`, or `-p NAME` for each package.
    fn selection(&self, workspace_flag: &'static str) -> Vec<String> {
        if self.packages.is_empty() {
            return vec![workspace_flag.to_owned()];
        }
        self.packages
            .iter()
            .flat_map(|p| ["-p".to_owned(), p.clone()])
            .collect()
    }
}

fn run_all(root: &Path, scope: &Scope, pipeline: &mut Pipeline) -> Result<()> {
    static_checks(root, scope, pipeline)?;
    tests(root, scope, pipeline)?;
    if scope.includes("xtask") {
        real_cluster(root, pipeline)?;
    }
    Ok(())
}

/// What needs no test to run: format, source checks, clippy, the generated CRDs.
fn static_checks(root: &Path, scope: &Scope, pipeline: &mut Pipeline) -> Result<()> {
    pipeline.step("format (cargo fmt --check)", |_| {
        checked(
            cargo(root)
                .arg("fmt")
                .args(scope.selection("--all"))
                .arg("--check"),
        )
    })?;
    pipeline.step(
        "source checks (function length, tunable defaults, event catalog, layers)",
        |_| crate::checks::run(root, &scope.packages),
    )?;
    pipeline.step("lint (cargo clippy -D warnings)", |_| {
        checked(
            cargo(root)
                .arg("clippy")
                .args(scope.selection("--workspace"))
                .args(["--all-targets", "-j2", "--", "-D", "warnings"]),
        )
    })?;
    pipeline.step("generated CRDs (cargo xtask crds --check)", |_| {
        crate::crds::command(&["--check".to_owned()])
    })?;
    Ok(())
}

fn tests(root: &Path, scope: &Scope, pipeline: &mut Pipeline) -> Result<()> {
    pipeline.step("unit tests", |p| {
        let counts = cargo_test(
            cargo(root)
                .arg("test")
                .args(scope.selection("--workspace"))
                .args(["--lib", "--bins", "--no-fail-fast", "-j2"]),
        );
        p.add_tests(counts)
    })?;
    pipeline.step("doctests (crate READMEs and API docs)", |p| {
        let counts = cargo_test(
            cargo(root)
                .arg("test")
                .args(scope.selection("--workspace"))
                .args(["--doc", "--no-fail-fast", "-j2"]),
        );
        p.add_tests(counts)
    })?;
    let binaries = pipeline.step(
        "control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)",
        |_| controlplane::ensure(root, false),
    )?;
    let kustomize = pipeline.step("kustomize (renders deploy/ for the manifest check)", |_| {
        controlplane::kustomize(root)
    })?;
    let openreports = pipeline.step(
        "OpenReports CRDs (test fixtures, from the openreports/reports-api Go module)",
        |_| crate::openreports::ensure(root),
    )?;
    pipeline.step("integration and end-to-end tests", |p| {
        let counts = cargo_test(
            cargo(root)
                .arg("test")
                .args(scope.selection("--workspace"))
                .args(["--test", "*", "--no-fail-fast", "-j2"])
                .env(POOLKEEPER_CONTROL_PLANE, &binaries)
                .env(POOLKEEPER_KUSTOMIZE, &kustomize)
                .env(crate::openreports::POOLKEEPER_OPENREPORTS_CRDS, &openreports),
        );
        let counts = p.add_tests(counts)?;
        if counts.passed == 0 {
            return Err(Error::Check("no end-to-end test ran".to_owned()));
        }
        if counts.ignored > 0 {
            return Err(Error::Check(format!(
                "{} end-to-end tests were marked ignored and skipped; every end-to-end test must run",
                counts.ignored
            )));
        }
        Ok(())
    })?;
    Ok(())
}

/// The install tests on a real node (cargo xtask cluster test). A machine that cannot run
/// the node (not root, no cgroups, packages missing and not installable) fails the step with
/// the reason: they are never skipped.
fn real_cluster(root: &Path, pipeline: &mut Pipeline) -> Result<()> {
    pipeline.step(
        "real-cluster tests (a kubelet node: kustomize, Helm, operations)",
        |p| {
            let layout = crate::cluster::Layout::new(root);
            let counts = crate::cluster::test(root, &layout, cargo_test);
            let counts = p.add_tests(counts)?;
            if counts.passed == 0 || counts.ignored > 0 {
                return Err(Error::Check(format!(
                    "real-cluster tests: {} passed, {} ignored; every one must run",
                    counts.passed, counts.ignored
                )));
            }
            Ok(())
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_selects_the_workspace_or_named_packages() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let all = Scope::parse(&[]).unwrap();
        assert_eq!(all.selection("--workspace"), ["--workspace"]);
        let some = Scope::parse(&args(&["-p", "a", "--package", "b"])).unwrap();
        assert_eq!(some.selection("--all"), ["-p", "a", "-p", "b"]);
        assert!(Scope::parse(&args(&["-p"])).is_err());
        assert!(Scope::parse(&args(&["--release"])).is_err());
    }

    #[test]
    fn libtest_result_lines_are_parsed() {
        let cases = [
            (
                "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s",
                Some(Counts {
                    passed: 12,
                    failed: 0,
                    ignored: 1,
                }),
            ),
            (
                "test result: FAILED. 6 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 15.77s",
                Some(Counts {
                    passed: 6,
                    failed: 1,
                    ignored: 0,
                }),
            ),
            ("running 7 tests", None),
            ("test a::b ... ok", None),
        ];
        for (line, expected) in cases {
            assert_eq!(parse_test_result(line), expected, "{line}");
        }
    }
}
