//! The `poolkeeper` binary as an operator runs it: configuration checks and
//! startup against a cluster that cannot be reached.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::http_get;
use crate::objects::free_port;

const BINARY: &str = env!("CARGO_BIN_EXE_poolkeeper");
const REFERENCE_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/poolkeeper.yaml");

fn poolkeeper(args: &[&str]) -> std::process::Output {
    Command::new(BINARY)
        .args(args)
        .output()
        .expect("the poolkeeper binary runs")
}

fn write_temp(dir: &tempfile::TempDir, name: &str, contents: &str) -> String {
    let path = dir.path().join(name);
    std::fs::File::create(&path)
        .and_then(|mut file| file.write_all(contents.as_bytes()))
        .expect("temporary file written");
    path.to_str().expect("UTF-8 temp path").to_owned()
}

#[test]
fn check_config_accepts_the_reference_file() {
    let output = poolkeeper(&["check-config", REFERENCE_CONFIG]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

#[test]
fn check_config_names_the_field_of_a_bad_duration_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_temp(
        &dir,
        "bad.yaml",
        "reconciler: {debounceInterval: 5 parsecs}\n",
    );
    let output = poolkeeper(&["check-config", &file]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("reconciler.debounceInterval") && stderr.contains("parsecs"),
        "{stderr}"
    );
}

#[test]
fn check_config_reports_every_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_temp(
        &dir,
        "bad.yaml",
        "executor: {concurrency: 0}\nwebhook: {listen: \"0.0.0.0:70000\"}\nsurprise: 1\n",
    );
    let output = poolkeeper(&["check-config", &file]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    for field in ["executor.concurrency", "webhook.listen", "surprise"] {
        assert!(stderr.contains(field), "{field} missing from: {stderr}");
    }
}

#[test]
fn default_config_passes_its_own_check() {
    let output = poolkeeper(&["default-config"]);
    assert_eq!(output.status.code(), Some(0));
    let dir = tempfile::tempdir().unwrap();
    let file = write_temp(
        &dir,
        "default.yaml",
        &String::from_utf8_lossy(&output.stdout),
    );
    let output = poolkeeper(&["check-config", &file]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

#[test]
fn run_with_an_invalid_config_exits_2_before_starting() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_temp(&dir, "bad.yaml", "bus: {capacity: 1}\n");
    let output = poolkeeper(&["run", "--config", &file]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("bus.capacity"));
}

const UNREACHABLE_KUBECONFIG: &str = r#"
apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: nobody
  user: {token: not-a-token}
contexts:
- name: nowhere
  context: {cluster: nowhere, user: nobody}
current-context: nowhere
"#;

/// Fails within the API server timeout with a clear message, having
/// answered liveness probes (live) and readiness probes (not ready) meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_without_a_reachable_cluster_fails_fast_and_probes_answer_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let admin = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let config = write_temp(
        &dir,
        "config.yaml",
        &format!(
            "health: {{listen: \"{admin}\"}}\nwebhook: {{listen: \"127.0.0.1:{}\", certDir: {}}}\nlogging: {{format: text}}\n",
            free_port(),
            dir.path().display()
        ),
    );
    let kubeconfig = write_temp(&dir, "kubeconfig", UNREACHABLE_KUBECONFIG);
    let started = Instant::now();
    let child = tokio::process::Command::new(BINARY)
        .args(["run", "--config", &config, "--kubeconfig", &kubeconfig])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("poolkeeper starts");

    let mut live = None;
    let mut not_ready = None;
    while live.is_none() || not_ready.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no probe answers within 5s"
        );
        if let Ok(Ok(stream)) = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(admin),
        )
        .await
        {
            drop(stream);
            live = Some(http_get(admin, "/healthz").await);
            // The admin server answers as soon as it is bound, before the API-server check
            // has failed its first attempt: wait for the check to say why it is not ready.
            let readyz = http_get(admin, "/readyz?verbose").await;
            if readyz.1.contains("apiserver failed") {
                not_ready = Some(readyz);
            } else {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let (live_status, live_body) = live.unwrap();
    assert_eq!(live_status, 200, "{live_body}");
    let (ready_status, ready_body) = not_ready.unwrap();
    assert_eq!(ready_status, 503, "{ready_body}");
    assert!(
        ready_body.contains("[-]apiserver failed: API server unreachable"),
        "{ready_body}"
    );
    assert!(
        ready_body.contains("[-]index failed: stage \"watchers\" has not started yet"),
        "{ready_body}"
    );

    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("poolkeeper gives up within 30s")
        .expect("poolkeeper exits");
    let elapsed = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("API server could not be reached"),
        "no clear message in: {stderr}"
    );
    assert!(
        elapsed < Duration::from_secs(20),
        "took {elapsed:?} to give up"
    );
}
