//! `cargo xtask fuzz [TARGET]... [--time 10m]`: the libFuzzer targets of `fuzz/`, one after the
//! other, each for the given time; then the corpus is minimised (`cargo fuzz cmin`) so that what
//! is kept in `fuzz/corpus/` stays small enough for the replay test of the normal suite.
//!
//! cargo-fuzz needs a nightly toolchain: xtask installs it (`rustup toolchain install nightly
//! --profile minimal`) and cargo-fuzz (`cargo install cargo-fuzz --locked`) when they are missing.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::run::{display, elapsed};
use crate::{Error, Result, target_dir, workspace_root};

/// The targets of `fuzz/fuzz_targets/`, in the order they run.
pub const TARGETS: [&str; 5] = [
    "admission_review",
    "placement_policy",
    "config_yaml",
    "objects_file",
    "pod_list_protobuf",
];

/// Longest input libFuzzer makes: room for a large AdmissionReview or objects file.
const MAX_LEN: &str = "65536";

#[derive(Debug, PartialEq, Eq)]
struct Options {
    targets: Vec<&'static str>,
    time: Duration,
}

fn parse_args(args: &[String]) -> Result<Options> {
    let mut targets = Vec::new();
    let mut time = Duration::from_secs(600);
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--time" => {
                let value = rest
                    .next()
                    .ok_or_else(|| Error::Usage("fuzz: --time needs a duration".to_owned()))?;
                time = parse_duration(value)?;
            }
            name => match TARGETS.iter().find(|target| **target == name) {
                Some(target) => targets.push(*target),
                None => {
                    return Err(Error::Usage(format!(
                        "fuzz: unknown target or option {name:?}; targets: {}",
                        TARGETS.join(", ")
                    )));
                }
            },
        }
    }
    if targets.is_empty() {
        targets = TARGETS.to_vec();
    }
    Ok(Options { targets, time })
}

/// `90`, `90s`, `10m`, `1h`, `1m30s`.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let invalid = || Error::Usage(format!("not a duration: {text:?} (e.g. 90s, 10m, 1h)"));
    let mut seconds = 0u64;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return Err(invalid()),
        };
        let value: u64 = number.parse().map_err(|_| invalid())?;
        seconds += value * unit;
        number.clear();
    }
    if !number.is_empty() {
        seconds += number.parse::<u64>().map_err(|_| invalid())?;
    }
    if seconds == 0 {
        return Err(invalid());
    }
    Ok(Duration::from_secs(seconds))
}

/// What one run did, from libFuzzer's final statistics.
#[derive(Debug, Default, PartialEq, Eq)]
struct Stats {
    executions: u64,
    per_second: u64,
    peak_rss_mb: u64,
}

impl Stats {
    fn read(&mut self, line: &str) {
        let Some((name, value)) = line.trim().rsplit_once(':') else {
            return;
        };
        let Ok(value) = value.trim().parse::<u64>() else {
            return;
        };
        match name.trim() {
            "stat::number_of_executed_units" => self.executions = value,
            "stat::average_exec_per_sec" => self.per_second = value,
            "stat::peak_rss_mb" => self.peak_rss_mb = value,
            _ => {}
        }
    }
}

struct Outcome {
    target: &'static str,
    took: Duration,
    stats: Stats,
    corpus_files: usize,
    corpus_bytes: u64,
    crashes: Vec<PathBuf>,
}

pub fn command(args: &[String]) -> Result<()> {
    let options = parse_args(args)?;
    let root = workspace_root();
    ensure_tools()?;
    let fuzz = Fuzz::new(&root);
    fuzz.build()?;
    let mut outcomes = Vec::new();
    for target in &options.targets {
        outcomes.push(fuzz.run(target, options.time)?);
    }
    print_summary(&outcomes, options.time);
    let crashed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.crashes.is_empty()).collect();
    if crashed.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = crashed
        .iter()
        .flat_map(|o| o.crashes.iter().map(|c| c.display().to_string()))
        .collect();
    Err(Error::Check(format!(
        "crashing inputs (reproduce with `cargo fuzz run TARGET FILE --fuzz-dir fuzz`, minimise \
         with `cargo fuzz tmin`, then keep them in fuzz/regressions/TARGET/):\n  {}",
        list.join("\n  ")
    )))
}

/// The nightly toolchain and cargo-fuzz, installed when missing.
fn ensure_tools() -> Result<()> {
    if !succeeds(Command::new("rustup").args(["run", "nightly", "rustc", "--version"])) {
        println!("==> installing a nightly toolchain for cargo-fuzz");
        crate::run::status(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    if !succeeds(Command::new("cargo-fuzz").arg("--version")) {
        println!("==> installing cargo-fuzz");
        crate::run::status(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    Ok(())
}

fn succeeds(command: &mut Command) -> bool {
    command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Where things are, and how cargo-fuzz is invoked.
struct Fuzz {
    root: PathBuf,
    fuzz_dir: PathBuf,
    build_dir: PathBuf,
}

impl Fuzz {
    fn new(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
            fuzz_dir: root.join("fuzz"),
            build_dir: target_dir(root).join("fuzz"),
        }
    }

    /// `cargo fuzz SUBCOMMAND` with the nightly toolchain, building without a sanitizer (the
    /// code is safe Rust: the fuzzers look for panics, overflows, hangs and memory blow-ups)
    /// and with debug assertions, so arithmetic overflow panics.
    fn cargo_fuzz(&self, subcommand: &str) -> Command {
        let mut command = Command::new("cargo");
        command
            .current_dir(&self.root)
            .env("RUSTUP_TOOLCHAIN", "nightly")
            .env_remove("CARGO")
            .env_remove("RUSTC")
            .env_remove("CARGO_TARGET_DIR")
            .args(["fuzz", subcommand, "--fuzz-dir"])
            .arg(&self.fuzz_dir)
            .arg("--target-dir")
            .arg(&self.build_dir)
            .args(["--sanitizer", "none", "--debug-assertions"])
            .env("CARGO_BUILD_JOBS", "2");
        command
    }

    fn build(&self) -> Result<()> {
        let mut build = self.cargo_fuzz("build");
        println!("$ {}", display(&build));
        crate::run::status(&mut build)
    }

    fn corpus(&self, target: &str) -> PathBuf {
        self.fuzz_dir.join("corpus").join(target)
    }

    fn artifacts(&self, target: &str) -> PathBuf {
        self.fuzz_dir.join("artifacts").join(target)
    }

    fn run(&self, target: &'static str, time: Duration) -> Result<Outcome> {
        let corpus = self.corpus(target);
        let artifacts = self.artifacts(target);
        for dir in [&corpus, &artifacts] {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        }
        let before = crash_files(&artifacts)?;
        let seeds = self.seed_dirs(target)?;
        let mut run = self.cargo_fuzz("run");
        run.arg(target).arg(&corpus).args(&seeds).arg("--").args([
            format!("-max_total_time={}", time.as_secs()),
            format!("-max_len={MAX_LEN}"),
            "-timeout=10".to_owned(),
            "-rss_limit_mb=2048".to_owned(),
            "-print_final_stats=1".to_owned(),
            format!("-artifact_prefix={}/", artifacts.display()),
            format!(
                "-dict={}",
                self.fuzz_dir
                    .join("dict")
                    .join(format!("{target}.dict"))
                    .display()
            ),
        ]);
        println!(
            "\n==> fuzz {target} for {}\n$ {}",
            elapsed(time),
            display(&run)
        );
        let started = Instant::now();
        let (stats, succeeded) = run_with_stats(&mut run)?;
        let took = started.elapsed();
        let crashes: Vec<PathBuf> = crash_files(&artifacts)?
            .into_iter()
            .filter(|file| !before.contains(file))
            .collect();
        if !succeeded && crashes.is_empty() {
            return Err(Error::CommandFailed {
                command: display(&run),
                status: "failed without leaving a crashing input".to_owned(),
            });
        }
        if crashes.is_empty() {
            self.minimise(target)?;
        }
        let (corpus_files, corpus_bytes) = dir_size(&corpus)?;
        Ok(Outcome {
            target,
            took,
            stats,
            corpus_files,
            corpus_bytes,
            crashes,
        })
    }

    /// `fuzz/seeds/<target>/` and a directory with the repository files `fuzz/seeds.txt` lists.
    fn seed_dirs(&self, target: &str) -> Result<Vec<PathBuf>> {
        let listed = self.fuzz_dir.join("seeds.txt");
        let list = std::fs::read_to_string(&listed)
            .map_err(|e| Error::io(format!("reading {}", listed.display()), e))?;
        let copies = self.build_dir.join("seeds").join(target);
        std::fs::create_dir_all(&copies)
            .map_err(|e| Error::io(format!("creating {}", copies.display()), e))?;
        for path in seed_paths(&list, target) {
            let source = self.root.join(path);
            let name = path.replace('/', "_");
            std::fs::copy(&source, copies.join(name))
                .map_err(|e| Error::io(format!("copying {}", source.display()), e))?;
        }
        Ok(vec![self.fuzz_dir.join("seeds").join(target), copies])
    }

    /// Replaces the corpus with the smallest subset that covers as much.
    fn minimise(&self, target: &str) -> Result<()> {
        let mut cmin = self.cargo_fuzz("cmin");
        cmin.arg(target)
            .arg(self.corpus(target))
            .arg("--")
            .arg(format!("-max_len={MAX_LEN}"))
            .arg("-timeout=10");
        println!("$ {}", display(&cmin));
        crate::run::status(&mut cmin)
    }
}

/// The paths `fuzz/seeds.txt` lists for `target` (`TARGET PATH` lines, `#` comments).
fn seed_paths<'a>(list: &'a str, target: &str) -> Vec<&'a str> {
    list.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| {
            let (name, path) = line.split_once(char::is_whitespace)?;
            (name == target).then_some(path.trim())
        })
        .collect()
}

/// Runs libFuzzer, passing its output through and reading its final statistics; a crash is
/// not an error here (its artifact is reported).
fn run_with_stats(command: &mut Command) -> Result<(Stats, bool)> {
    let shown = display(command);
    let mut child = command
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io(format!("starting `{shown}`"), e))?;
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut stats = Stats::default();
    let mut out = std::io::stderr().lock();
    for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
        let _ = writeln!(out, "{line}");
        stats.read(&line);
    }
    drop(out);
    let status = child
        .wait()
        .map_err(|e| Error::io(format!("waiting for `{shown}`"), e))?;
    Ok((stats, status.success()))
}

fn crash_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// Number of files and their total size.
fn dir_size(dir: &Path) -> Result<(usize, u64)> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    let sizes: Vec<u64> = entries
        .flatten()
        .filter_map(|entry| entry.metadata().ok())
        .filter(|meta| meta.is_file())
        .map(|meta| meta.len())
        .collect();
    Ok((sizes.len(), sizes.iter().sum()))
}

fn print_summary(outcomes: &[Outcome], time: Duration) {
    println!("\n==> fuzz summary ({} per target)", elapsed(time));
    println!(
        "    {:<18} {:>8} {:>14} {:>9} {:>8} {:>12} {:>8} {:>8}",
        "target", "time", "executions", "exec/s", "rss MB", "corpus files", "KiB", "crashes"
    );
    for o in outcomes {
        println!(
            "    {:<18} {:>8} {:>14} {:>9} {:>8} {:>12} {:>8} {:>8}",
            o.target,
            elapsed(o.took),
            o.stats.executions,
            o.stats.per_second,
            o.stats.peak_rss_mb,
            o.corpus_files,
            o.corpus_bytes / 1024,
            o.crashes.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        let cases = [
            ("90", 90),
            ("90s", 90),
            ("10m", 600),
            ("1h", 3600),
            ("1m30s", 90),
        ];
        for (text, seconds) in cases {
            assert_eq!(
                parse_duration(text).unwrap(),
                Duration::from_secs(seconds),
                "{text}"
            );
        }
        for bad in ["", "0", "ten", "5d", "m"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn targets_and_time_are_read() {
        let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_args(&args(&[])).unwrap(),
            Options {
                targets: TARGETS.to_vec(),
                time: Duration::from_secs(600)
            }
        );
        assert_eq!(
            parse_args(&args(&["config_yaml", "--time", "30s"])).unwrap(),
            Options {
                targets: vec!["config_yaml"],
                time: Duration::from_secs(30)
            }
        );
        assert!(parse_args(&args(&["nope"])).is_err());
        assert!(parse_args(&args(&["--time"])).is_err());
    }

    #[test]
    fn final_statistics_are_read() {
        let mut stats = Stats::default();
        for line in [
            "Done 123456 runs in 600 second(s)",
            "stat::number_of_executed_units: 123456",
            "stat::average_exec_per_sec:     205",
            "stat::new_units_added:          42",
            "stat::peak_rss_mb:              311",
        ] {
            stats.read(line);
        }
        assert_eq!(
            stats,
            Stats {
                executions: 123456,
                per_second: 205,
                peak_rss_mb: 311
            }
        );
    }

    #[test]
    fn seed_list_lines_select_a_target() {
        let list = "# comment\nconfig_yaml   config/poolkeeper.yaml\n\nobjects_file  a.yaml\n";
        assert_eq!(seed_paths(list, "config_yaml"), ["config/poolkeeper.yaml"]);
        assert_eq!(seed_paths(list, "objects_file"), ["a.yaml"]);
        assert!(seed_paths(list, "admission_review").is_empty());
    }
}
