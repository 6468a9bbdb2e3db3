//! Admission latency and throughput of the real [`WebhookServer`] over HTTPS
//! keep-alive on loopback, driven by `wrk`.
//!
//! The server runs in-process as a supervisor component on a 2-worker tokio
//! runtime, with an index of 1,000 nodes in 50 Edge pools, the NodePools and
//! the placement ConfigMap, and a fresh self-signed certificate. `wrk -t1`
//! POSTs one AdmissionReview over and over to the validate or the mutate
//! path, on 1, 4 and 16 keep-alive connections (closed loop: a connection
//! sends its next request when the answer arrives), then paced: 18
//! connections each pausing a random 1 to 5 ms after every answer (`delay()`
//! in the Lua script; wrk's timers have millisecond resolution), which comes
//! to about 5,000 requests/s arriving at spread-out times. wrk (not wrk2)
//! cannot send at a fixed rate, so the paced run is the nearest it gets. wrk
//! and the server share the machine's cores.
//!
//! `cargo bench -p poolkeeper-webhook --bench load` needs `wrk` on the PATH
//! (`apt-get install wrk`). Without `--bench` (as under `cargo test
//! --benches`) it only starts the server and checks both answers, no wrk.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[allow(dead_code)]
mod fixtures;

use fixtures::{NODES, POOLS, Pki, Server, check_answers, start_server, stop, webhooks};

const NAME: &str = "webhook_load";
const DURATION: &str = "10s";
const CONNECTIONS: [u32; 3] = [1, 4, 16];
/// The paced run: connections, each pausing a random 1..=5 ms (3 ms on
/// average) after every answer, which comes to about 5,000 requests/s.
const PACED_CONNECTIONS: u32 = 18;
const PACED_MAX_DELAY_MS: u32 = 5;
/// Set to a number of seconds to keep the server up for wrk runs by hand
/// instead of running the load test.
const SERVE_ENV: &str = "POOLKEEPER_BENCH_SERVE_SECS";

fn wrk_available() -> bool {
    Command::new("wrk").arg("--version").output().is_ok()
}

/// A wrk script POSTing `body`; with `max_delay_ms`, each connection pauses
/// a random 1..=max_delay_ms milliseconds after every answer.
fn write_script(
    dir: &Path,
    name: &str,
    body: &str,
    max_delay_ms: Option<u32>,
) -> std::path::PathBuf {
    assert!(!body.contains("]==]"), "the body fits a Lua long string");
    let mut script = String::new();
    writeln!(script, "wrk.method = \"POST\"").unwrap();
    writeln!(
        script,
        "wrk.headers[\"Content-Type\"] = \"application/json\""
    )
    .unwrap();
    writeln!(script, "wrk.body = [==[{body}]==]").unwrap();
    if let Some(ms) = max_delay_ms {
        writeln!(script, "function delay() return math.random(1, {ms}) end").unwrap();
    }
    // --latency prints up to p99; the tail beyond it, in microseconds.
    writeln!(
        script,
        "function done(summary, latency, requests) \
         io.write(string.format(\"p99.9 %d\\n\", latency:percentile(99.9))) end"
    )
    .unwrap();
    let path = dir.join(name);
    std::fs::write(&path, script).expect("writes the wrk script");
    path
}

#[derive(Debug, Default)]
struct WrkResult {
    requests_per_second: f64,
    requests: u64,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
    non_2xx: u64,
    socket_errors: String,
}

/// `250.00us`, `1.20ms`, `2.00s` in microseconds.
fn micros(text: &str) -> f64 {
    let (number, factor) = if let Some(n) = text.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1_000.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60_000_000.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000_000.0)
    } else {
        (text, 1.0)
    };
    number.parse::<f64>().unwrap_or(f64::NAN) * factor
}

fn parse_wrk(output: &str) -> WrkResult {
    let mut result = WrkResult::default();
    for line in output.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["50%", v] => result.p50_us = micros(v),
            ["90%", v] => result.p90_us = micros(v),
            ["99%", v] => result.p99_us = micros(v),
            ["p99.9", v] => result.p999_us = v.parse().unwrap_or(f64::NAN),
            ["Latency", _avg, _stdev, max, ..] => result.max_us = micros(max),
            ["Requests/sec:", v] => result.requests_per_second = v.parse().unwrap_or(f64::NAN),
            [n, "requests", "in", ..] => result.requests = n.parse().unwrap_or(0),
            ["Non-2xx", "or", "3xx", "responses:", n] => result.non_2xx = n.parse().unwrap_or(0),
            ["Socket", "errors:", rest @ ..] => result.socket_errors = rest.join(" "),
            _ => {}
        }
    }
    result
}

fn run_wrk(url: &str, connections: u32, script: &Path) -> WrkResult {
    let connections = connections.to_string();
    let script = script.to_string_lossy();
    let args = [
        "-t1",
        "-c",
        &connections,
        "-d",
        DURATION,
        "--latency",
        "-s",
        &script,
        url,
    ];
    let output = Command::new("wrk").args(args).output().expect("wrk starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "wrk {} failed: {}\n{stdout}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let result = parse_wrk(&stdout);
    assert!(result.requests > 0, "wrk sent nothing:\n{stdout}");
    result
}

fn load(server: &Server) {
    let scripts = tempfile::tempdir().expect("temporary directory");
    let paths = webhooks();
    println!(
        "{NAME}: wrk -t1 -d{DURATION} --latency, HTTPS keep-alive to 127.0.0.1, {NODES} nodes in {POOLS} pools"
    );
    println!(
        "| webhook | connections | pacing | requests/s | p50 | p90 | p99 | p99.9 | max | non-2xx | socket errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (webhook, path, body) in &paths {
        let url = format!("https://{}{path}", server.addr);
        let closed = write_script(scripts.path(), &format!("{webhook}.lua"), body, None);
        let paced = write_script(
            scripts.path(),
            &format!("{webhook}-paced.lua"),
            body,
            Some(PACED_MAX_DELAY_MS),
        );
        let runs = CONNECTIONS
            .iter()
            .map(|c| (*c, &closed, "closed loop".to_owned()))
            .chain([(
                PACED_CONNECTIONS,
                &paced,
                format!("paced: random 1-{PACED_MAX_DELAY_MS} ms pause per request"),
            )]);
        for (connections, script, pacing) in runs {
            let r = run_wrk(&url, connections, script);
            println!(
                "| {webhook} | {connections} | {pacing} | {:.0} | {:.0} µs | {:.0} µs | {:.0} µs | {:.2} ms | {:.2} ms | {} | {} |",
                r.requests_per_second,
                r.p50_us,
                r.p90_us,
                r.p99_us,
                r.p999_us / 1_000.0,
                r.max_us / 1_000.0,
                r.non_2xx,
                if r.socket_errors.is_empty() {
                    "none"
                } else {
                    &r.socket_errors
                },
            );
        }
    }
}

/// Keeps the server up for a while, for wrk runs by hand: prints the URLs
/// and writes the request bodies beside the scripts it prints.
fn serve_for(server: &Server, duration: Duration) {
    let dir = std::env::temp_dir().join("poolkeeper-webhook-load");
    std::fs::create_dir_all(&dir).expect("creates the script directory");
    for (webhook, path, body) in webhooks() {
        let script = write_script(&dir, &format!("{webhook}.lua"), &body, None);
        println!(
            "{webhook}: wrk -t1 -c4 -d10s --latency -s {} https://{}{path}",
            script.display(),
            server.addr
        );
    }
    println!("serving for {duration:?}");
    std::thread::sleep(duration);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let benching = args.iter().any(|a| a == "--bench");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| NAME.contains(f.as_str())) {
        return;
    }
    if benching && !wrk_available() {
        eprintln!(
            "{NAME}: `wrk` was not found on the PATH; install it (Debian/Ubuntu: `apt-get install wrk`)"
        );
        std::process::exit(1);
    }
    let pki = Pki::new();
    let server = start_server(&pki, Some(2));
    check_answers(&server, &pki);
    if let Some(seconds) = std::env::var(SERVE_ENV)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        serve_for(&server, Duration::from_secs(seconds));
    } else if benching {
        load(&server);
    } else {
        println!("{NAME}: server answers both webhooks (run with --bench for the load test)");
    }
    stop(server);
}
