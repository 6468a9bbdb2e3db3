//! The chart under GitOps, as Argo CD or Flux run it: `helm template` applied with `kubectl
//! apply --server-side`, then rendered and applied again five times while Pods are created in
//! a bound namespace. Every create succeeds and every Pod is placed; the renders are the same
//! bytes; no apply meets a field conflict; the fields the leader keeps (selectors, caBundle)
//! are left as they were. Pruning the render afterwards leaves nothing of poolkeeper's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::chart::helm_ok;
use crate::scenario::{self, POOL, WORKLOAD_NAMESPACE};
use crate::support::{
    Cluster, NAMESPACE, REGISTRY_IMAGE, eventually, fresh_start, no_webhook_configuration_left,
    run_with_input, serial, wait_for_replicas, work_dir,
};

const CONFIGURATION_KINDS: [&str; 2] = [
    "mutatingwebhookconfiguration",
    "validatingwebhookconfiguration",
];
/// Re-applies while the Pods are created.
const RESYNCS: usize = 5;
/// The stream's bound: it stops at the last re-apply or here.
const MAX_PODS: usize = 150;
/// Pods of the stream alive at once: each is deleted this many creates later.
const LIVE_PODS: usize = 10;

/// What a GitOps tool renders: the chart (with its CRDs when asked), without the `helm test`
/// objects.
fn render(crds: bool) -> String {
    let (repository, tag) = REGISTRY_IMAGE.rsplit_once(':').unwrap();
    let repository = format!("image.repository={repository}");
    let tag = format!("image.tag={tag}");
    let mut args = vec![
        "template",
        "poolkeeper",
        "deploy/chart",
        "--namespace",
        NAMESPACE,
        "--skip-tests",
        "--set",
        &repository,
        "--set",
        &tag,
    ];
    if crds {
        args.push("--include-crds");
    }
    helm_ok(&args)
}

fn apply_server_side(cluster: &Cluster, rendered: &str) {
    let mut command = cluster.command("kubectl");
    // No --force-conflicts: a field another manager owns fails the apply.
    command.args(["apply", "--server-side", "-f", "-"]);
    let out = run_with_input(&mut command, rendered);
    assert!(
        out.status.success(),
        "kubectl apply --server-side: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every entry's name, selectors and caBundle, of both configurations.
pub fn leaders_fields(cluster: &Cluster) -> String {
    CONFIGURATION_KINDS
        .iter()
        .map(|kind| {
            cluster.kubectl_ok(&[
                "get",
                kind,
                "poolkeeper",
                "-o",
                r#"jsonpath={range .webhooks[*]}{.name} {.namespaceSelector} {.objectSelector} {.clientConfig.caBundle}{"\n"}{end}"#,
            ])
        })
        .collect()
}

/// Each entry has a caBundle: the leader published its CA.
pub fn wait_for_ca_bundles(cluster: &Cluster) {
    eventually(
        "a caBundle in every entry",
        Duration::from_secs(120),
        || {
            let fields = leaders_fields(cluster);
            let entries: Vec<&str> = fields.lines().collect();
            (entries.len() == 4
                && entries
                    .iter()
                    .all(|l| l.rsplit(' ').next().is_some_and(|ca| ca.len() > 100)))
            .then_some(())
        },
    );
}

/// Creates Pods in the bound namespace one after another until `stop` (or `max_pods`);
/// returns how many were created and the failures and unplaced Pods it saw.
pub fn pod_stream(stop: Arc<AtomicBool>, max_pods: usize) -> (usize, Vec<String>) {
    let cluster = Cluster::from_env();
    let mut problems = Vec::new();
    let mut created = 0;
    while !stop.load(Ordering::SeqCst) && created < max_pods {
        let name = format!("stream-{created}");
        let pod = format!(
            r#"{{"apiVersion": "v1", "kind": "Pod",
 "metadata": {{"name": "{name}", "namespace": "{WORKLOAD_NAMESPACE}"}},
 "spec": {{"terminationGracePeriodSeconds": 0,
   "containers": [{{"name": "c", "image": "{image}", "imagePullPolicy": "Never"}}]}}}}"#,
            image = cluster.workload_image
        );
        let mut command = cluster.command("kubectl");
        command.args([
            "create",
            "-f",
            "-",
            "-o",
            "jsonpath={.spec.affinity.nodeAffinity}",
        ]);
        let out = run_with_input(&mut command, &pod);
        if !out.status.success() {
            problems.push(format!(
                "{name}: create failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        } else if !String::from_utf8_lossy(&out.stdout).contains(POOL) {
            problems.push(format!("{name}: admitted unplaced"));
        }
        created += 1;
        if created > LIVE_PODS {
            let old = format!("pod/stream-{}", created - 1 - LIVE_PODS);
            cluster.kubectl(&["-n", WORKLOAD_NAMESPACE, "delete", &old, "--wait=false"]);
        }
    }
    (created, problems)
}

/// Objects the controller made that must not outlive the installation: its admission
/// policies (whichever kinds the API server serves) and its serving-certificate Secret.
fn poolkeepers_objects_left(cluster: &Cluster) -> Vec<String> {
    let served = cluster.kubectl_ok(&[
        "api-resources",
        "--api-group=admissionregistration.k8s.io",
        "-o",
        "name",
    ]);
    let mut left: Vec<String> = served
        .lines()
        .filter(|kind| kind.contains("admissionpolic"))
        .flat_map(|kind| {
            cluster
                .kubectl_ok(&["get", kind, "-o", "name"])
                .lines()
                .filter(|name| name.contains("poolkeeper"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    let secret = cluster.kubectl(&["-n", NAMESPACE, "get", "secret/poolkeeper-webhook-tls"]);
    if secret.status.success() {
        left.push("secret/poolkeeper-webhook-tls".to_owned());
    }
    left
}

/// After an uninstall: no webhook configuration, no admission policy object and no Secret of
/// poolkeeper's (the controller's objects go through their owner reference to the
/// MutatingWebhookConfiguration, which kube-controller-manager's garbage collector follows).
pub fn nothing_of_poolkeeper_left(cluster: &Cluster) {
    no_webhook_configuration_left(cluster);
    eventually(
        "the controller's objects collected",
        Duration::from_secs(120),
        || {
            let left = poolkeepers_objects_left(cluster);
            left.is_empty().then_some(()).or_else(|| {
                eprintln!("still left: {left:?}");
                None
            })
        },
    );
}

#[test]
fn gitops_resyncs_never_reset_what_the_leader_keeps() {
    let _serial = serial();
    let cluster = Cluster::from_env();
    fresh_start(&cluster);
    let work = work_dir("gitops");
    cluster.import_image();
    crate::kustomize::prerequisites(&cluster, &work);
    cluster.kubectl_ok(&["create", "namespace", NAMESPACE]);
    let rendered = render(true);
    apply_server_side(&cluster, &rendered);
    wait_for_replicas(&cluster, "app.kubernetes.io/instance=poolkeeper");
    scenario::set_up(&cluster, "poolkeeper-placement");
    wait_for_ca_bundles(&cluster);
    let before = leaders_fields(&cluster);

    let stop = Arc::new(AtomicBool::new(false));
    let stream = {
        let stop = stop.clone();
        std::thread::spawn(move || pod_stream(stop, MAX_PODS))
    };
    for resync in 0..RESYNCS {
        std::thread::sleep(Duration::from_secs(2));
        let again = render(true);
        assert!(again == rendered, "render {resync} differs from the first");
        apply_server_side(&cluster, &again);
    }
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    let (created, problems) = stream.join().expect("the Pod stream");
    println!("{created} Pods created across {RESYNCS} re-applies");
    assert!(created >= RESYNCS, "the stream ran ({created} Pods)");
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(
        leaders_fields(&cluster),
        before,
        "the re-applies changed the leader's fields"
    );

    scenario::tear_down(&cluster);
    // A GitOps tool prunes what it applied; the CRDs stay (deleting them deletes every
    // NodePool, MachineClass and Machine).
    let mut prune = cluster.command("kubectl");
    prune.args([
        "delete",
        "--ignore-not-found",
        "--wait=true",
        "--timeout=120s",
        "-f",
        "-",
    ]);
    let out = run_with_input(&mut prune, &render(false));
    assert!(
        out.status.success(),
        "kubectl delete: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    nothing_of_poolkeeper_left(&cluster);
    cluster.kubectl_ok(&["delete", "namespace", NAMESPACE, "--timeout=120s"]);
}
