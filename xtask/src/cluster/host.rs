//! What the node needs from the machine, checked before anything starts, each with a message
//! that says what is missing and how to get it: root, cgroups, the Debian packages (installed
//! with apt-get when missing), and the kernel settings the kubelet changes.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run::display;
use crate::{Error, Result};

/// Programs the node runs, and the Debian package of each.
const PROGRAMS: [(&str, &str); 12] = [
    ("ip", "iproute2"),
    ("nsenter", "util-linux"),
    ("umount", "mount"),
    ("iptables", "iptables"),
    ("conntrack", "conntrack"),
    ("containerd", "containerd"),
    ("containerd-shim-runc-v2", "containerd"),
    ("ctr", "containerd"),
    ("runc", "runc"),
    // The tests: the README's blocks are bash and make the webhook's certificates with openssl;
    // /metrics is read from inside the namespace.
    ("bash", "bash"),
    ("openssl", "openssl"),
    ("curl", "curl"),
];

/// The CNI plugins the node's network uses.
const CNI_PLUGINS: [&str; 4] = ["bridge", "host-local", "loopback", "portmap"];
const CNI_PACKAGE: &str = "containernetworking-plugins";
/// Where Debian's package puts them, then the upstream convention.
const CNI_DIRS: [&str; 2] = ["/usr/lib/cni", "/opt/cni/bin"];

/// Directories searched besides PATH: root's tools live in the sbin directories, which a
/// non-login shell's PATH may lack.
const SBIN: [&str; 4] = ["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin"];

/// cgroup v1 controllers the kubelet manages Pods with.
const V1_CONTROLLERS: [&str; 5] = ["cpu", "cpuacct", "cpuset", "memory", "pids"];

/// Kernel settings the kubelet sets at its start (as on every node): saved before and put
/// back by `down`.
pub const KUBELET_SYSCTLS: [&str; 6] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// The machine as the node sees it.
#[derive(Debug, Clone)]
pub struct Host {
    pub cgroups: Cgroups,
    pub cni_bin_dir: PathBuf,
    /// PATH for the daemons: the caller's plus the sbin directories.
    pub path: String,
}

/// Where the cluster's cgroup goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cgroups {
    /// Every mounted v1 hierarchy, and the unified one of hybrid mode (the cluster's cgroup is
    /// made in each and removed from each), and the one whose
    /// `cgroup.procs` lists every process of the cluster.
    V1 {
        hierarchies: Vec<PathBuf>,
        tracking: PathBuf,
    },
    /// The unified hierarchy's mount point.
    V2 { root: PathBuf },
}

impl Cgroups {
    /// The hierarchies to make and remove the cluster's cgroup in.
    pub fn hierarchies(&self) -> Vec<PathBuf> {
        match self {
            Self::V1 { hierarchies, .. } => hierarchies.clone(),
            Self::V2 { root } => vec![root.clone()],
        }
    }

    /// The hierarchy that tracks every process (pids in v1, the unified one in v2).
    pub fn tracking(&self) -> &Path {
        match self {
            Self::V1 { tracking, .. } => tracking,
            Self::V2 { root } => root,
        }
    }
}

/// Checks everything, installing missing Debian packages; the error lists what is missing.
pub fn check() -> Result<Host> {
    if !is_root() {
        return Err(Error::Check(
            "the cluster needs root: it creates a network namespace, cgroups and mounts, and \
             runs containerd and the kubelet (run it as root, e.g. with sudo)"
                .to_owned(),
        ));
    }
    let cgroups = detect_cgroups(&std::fs::read_to_string("/proc/self/mountinfo").map_err(
        |e| {
            Error::io(
                "reading /proc/self/mountinfo to find the cgroup hierarchies",
                e,
            )
        },
    )?)?;
    let path = daemon_path();
    let cni_bin_dir = ensure_packages(&path)?;
    Ok(Host {
        cgroups,
        cni_bin_dir,
        path,
    })
}

/// Root and the cgroup hierarchies: what `down` needs (it installs nothing).
pub fn cgroups() -> Result<Cgroups> {
    if !is_root() {
        return Err(Error::Check(
            "taking the cluster down needs root (run it as root, e.g. with sudo)".to_owned(),
        ));
    }
    detect_cgroups(
        &std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| Error::io("reading /proc/self/mountinfo", e))?,
    )
}

fn is_root() -> bool {
    // The effective uid: the second number of the `Uid:` line.
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

fn daemon_path() -> String {
    let current = std::env::var("PATH").unwrap_or_default();
    let mut dirs: Vec<&str> = current.split(':').filter(|d| !d.is_empty()).collect();
    for dir in SBIN {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs.join(":")
}

fn find_program(path: &str, program: &str) -> Option<PathBuf> {
    path.split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|p| p.is_file())
}

fn find_cni_dir() -> Option<PathBuf> {
    CNI_DIRS
        .iter()
        .map(PathBuf::from)
        .find(|dir| CNI_PLUGINS.iter().all(|p| dir.join(p).is_file()))
}

/// The Debian packages whose programs are missing, without duplicates.
fn missing_packages(path: &str) -> Vec<&'static str> {
    let mut packages: Vec<&str> = PROGRAMS
        .iter()
        .filter(|(program, _)| find_program(path, program).is_none())
        .map(|(_, package)| *package)
        .collect();
    if find_cni_dir().is_none() {
        packages.push(CNI_PACKAGE);
    }
    packages.sort_unstable();
    packages.dedup();
    packages
}

/// Installs what is missing with apt-get (after an `apt-get update` if the first try fails),
/// and returns the CNI plugin directory.
fn ensure_packages(path: &str) -> Result<PathBuf> {
    let missing = missing_packages(path);
    if !missing.is_empty() {
        if find_program(path, "apt-get").is_none() {
            return Err(Error::Check(format!(
                "the cluster needs these packages, and apt-get is not here to install them: \
                 {} (install them with the system's package manager)",
                missing.join(" ")
            )));
        }
        eprintln!("cluster: installing {} with apt-get", missing.join(" "));
        if apt_install(&missing).is_err() {
            apt(&["update", "-qq"])?;
            apt_install(&missing)?;
        }
        let still = missing_packages(path);
        if !still.is_empty() {
            return Err(Error::Check(format!(
                "after `apt-get install`, programs of these packages are still missing: {}",
                still.join(" ")
            )));
        }
    }
    find_cni_dir().ok_or_else(|| {
        Error::Check(format!(
            "the CNI plugins {CNI_PLUGINS:?} are in none of {CNI_DIRS:?} \
             (apt-get install {CNI_PACKAGE})"
        ))
    })
}

fn apt_install(packages: &[&str]) -> Result<()> {
    let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
    args.extend_from_slice(packages);
    apt(&args)
}

fn apt(args: &[&str]) -> Result<()> {
    let mut command = Command::new("apt-get");
    command
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(std::process::Stdio::null());
    println!("$ {}", display(&command));
    crate::run::status(&mut command)
}

/// From /proc/self/mountinfo: v2 when /sys/fs/cgroup is the unified hierarchy, otherwise the
/// v1 hierarchies, which must include the controllers the kubelet uses.
pub fn detect_cgroups(mountinfo: &str) -> Result<Cgroups> {
    let mut v1: Vec<(PathBuf, Vec<String>)> = Vec::new();
    let mut v2_root = None;
    for line in mountinfo.lines() {
        // ... mount-point ... - fstype source super-options
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = left.split(' ').nth(4).unwrap_or_default();
        let mut right = right.split(' ');
        let fs_type = right.next().unwrap_or_default();
        let options = right.nth(1).unwrap_or_default();
        match fs_type {
            "cgroup2" if mount_point == "/sys/fs/cgroup" => v2_root = Some(mount_point),
            // Hybrid mode: runc and the kubelet make cgroups in it too.
            "cgroup2" => v1.push((PathBuf::from(mount_point), Vec::new())),
            "cgroup" => {
                let controllers = options
                    .split(',')
                    .filter(|o| V1_CONTROLLERS.contains(o) || o.starts_with("name="))
                    .map(str::to_owned)
                    .collect();
                v1.push((PathBuf::from(mount_point), controllers));
            }
            _ => {}
        }
    }
    if let Some(root) = v2_root {
        return Ok(Cgroups::V2 {
            root: PathBuf::from(root),
        });
    }
    let has = |controller: &str| v1.iter().any(|(_, c)| c.iter().any(|x| x == controller));
    let missing: Vec<&str> = V1_CONTROLLERS.iter().copied().filter(|c| !has(c)).collect();
    if v1.is_empty() || !missing.is_empty() {
        return Err(Error::Check(format!(
            "the kubelet needs cgroups: the unified hierarchy at /sys/fs/cgroup, or v1 \
             hierarchies with the controllers {V1_CONTROLLERS:?}; missing here: {missing:?}"
        )));
    }
    let tracking = v1
        .iter()
        .find(|(_, c)| c.iter().any(|x| x == "pids"))
        .map(|(p, _)| p.clone())
        .expect("pids is among the controllers found");
    Ok(Cgroups::V1 {
        hierarchies: v1.into_iter().map(|(p, _)| p).collect(),
        tracking,
    })
}

/// `name value` lines of the kubelet's sysctls as they are now.
pub fn read_sysctls() -> String {
    KUBELET_SYSCTLS
        .iter()
        .filter_map(|name| {
            let value = std::fs::read_to_string(Path::new("/proc/sys").join(name)).ok()?;
            Some(format!("{name} {}\n", value.trim()))
        })
        .collect()
}

/// Writes back what `read_sysctls` saved; unknown names are ignored.
pub fn restore_sysctls(saved: &str) -> Result<()> {
    for line in saved.lines() {
        let Some((name, value)) = line.split_once(' ') else {
            continue;
        };
        if !KUBELET_SYSCTLS.contains(&name) {
            continue;
        }
        let path = Path::new("/proc/sys").join(name);
        if std::fs::read_to_string(&path).is_ok_and(|now| now.trim() == value) {
            continue;
        }
        std::fs::write(&path, value)
            .map_err(|e| Error::io(format!("restoring {} to {value}", path.display()), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "\
30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:28 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
33 30 0:29 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
34 30 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
35 30 0:31 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
36 30 0:32 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
37 30 0:33 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn v1_hierarchies_are_found() {
        let Cgroups::V1 {
            hierarchies,
            tracking,
        } = detect_cgroups(V1).unwrap()
        else {
            panic!("v1 expected");
        };
        // The five controllers, name=systemd and the hybrid unified hierarchy.
        assert_eq!(hierarchies.len(), 7);
        assert_eq!(tracking, PathBuf::from("/sys/fs/cgroup/pids"));
    }

    #[test]
    fn the_unified_hierarchy_is_v2() {
        let mountinfo = "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
        assert_eq!(
            detect_cgroups(mountinfo).unwrap(),
            Cgroups::V2 {
                root: PathBuf::from("/sys/fs/cgroup")
            }
        );
    }

    #[test]
    fn missing_controllers_are_named() {
        let without_pids: String = V1
            .lines()
            .filter(|l| !l.contains("pids"))
            .collect::<Vec<_>>()
            .join("\n");
        let error = detect_cgroups(&without_pids).unwrap_err().to_string();
        assert!(error.contains(r#"["pids"]"#), "{error}");
        let error = detect_cgroups("").unwrap_err().to_string();
        assert!(error.contains("needs cgroups"), "{error}");
    }

    #[test]
    fn sbin_directories_are_added_once() {
        let path = daemon_path();
        for dir in SBIN {
            assert_eq!(
                path.split(':').filter(|d| *d == dir).count(),
                1,
                "{dir} in {path}"
            );
        }
    }
}
