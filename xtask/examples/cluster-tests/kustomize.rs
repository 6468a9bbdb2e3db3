//! The README's kustomize installation without cert-manager, on the real node: the serving
//! certificate issued by poolkeeper, `kubectl apply -k` of an overlay of deploy/, both replicas
//! Ready, placement and denial through the Service, JSON logs, /metrics at the Pods' addresses
//! (and the chart's monitoring pack checked against them), and the README's uninstall leaving
//! no webhook configuration, admission policy or Secret of poolkeeper's.

use std::path::{Path, PathBuf};

use crate::scenario;
use crate::support::{
    Cluster, NAMESPACE, REGISTRY_IMAGE, deployment_image, fresh_start, readme_block, serial,
    wait_for_replicas, work_dir,
};

const SELECTOR: &str = "app.kubernetes.io/name=poolkeeper";

/// The README's prerequisites and kustomize blocks, in a fresh work directory; the names of
/// the two Ready replicas.
pub fn install(cluster: &Cluster, test: &str) -> (PathBuf, Vec<String>) {
    fresh_start(cluster);
    let work = work_dir(test);
    cluster.import_image();
    prerequisites(cluster, &work);
    cluster.bash_ok(&work, &readme_block("kustomize-install"));
    let overlay = std::fs::read_to_string(work.join("my-poolkeeper/kustomization.yaml")).unwrap();
    assert!(
        overlay.contains(&format!(
            "newName: {}",
            REGISTRY_IMAGE.rsplit_once(':').unwrap().0
        )),
        "the overlay swaps the image: {overlay}"
    );
    let replicas = wait_for_replicas(cluster, SELECTOR);
    let image = deployment_image(cluster);
    assert_eq!(image, REGISTRY_IMAGE, "the overlay's image runs");
    (work, replicas)
}

/// The machine namespace, created as the README says where it does not exist yet.
pub fn prerequisites(cluster: &Cluster, work: &Path) {
    let exists = cluster
        .kubectl(&["get", "namespace", "machine-system"])
        .status
        .success();
    if !exists {
        cluster.bash_ok(work, &readme_block("prerequisites"));
    }
}

pub fn uninstall(cluster: &Cluster, work: &Path) {
    cluster.bash_ok(work, &readme_block("kustomize-uninstall"));
    crate::gitops::nothing_of_poolkeeper_left(cluster);
    let left = cluster.kubectl(&["get", "namespace", NAMESPACE]);
    assert!(!left.status.success(), "{NAMESPACE} is gone");
}

#[test]
fn kustomize_install_as_the_readme_says() {
    let _serial = serial();
    let cluster = Cluster::from_env();
    let (work, replicas) = install(&cluster, "kustomize");
    scenario::set_up(&cluster, "poolkeeper-placement");
    scenario::webhooks_go_through_the_service(&cluster, "poolkeeper-webhook");
    scenario::deployment_is_placed_and_running(&cluster);
    scenario::outside_pod_is_denied(&cluster);
    logs_are_json(&cluster, &replicas);
    metrics_at_the_pod_addresses(&cluster);
    crate::monitoring::the_pack_reads_what_poolkeeper_exports(&cluster);
    scenario::tear_down(&cluster);
    uninstall(&cluster, &work);
}

/// `kubectl logs`: one JSON object per line, with a timestamp, a level and a message.
fn logs_are_json(cluster: &Cluster, replicas: &[String]) {
    for pod in replicas {
        let logs = cluster.kubectl_ok(&["-n", NAMESPACE, "logs", pod]);
        assert!(logs.lines().count() > 3, "{pod} logged: {logs}");
        for line in logs.lines() {
            let object = line.starts_with('{') && line.ends_with('}');
            let fields = ["\"timestamp\":", "\"level\":", "\"message\":"]
                .iter()
                .all(|f| line.contains(f));
            assert!(object && fields, "{pod}: not a JSON log line: {line}");
        }
    }
}

/// Each replica's /metrics, read at its Pod IP as Prometheus does: the admissions of the
/// scenario were counted (the API server called the webhooks), by the replicas together;
/// under the CEL engine the plain Pods never reach them.
fn metrics_at_the_pod_addresses(cluster: &Cluster) {
    let ips = cluster.kubectl_ok(&[
        "-n",
        NAMESPACE,
        "get",
        "pods",
        "-l",
        SELECTOR,
        "-o",
        "jsonpath={.items[*].status.podIP}",
    ]);
    let mut denied = 0.0;
    let mut patched = 0.0;
    let mut cel = 0.0;
    for ip in ips.split_whitespace() {
        let metrics = cluster.curl(&format!("http://{ip}:8081/metrics"));
        cel += sample(&metrics, "poolkeeper_placement_engine{engine=\"cel\"");
        denied += sample(
            &metrics,
            "poolkeeper_webhook_admissions_total{webhook=\"validate\",result=\"denied\"",
        );
        patched += sample(
            &metrics,
            "poolkeeper_webhook_admissions_total{webhook=\"mutate\",result=\"patched\"",
        );
    }
    assert_eq!(ips.split_whitespace().count(), 2, "two Pod IPs: {ips}");
    assert!(denied >= 1.0, "the denial was counted ({denied})");
    if cel > 0.0 {
        // placement.engine auto runs cel on this API server: the admission
        // policies placed the Deployment's plain Pods, no webhook call.
        assert_eq!(
            patched, 0.0,
            "under the CEL engine no plain Pod reaches the mutating webhook"
        );
    } else {
        assert!(
            patched >= 2.0,
            "the Deployment's Pods' mutations were counted ({patched})"
        );
    }
}

/// The sum of the samples whose line starts with `prefix`.
fn sample(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with(prefix))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}
