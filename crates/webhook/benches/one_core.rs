//! The one-core admission budget: latency at fixed request rates and server
//! CPU per admission, with the webhook server pinned to one core and the
//! load generator to the other.
//!
//! `cargo bench -p poolkeeper-webhook --bench one_core` (about 15 minutes;
//! needs `taskset`, two cores, and Go to build the generator once):
//!
//! - The server is this bench binary re-run as `one_core --serve` under
//!   `taskset -c 0`: the real `WebhookServer` as a supervisor component on
//!   127.0.0.1, on a tokio runtime sized by the CPUs it may use (one), with
//!   the shared fixtures (1,000 nodes in 50 Edge pools, a policy with
//!   bindings and edge tolerations) and a subscriber draining the bus; as
//!   in the controller, memory comes from mimalloc and logs go to stderr at
//!   `info`.
//! - The bench itself runs on the generator's core too, so that its
//!   readings of `/proc` never wake the server's core.
//! - The generator is vegeta (open loop: requests leave at the fixed rate
//!   whether or not earlier ones were answered; it adds workers, and so
//!   connections, when answers are late) under `taskset -c 1`, over HTTPS
//!   keep-alive, HTTP/1.1 and HTTP/2. It is built once with `go install`
//!   into `~/.cache/poolkeeper/vegeta-<version>/` (the Go module proxy);
//!   `POOLKEEPER_VEGETA=/path/to/vegeta` uses another build.
//! - For each protocol and webhook: first the API server's rate, 1,000
//!   requests/s, in 9 rounds of 5 s, each round running every server in
//!   turn (the order rotating from round to round); then 2,000 and 5,000
//!   requests/s for 10 s each, every server in turn; then rising 5 s steps
//!   until p99 reaches 1 ms (the highest rate below it is reported).
//!   Server CPU per admission is the server process's utime+stime
//!   (`/proc/<pid>/stat`) over a run divided by the requests of that run.
//! - At 1,000/s one 8-second run of one server has measured anything from
//!   49 to 89 µs: the virtual machine's wake-ups and caches cost more at
//!   some moments than at others. So the figure at 1,000/s is the median
//!   of the rounds (the table shows the round of the median, a line below
//!   it every round), and the servers are compared round by round, having
//!   run within seconds of each other.
//! - The server of this build runs as `current`. A server to compare it
//!   with comes from a git revision: `one_core` built there
//!   (`cargo bench -p poolkeeper-webhook --bench one_core --no-run` in a
//!   checkout of that revision) and named by
//!   `POOLKEEPER_ONE_CORE_BASELINE=/path/to/that/one_core` runs its
//!   `--serve` server as `previous`, run for run beside `current`. The
//!   tables then give current / previous at the same rate in parentheses,
//!   and the median of the round-by-round ratios at 1,000/s.
//!
//! Without `--bench` (as under `cargo test --benches`) it starts the server
//! in-process and checks both answers, nothing else. `one_core --serve
//! [SECONDS]` serves for hand-driven load: it prints `pid=.. addr=.. ca=..`
//! and stops after SECONDS (default 600) or when its stdin closes.

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[allow(dead_code)]
mod fixtures;

use fixtures::{NODES, POOLS, Pki, check_answers, start_server, stop, webhooks};

// As in the poolkeeper binary: the server measured is the one shipped.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NAME: &str = "webhook_one_core";
const VEGETA_MODULE: &str = "github.com/tsenart/vegeta/v12";
const VEGETA_VERSION: &str = "v12.13.0";
/// The rate the API server sends at: measured in rounds.
const API_SERVER_RATE: u32 = 1_000;
const ROUNDS: usize = 9;
const ROUND_SECONDS: u64 = 5;
const HIGHER_RATES: [u32; 2] = [2_000, 5_000];
const FIXED_SECONDS: u64 = 10;
const STEP_SECONDS: u64 = 5;
/// The maximum-rate search: from the last fixed rate upwards by this much,
/// never beyond `MAX_RATE`.
const RATE_STEP: u32 = 1_000;
const MAX_RATE: u32 = 20_000;
const P99_BUDGET: Duration = Duration::from_millis(1);
const SERVER_CORE: &str = "0";
const GENERATOR_CORE: &str = "1";
/// How long `--serve` runs when not told otherwise.
const DEFAULT_SERVE_SECONDS: u64 = 600;
/// A run that has not ended this long after its duration is killed.
const RUN_GRACE: Duration = Duration::from_secs(20);
const BASELINE_ENV: &str = "POOLKEEPER_ONE_CORE_BASELINE";
const VEGETA_ENV: &str = "POOLKEEPER_VEGETA";
/// The server of this build.
const CURRENT: &str = "current";
/// The server the ratios are taken against: the baseline's.
const REFERENCE: &str = "previous";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--serve") {
        let seconds = args
            .get(at + 1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(DEFAULT_SERVE_SECONDS);
        serve(
            Duration::from_secs(seconds),
            args.iter().any(|a| a == "--until-stdin-closes"),
        );
        return;
    }
    let benching = args.iter().any(|a| a == "--bench");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| NAME.contains(f.as_str())) {
        return;
    }
    if !benching {
        let pki = Pki::new();
        let server = start_server(&pki, Some(1));
        check_answers(&server, &pki);
        stop(server);
        println!("{NAME}: server answers both webhooks (run with --bench for the load test)");
        return;
    }
    bench();
}

/// `--serve`: the server under test, in this process, until `limit` (or
/// until stdin closes, with `--until-stdin-closes`: the bench holds it open
/// while it measures, and a bench that dies takes its servers along).
fn serve(limit: Duration, until_stdin_closes: bool) {
    // As the controller logs by default. Without a subscriber every span of
    // h2 and hyper is built and handed to `log` (kube enables `tracing/log`),
    // which the shipped server never does.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(std::io::stderr)
        .try_init();
    let pki = Pki::new();
    let server = start_server(&pki, None);
    check_answers(&server, &pki);
    let ca = std::env::temp_dir().join(format!("{NAME}-{}-ca.pem", std::process::id()));
    std::fs::write(&ca, pki.ca_pem()).expect("writes the CA certificate");
    println!(
        "pid={} addr={} ca={}",
        std::process::id(),
        server.addr,
        ca.display()
    );
    std::io::stdout().flush().expect("stdout");
    let (closed, stdin_closed) = std::sync::mpsc::channel::<()>();
    if until_stdin_closes {
        std::thread::spawn(move || {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            drop(closed);
        });
    }
    let _ = stdin_closed.recv_timeout(limit);
    stop(server);
    let _ = std::fs::remove_file(&ca);
}

/// A `--serve` child pinned to the server core.
struct ServerProcess {
    label: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    pid: u32,
    addr: String,
    ca: PathBuf,
}

impl ServerProcess {
    fn start(label: &'static str, exe: &Path) -> Self {
        let mut child = Command::new("taskset")
            .args(["-c", SERVER_CORE])
            .arg(exe)
            .args(["--serve", "3600", "--until-stdin-closes"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starts {}: {e}", exe.display()));
        let stdin = child.stdin.take();
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("reads the server's address");
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .unwrap_or_else(|| panic!("{label} server printed {line:?}"))
                .to_owned()
        };
        Self {
            label,
            pid: field("pid=").parse().expect("a pid"),
            addr: field("addr="),
            ca: PathBuf::from(field("ca=")),
            child,
            stdin,
        }
    }

    /// utime + stime of the whole server process so far.
    fn cpu(&self) -> Duration {
        process_cpu(self.pid).expect("the server process is running")
    }

    fn stop(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + RUN_GRACE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// utime + stime of process `pid` from `/proc/<pid>/stat`.
fn process_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields after it do not.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after `(comm)`.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_secs_f64(
        ticks as f64 / clock_ticks_per_second(),
    ))
}

/// Asked once: a `getconf` started at every reading of a run would be
/// load on the machine measured.
fn clock_ticks_per_second() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Moves this process (all its threads, and so the processes it starts
/// without `taskset`) to the generator's core: its readings of `/proc` and
/// its waiting must not wake the server's core.
fn pin_to_generator_core() {
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", GENERATOR_CORE])
        .arg(std::process::id().to_string())
        .stdout(Stdio::null())
        .status()
        .expect("runs taskset");
    assert!(status.success(), "taskset -p failed: {status}");
}

/// vegeta: `$POOLKEEPER_VEGETA`, else the cached build of
/// `VEGETA_VERSION`, built with `go install` when missing.
fn vegeta() -> PathBuf {
    if let Some(path) = std::env::var_os(VEGETA_ENV) {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("HOME").expect("HOME is set");
    let dir = Path::new(&home)
        .join(".cache/poolkeeper")
        .join(format!("vegeta-{VEGETA_VERSION}"));
    let binary = dir.join("vegeta");
    if binary.exists() {
        return binary;
    }
    eprintln!(
        "{NAME}: building vegeta {VEGETA_VERSION} into {}",
        dir.display()
    );
    let status = Command::new("go")
        .args(["install", &format!("{VEGETA_MODULE}@{VEGETA_VERSION}")])
        .env("GOBIN", &dir)
        .status()
        .unwrap_or_else(|e| panic!("`go install {VEGETA_MODULE}` needs Go on the PATH: {e}"));
    assert!(status.success(), "go install {VEGETA_MODULE} failed");
    binary
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Http1,
    Http2,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Http1 => "HTTP/1.1",
            Protocol::Http2 => "HTTP/2",
        }
    }
}

/// What one fixed-rate run came to.
#[derive(Clone, Debug)]
struct Measured {
    rate: u32,
    requests: usize,
    failed: usize,
    achieved: f64,
    p50: Duration,
    p99: Duration,
    p999: Duration,
    max: Duration,
    cpu_per_request: Duration,
    generator_cpu: f64,
}

impl Measured {
    /// Met the budget: p99 under 1 ms, every answer a 200, the rate held.
    fn within_budget(&self) -> bool {
        self.p99 < P99_BUDGET && self.failed == 0 && self.achieved >= f64::from(self.rate) * 0.97
    }
}

struct Attack<'a> {
    vegeta: &'a Path,
    dir: &'a Path,
    server: &'a ServerProcess,
    path: &'a str,
    body: &'a Path,
    protocol: Protocol,
}

impl Attack<'_> {
    /// Sends `rate` requests/s for `seconds` and measures the answers and
    /// the server's CPU over the run.
    fn run(&self, rate: u32, seconds: u64) -> Measured {
        let targets = self.dir.join("targets.txt");
        std::fs::write(
            &targets,
            format!(
                "POST https://{}{}\nContent-Type: application/json\n@{}\n",
                self.server.addr,
                self.path,
                self.body.display()
            ),
        )
        .expect("writes the targets");
        let results = self.dir.join("results.bin");
        let cpu_before = self.server.cpu();
        let generator_cpu = run_bounded(
            Command::new("taskset")
                .args(["-c", GENERATOR_CORE])
                .arg(self.vegeta)
                .arg("attack")
                .arg(format!("-rate={rate}/1s"))
                .arg(format!("-duration={seconds}s"))
                .arg(format!("-targets={}", targets.display()))
                .arg(format!("-root-certs={}", self.server.ca.display()))
                .arg(format!("-http2={}", self.protocol == Protocol::Http2))
                .args(["-timeout=5s", "-max-body=0", "-keepalive=true"])
                .arg(format!("-output={}", results.display())),
            Duration::from_secs(seconds),
        );
        let cpu = self.server.cpu() - cpu_before;
        let mut measured = summarize(self.vegeta, &results, rate);
        measured.cpu_per_request = cpu / measured.requests.max(1) as u32;
        measured.generator_cpu = generator_cpu.as_secs_f64() / seconds as f64;
        measured
    }
}

/// Runs `command` to completion, killing it when it outlives `expected` by
/// `RUN_GRACE`; returns its CPU time as last seen in `/proc`.
fn run_bounded(command: &mut Command, expected: Duration) -> Duration {
    let mut child = command
        .stdout(Stdio::null())
        .spawn()
        .expect("starts vegeta");
    let deadline = Instant::now() + expected + RUN_GRACE;
    let mut cpu = Duration::ZERO;
    loop {
        if let Some(status) = child.try_wait().expect("waits for vegeta") {
            assert!(status.success(), "vegeta failed: {status}");
            return cpu;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("vegeta ran past {expected:?} + {RUN_GRACE:?}");
        }
        // `taskset` execs vegeta: the child's pid is vegeta's.
        cpu = process_cpu(child.id()).unwrap_or(cpu);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Latencies and answer codes of a run, from `vegeta encode --to=csv`
/// (timestamp ns, code, latency ns, ...).
fn summarize(vegeta: &Path, results: &Path, rate: u32) -> Measured {
    let output = Command::new(vegeta)
        .args(["encode", "--to=csv"])
        .arg(results)
        .output()
        .expect("vegeta encode");
    assert!(output.status.success(), "vegeta encode failed");
    let text = String::from_utf8_lossy(&output.stdout);
    let mut latencies = Vec::new();
    let (mut failed, mut first, mut last) = (0, u128::MAX, 0u128);
    for line in text.lines() {
        let mut fields = line.splitn(4, ',');
        let (Some(at), Some(code), Some(latency)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (Ok(at), Ok(latency)) = (at.parse::<u128>(), latency.parse::<u64>()) else {
            continue;
        };
        first = first.min(at);
        last = last.max(at);
        failed += usize::from(code != "200");
        latencies.push(Duration::from_nanos(latency));
    }
    assert!(!latencies.is_empty(), "vegeta recorded no request");
    latencies.sort_unstable();
    let quantile =
        |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    let span = (last.saturating_sub(first)) as f64 / 1e9;
    Measured {
        rate,
        requests: latencies.len(),
        failed,
        achieved: if span > 0.0 {
            (latencies.len() - 1) as f64 / span
        } else {
            0.0
        },
        p50: quantile(0.50),
        p99: quantile(0.99),
        p999: quantile(0.999),
        max: latencies[latencies.len() - 1],
        cpu_per_request: Duration::ZERO,
        generator_cpu: 0.0,
    }
}

/// What one server came to for one protocol and webhook.
struct ServerRuns {
    label: &'static str,
    /// The rounds at [`API_SERVER_RATE`], in the order run.
    rounds: Vec<Measured>,
    /// The round of the median CPU per admission, then the higher fixed
    /// rates and the rising steps.
    runs: Vec<Measured>,
    first_miss: Option<Measured>,
}

/// The rounds at the API server's rate and the higher fixed rates, each
/// run by every server in turn (so that a change in the machine's load
/// falls on all of them alike), then each server's rising steps until it
/// misses the budget.
fn measure(attacks: &[Attack<'_>]) -> Vec<ServerRuns> {
    let mut rounds: Vec<Vec<Measured>> = vec![Vec::new(); attacks.len()];
    for round in 0..ROUNDS {
        for turn in 0..attacks.len() {
            let server = (round + turn) % attacks.len();
            rounds[server].push(attacks[server].run(API_SERVER_RATE, ROUND_SECONDS));
        }
    }
    let mut fixed: Vec<Vec<Measured>> = rounds.iter().map(|r| vec![median_round(r)]).collect();
    for rate in HIGHER_RATES {
        for (attack, runs) in attacks.iter().zip(&mut fixed) {
            runs.push(attack.run(rate, FIXED_SECONDS));
        }
    }
    attacks
        .iter()
        .zip(rounds)
        .zip(fixed)
        .map(|((attack, rounds), mut runs)| {
            let mut rate = HIGHER_RATES[HIGHER_RATES.len() - 1];
            while runs.last().is_some_and(Measured::within_budget) && rate < MAX_RATE {
                rate += RATE_STEP;
                runs.push(attack.run(rate, STEP_SECONDS));
            }
            let first_miss = rounds
                .iter()
                .chain(&runs)
                .find(|m| !m.within_budget())
                .cloned();
            ServerRuns {
                label: attack.server.label,
                rounds,
                runs,
                first_miss,
            }
        })
        .collect()
}

/// The round whose CPU per admission is the median of `rounds`.
fn median_round(rounds: &[Measured]) -> Measured {
    median_by(rounds, |a, b| a.cpu_per_request.cmp(&b.cpu_per_request))
}

/// The middle one of `values` (the upper of the two middle ones for an even count).
fn median_by<T: Clone>(values: &[T], compare: impl Fn(&T, &T) -> std::cmp::Ordering) -> T {
    let mut sorted: Vec<&T> = values.iter().collect();
    sorted.sort_by(|a, b| compare(a, b));
    sorted[sorted.len() / 2].clone()
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn print_run(label: &str, m: &Measured, baseline: Option<&Measured>) {
    let ratio = |now: Duration, before: Option<Duration>| match before {
        Some(before) if !before.is_zero() => {
            format!(" ({:.2}x)", now.as_secs_f64() / before.as_secs_f64())
        }
        _ => String::new(),
    };
    println!(
        "| {label} | {} | {:.0} | {}{} | {}{} | {}{} | {} | {:.1} µs{} | {} | {:.0} % |",
        m.rate,
        m.achieved,
        micros(m.p50),
        ratio(m.p50, baseline.map(|b| b.p50)),
        micros(m.p99),
        ratio(m.p99, baseline.map(|b| b.p99)),
        micros(m.p999),
        ratio(m.p999, baseline.map(|b| b.p999)),
        micros(m.max),
        m.cpu_per_request.as_secs_f64() * 1e6,
        ratio(m.cpu_per_request, baseline.map(|b| b.cpu_per_request)),
        m.failed,
        m.generator_cpu * 100.0,
    );
}

fn print_table(protocol: Protocol, webhook: &str, results: &[ServerRuns]) {
    println!();
    println!(
        "{webhook} over {} (server on core {SERVER_CORE}, vegeta on core {GENERATOR_CORE})",
        protocol.name()
    );
    println!(
        "| server | rate/s | achieved/s | p50 | p99 | p99.9 | max | server CPU/admission | non-200 | generator CPU |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let reference = results.iter().find(|r| r.label == REFERENCE);
    for server in results {
        for m in &server.runs {
            let before = reference
                .filter(|_| server.label != REFERENCE)
                .and_then(|r| r.runs.iter().find(|b| b.rate == m.rate));
            print_run(server.label, m, before);
        }
    }
    println!(
        "server CPU/admission at {API_SERVER_RATE}/s, {ROUNDS} rounds of {ROUND_SECONDS} s \
         (median, then every round in the order run):"
    );
    let micros_of = |m: &Measured| m.cpu_per_request.as_secs_f64() * 1e6;
    for server in results {
        let all: Vec<f64> = server.rounds.iter().map(micros_of).collect();
        let against = reference
            .filter(|_| server.label != REFERENCE)
            .map(|r| {
                let ratios: Vec<f64> = all
                    .iter()
                    .zip(r.rounds.iter().map(micros_of))
                    .map(|(now, then)| now / then)
                    .collect();
                format!(
                    "; round by round against {REFERENCE}: median {:.2}x",
                    median_by(&ratios, f64::total_cmp)
                )
            })
            .unwrap_or_default();
        println!(
            "- {}: median {:.1} µs (all: {}){against}",
            server.label,
            micros_of(&median_round(&server.rounds)),
            all.iter()
                .map(|v| format!("{v:.1}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for server in results {
        let best = server
            .rounds
            .iter()
            .chain(&server.runs)
            .filter(|m| m.within_budget())
            .map(|m| m.rate)
            .max();
        let crossed = server.first_miss.as_ref().map_or_else(
            || format!("not within {MAX_RATE}/s"),
            |m| format!("{}/s (p99 {})", m.rate, micros(m.p99)),
        );
        println!(
            "{}: highest rate with p99 < 1 ms: {}; budget first missed at {crossed}",
            server.label,
            best.map_or_else(|| "none".to_owned(), |r| format!("{r}/s"))
        );
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn bench() {
    let vegeta = vegeta();
    pin_to_generator_core();
    let exe = std::env::current_exe().expect("the bench binary");
    let mut servers = vec![ServerProcess::start(CURRENT, &exe)];
    if let Some(baseline) = std::env::var_os(BASELINE_ENV) {
        servers.push(ServerProcess::start(REFERENCE, Path::new(&baseline)));
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    println!(
        "{NAME}: {NODES} nodes in {POOLS} pools; vegeta {VEGETA_VERSION}; load average {} at start",
        load_average()
    );
    for protocol in [Protocol::Http1, Protocol::Http2] {
        for (webhook, path, body) in webhooks() {
            let body_file = dir.path().join(format!("{webhook}.json"));
            std::fs::write(&body_file, body).expect("writes the body");
            let attacks: Vec<Attack<'_>> = servers
                .iter()
                .map(|server| Attack {
                    vegeta: &vegeta,
                    dir: dir.path(),
                    server,
                    path,
                    body: &body_file,
                    protocol,
                })
                .collect();
            for attack in &attacks {
                attack.run(API_SERVER_RATE, 2); // warm-up: connections, caches
            }
            print_table(protocol, webhook, &measure(&attacks));
        }
    }
    println!("\nload average {} at the end", load_average());
    for server in servers {
        server.stop();
    }
}
