//! Taking the cluster down, also after a run that was killed half-way: every process of its
//! cgroup, its mounts, cgroups and network namespace, the few files the kubelet, containerd
//! and the CNI plugins write on the host outside the cluster's directories, and the kernel
//! settings the kubelet changed.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::host::{self, Cgroups};
use super::{Layout, NETNS, daemons, netns_exists};
use crate::{Error, Result, oci};

/// Host paths the node writes to although it is told to keep its files elsewhere: the
/// kubelet's device-plugin directory and container-log links, libcni's result cache,
/// containerd's shim sockets, `ip netns`' directory. Those the cluster creates are removed
/// whole; in those that existed before only the cluster's entries are.
const HOST_PATHS: [&str; 6] = [
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/var/lib/cni",
    "/run/containerd",
    "/run/netns",
];
/// libcni names its cached results after the network.
const CNI_RESULTS: &str = "/var/lib/cni/results";
const CNI_NETWORK: &str = "poolkeeper-cluster";
const SHIM_SOCKETS: &str = "/run/containerd/s";

fn state_file(layout: &Layout) -> PathBuf {
    layout.dir.join("host-state")
}

/// Saves the kubelet's kernel settings and which host paths do not exist yet.
pub fn record_host_state(layout: &Layout) -> Result<()> {
    let mut state: String = host::read_sysctls()
        .lines()
        .map(|line| format!("sysctl {line}\n"))
        .collect();
    for path in HOST_PATHS.iter().filter(|p| !Path::new(p).exists()) {
        state.push_str(&format!("created {path}\n"));
    }
    let file = state_file(layout);
    std::fs::write(&file, state).map_err(|e| Error::io(format!("writing {}", file.display()), e))
}

/// `cargo xtask cluster down`.
pub fn down(layout: &Layout) -> Result<()> {
    let cgroups = host::cgroups()?;
    let anything = netns_exists()
        || layout.run.exists()
        || state_file(layout).exists()
        || !daemons::cluster_processes(cgroups.tracking()).is_empty();
    if !anything {
        println!("no cluster is up");
        return Ok(());
    }
    cleanup(layout, &cgroups)?;
    println!("cluster down; its logs are in {}", layout.logs().display());
    Ok(())
}

/// Removes whatever of a cluster is there; goes on past a failed step and reports the first.
pub fn cleanup(layout: &Layout, cgroups: &Cgroups) -> Result<()> {
    let mut errors: Vec<Error> = Vec::new();
    let mut note = |result: Result<()>| {
        if let Err(error) = result {
            errors.push(error);
        }
    };
    note(daemons::kill_all(cgroups.tracking()).map(drop));
    note(remove_shim_sockets(layout));
    note(unmount_below(&layout.run));
    note(remove_cgroups(cgroups));
    if netns_exists() {
        note(super::ip(&["netns", "delete", NETNS]));
    }
    note(restore_host(layout));
    if layout.run.exists() {
        note(
            std::fs::remove_dir_all(&layout.run)
                .map_err(|e| Error::io(format!("removing {}", layout.run.display()), e)),
        );
    }
    note(remove_files_but_logs(&layout.dir));
    match errors.into_iter().next() {
        None => Ok(()),
        Some(first) => Err(first),
    }
}

fn remove_cgroups(cgroups: &Cgroups) -> Result<()> {
    // The kernel frees a cgroup's processes asynchronously after SIGKILL: retry briefly.
    let mut last = Ok(());
    for _ in 0..20 {
        last = daemons::remove_cgroups(cgroups);
        if last.is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    last
}

/// containerd 1.6 names a shim's socket after the SHA-256 of its address, namespace and
/// task id, in a fixed directory: those of the cluster's tasks are removed.
fn remove_shim_sockets(layout: &Layout) -> Result<()> {
    let tasks = layout
        .run
        .join("containerd/state/io.containerd.runtime.v2.task/k8s.io");
    let Ok(entries) = std::fs::read_dir(&tasks) else {
        return Ok(());
    };
    let address = layout.containerd_socket();
    for entry in entries.flatten() {
        let id = entry.file_name();
        let key = format!("{}/k8s.io/{}", address.display(), id.to_string_lossy());
        let socket = Path::new(SHIM_SOCKETS).join(oci::sha256_hex(key.as_bytes()));
        if socket.exists() {
            std::fs::remove_file(&socket)
                .map_err(|e| Error::io(format!("removing {}", socket.display()), e))?;
        }
    }
    Ok(())
}

/// Mount points below `dir` (the kubelet's volumes, containers' root filesystems, Pods'
/// network namespaces), innermost first, unmounted; lazily when busy.
fn unmount_below(dir: &Path) -> Result<()> {
    for _ in 0..5 {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| Error::io("reading /proc/self/mountinfo", e))?;
        let points = mount_points_below(&mountinfo, dir);
        if points.is_empty() {
            return Ok(());
        }
        for point in points.iter().rev() {
            let unmounted = Command::new("umount").arg(point).output();
            if !unmounted.is_ok_and(|o| o.status.success()) {
                let _ = Command::new("umount").arg("-l").arg(point).output();
            }
        }
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let left = mount_points_below(&mountinfo, dir);
    if left.is_empty() {
        Ok(())
    } else {
        Err(Error::Check(format!("still mounted: {left:?}")))
    }
}

/// In mount order: the later mounts sit on top of the earlier ones.
fn mount_points_below(mountinfo: &str, dir: &Path) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape_octal(field)))
        .filter(|point| point.starts_with(dir))
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\040`-style octal escapes.
fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escape = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match escape.and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Kernel settings back as they were; host paths the cluster created removed; in the others,
/// the cluster's entries.
fn restore_host(layout: &Layout) -> Result<()> {
    let state = std::fs::read_to_string(state_file(layout)).unwrap_or_default();
    let sysctls: String = state
        .lines()
        .filter_map(|l| l.strip_prefix("sysctl "))
        .map(|l| format!("{l}\n"))
        .collect();
    host::restore_sysctls(&sysctls)?;
    let created: Vec<&str> = state
        .lines()
        .filter_map(|l| l.strip_prefix("created "))
        .collect();
    for path in HOST_PATHS {
        if !created.contains(&path) {
            continue;
        }
        if path == "/run/netns" {
            // `ip netns add` bind-mounts the directory on itself.
            let _ = Command::new("umount").arg(path).output();
        }
        if Path::new(path).exists() {
            std::fs::remove_dir_all(path).map_err(|e| Error::io(format!("removing {path}"), e))?;
        }
    }
    remove_entries(Path::new("/var/log/containers"), |entry| {
        std::fs::read_link(entry).is_ok_and(|target| target.starts_with(layout.pod_logs()))
    })?;
    remove_entries(Path::new(CNI_RESULTS), |entry| {
        entry
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{CNI_NETWORK}-")))
    })
}

fn remove_entries(dir: &Path, ours: impl Fn(&Path) -> bool) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for path in entries.flatten().map(|e| e.path()).filter(|p| ours(p)) {
        std::fs::remove_file(&path)
            .map_err(|e| Error::io(format!("removing {}", path.display()), e))?;
    }
    Ok(())
}

fn remove_files_but_logs(dir: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        if entry.file_name() == "logs" {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(|e| Error::io(format!("removing {}", path.display()), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_below_a_directory_are_found_in_order() {
        let mountinfo = "\
22 1 0:21 / / rw - ext4 /dev/vda rw
90 22 0:50 / /run/poolkeeper-cluster/kubelet rw shared:5 - ext4 /dev/vda rw
91 90 0:51 / /run/poolkeeper-cluster/kubelet/pods/a/volumes/x rw - tmpfs tmpfs rw
92 22 0:52 / /run/poolkeeper-cluster-other rw - tmpfs tmpfs rw
93 22 0:53 / /run/poolkeeper-cluster/with\\040space rw - tmpfs tmpfs rw
";
        let points = mount_points_below(mountinfo, Path::new("/run/poolkeeper-cluster"));
        assert_eq!(
            points,
            [
                PathBuf::from("/run/poolkeeper-cluster/kubelet"),
                PathBuf::from("/run/poolkeeper-cluster/kubelet/pods/a/volumes/x"),
                PathBuf::from("/run/poolkeeper-cluster/with space"),
            ]
        );
    }

    #[test]
    fn octal_escapes_are_decoded() {
        assert_eq!(unescape_octal(r"a\040b\011c\134d"), "a b\tc\\d");
        assert_eq!(unescape_octal(r"trailing\04"), r"trailing\04");
        assert_eq!(unescape_octal(r"\999"), r"\999");
    }
}
