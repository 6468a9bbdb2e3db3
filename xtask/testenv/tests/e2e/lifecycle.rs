use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use poolkeeper_testenv::{Binaries, Process, TestEnv, eventually};

/// Pids of processes whose command line mentions `dir` (every control-plane process does).
fn processes_using(dir: &Path) -> Vec<u32> {
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .contains(&needle)
                .then_some(pid)
        })
        .collect()
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

fn assert_released(dir: &Path, port: u16) {
    assert_eq!(
        processes_using(dir),
        Vec::<u32>::new(),
        "processes left behind"
    );
    assert!(!dir.exists(), "{} left behind", dir.display());
    assert!(
        TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err(),
        "port {port} still accepts connections"
    );
}

#[tokio::test]
async fn dropping_the_env_stops_processes_and_removes_files() {
    let env = TestEnv::builder().scheduler(true).start().await.unwrap();
    let dir = env.dir().to_owned();
    let port = port_of(&env.server_url());
    let running = eventually(
        "etcd, kube-apiserver and kube-scheduler running",
        Duration::from_secs(5),
        || {
            let pids = processes_using(&dir);
            async move { (pids.len() == 3).then_some(pids) }
        },
    )
    .await;
    assert!(
        running.is_ok(),
        "{running:?}: {:?}\nscheduler log:\n{}",
        processes_using(&dir),
        env.log_tail(Process::Scheduler, 20)
    );
    assert!(env.kubeconfig_path().starts_with(&dir));
    let kubeconfig = env.kubeconfig();
    assert_eq!(
        kubeconfig.clusters[0].cluster.as_ref().unwrap().server,
        Some(env.server_url())
    );
    Api::<Namespace>::all(env.client())
        .get("default")
        .await
        .unwrap();

    drop(env);
    assert_released(&dir, port);
}

#[tokio::test]
async fn a_panicking_test_still_releases_everything() {
    let mut started: Option<(PathBuf, u16)> = None;
    let outcome = std::panic::AssertUnwindSafe(async {
        let env = TestEnv::builder().start().await.unwrap();
        started = Some((env.dir().to_owned(), port_of(&env.server_url())));
        panic!("a failing assertion while the control plane runs");
    })
    .catch_unwind()
    .await;
    assert!(outcome.is_err());
    let (dir, port) = started.unwrap();
    assert_released(&dir, port);
}

/// Executable shell scripts standing in for the control-plane binaries.
fn fake_binaries(dir: &Path, etcd: &str, apiserver: &str) -> Binaries {
    use std::os::unix::fs::PermissionsExt;
    let write = |name: &str, body: &str| {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    };
    Binaries {
        etcd: write("etcd", etcd),
        kube_apiserver: write("kube-apiserver", apiserver),
        kube_controller_manager: write("kube-controller-manager", "exec sleep 600"),
        kube_scheduler: write("kube-scheduler", "exec sleep 600"),
        kubectl: write("kubectl", "exit 1"),
    }
}

#[tokio::test]
async fn a_process_that_exits_during_startup_is_reported_with_its_log() {
    let scripts = tempfile::tempdir().unwrap();
    let binaries = fake_binaries(
        scripts.path(),
        "exec sleep 600",
        "echo 'Error: invalid flag --secure-port' >&2; exit 3",
    );
    let error = TestEnv::builder()
        .binaries(binaries)
        .start()
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.starts_with("kube-apiserver exited during startup"),
        "{message}"
    );
    assert!(
        message.contains("Error: invalid flag --secure-port"),
        "{message}"
    );
}

#[tokio::test]
async fn a_port_taken_in_the_meantime_is_retried_with_new_ports() {
    let scripts = tempfile::tempdir().unwrap();
    let attempts = scripts.path().join("attempts");
    let binaries = fake_binaries(
        scripts.path(),
        &format!(
            "echo attempt >> {}; echo 'listen tcp 127.0.0.1:1234: bind: address already in use' >&2; exit 1",
            attempts.display()
        ),
        "exec sleep 600",
    );
    let error = TestEnv::builder()
        .binaries(binaries)
        .start()
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("address already in use"),
        "{error}"
    );
    let tried = std::fs::read_to_string(&attempts).unwrap().lines().count();
    assert_eq!(tried, poolkeeper_testenv::START_ATTEMPTS);
}
