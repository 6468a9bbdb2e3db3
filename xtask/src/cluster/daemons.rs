//! The cluster's processes. Each starts inside the network namespace through `nsenter --net`
//! (so it keeps the host's mount namespace: the kubelet's volume mounts are the ones containerd
//! bind-mounts into containers) and inside the cluster's cgroup (so `down` finds every process
//! of the cluster, containerd's shims and the containers included), writes a log file of its
//! own, and has its pid recorded.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::host::{Cgroups, Host};
use super::process;
use super::{Layout, NETNS};
use crate::{Error, Result};

pub use super::process::{CGROUP, alive};
/// The daemons' own cgroup: a leaf, as cgroup v2 wants processes only in leaves.
const DAEMONS_CGROUP: &str = "daemons";

const POLL: Duration = Duration::from_millis(250);

pub struct Daemon {
    pub name: &'static str,
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// Makes the cluster's cgroup in every hierarchy (cpuset needs its CPUs and memory nodes
/// copied from the parent before a process may join) and the daemons' leaf.
pub fn create_cgroups(host: &Host) -> Result<()> {
    for hierarchy in host.cgroups.hierarchies() {
        let dir = hierarchy.join(CGROUP);
        mkdir(&dir)?;
        for file in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(value) = std::fs::read_to_string(hierarchy.join(file)) {
                std::fs::write(dir.join(file), value.trim())
                    .map_err(|e| Error::io(format!("writing {}", dir.join(file).display()), e))?;
            }
        }
    }
    mkdir(&daemons_cgroup(host))
}

fn mkdir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))
}

fn daemons_cgroup(host: &Host) -> PathBuf {
    host.cgroups.tracking().join(CGROUP).join(DAEMONS_CGROUP)
}

/// Starts the daemon in the background ([`process::spawn`]) and records its pid.
pub fn start(layout: &Layout, host: &Host, daemon: &Daemon) -> Result<u32> {
    let log_path = layout.log(daemon.name);
    let log = File::create(&log_path)
        .map_err(|e| Error::io(format!("creating {}", log_path.display()), e))?;
    let child = process::spawn(
        &process::Launch {
            program: daemon.program.as_os_str(),
            args: &daemon.args,
            cgroup_procs: &[daemons_cgroup(host).join("cgroup.procs")],
            netns: &Path::new("/run/netns").join(NETNS),
            path_env: std::ffi::OsStr::new(&host.path),
        },
        log,
    )
    .map_err(|e| Error::io(format!("starting {}", daemon.name), e))?;
    let pid = child.id();
    let pids = layout.pids_file();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&pids)
        .map_err(|e| Error::io(format!("opening {}", pids.display()), e))?;
    writeln!(file, "{} {pid}", daemon.name)
        .map_err(|e| Error::io(format!("writing {}", pids.display()), e))?;
    Ok(pid)
}

/// The daemons `start` recorded (a restart replaces its daemon's record): name and pid.
pub fn recorded(layout: &Layout) -> Vec<(String, u32)> {
    process::parse_pids(&std::fs::read_to_string(layout.pids_file()).unwrap_or_default())
}

/// An error naming the first recorded daemon that is no longer running, with its log's tail.
pub fn check_running(layout: &Layout) -> Result<()> {
    match recorded(layout).into_iter().find(|(_, pid)| !alive(*pid)) {
        None => Ok(()),
        Some((name, pid)) => Err(Error::Check(format!(
            "{name} (pid {pid}) exited; the end of {}:\n{}",
            layout.log(&name).display(),
            log_tail(&layout.log(&name), 30)
        ))),
    }
}

/// Polls `ready` until it is true, failing at once when a daemon exits and after `timeout`.
pub fn wait_until(
    layout: &Layout,
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<()> {
    let started = Instant::now();
    loop {
        if ready() {
            return Ok(());
        }
        check_running(layout)?;
        if started.elapsed() > timeout {
            return Err(Error::Check(format!(
                "{what}: not within {}s (logs in {})",
                timeout.as_secs(),
                layout.logs().display()
            )));
        }
        std::thread::sleep(POLL);
    }
}

pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Every process in the cluster's cgroup (daemons, shims, containers) in `root`'s hierarchy.
pub fn cluster_processes(tracking: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    let mut dirs = vec![tracking.join(CGROUP)];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(entry.path());
            }
        }
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        pids.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    pids
}

/// SIGKILL to every process of the cluster until none is left (bounded: 15 s).
pub fn kill_all(tracking: &Path) -> Result<usize> {
    let mut killed = 0;
    let started = Instant::now();
    loop {
        let pids: Vec<u32> = cluster_processes(tracking)
            .into_iter()
            .filter(|pid| alive(*pid))
            .collect();
        if pids.is_empty() {
            return Ok(killed);
        }
        if started.elapsed() > Duration::from_secs(15) {
            return Err(Error::Check(format!(
                "processes of the cluster still running after SIGKILL: {pids:?}"
            )));
        }
        killed += pids.len();
        let mut kill = Command::new("sh");
        kill.args(["-c", r#"kill -KILL "$@" 2>/dev/null; true"#, "kill"])
            .args(pids.iter().map(u32::to_string));
        let _ = kill.status();
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Removes the cluster's cgroup from every hierarchy, children first.
pub fn remove_cgroups(cgroups: &Cgroups) -> Result<()> {
    for hierarchy in cgroups.hierarchies() {
        let top = hierarchy.join(CGROUP);
        if !top.exists() {
            continue;
        }
        let mut order = Vec::new();
        let mut dirs = vec![top];
        while let Some(dir) = dirs.pop() {
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for entry in entries.flatten() {
                    if entry.file_type().is_ok_and(|t| t.is_dir()) {
                        dirs.push(entry.path());
                    }
                }
            }
            order.push(dir);
        }
        // Parents were pushed before their children: remove in reverse.
        for dir in order.iter().rev() {
            std::fs::remove_dir(dir)
                .map_err(|e| Error::io(format!("removing cgroup {}", dir.display()), e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_are_the_last_lines() {
        let path = std::env::temp_dir().join(format!("xtask-tail-{}", std::process::id()));
        std::fs::write(&path, "a\nb\nc\n").unwrap();
        assert_eq!(log_tail(&path, 2), "b\nc");
        assert_eq!(log_tail(&path, 10), "a\nb\nc");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(log_tail(&path, 2), "");
    }
}
