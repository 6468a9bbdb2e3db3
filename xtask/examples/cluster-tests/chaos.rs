//! Leader safety under faults (`cargo xtask chaos --minutes N`; a 2.5-minute run in every
//! `cargo xtask cluster test`): the kustomize installation's two replicas under a steady load
//! while the leader is deleted (once, and every 30 s through a phase), frozen (SIGSTOP) for
//! 2 × leaseDuration, cut off from the API server (iptables in its Pod's network namespace)
//! for 2 × leaseDuration, CPU-throttled, the API server is restarted, and both replicas are
//! deleted at once, in cycles ([`schedule`]) until the time is up. Then the end state must be
//! exact within [`CONVERGENCE`], and the oracle — the API server's audit log, not
//! poolkeeper's logs — must find no accepted write by a replica outside its term.
//!
//! Every loop is bounded in count and time; faults touch only the cluster's own Pods, their
//! network namespaces and the cluster's API server; processes are signalled by the PID
//! containerd reports for the container, the API server by the PID the tier recorded.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::kustomize;
use crate::oracle;
use crate::process;
use crate::scenario::{self, POOL, WORKLOAD_NAMESPACE};
use crate::schedule::{self, Fault, Schedule, Step};
use crate::support::{Cluster, NAMESPACE, eventually, run, serial, wait_for_replicas};

const SELECTOR: &str = "app.kubernetes.io/name=poolkeeper";
/// deploy/'s configuration takes the default timings.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// A frozen or cut-off leader stays so for this long.
const FAULT_HOLD: Duration = Duration::from_secs(30);
/// After the last fault, the end state is exact within this bound.
const CONVERGENCE: Duration = Duration::from_secs(90);
/// A new leader within this bound after each fault.
const LEADER_BOUND: Duration = Duration::from_secs(120);
const UNBOUND_NAMESPACE: &str = "chaos-free";
const MACHINE_NAMESPACE: &str = "machine-system";
const CLASS_FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";
const SECRET_FINALIZER: &str = "machine.sapcloud.io/machine-controller";
/// Pods per batch and the period of batches of each create stream (one per namespace, in
/// parallel: 20 creates a second in all while kubectl keeps up), at most this many per stream.
const BATCH: usize = 10;
const BATCH_PERIOD: Duration = Duration::from_secs(1);
const STREAM_MAX: usize = 15_000;
/// The restarted API server stays down this long after it exited.
const API_SERVER_DOWN: Duration = Duration::from_secs(5);
/// SIGTERM, then SIGKILL after this: its graceful stop here outlasts 30 s (a draining it never
/// finishes), which would make every restart a 40-second outage.
const API_SERVER_STOP_GRACE: Duration = Duration::from_secs(10);
/// The restarted API server serves again within this bound.
const API_SERVER_BOUND: Duration = Duration::from_secs(120);
const AUDIT_LOG: &str = "POOLKEEPER_CLUSTER_AUDIT_LOG";
/// The tier's record of its daemons' pids, and their logs' directory.
const PIDS: &str = "POOLKEEPER_CLUSTER_PIDS";
const LOGS: &str = "POOLKEEPER_CLUSTER_LOGS";
const MINUTES: &str = "POOLKEEPER_CHAOS_MINUTES";
/// `1` from `cargo xtask chaos --broken-leader`: the image's leader is broken on purpose, so
/// the run takes [`Schedule::broken_leader`] and the command, not this test, judges the
/// oracle's report (it must find writes outside a term).
const BROKEN_LEADER: &str = "POOLKEEPER_CHAOS_BROKEN_LEADER";

/// One injected fault: when (since the run's start), and how long until another replica led.
#[derive(Debug)]
struct Injected {
    fault: Fault,
    at: Duration,
    /// The window in which creates may fail: only while both replicas are down or the API
    /// server is.
    until: Duration,
    /// `None`: the leader kept the Lease (a throttled leader may). After an API server restart:
    /// until the Lease was written again, by either replica.
    new_leader_after: Option<Duration>,
}

#[test]
fn leader_safety_under_chaos() {
    let _serial = serial();
    let cluster = Arc::new(Cluster::from_env());
    let minutes: f64 = std::env::var(MINUTES)
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(2.5);
    let run_for = Duration::from_secs_f64(minutes * 60.0);
    let broken_leader = std::env::var(BROKEN_LEADER).is_ok_and(|v| v == "1");
    let schedule = if broken_leader {
        Schedule::broken_leader(run_for)
    } else {
        Schedule::new(run_for)
    };
    // Earlier installations' writes in the same audit log are not this run's.
    let installed_at = std::time::SystemTime::now();
    let (work, _) = kustomize::install(&cluster, "chaos");
    scenario::set_up(&cluster, "poolkeeper-placement");
    cluster.kubectl_ok(&["create", "namespace", UNBOUND_NAMESPACE]);
    let memory_before = memory(&cluster);

    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let creates = start_creates(Arc::clone(&cluster), Arc::clone(&stop), start);
    let scaler = start_scaler(Arc::clone(&cluster), Arc::clone(&stop));
    let script = start_script(Arc::clone(&cluster), Arc::clone(&stop), broken_leader);
    let injected = inject_faults(&cluster, start, &schedule);
    let last_fault = start.elapsed();
    stop.store(true, Ordering::SeqCst);
    let creates = creates.join().expect("the create stream");
    scaler.join().expect("the scaler");
    script.join().expect("the script");

    final_machine_state(&cluster);
    let converged = end_state_exact(&cluster, start);
    let memory_after = memory(&cluster);
    let restarts = restarts(&cluster);
    let report = audit(installed_at);
    print_figures(&Figures {
        injected: &injected,
        creates: &creates,
        last_fault,
        converged,
        restarts,
        memory: (memory_before, memory_after),
        report: &report,
    });
    let outside_windows = unbound_creates_never_failed(&creates, &injected);
    println!(
        "bound-namespace creates failed outside the both-replicas-down windows: {outside_windows}"
    );
    if broken_leader {
        println!("the leader is broken on purpose: `cargo xtask chaos --broken-leader` judges");
    } else {
        assert!(
            report.passed(),
            "writes outside their replica's term: {report}"
        );
    }

    cleanup(&cluster);
    scenario::tear_down(&cluster);
    kustomize::uninstall(&cluster, &work);
}

/// Waits for a leader other than `old` that is a running Pod; how long after `since`.
fn wait_new_leader(cluster: &Cluster, old: &str, since: Instant) -> Duration {
    cluster.wait_for_new_leader(old, LEADER_BOUND);
    since.elapsed()
}

fn current_leader(cluster: &Cluster) -> String {
    eventually("a leader", LEADER_BOUND, || cluster.leader())
}

/// The faults of the schedule until it says the run is over.
fn inject_faults(cluster: &Cluster, start: Instant, schedule: &Schedule) -> Vec<Injected> {
    let mut injected: Vec<Injected> = Vec::new();
    for index in 0.. {
        let kinds: BTreeSet<Fault> = injected.iter().map(|i| i.fault).collect();
        let Some(step) = schedule.next(index, start.elapsed(), &kinds) else {
            break;
        };
        match step {
            Step::Once(fault) => {
                wait_for_replicas(cluster, SELECTOR);
                injected.push(inject(cluster, fault, start));
            }
            Step::DeletionPhase { deletions } => {
                wait_for_replicas(cluster, SELECTOR);
                let phase = Instant::now();
                for due in schedule::deletion_times(deletions) {
                    std::thread::sleep(due.saturating_sub(phase.elapsed()));
                    injected.push(inject(cluster, Fault::LeaderDeletedEvery30s, start));
                }
            }
        }
    }
    injected
}

/// Injects `fault` into the current leader (or the API server) and waits for its outcome.
fn inject(cluster: &Cluster, fault: Fault, start: Instant) -> Injected {
    let old = current_leader(cluster);
    let at = start.elapsed();
    let since = Instant::now();
    let mut until = at;
    let new_leader_after = match fault {
        Fault::LeaderDeleted | Fault::LeaderDeletedEvery30s => {
            cluster.kubectl_ok(&["-n", NAMESPACE, "delete", "pod", &old, "--wait=false"]);
            Some(wait_new_leader(cluster, &old, since))
        }
        Fault::LeaderFrozen => Some(hold(cluster, &old, since, Hold::Freeze)),
        Fault::LeaderCutOff => Some(hold(cluster, &old, since, Hold::CutOff)),
        Fault::LeaderThrottled => throttle(cluster, &old, since),
        Fault::ApiServerRestarted => {
            let (served, leading) = restart_api_server(cluster, since);
            until = at + served;
            Some(leading)
        }
        Fault::BothDeleted => {
            cluster.kubectl_ok(&[
                "-n",
                NAMESPACE,
                "delete",
                "pods",
                "-l",
                SELECTOR,
                "--wait=false",
            ]);
            let took = wait_new_leader(cluster, &old, since);
            // Until a replica serves again: the Service has an endpoint.
            wait_for_replicas(cluster, SELECTOR);
            until = start.elapsed();
            Some(took)
        }
    };
    eprintln!("chaos: {fault:?} at {at:?}: a new leader after {new_leader_after:?}");
    Injected {
        fault,
        at,
        until,
        new_leader_after,
    }
}

/// Restarts the API server as the tier does (by its recorded pid, the same command line, the
/// audit log appended to), down [`API_SERVER_DOWN`] after it exited (SIGTERM, SIGKILL after
/// [`API_SERVER_STOP_GRACE`]). Returns how long after
/// `since` it served again (`/readyz`) and the Lease was next written (within a retry period:
/// the first write after it serves, by either replica).
fn restart_api_server(cluster: &Cluster, since: Instant) -> (Duration, Duration) {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let logs = var(LOGS);
    let pid = process::restart(
        Path::new(&var(PIDS)),
        "kube-apiserver",
        &Path::new(&logs).join("kube-apiserver.log"),
        &Path::new("/run/netns").join(&cluster.netns),
        API_SERVER_STOP_GRACE,
        API_SERVER_DOWN,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let served = eventually("the API server serving again", API_SERVER_BOUND, || {
        let ready = cluster.kubectl(&["get", "--raw=/readyz"]);
        ready.status.success().then(|| since.elapsed())
    });
    let renewed = |cluster: &Cluster| cluster.lease("{.spec.holderIdentity} {.spec.renewTime}");
    let at_ready = renewed(cluster);
    let leading = eventually("the Lease written after the restart", LEADER_BOUND, || {
        let now = renewed(cluster)?;
        (Some(&now) != at_ready.as_ref()).then(|| (since.elapsed(), now))
    });
    eprintln!(
        "chaos: kube-apiserver restarted (pid {pid}), serving after {served:?}; Lease {} -> {}",
        at_ready.unwrap_or_default(),
        leading.1
    );
    (served, leading.0)
}

#[derive(Clone, Copy)]
enum Hold {
    /// SIGSTOP of the container's process, SIGCONT after.
    Freeze,
    /// Every packet from the Pod to the API server dropped, then allowed again.
    CutOff,
}

/// Holds the leader `pod` frozen or cut off for [`FAULT_HOLD`], releases it; how long until
/// another replica led.
fn hold(cluster: &Cluster, pod: &str, since: Instant, how: Hold) -> Duration {
    let pid = container_pid(cluster, pod);
    let rules = api_server_rules();
    match how {
        Hold::Freeze => signal(pid, "STOP"),
        Hold::CutOff => rules.iter().for_each(|rule| iptables(pid, "-I", rule)),
    }
    let took_over = wait_new_leader(cluster, pod, since);
    std::thread::sleep(FAULT_HOLD.saturating_sub(since.elapsed()));
    match how {
        Hold::Freeze => signal(pid, "CONT"),
        Hold::CutOff => rules.iter().for_each(|rule| iptables(pid, "-D", rule)),
    }
    took_over
}

/// Limits the leader's container to 5 % of a CPU for [`FAULT_HOLD`] (its cgroup's CPU quota,
/// v2 `cpu.max` or v1 `cpu.cfs_quota_us`), then restores the quota; when another replica led
/// meanwhile, how long after `since`.
fn throttle(cluster: &Cluster, pod: &str, since: Instant) -> Option<Duration> {
    let pid = container_pid(cluster, pod);
    let quota = cpu_quota_file(pid);
    let saved = std::fs::read_to_string(&quota).unwrap_or_else(|e| panic!("{quota}: {e}"));
    let limited = if quota.ends_with("cpu.max") {
        "5000 100000"
    } else {
        "5000"
    };
    std::fs::write(&quota, limited).unwrap_or_else(|e| panic!("{quota}: {e}"));
    let mut took_over = None;
    while since.elapsed() < FAULT_HOLD {
        if took_over.is_none() && cluster.leader().is_some_and(|l| l != pod) {
            took_over = Some(since.elapsed());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    // The process may have been restarted meanwhile: its cgroup is gone then.
    if let Err(error) = std::fs::write(&quota, saved.trim()) {
        eprintln!("chaos: restoring {quota}: {error}");
    }
    took_over
}

/// The CPU quota file of the cgroup of process `pid`.
fn cpu_quota_file(pid: u32) -> String {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/cgroup: {e}"));
    for line in cgroups.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next(), fields.next(), fields.next());
        match (controllers, path) {
            (Some(""), Some(path)) => return format!("/sys/fs/cgroup{path}/cpu.max"),
            (Some(c), Some(path)) if c.split(',').any(|c| c == "cpu") => {
                return format!("/sys/fs/cgroup/{c}{path}/cpu.cfs_quota_us");
            }
            _ => {}
        }
    }
    panic!("no CPU cgroup for process {pid}:\n{cgroups}")
}

/// The host PID of `pod`'s container, as containerd reports it.
fn container_pid(cluster: &Cluster, pod: &str) -> u32 {
    let id = cluster.kubectl_ok(&[
        "-n",
        NAMESPACE,
        "get",
        "pod",
        pod,
        "-o",
        "jsonpath={.status.containerStatuses[0].containerID}",
    ]);
    let id = id.trim().trim_start_matches("containerd://").to_owned();
    let out = run(Command::new("ctr")
        .arg(format!("--address={}", cluster.containerd))
        .args(["--namespace", "k8s.io", "task", "ls"])
        .stdin(Stdio::null()));
    let tasks = String::from_utf8_lossy(&out.stdout).into_owned();
    tasks
        .lines()
        .find_map(|line| {
            let mut fields = line.split_whitespace();
            (fields.next()? == id).then(|| fields.next()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no task {id} of {pod}:\n{tasks}"))
}

/// SIGSTOP or SIGCONT. A process the kubelet restarted meanwhile (its liveness probe fails
/// while it is stopped) is gone: that is logged, not a failure.
fn signal(pid: u32, name: &str) {
    let out = run(Command::new("kill").args(["-s", name, &pid.to_string()]));
    if !out.status.success() {
        eprintln!(
            "chaos: kill -s {name} {pid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
}

/// The API server as a Pod reaches it: the `kubernetes` Service and the node's address.
fn api_server_rules() -> [Vec<String>; 2] {
    ["10.96.0.1", "10.240.0.1"].map(|address| {
        ["OUTPUT", "-d", address, "-p", "tcp", "-j", "DROP"]
            .map(str::to_owned)
            .to_vec()
    })
}

/// iptables in the network namespace of process `pid` (a Pod's: the test's own cluster).
fn iptables(pid: u32, action: &str, rule: &[String]) {
    let out = run(Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .args(["--", "iptables", "-w", action])
        .args(rule)
        .stdin(Stdio::null()));
    if !out.status.success() {
        eprintln!(
            "chaos: iptables {action} {}: {}",
            rule.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
}

/// One create: when its kubectl call began and ended (since the run's start), and whether it
/// failed.
#[derive(Clone, Copy, Debug)]
struct Create {
    from: Duration,
    to: Duration,
    failed: bool,
}

impl Create {
    /// Whether the call overlapped `from..=to` (a call begun before a fault can fail by it).
    fn overlaps(&self, from: Duration, to: Duration) -> bool {
        self.from <= to && self.to >= from
    }
}

/// Creates in the bound and the unbound namespace.
#[derive(Debug, Default)]
struct Creates {
    bound: Vec<Create>,
    unbound: Vec<Create>,
    /// The first lines of what kubectl said about failed creates, with when.
    errors: Vec<String>,
}

/// Gated Pods (admitted and stored, never run) in the bound and the unbound namespace, two
/// streams in parallel, until `stop`.
fn start_creates(
    cluster: Arc<Cluster>,
    stop: Arc<AtomicBool>,
    start: Instant,
) -> JoinHandle<Creates> {
    std::thread::spawn(move || {
        let [bound, unbound] = [WORKLOAD_NAMESPACE, UNBOUND_NAMESPACE].map(|namespace| {
            let (cluster, stop) = (Arc::clone(&cluster), Arc::clone(&stop));
            std::thread::spawn(move || create_stream(&cluster, namespace, &stop, start))
        });
        let (bound, mut errors) = bound.join().expect("the bound create stream");
        let (unbound, more_errors) = unbound.join().expect("the unbound create stream");
        errors.extend(more_errors);
        Creates {
            bound,
            unbound,
            errors,
        }
    })
}

/// Each create of a stream and the first lines of what kubectl said about failed ones.
type Stream = (Vec<Create>, Vec<String>);

/// Creates in `namespace`: a batch of [`BATCH`] every [`BATCH_PERIOD`] (a batch that is late
/// goes at once), until `stop` or [`STREAM_MAX`].
fn create_stream(cluster: &Cluster, namespace: &str, stop: &AtomicBool, start: Instant) -> Stream {
    let (mut record, mut errors) = (Vec::new(), Vec::new());
    let began = Instant::now();
    let mut batches = 0;
    while !stop.load(Ordering::SeqCst) && record.len() < STREAM_MAX {
        let first = record.len();
        let yaml: String = (first..first + BATCH)
            .map(|i| gated_pod(cluster, namespace, i))
            .collect();
        let at = start.elapsed();
        let mut command = cluster.command("kubectl");
        command.args(["create", "-f", "-", "-o", "name"]);
        let out = crate::support::run_with_input(&mut command, &yaml);
        let created = String::from_utf8_lossy(&out.stdout).lines().count();
        if created < BATCH && errors.len() < 10 {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let first = stderr.lines().next().unwrap_or_default();
            errors.push(format!("{:.1} s, {namespace}: {first}", at.as_secs_f64()));
        }
        let to = start.elapsed();
        record.extend((0..BATCH).map(|i| Create {
            from: at,
            to,
            failed: i >= created,
        }));
        batches += 1;
        std::thread::sleep((BATCH_PERIOD * batches).saturating_sub(began.elapsed()));
    }
    (record, errors)
}

fn gated_pod(cluster: &Cluster, namespace: &str, i: usize) -> String {
    format!(
        r#"---
apiVersion: v1
kind: Pod
metadata: {{name: chaos-{i}, namespace: {namespace}, labels: {{chaos: "true"}}}}
spec:
  schedulingGates: [{{name: poolkeeper.test/held}}]
  containers:
    - {{name: c, image: "{image}", imagePullPolicy: Never}}
"#,
        image = cluster.workload_image
    )
}

/// A Deployment in the bound namespace scaled between 1 and 3 replicas every 10 s.
fn start_scaler(cluster: Arc<Cluster>, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    cluster.apply_ok(&format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: chaos-web, namespace: {WORKLOAD_NAMESPACE}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: chaos-web}}}}
  template:
    metadata: {{labels: {{app: chaos-web}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
        - {{name: web, image: "{image}", imagePullPolicy: Never}}
"#,
        image = cluster.workload_image
    ));
    std::thread::spawn(move || {
        for step in 0..1_000 {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let replicas = format!("--replicas={}", 1 + step % 3);
            // A failed scale (API server busy) is tried again at the next step.
            cluster.kubectl(&[
                "-n",
                WORKLOAD_NAMESPACE,
                "scale",
                "deployment/chaos-web",
                &replicas,
            ]);
            std::thread::sleep(Duration::from_secs(10));
        }
    })
}

/// Secrets `s0`..`s3`, classes `c<i>` referencing `s<i>`, and Machines re-pointed among the
/// classes every 3 s until `stop` ([`schedule::script_step`]).
fn start_script(
    cluster: Arc<Cluster>,
    stop: Arc<AtomicBool>,
    broken_leader: bool,
) -> JoinHandle<()> {
    let mut objects = String::new();
    for i in 0..4 {
        objects.push_str(&format!(
            r#"---
apiVersion: v1
kind: Secret
metadata: {{name: s{i}, namespace: {MACHINE_NAMESPACE}}}
stringData: {{token: t{i}}}
---
apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineClass
metadata: {{name: c{i}, namespace: {MACHINE_NAMESPACE}}}
provider: local
providerSpec: {{size: c{i}}}
secretRef: {{name: s{i}, namespace: {MACHINE_NAMESPACE}}}
"#
        ));
    }
    cluster.apply_ok(&objects);
    std::thread::spawn(move || {
        for step in 0..1_000 {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let (machine, class) = schedule::script_step(step, broken_leader);
            // Failures are the API server's during a fault: the final state is applied after.
            cluster.apply(&machine_yaml(machine, class));
            std::thread::sleep(Duration::from_secs(3));
        }
    })
}

fn machine_yaml(machine: usize, class: usize) -> String {
    format!(
        r#"apiVersion: machine.sapcloud.io/v1alpha1
kind: Machine
metadata: {{name: m{machine}, namespace: {MACHINE_NAMESPACE}}}
spec:
  class: {{kind: MachineClass, name: c{class}}}
"#
    )
}

/// The script's known end: m0 and m1 on c0, m2 on c1, the other Machines gone, c3 deleted
/// (it goes once unused), c2 kept unused.
fn final_machine_state(cluster: &Cluster) {
    let mut yaml = String::new();
    for (machine, class) in [(0, 0), (1, 0), (2, 1)] {
        yaml.push_str("---\n");
        yaml.push_str(&machine_yaml(machine, class));
    }
    cluster.apply_ok(&yaml);
    cluster.kubectl_ok(&[
        "-n",
        MACHINE_NAMESPACE,
        "delete",
        "machine",
        "m3",
        "m4",
        "m5",
        "--ignore-not-found",
        "--wait=false",
    ]);
    cluster.kubectl_ok(&[
        "-n",
        MACHINE_NAMESPACE,
        "delete",
        "machineclass",
        "c3",
        "--wait=false",
    ]);
}

/// Each object of `kind` in the machine namespace that carries `finalizer`.
fn with_finalizer(cluster: &Cluster, kind: &str, finalizer: &str) -> BTreeSet<String> {
    let listed = cluster.kubectl_ok(&[
        "-n",
        MACHINE_NAMESPACE,
        "get",
        kind,
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name} {.metadata.finalizers}{"\n"}{end}"#,
    ]);
    listed
        .lines()
        .filter(|line| line.contains(&format!("\"{finalizer}\"")))
        .filter_map(|line| line.split(' ').next().map(str::to_owned))
        .collect()
}

/// Finalizers exact on classes and Secrets, c3 gone, the selectors binding the workload
/// namespace, every Pod of the bound namespace carrying its pool; how long after `start`.
fn end_state_exact(cluster: &Cluster, start: Instant) -> Duration {
    let names = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
    let classes = names(&["c0", "c1"]);
    let secrets = names(&["s0", "s1", "s2"]);
    let since = Instant::now();
    eventually("the end state", CONVERGENCE, || {
        let got_classes = with_finalizer(cluster, "machineclasses", CLASS_FINALIZER);
        let got_secrets = with_finalizer(cluster, "secrets", SECRET_FINALIZER);
        let c3 = cluster.kubectl(&["-n", MACHINE_NAMESPACE, "get", "machineclass", "c3"]);
        (got_classes == classes && got_secrets == secrets && !c3.status.success()).then_some(())
    });
    scenario::wait_for_binding(cluster, "poolkeeper");
    let pools = cluster.kubectl_ok(&[
        "-n",
        WORKLOAD_NAMESPACE,
        "get",
        "pods",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name} {.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]}{"\n"}{end}"#,
    ]);
    let unplaced: Vec<&str> = pools
        .lines()
        .filter(|l| !l.ends_with(&format!(" {POOL}")))
        .collect();
    assert!(
        unplaced.is_empty(),
        "Pods of the bound namespace without their pool: {unplaced:?}"
    );
    let converged = since.elapsed();
    eprintln!(
        "chaos: end state exact {converged:?} after the script's final step ({:?} into the run)",
        start.elapsed()
    );
    converged
}

/// Container restarts of poolkeeper's current Pods.
fn restarts(cluster: &Cluster) -> u32 {
    let counts = cluster.kubectl_ok(&[
        "-n",
        NAMESPACE,
        "get",
        "pods",
        "-l",
        SELECTOR,
        "-o",
        "jsonpath={.items[*].status.containerStatuses[0].restartCount}",
    ]);
    counts
        .split_whitespace()
        .filter_map(|c| c.parse::<u32>().ok())
        .sum()
}

/// The replicas' resident memory (MiB, summed): `VmRSS` of their containers' processes.
fn memory(cluster: &Cluster) -> f64 {
    let pods = wait_for_replicas(cluster, SELECTOR);
    let kib: u64 = pods
        .iter()
        .map(|pod| container_pid(cluster, pod))
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .sum();
    kib as f64 / 1024.0
}

/// The oracle over the API server's audit log: in-flight writes are allowed up to
/// leaseDuration − renewDeadline after their term (the margin the term guard keeps).
fn audit(since: std::time::SystemTime) -> oracle::Report {
    let path = std::env::var(AUDIT_LOG).unwrap_or_else(|_| panic!("{AUDIT_LOG} is not set"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let mut requests = oracle::parse_log(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let since = since
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    requests.retain(|r| r.received >= since);
    let grace = LEASE_DURATION.saturating_sub(RENEW_DEADLINE);
    oracle::check(
        &requests,
        &oracle::Scope {
            username: format!("system:serviceaccount:{NAMESPACE}:poolkeeper"),
            lease_namespace: NAMESPACE.to_owned(),
            lease_name: "poolkeeper".to_owned(),
            grace: i64::try_from(grace.as_micros()).unwrap_or(i64::MAX),
        },
    )
}

struct Figures<'a> {
    injected: &'a [Injected],
    creates: &'a Creates,
    last_fault: Duration,
    converged: Duration,
    restarts: u32,
    memory: (f64, f64),
    report: &'a oracle::Report,
}

/// The table of RELIABILITY.md, printed.
fn print_figures(f: &Figures<'_>) {
    let failed = |creates: &[Create]| creates.iter().filter(|c| c.failed).count();
    println!(
        "| fault | injected | new leader p50 / max | creates failed in its window (bound ns) |"
    );
    println!("|---|---|---|---|");
    let kinds: BTreeSet<Fault> = f.injected.iter().map(|i| i.fault).collect();
    for kind in kinds {
        let mut took: Vec<Duration> = f
            .injected
            .iter()
            .filter(|i| i.fault == kind)
            .filter_map(|i| i.new_leader_after)
            .collect();
        took.sort();
        let in_windows = f
            .injected
            .iter()
            .filter(|i| i.fault == kind)
            .map(|i| {
                f.creates
                    .bound
                    .iter()
                    .filter(|c| {
                        let end = i.until.max(i.at + i.new_leader_after.unwrap_or(FAULT_HOLD));
                        c.failed && c.overlaps(i.at, end)
                    })
                    .count()
            })
            .sum::<usize>();
        let injected = f.injected.iter().filter(|i| i.fault == kind).count();
        let leader = match (took.get(took.len().saturating_sub(1) / 2), took.last()) {
            (Some(p50), Some(max)) => format!(
                "{:.1} s / {:.1} s ({} of {injected})",
                p50.as_secs_f64(),
                max.as_secs_f64(),
                took.len()
            ),
            _ => "kept the Lease".to_owned(),
        };
        println!("| {kind:?} | {injected} | {leader} | {in_windows} |");
    }
    let attempted = f.creates.bound.len() + f.creates.unbound.len();
    println!(
        "creates: bound {} ({} failed), unbound {} ({} failed), {:.1}/s; last fault at {:.0} s; \
         end state exact {:.1} s after the script's final step; restarts {}; memory {:.1} -> \
         {:.1} MiB; audit: {}\nfailed creates: {:#?}",
        f.creates.bound.len(),
        failed(&f.creates.bound),
        f.creates.unbound.len(),
        failed(&f.creates.unbound),
        attempted as f64 / f.last_fault.as_secs_f64().max(1.0),
        f.last_fault.as_secs_f64(),
        f.converged.as_secs_f64(),
        f.restarts,
        f.memory.0,
        f.memory.1,
        f.report,
        f.creates.errors
    );
}

/// Creates in the unbound namespace never fail while the API server serves: no webhook
/// matches it, whatever the replicas do. Those of the bound namespace that failed outside the
/// windows where both replicas or the API server were down are counted (the frozen leader
/// stays behind the Service until its readiness probe fails).
fn unbound_creates_never_failed(creates: &Creates, injected: &[Injected]) -> usize {
    let within = |create: &Create, kinds: &[Fault]| {
        injected
            .iter()
            .any(|i| kinds.contains(&i.fault) && create.overlaps(i.at, i.until))
    };
    let unbound: Vec<&Create> = creates
        .unbound
        .iter()
        .filter(|c| c.failed && !within(c, &[Fault::ApiServerRestarted]))
        .collect();
    assert!(
        unbound.is_empty(),
        "creates in the unbound namespace failed while the API server served: {unbound:?}"
    );
    creates
        .bound
        .iter()
        .filter(|c| c.failed && !within(c, &[Fault::BothDeleted, Fault::ApiServerRestarted]))
        .count()
}

fn cleanup(cluster: &Cluster) {
    for namespace in [WORKLOAD_NAMESPACE, UNBOUND_NAMESPACE] {
        cluster.kubectl_ok(&[
            "-n",
            namespace,
            "delete",
            "pods",
            "-l",
            "chaos=true",
            "--wait=false",
        ]);
    }
    cluster.kubectl_ok(&["delete", "namespace", UNBOUND_NAMESPACE, "--wait=false"]);
    cluster.kubectl_ok(&[
        "-n",
        WORKLOAD_NAMESPACE,
        "delete",
        "deployment",
        "chaos-web",
    ]);
    cluster.kubectl_ok(&[
        "-n",
        MACHINE_NAMESPACE,
        "delete",
        "machines",
        "--all",
        "--wait=false",
    ]);
    eventually("the chaos classes gone", CONVERGENCE, || {
        cluster
            .kubectl(&[
                "-n",
                MACHINE_NAMESPACE,
                "delete",
                "machineclasses",
                "--all",
                "--timeout=20s",
            ])
            .status
            .success()
            .then_some(())
    });
    cluster.kubectl_ok(&[
        "-n",
        MACHINE_NAMESPACE,
        "delete",
        "secrets",
        "s0",
        "s1",
        "s2",
        "s3",
        "--ignore-not-found",
    ]);
}
