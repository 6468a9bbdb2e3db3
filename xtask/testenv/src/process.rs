//! Child processes of a control plane: spawned so that none outlives the process that owns it.
//!
//! Three layers make sure of that:
//! - `Drop` kills and reaps each child (this also runs when a test panics);
//! - each child runs under `setpriv --pdeathsig KILL` when `setpriv` is available, so the kernel
//!   kills it if the owning process dies without running destructors (SIGKILL, a signal that
//!   ends the test runner). The parent-death signal fires when the *thread* that forked exits,
//!   so all children are forked from one thread that lives as long as the process;
//! - each child gets its own process group, so Ctrl-C in a terminal reaches the owning process
//!   only, which then stops the children in order.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock, mpsc};

use crate::TestEnvError;

/// Proxy settings must not redirect the loopback traffic between the components.
const PROXY_VARIABLES: [&str; 6] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

struct SpawnRequest {
    program: PathBuf,
    args: Vec<OsString>,
    log: File,
    reply: mpsc::Sender<io::Result<Child>>,
}

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (sender, receiver) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testenv-spawner".to_owned())
            .spawn(move || {
                let with_pdeathsig = setpriv_supports_pdeathsig();
                // The sender lives in a static, so this loop (and the thread) ends only with the process.
                while let Ok(request) = receiver.recv() {
                    let child = spawn_now(&request, with_pdeathsig);
                    let _ = request.reply.send(child);
                }
            })
            .expect("spawning the testenv-spawner thread");
        Mutex::new(sender)
    })
}

fn setpriv_supports_pdeathsig() -> bool {
    Command::new("setpriv")
        .args(["--pdeathsig", "KILL", "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn spawn_now(request: &SpawnRequest, with_pdeathsig: bool) -> io::Result<Child> {
    let mut command = if with_pdeathsig {
        let mut command = Command::new("setpriv");
        command
            .args(["--pdeathsig", "KILL", "--"])
            .arg(&request.program);
        command
    } else {
        Command::new(&request.program)
    };
    command
        .args(&request.args)
        .stdin(Stdio::null())
        .stdout(request.log.try_clone()?)
        .stderr(request.log.try_clone()?)
        .process_group(0);
    for name in PROXY_VARIABLES {
        command.env_remove(name);
    }
    command.spawn()
}

/// A child process with its output captured in a log file; killed and reaped on drop. It can be
/// killed and started again with the same program, arguments and log file (fault injection).
pub(crate) struct ManagedProcess {
    name: &'static str,
    program: PathBuf,
    args: Vec<OsString>,
    child: Option<Child>,
    log_path: PathBuf,
}

impl ManagedProcess {
    pub(crate) fn spawn(
        name: &'static str,
        program: &Path,
        args: Vec<OsString>,
        log_path: PathBuf,
    ) -> Result<Self, TestEnvError> {
        let log = File::create(&log_path)
            .map_err(|e| TestEnvError::io(format!("creating {}", log_path.display()), e))?;
        let mut process = Self {
            name,
            program: program.to_owned(),
            args,
            child: None,
            log_path,
        };
        process.child = Some(process.spawn_child(log)?);
        Ok(process)
    }

    fn spawn_child(&self, log: File) -> Result<Child, TestEnvError> {
        let (reply, response) = mpsc::channel();
        let request = SpawnRequest {
            program: self.program.clone(),
            args: self.args.clone(),
            log,
            reply,
        };
        let sent = spawner()
            .lock()
            .map_err(|_| TestEnvError::io("spawner lock", io::Error::other("poisoned")))?
            .send(request);
        match sent {
            Ok(()) => response
                .recv()
                .unwrap_or_else(|_| Err(io::Error::other("spawner thread is gone"))),
            Err(_) => Err(io::Error::other("spawner thread is gone")),
        }
        .map_err(|source| TestEnvError::Spawn {
            process: self.name,
            program: self.program.clone(),
            source,
        })
    }

    /// Starts the process again after [`ManagedProcess::kill`]: same program and arguments,
    /// its output appended to the same log after a marker line.
    pub(crate) fn respawn(&mut self) -> Result<(), TestEnvError> {
        if self.is_running() {
            return Err(TestEnvError::ProcessState {
                process: self.name,
                state: "already running",
            });
        }
        let mut log = OpenOptions::new()
            .append(true)
            .open(&self.log_path)
            .map_err(|e| TestEnvError::io(format!("opening {}", self.log_path.display()), e))?;
        writeln!(
            log,
            "--- poolkeeper-testenv: {} started again ---",
            self.name
        )
        .map_err(|e| TestEnvError::io(format!("writing {}", self.log_path.display()), e))?;
        self.child = Some(self.spawn_child(log)?);
        Ok(())
    }

    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    pub(crate) fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The pid of the running child; `None` once it was killed.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The child was started and has neither exited nor been killed.
    pub(crate) fn is_running(&mut self) -> bool {
        self.child.is_some() && self.exited().is_none()
    }

    /// The exit status if the process has ended.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// The last `lines` lines of the process's output.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log_path, lines)
    }

    /// SIGKILL (no chance to clean up, as in a crash) and reap. Only this child is signalled,
    /// by its pid.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `lines` lines of a file (reading at most its last 64 KiB).
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    const MAX_BYTES: u64 = 64 * 1024;
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(MAX_BYTES)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A TCP port on 127.0.0.1 that was free a moment ago. Another process may take it before the
/// child binds it; the caller retries with fresh ports when a child reports the address in use.
pub fn free_port() -> Result<u16, TestEnvError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| TestEnvError::io("finding a free port on 127.0.0.1", e))
}

/// Prefix of every control plane's temporary directory; the pid of the owning process follows it.
pub(crate) const TEMP_DIR_PREFIX: &str = "poolkeeper-testenv-";

/// Creates the temporary directory of a new control plane.
pub(crate) fn create_temp_dir() -> Result<tempfile::TempDir, TestEnvError> {
    tempfile::Builder::new()
        .prefix(&format!("{TEMP_DIR_PREFIX}{}-", std::process::id()))
        .tempdir()
        .map_err(|e| TestEnvError::io("creating the control plane's temporary directory", e))
}

/// Removes directories left behind by processes that died without running destructors.
/// Their children are already gone (parent-death signal); only the files remain.
pub(crate) fn remove_stale_temp_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.strip_prefix(TEMP_DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(owner.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_returns_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "a\nb\nc\nd\n").unwrap();
        assert_eq!(log_tail(&path, 2), "c\nd");
        assert_eq!(log_tail(&path, 10), "a\nb\nc\nd");
        assert_eq!(log_tail(&dir.path().join("missing"), 3), "");
    }

    #[test]
    fn free_ports_are_bindable() {
        let port = free_port().unwrap();
        assert_ne!(port, 0);
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
    }

    #[test]
    fn spawned_process_is_killed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let mut process = ManagedProcess::spawn(
            "sleep",
            Path::new("sleep"),
            vec!["600".into()],
            dir.path().join("sleep.log"),
        )
        .unwrap();
        let pid = process.pid().unwrap();
        assert!(process.exited().is_none());
        let proc_dir = Path::new("/proc").join(pid.to_string());
        assert!(proc_dir.exists());
        drop(process);
        assert!(!proc_dir.exists(), "process {pid} outlived its handle");
    }

    #[test]
    fn a_killed_process_starts_again_with_the_same_arguments_and_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sh.log");
        let mut process = ManagedProcess::spawn(
            "sh",
            Path::new("/bin/sh"),
            vec!["-c".into(), "echo started; exec sleep 600".into()],
            log.clone(),
        )
        .unwrap();
        let first = process.pid().unwrap();
        // Killed before its first line, the process would leave nothing to compare.
        let wait_for_lines = |count: usize| {
            (0..250)
                .map(|_| {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    log_tail(&log, 5)
                })
                .find(|tail| tail.lines().count() == count)
                .unwrap_or_else(|| log_tail(&log, 5))
        };
        assert_eq!(wait_for_lines(1), "started");
        assert!(
            process.respawn().is_err(),
            "a running process is not started twice"
        );
        process.kill();
        assert_eq!(process.pid(), None);
        assert!(!process.is_running());
        assert!(!Path::new("/proc").join(first.to_string()).exists());

        process.respawn().unwrap();
        let second = process.pid().unwrap();
        assert_ne!(first, second);
        assert!(process.is_running());
        assert_eq!(
            wait_for_lines(3),
            "started\n--- poolkeeper-testenv: sh started again ---\nstarted"
        );
        drop(process);
        assert!(!Path::new("/proc").join(second.to_string()).exists());
    }

    #[test]
    fn output_is_captured_in_the_log_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sh.log");
        let mut process = ManagedProcess::spawn(
            "sh",
            Path::new("/bin/sh"),
            vec!["-c".into(), "echo to-stdout; echo to-stderr >&2".into()],
            log.clone(),
        )
        .unwrap();
        let status = process.child.as_mut().unwrap().wait().unwrap();
        assert!(status.success());
        assert_eq!(log_tail(&log, 5), "to-stdout\nto-stderr");
        assert_eq!(process.exited(), Some(status));
    }

    #[test]
    fn temp_dirs_of_dead_owners_are_removed_and_live_ones_kept() {
        let mine = create_temp_dir().unwrap();
        // pid_max on Linux is at most 2^22, so this pid cannot exist.
        let stale = std::env::temp_dir().join(format!("{TEMP_DIR_PREFIX}4294967295-test"));
        std::fs::create_dir_all(&stale).unwrap();
        remove_stale_temp_dirs();
        assert!(!stale.exists());
        assert!(mine.path().exists());
    }
}
