//! Day-two operations on the kustomize installation: a rolling restart while Pods are being
//! created (no create fails: a replica leaves the Service before it stops answering), and the
//! leader's Pod deleted (the other replica takes the Lease and keeps MachineClass finalizers
//! in step with Machines).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::kustomize;
use crate::scenario::{self, POOL, WORKLOAD_NAMESPACE};
use crate::support::{Cluster, NAMESPACE, eventually, serial, wait_for_replicas};

const SELECTOR: &str = "app.kubernetes.io/name=poolkeeper";
/// The stream of creates: one every STREAM_PERIOD, at most STREAM_MAX, for at most
/// STREAM_LIMIT.
const STREAM_PERIOD: Duration = Duration::from_millis(250);
const STREAM_MAX: usize = 400;
const STREAM_LIMIT: Duration = Duration::from_secs(240);
const MACHINE_NAMESPACE: &str = "machine-system";
const FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";

#[test]
fn rollout_restart_and_leader_loss_keep_admission_and_finalizers() {
    let _serial = serial();
    let cluster = Arc::new(Cluster::from_env());
    let (work, _) = kustomize::install(&cluster, "operations");
    scenario::set_up(&cluster, "poolkeeper-placement");
    rollout_restart_under_creates(&cluster);
    leader_loss(&cluster);
    scenario::tear_down(&cluster);
    kustomize::uninstall(&cluster, &work);
}

/// The outcome of the stream: Pods created, and the failed creates' errors.
struct Stream {
    created: Vec<String>,
    failures: Vec<String>,
}

/// Pods held by a scheduling gate (admitted and stored, never run), created one after the
/// other until `stop` is set.
fn start_stream(cluster: Arc<Cluster>, stop: Arc<AtomicBool>) -> JoinHandle<Stream> {
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut stream = Stream {
            created: Vec::new(),
            failures: Vec::new(),
        };
        for n in 0..STREAM_MAX {
            if stop.load(Ordering::SeqCst) || started.elapsed() > STREAM_LIMIT {
                break;
            }
            let name = format!("stream-{n}");
            let out = cluster.apply(&format!(
                r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {WORKLOAD_NAMESPACE}, labels: {{stream: "true"}}}}
spec:
  schedulingGates: [{{name: poolkeeper.test/held}}]
  containers:
    - {{name: c, image: "{image}", imagePullPolicy: Never}}
"#,
                image = cluster.workload_image
            ));
            if out.status.success() {
                stream.created.push(name);
            } else {
                let at = started.elapsed().as_secs_f64();
                let error = String::from_utf8_lossy(&out.stderr);
                stream
                    .failures
                    .push(format!("{name} at {at:.1}s: {}", error.trim()));
            }
            std::thread::sleep(STREAM_PERIOD);
        }
        stream
    })
}

fn rollout_restart_under_creates(cluster: &Arc<Cluster>) {
    let before = wait_for_replicas(cluster, SELECTOR);
    let stop = Arc::new(AtomicBool::new(false));
    let stream = start_stream(Arc::clone(cluster), Arc::clone(&stop));
    std::thread::sleep(Duration::from_secs(3));
    cluster.kubectl_ok(&[
        "-n",
        NAMESPACE,
        "rollout",
        "restart",
        "deployment/poolkeeper",
    ]);
    cluster.kubectl_ok(&[
        "-n",
        NAMESPACE,
        "rollout",
        "status",
        "deployment/poolkeeper",
        "--timeout=4m",
    ]);
    let after = wait_for_replicas(cluster, SELECTOR);
    // The old replicas have stopped: creates go on against the new ones only.
    eventually("the old replicas gone", Duration::from_secs(60), || {
        let pods = cluster.kubectl_ok(&["-n", NAMESPACE, "get", "pods", "-o", "name"]);
        before
            .iter()
            .all(|old| !pods.contains(old.as_str()))
            .then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::SeqCst);
    let stream = stream.join().expect("the stream thread");
    assert!(
        before.iter().all(|old| !after.contains(old)),
        "new replicas {after:?} replaced {before:?}"
    );
    assert!(
        stream.failures.is_empty(),
        "{} of {} creates failed during the rolling restart:\n{}\n{}",
        stream.failures.len(),
        stream.failures.len() + stream.created.len(),
        stream.failures.join("\n"),
        cluster.diagnostics()
    );
    assert!(
        stream.created.len() >= 20,
        "the stream ran: {}",
        stream.created.len()
    );
    every_stream_pod_was_placed(cluster, stream.created.len());
}

/// Each Pod of the stream went through the mutating webhook: it has the pool's affinity.
fn every_stream_pod_was_placed(cluster: &Cluster, created: usize) {
    let pools = cluster.kubectl_ok(&[
        "-n",
        WORKLOAD_NAMESPACE,
        "get",
        "pods",
        "-l",
        "stream=true",
        "-o",
        r#"jsonpath={range .items[*]}{.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]}{"\n"}{end}"#,
    ]);
    assert_eq!(pools.lines().count(), created, "{pools}");
    assert!(
        pools.lines().all(|pool| pool == POOL),
        "a Pod of the stream was admitted without its pool: {pools}"
    );
    cluster.kubectl_ok(&[
        "-n",
        WORKLOAD_NAMESPACE,
        "delete",
        "pods",
        "-l",
        "stream=true",
        "--wait=false",
    ]);
}

fn leader_loss(cluster: &Cluster) {
    let replicas = wait_for_replicas(cluster, SELECTOR);
    let old_leader = eventually("a leader", Duration::from_secs(60), || {
        cluster.leader().filter(|l| replicas.contains(l))
    });
    machine_class(cluster, "small", true);
    has_finalizer(cluster, "small", true);
    cluster.kubectl_ok(&["-n", NAMESPACE, "delete", "pod", &old_leader]);
    // The survivor, or the replacement the ReplicaSet starts meanwhile: whichever campaigns
    // first once the old leader has handed the Lease back.
    let new_leader = cluster.wait_for_new_leader(&old_leader, Duration::from_secs(60));
    eprintln!("leader {old_leader} deleted; {new_leader} leads");
    // The new leader keeps finalizers in step: added for a class in use, removed from one
    // no Machine uses any more, and that class can then go.
    machine_class(cluster, "large", true);
    has_finalizer(cluster, "large", true);
    cluster.kubectl_ok(&["-n", MACHINE_NAMESPACE, "delete", "machine", "small-1"]);
    has_finalizer(cluster, "small", false);
    cluster.kubectl_ok(&[
        "-n",
        MACHINE_NAMESPACE,
        "delete",
        "machineclass",
        "small",
        "--timeout=60s",
    ]);
    cluster.kubectl_ok(&["-n", MACHINE_NAMESPACE, "delete", "machine", "large-1"]);
    has_finalizer(cluster, "large", false);
    cluster.kubectl_ok(&[
        "-n",
        MACHINE_NAMESPACE,
        "delete",
        "machineclass",
        "large",
        "--timeout=60s",
    ]);
    wait_for_replicas(cluster, SELECTOR);
}

/// A MachineClass and, when `in_use`, a Machine of it named `<class>-1`.
fn machine_class(cluster: &Cluster, name: &str, in_use: bool) {
    let mut yaml = format!(
        r#"apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineClass
metadata: {{name: {name}, namespace: {MACHINE_NAMESPACE}}}
provider: local
providerSpec: {{size: {name}}}
"#
    );
    if in_use {
        yaml.push_str(&format!(
            r#"---
apiVersion: machine.sapcloud.io/v1alpha1
kind: Machine
metadata: {{name: {name}-1, namespace: {MACHINE_NAMESPACE}}}
spec:
  class: {{kind: MachineClass, name: {name}}}
"#
        ));
    }
    cluster.apply_ok(&yaml);
}

fn has_finalizer(cluster: &Cluster, class: &str, expected: bool) {
    let what = format!("MachineClass {class} with the finalizer: {expected}");
    eventually(&what, Duration::from_secs(60), || {
        let finalizers = cluster.kubectl_ok(&[
            "-n",
            MACHINE_NAMESPACE,
            "get",
            "machineclass",
            class,
            "-o",
            "jsonpath={.metadata.finalizers}",
        ]);
        (finalizers.contains(FINALIZER) == expected).then_some(())
    });
}
