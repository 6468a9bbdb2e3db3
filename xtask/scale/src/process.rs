//! The poolkeeper binary as a child process: its configuration, its log (each line stamped
//! with the time since the process started, as it arrives), `/readyz` polling, `/metrics`,
//! its memory from `/proc`, and a graceful stop by PID.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};

use crate::error::{Result, ScaleError};

const READY_POLL: Duration = Duration::from_millis(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(40);
const LOG_TAIL: usize = 30;

/// What poolkeeper is started with.
#[derive(Clone, Debug)]
pub struct Launch {
    pub binary: PathBuf,
    pub kubeconfig: PathBuf,
    pub namespace: String,
    pub lease_namespace: String,
    pub page_size: u32,
    pub debounce: Duration,
    /// `audit.concurrency`, where not the configuration's default.
    pub audit_concurrency: Option<usize>,
    /// `placement.engine`, where not the configuration's default.
    pub engine: Option<String>,
    /// `audit.reports`: OpenReports written by the leader's audit rounds.
    pub audit_reports: bool,
    pub cert_dir: PathBuf,
    pub admin: SocketAddr,
    pub webhook: SocketAddr,
    /// Where the configuration and the log are written.
    pub dir: PathBuf,
}

/// One line of poolkeeper's log, with the time since the process was started.
#[derive(Clone, Debug)]
pub struct LogLine {
    pub at: Duration,
    pub text: String,
}

impl LogLine {
    /// The JSON object of a structured log line.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_str(&self.text).ok()
    }
}

/// Memory of a process, from `/proc/<pid>/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    pub rss_kib: u64,
    pub peak_kib: u64,
}

pub struct Poolkeeper {
    child: Child,
    pid: u32,
    admin: SocketAddr,
    started: Instant,
    log: Arc<Mutex<Vec<LogLine>>>,
}

/// A loopback address whose port was free a moment ago.
pub fn free_addr() -> Result<SocketAddr> {
    Ok(SocketAddr::from((
        Ipv4Addr::LOCALHOST,
        poolkeeper_testenv::free_port()?,
    )))
}

/// The configuration file: defaults, except what a local run needs (addresses, certificate
/// directory, JSON logs for the timeline) and the figures the benchmark compares with
/// (page size, debounce, the audit's concurrency), written out so the report can name them.
pub fn config_yaml(launch: &Launch) -> String {
    let config = format!(
        "namespace: {namespace}\n\
         leaderElection: {{enabled: true, leaseNamespace: {lease}}}\n\
         watchers: {{pageSize: {page}}}\n\
         reconciler: {{debounceInterval: {debounce}ms}}\n\
         webhook: {{listen: \"{webhook}\", certDir: \"{certs}\"}}\n\
         health: {{listen: \"{admin}\"}}\n\
         shutdown: {{drainDelay: 0s}}\n\
         logging: {{level: info, format: json}}\n",
        namespace = launch.namespace,
        lease = launch.lease_namespace,
        page = launch.page_size,
        debounce = launch.debounce.as_millis(),
        webhook = launch.webhook,
        certs = launch.cert_dir.display(),
        admin = launch.admin,
    );
    let audit: Vec<String> = [
        launch
            .audit_concurrency
            .map(|concurrency| format!("concurrency: {concurrency}")),
        launch.audit_reports.then(|| "reports: true".to_owned()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let config = if audit.is_empty() {
        config
    } else {
        format!("{config}audit: {{{}}}\n", audit.join(", "))
    };
    match &launch.engine {
        Some(engine) => format!("{config}placement: {{engine: {engine}}}\n"),
        None => config,
    }
}

impl Poolkeeper {
    /// Starts `poolkeeper run`, under `setpriv --pdeathsig KILL` where util-linux has it, so
    /// the controller dies with this process even when it is killed outright. Call it from
    /// the main thread: the parent-death signal follows the thread that forks.
    pub fn start(launch: &Launch) -> Result<Self> {
        let config = launch.dir.join("poolkeeper.yaml");
        std::fs::write(&config, config_yaml(launch))
            .map_err(|e| ScaleError::io(format!("writing {}", config.display()), e))?;
        let mut command = if on_path("setpriv") {
            let mut command = Command::new("setpriv");
            command
                .args(["--pdeathsig", "KILL", "--"])
                .arg(&launch.binary);
            command
        } else {
            Command::new(&launch.binary)
        };
        command
            .arg("run")
            .arg("--config")
            .arg(&config)
            .arg("--kubeconfig")
            .arg(&launch.kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let started = Instant::now();
        let mut child = command
            .spawn()
            .map_err(|e| ScaleError::io(format!("starting {}", launch.binary.display()), e))?;
        let pid = child.id().unwrap_or_default();
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("stderr is piped");
        tokio::spawn(follow_log(
            stderr,
            started,
            log.clone(),
            launch.dir.join("poolkeeper.log"),
        ));
        Ok(Self {
            child,
            pid,
            admin: launch.admin,
            started,
            log,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn log(&self) -> Vec<LogLine> {
        self.log.lock().expect("log lock").clone()
    }

    fn log_tail(&self) -> String {
        let log = self.log();
        let skip = log.len().saturating_sub(LOG_TAIL);
        log[skip..]
            .iter()
            .map(|line| line.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Fails when the process has exited, naming what it was waiting for.
    pub fn check_running(&mut self, what: &str) -> Result<()> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(ScaleError::PoolkeeperExited {
                what: what.to_owned(),
                status,
                log_tail: self.log_tail(),
            }),
            Ok(None) => Ok(()),
            Err(e) => Err(ScaleError::io("checking on poolkeeper", e)),
        }
    }

    /// Polls `/readyz` until it answers 200; the time since the process started.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<Duration> {
        loop {
            self.check_running("/readyz answered 200")?;
            if let Ok((200, _)) = http_get(self.admin, "/readyz").await {
                return Ok(self.started.elapsed());
            }
            if self.started.elapsed() > timeout {
                return Err(ScaleError::timeout("poolkeeper's /readyz 200", timeout));
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// poolkeeper's `/metrics` text.
    pub async fn metrics(&self) -> Result<String> {
        match http_get(self.admin, "/metrics").await {
            Ok((200, body)) => Ok(body),
            Ok((status, body)) => Err(ScaleError::Unexpected(format!(
                "poolkeeper's /metrics answered {status}: {body}"
            ))),
            Err(e) => Err(ScaleError::io("reading poolkeeper's /metrics", e)),
        }
    }

    pub fn memory(&self) -> Result<Memory> {
        memory_of(self.pid)
    }

    /// SIGTERM (by PID, with the kill utility: the workspace forbids the unsafe libc call),
    /// then SIGKILL if it has not stopped within the timeout.
    pub async fn stop(mut self) -> Result<(ExitStatus, Duration)> {
        let asked = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .await;
        match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
            Ok(status) => status
                .map(|s| (s, asked.elapsed()))
                .map_err(|e| ScaleError::io("waiting for poolkeeper to stop", e)),
            Err(_) => {
                let _ = self.child.kill().await;
                Err(ScaleError::timeout(
                    "poolkeeper stopping after SIGTERM",
                    STOP_TIMEOUT,
                ))
            }
        }
    }
}

async fn follow_log(
    stderr: ChildStderr,
    started: Instant,
    log: Arc<Mutex<Vec<LogLine>>>,
    file: PathBuf,
) {
    let mut out = tokio::fs::File::create(&file).await.ok();
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(text)) = lines.next_line().await {
        let at = started.elapsed();
        if let Some(out) = out.as_mut() {
            let _ = out
                .write_all(format!("{:>10.3} {text}\n", at.as_secs_f64()).as_bytes())
                .await;
        }
        log.lock().expect("log lock").push(LogLine { at, text });
    }
}

/// RSS and peak RSS of process `pid`.
pub fn memory_of(pid: u32) -> Result<Memory> {
    let path = format!("/proc/{pid}/status");
    let status =
        std::fs::read_to_string(&path).map_err(|e| ScaleError::io(format!("reading {path}"), e))?;
    parse_memory(&status).ok_or_else(|| ScaleError::Unexpected(format!("no VmRSS/VmHWM in {path}")))
}

fn parse_memory(status: &str) -> Option<Memory> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some(Memory {
        rss_kib: field("VmRSS:")?,
        peak_kib: field("VmHWM:")?,
    })
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// A minimal HTTP/1.0 GET: status code and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line in {head:?}")))?;
    Ok((status, body.to_owned()))
}

/// `/proc/loadavg`'s three averages.
pub fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
}

/// The directory for this run's files, created if missing.
pub fn prepare_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| ScaleError::io(format!("creating {}", dir.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_comes_from_vmrss_and_vmhwm() {
        let status =
            "Name:\tpoolkeeper\nVmPeak:\t  900000 kB\nVmHWM:\t   70312 kB\nVmRSS:\t   51200 kB\n";
        assert_eq!(
            parse_memory(status),
            Some(Memory {
                rss_kib: 51_200,
                peak_kib: 70_312
            })
        );
        assert_eq!(parse_memory("Name:\tx\n"), None);
    }

    #[test]
    fn the_config_names_every_figure_the_report_compares_with() {
        let launch = Launch {
            binary: PathBuf::from("poolkeeper"),
            kubeconfig: PathBuf::from("kubeconfig"),
            namespace: "machine-system".to_owned(),
            lease_namespace: "poolkeeper-system".to_owned(),
            page_size: 500,
            debounce: Duration::from_millis(500),
            audit_concurrency: Some(8),
            engine: Some("cel".to_owned()),
            audit_reports: true,
            cert_dir: PathBuf::from("/tmp/certs"),
            admin: SocketAddr::from(([127, 0, 0, 1], 8081)),
            webhook: SocketAddr::from(([127, 0, 0, 1], 9443)),
            dir: PathBuf::from("/tmp"),
        };
        let yaml = config_yaml(&launch);
        for expected in [
            "namespace: machine-system",
            "leaderElection: {enabled: true, leaseNamespace: poolkeeper-system}",
            "watchers: {pageSize: 500}",
            "reconciler: {debounceInterval: 500ms}",
            "webhook: {listen: \"127.0.0.1:9443\", certDir: \"/tmp/certs\"}",
            "health: {listen: \"127.0.0.1:8081\"}",
            "logging: {level: info, format: json}",
            "audit: {concurrency: 8, reports: true}",
            "placement: {engine: cel}",
        ] {
            assert!(yaml.contains(expected), "{expected} missing from\n{yaml}");
        }
    }
}
