//! The README's Helm installation on the real node: `helm install` of deploy/chart with its own
//! certificate, the same placement and denial through the Service, the same RBAC and webhook
//! rules as deploy/, `helm upgrade` leaving the leader's selectors and caBundle alone, and
//! `helm uninstall` leaving no webhook configuration, admission policy or Secret of
//! poolkeeper's behind.

use std::time::Duration;

use crate::scenario;
use crate::support::{
    Cluster, NAMESPACE, REGISTRY_IMAGE, deployment_image, eventually, fresh_start, readme_block,
    serial, wait_for_replicas, work_dir,
};

/// What a release puts into its namespace.
const RELEASE_KINDS: &str = "pods,deployments,services,secrets,configmaps,poddisruptionbudgets,serviceaccounts,roles,rolebindings";

#[test]
fn helm_install_as_the_readme_says() {
    let _serial = serial();
    let cluster = Cluster::from_env();
    fresh_start(&cluster);
    let work = work_dir("helm");
    cluster.import_image();
    crate::kustomize::prerequisites(&cluster, &work);
    cluster.bash_ok(&work, &readme_block("helm-install"));
    wait_for_replicas(&cluster, "app.kubernetes.io/instance=poolkeeper");
    let image = deployment_image(&cluster);
    assert_eq!(image, REGISTRY_IMAGE);
    same_rules_as_deploy(&cluster, &work);
    scenario::set_up(&cluster, "poolkeeper-placement");
    scenario::webhooks_go_through_the_service(&cluster, "poolkeeper-webhook");
    scenario::deployment_is_placed_and_running(&cluster);
    scenario::outside_pod_is_denied(&cluster);
    // An upgrade (Helm 4 applies server-side) leaves the leader's fields as they are. It
    // also points `helm test` at the bound namespace and at the kubectl image the node has.
    let kept = crate::gitops::leaders_fields(&cluster);
    let kubectl_image = std::env::var("POOLKEEPER_CLUSTER_KUBECTL_IMAGE")
        .expect("POOLKEEPER_CLUSTER_KUBECTL_IMAGE (set by cargo xtask cluster test)");
    cluster.bash_ok(
        &work,
        &format!(
            "helm upgrade poolkeeper deploy/chart --namespace poolkeeper-system --reuse-values \
             --set tests.image={kubectl_image} --set tests.boundNamespace={} --wait --timeout 3m",
            scenario::WORKLOAD_NAMESPACE
        ),
    );
    assert_eq!(
        crate::gitops::leaders_fields(&cluster),
        kept,
        "helm upgrade changed the selectors or the caBundle"
    );
    // `helm test` (it fails the script when its Pod fails): the replicas available, then a
    // dry-run Pod in the bound namespace, placed in its pool.
    let tested = cluster.bash_ok(
        &work,
        "helm test poolkeeper --namespace poolkeeper-system --timeout 3m --logs",
    );
    assert!(
        tested.contains(&format!("\"values\":[\"{}\"]", scenario::POOL)),
        "the test Pod was placed in pool {}: {tested}",
        scenario::POOL
    );
    scenario::tear_down(&cluster);
    cluster.bash_ok(&work, &readme_block("helm-uninstall"));
    crate::gitops::nothing_of_poolkeeper_left(&cluster);
    // The release's objects go; the namespace (made by --create-namespace) stays, with what
    // was not the chart's: the placement ConfigMap the test made, the cluster CA's.
    let left = eventually(
        "the release's objects gone",
        Duration::from_secs(120),
        || {
            let left = cluster.kubectl_ok(&["-n", NAMESPACE, "get", RELEASE_KINDS, "-o", "name"]);
            let ours: Vec<String> = left
                .lines()
                .filter(|l| {
                    !l.ends_with("/kube-root-ca.crt") && !l.ends_with("/poolkeeper-placement")
                })
                .filter(|l| !l.ends_with("/default"))
                .map(str::to_owned)
                .collect();
            Some(ours).filter(|o| o.is_empty() || !o.iter().any(|l| l.starts_with("pod/")))
        },
    );
    assert!(left.is_empty(), "left by helm uninstall: {left:?}");
    cluster.kubectl_ok(&["delete", "namespace", NAMESPACE, "--timeout=120s"]);
}

/// The chart's ClusterRole, Roles and webhook rules, as installed, are deploy/'s as kubectl's
/// own kustomize renders them (the objects read through the API server's discovery; the
/// cert-manager kinds, unknown here, are left out).
fn same_rules_as_deploy(cluster: &Cluster, work: &std::path::Path) {
    let rendered = cluster.bash_ok(
        work,
        r#"kubectl kustomize deploy > rendered.yaml
kubectl create --dry-run=client -f rendered.yaml \
  -o jsonpath='{.kind}/{.metadata.name}={.rules}{.webhooks[*].rules}{"\n"}' 2>/dev/null || true"#,
    );
    let objects = [
        ("ClusterRole", "poolkeeper", None),
        ("Role", "poolkeeper", Some(NAMESPACE)),
        ("Role", "poolkeeper-machines", Some("machine-system")),
        ("MutatingWebhookConfiguration", "poolkeeper", None),
        ("ValidatingWebhookConfiguration", "poolkeeper", None),
    ];
    for (kind, name, namespace) in objects {
        let prefix = format!("{kind}/{name}=");
        let expected = rendered
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("deploy/ renders no {kind} {name}:\n{rendered}"));
        let mut args = vec![
            "get",
            kind,
            name,
            "-o",
            "jsonpath={.rules}{.webhooks[*].rules}",
        ];
        if let Some(namespace) = namespace {
            args.extend(["-n", namespace]);
        }
        let installed = cluster.kubectl_ok(&args);
        assert_eq!(
            installed, expected,
            "{kind} {name}: the chart's rules differ from deploy/'s"
        );
    }
}
