//! How a daemon of the cluster is started, and restarted by its recorded pid, with the
//! standard library alone: the tier starts every daemon this way (`cluster::daemons`), and the
//! chaos test (xtask/examples/cluster-tests) includes this file to restart the API server
//! mid-run as `cargo xtask cluster restart` does.
//!
//! A daemon joins the cluster's cgroup, then becomes its program inside the network namespace
//! through `nsenter --net` (the host's mount namespace kept), in a process group of its own (a
//! terminal's Ctrl-C does not reach it), writing its log; the pid recorded is the program's.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The cluster's cgroup below each hierarchy's root; the kubelet's `cgroupRoot`.
pub const CGROUP: &str = "poolkeeper-cluster";
/// Where the cgroup hierarchies are mounted.
const CGROUP_MOUNT: &str = "/sys/fs/cgroup";
const POLL: Duration = Duration::from_millis(100);

/// What a daemon runs and where.
pub struct Launch<'a> {
    pub program: &'a OsStr,
    pub args: &'a [String],
    /// The `cgroup.procs` files the daemon joins before it becomes the program.
    pub cgroup_procs: &'a [PathBuf],
    /// The network namespace's file (`/run/netns/NAME`).
    pub netns: &'a Path,
    pub path_env: &'a OsStr,
}

/// Starts the daemon in the background with stdout and stderr to `log`.
pub fn spawn(launch: &Launch<'_>, log: File) -> io::Result<Child> {
    let err_log = log.try_clone()?;
    Command::new("sh")
        .arg("-c")
        .arg(
            r#"netns=$1; n=$2; shift 2
while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 1; shift; n=$((n - 1)); done
exec nsenter --net="$netns" -- "$@""#,
        )
        .arg("sh")
        .arg(launch.netns)
        .arg(launch.cgroup_procs.len().to_string())
        .args(launch.cgroup_procs)
        .arg(launch.program)
        .args(launch.args)
        .env("PATH", launch.path_env)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err_log)
        .process_group(0)
        .spawn()
}

/// The records of the pids file: name and pid, one line each.
pub fn parse_pids(text: &str) -> Vec<(String, u32)> {
    text.lines()
        .filter_map(|line| {
            let (name, pid) = line.split_once(' ')?;
            Some((name.to_owned(), pid.parse().ok()?))
        })
        .collect()
}

/// The pids file with `name`'s record replaced by `pid` (appended when there was none).
pub fn with_pid(text: &str, name: &str, pid: u32) -> String {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|line| line.split_once(' ').is_none_or(|(n, _)| n != name))
        .map(str::to_owned)
        .collect();
    lines.push(format!("{name} {pid}"));
    lines.join("\n") + "\n"
}

/// The `cgroup.procs` files of the cgroups below the cluster's that `/proc/PID/cgroup` lists
/// (`ID:CONTROLLERS:PATH` lines; the unified hierarchy's controllers are empty).
pub fn cluster_cgroup_procs(proc_cgroup: &str, mount: &Path) -> Vec<PathBuf> {
    let top = format!("/{CGROUP}");
    proc_cgroup
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            if path != top && !path.starts_with(&format!("{top}/")) {
                return None;
            }
            let hierarchy = match controllers {
                "" => mount.to_path_buf(),
                c => mount.join(c.trim_start_matches("name=")),
            };
            Some(
                hierarchy
                    .join(path.trim_start_matches('/'))
                    .join("cgroup.procs"),
            )
        })
        .collect()
}

/// Running: the process exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) S ...`: the state follows the last parenthesis.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// Restarts the daemon `name` recorded in `pids_file`: SIGTERM (SIGKILL after `stop_grace`),
/// down for `down_for`, then the same command line in the same cgroups and network namespace,
/// its log appended to (and the files it writes itself, such as the API server's audit log,
/// opened again by it). The new pid replaces the old in `pids_file`; it is returned.
pub fn restart(
    pids_file: &Path,
    name: &str,
    log: &Path,
    netns: &Path,
    stop_grace: Duration,
    down_for: Duration,
) -> io::Result<u32> {
    let failed = |what: String| io::Error::other(format!("restarting {name}: {what}"));
    let pids = std::fs::read_to_string(pids_file)?;
    let pid = parse_pids(&pids)
        .into_iter()
        .rev()
        .find_map(|(n, pid)| (n == name).then_some(pid))
        .ok_or_else(|| failed(format!("no pid recorded in {}", pids_file.display())))?;
    if !alive(pid) {
        return Err(failed(format!("pid {pid} is not running")));
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))?;
    let mut argv = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned());
    let program = argv
        .next()
        .ok_or_else(|| failed("empty cmdline".to_owned()))?;
    let args: Vec<String> = argv.collect();
    let cgroup_procs = cluster_cgroup_procs(
        &std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?,
        Path::new(CGROUP_MOUNT),
    );
    if cgroup_procs.is_empty() {
        return Err(failed(format!("pid {pid} is not in the cgroup {CGROUP}")));
    }
    let path_env = std::env::var_os("PATH").unwrap_or_default();
    stop(pid, stop_grace).map_err(|e| failed(e.to_string()))?;
    std::thread::sleep(down_for);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let child = spawn(
        &Launch {
            program: OsStr::new(&program),
            args: &args,
            cgroup_procs: &cgroup_procs,
            netns,
            path_env: &path_env,
        },
        log,
    )?;
    let new_pid = child.id();
    std::fs::write(pids_file, with_pid(&pids, name, new_pid))?;
    Ok(new_pid)
}

/// SIGTERM, then SIGKILL when the process outlives `grace`; returns once it is gone.
fn stop(pid: u32, grace: Duration) -> io::Result<()> {
    for (signal, within) in [("TERM", grace), ("KILL", Duration::from_secs(5))] {
        Command::new("kill")
            .args(["-s", signal, &pid.to_string()])
            .stderr(Stdio::null())
            .status()?;
        let sent = Instant::now();
        while alive(pid) && sent.elapsed() < within {
            std::thread::sleep(POLL);
        }
        if !alive(pid) {
            return Ok(());
        }
    }
    Err(io::Error::other(format!("pid {pid} survived SIGKILL")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_free_pid_is_not() {
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX));
    }

    #[test]
    fn a_restarted_daemon_replaces_its_record_only() {
        let text = "etcd 10\nkube-apiserver 11\nkubelet 12\n";
        assert_eq!(
            parse_pids(text),
            [("etcd", 10), ("kube-apiserver", 11), ("kubelet", 12)]
                .map(|(n, p)| (n.to_owned(), p))
                .to_vec()
        );
        let restarted = with_pid(text, "kube-apiserver", 99);
        assert_eq!(restarted, "etcd 10\nkubelet 12\nkube-apiserver 99\n");
        assert_eq!(with_pid("", "etcd", 5), "etcd 5\n");
        // A name that is a prefix of another's is its own record.
        assert_eq!(
            with_pid("kube 1\nkube-proxy 2\n", "kube", 3),
            "kube-proxy 2\nkube 3\n"
        );
    }

    #[test]
    fn the_cluster_cgroups_of_a_process() {
        let mount = Path::new("/sys/fs/cgroup");
        let hybrid = "9:name=systemd:/\n8:pids:/poolkeeper-cluster/daemons\n\
                      4:memory:/other\n1:cpu,cpuacct:/poolkeeper-cluster-x\n0::/\n";
        assert_eq!(
            cluster_cgroup_procs(hybrid, mount),
            vec![PathBuf::from(
                "/sys/fs/cgroup/pids/poolkeeper-cluster/daemons/cgroup.procs"
            )]
        );
        assert_eq!(
            cluster_cgroup_procs("0::/poolkeeper-cluster/daemons\n", mount),
            vec![PathBuf::from(
                "/sys/fs/cgroup/poolkeeper-cluster/daemons/cgroup.procs"
            )]
        );
        assert!(cluster_cgroup_procs("0::/user.slice\n", mount).is_empty());
    }
}
