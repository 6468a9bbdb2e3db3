//! poolkeeper's own certificates rotating on a real node, under a stream of Pod creates: the
//! README's Helm installation with lifetimes of seconds (CA 150 s, serving certificate 50 s
//! renewed 20 s before it expires), so that within about two minutes the leader issues a new
//! serving certificate every 30 s and a new CA after 80 s. Every create in the bound namespace
//! succeeds and every Pod is placed; the API server never fails to call poolkeeper's webhooks
//! (neither its log nor its webhook rejection counter says so, an unknown CA included); both
//! replicas serve each new serving certificate within [`SWAP_BOUND`] of the Secret holding it.

use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::gitops::{nothing_of_poolkeeper_left, pod_stream, wait_for_ca_bundles};
use crate::scenario;
use crate::support::{
    Cluster, NAMESPACE, fresh_start, readme_block, run, serial, wait_for_replicas, work_dir,
};

/// Short enough for two renewals and a CA rotation within a couple of minutes, and valid for
/// `webhook.certificate`'s rules (renewBefore < leafValidity, leafValidity + renewBefore <
/// caValidity).
const LIFETIMES: [&str; 3] = [
    "config.webhook.certificate.caValidity=150s",
    "config.webhook.certificate.leafValidity=50s",
    "config.webhook.certificate.renewBefore=20s",
];
const SECRET: &str = "poolkeeper-webhook-tls";
/// Serving certificates the Secret must have held: the first and two renewals.
const LEAVES: usize = 3;
/// CAs that must have signed a served certificate: the first and its successor.
const CAS: usize = 2;
/// The observation ends when both counts are reached and served, or here.
const RUN_LIMIT: Duration = Duration::from_secs(200);
/// The stream's bound in Pods (it stops with the observation).
const MAX_PODS: usize = 2000;
/// From the Secret holding a serving certificate to both replicas serving it. A replica that
/// took longer than `renewBefore` would serve an expired certificate; it has a Secret watch.
const SWAP_BOUND: Duration = Duration::from_secs(5);

#[test]
fn certificates_rotate_under_a_stream_of_creates() {
    let _serial = serial();
    let cluster = Cluster::from_env();
    fresh_start(&cluster);
    let work = work_dir("rotation");
    cluster.import_image();
    crate::kustomize::prerequisites(&cluster, &work);
    let install = format!(
        "{} --set {}",
        readme_block("helm-install").trim_end(),
        LIFETIMES.join(" --set ")
    );
    cluster.bash_ok(&work, &install);
    wait_for_replicas(&cluster, "app.kubernetes.io/instance=poolkeeper");
    scenario::set_up(&cluster, "poolkeeper-placement");
    wait_for_ca_bundles(&cluster);

    let apiserver_log = ApiServerLog::from_here(&cluster);
    let failed_calls = webhook_call_errors(&cluster);
    let stop = Arc::new(AtomicBool::new(false));
    let stream = {
        let stop = stop.clone();
        std::thread::spawn(move || pod_stream(stop, MAX_PODS))
    };
    let seen = observe(&cluster, &replica_addresses(&cluster));
    stop.store(true, Ordering::SeqCst);
    let (created, problems) = stream.join().expect("the Pod stream");
    println!(
        "rotation: {created} Pods created in {:?}; {} serving certificates, {} CAs served; a new \
         serving certificate served by both replicas within {:?} (longest), {:?} per poll",
        seen.elapsed,
        seen.leaves.len(),
        seen.cas.len(),
        seen.longest_swap,
        seen.poll
    );
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(created > 0, "the stream ran");
    assert!(
        seen.leaves.len() >= LEAVES && seen.cas.len() >= CAS,
        "within {RUN_LIMIT:?}: {} serving certificates (at least {LEAVES}), {} CAs (at least \
         {CAS})\n{}",
        seen.leaves.len(),
        seen.cas.len(),
        cluster.diagnostics()
    );
    assert!(
        seen.longest_swap <= SWAP_BOUND,
        "a new serving certificate served by both replicas after {:?}",
        seen.longest_swap
    );
    let complaints = apiserver_log.complaints_about_poolkeeper();
    assert!(
        complaints.is_empty(),
        "the API server's log: {complaints:#?}"
    );
    assert_eq!(
        webhook_call_errors(&cluster),
        failed_calls,
        "the API server failed to call poolkeeper's webhooks"
    );

    scenario::tear_down(&cluster);
    cluster.bash_ok(&work, &readme_block("helm-uninstall"));
    nothing_of_poolkeeper_left(&cluster);
    cluster.kubectl_ok(&["delete", "namespace", NAMESPACE, "--timeout=120s"]);
}

/// What the observation saw.
struct Seen {
    /// Serial numbers of the serving certificates the Secret held.
    leaves: BTreeSet<String>,
    /// Serial numbers of the CAs that signed what a replica served.
    cas: BTreeSet<String>,
    /// The longest time from a serving certificate first seen in the Secret to both replicas
    /// serving it.
    longest_swap: Duration,
    /// The longest poll of the Secret and both replicas: the measure's resolution.
    poll: Duration,
    elapsed: Duration,
}

/// Polls the Secret and what each replica serves (`/readyz?verbose`) until the Secret has held
/// [`LEAVES`] serving certificates, [`CAS`] CAs have signed served ones and both replicas serve
/// the latest, or [`RUN_LIMIT`].
fn observe(cluster: &Cluster, replicas: &[String]) -> Seen {
    let started = Instant::now();
    let mut seen = Seen {
        leaves: BTreeSet::new(),
        cas: BTreeSet::new(),
        longest_swap: Duration::ZERO,
        poll: Duration::ZERO,
        elapsed: Duration::ZERO,
    };
    // The serving certificate both replicas must come to serve, since when.
    let mut pending: Option<(String, Instant)> = None;
    while started.elapsed() < RUN_LIMIT {
        let poll = Instant::now();
        let leaf = secret_leaf_serial(cluster);
        if seen.leaves.insert(leaf.clone()) {
            pending = Some((leaf, Instant::now()));
        }
        let served: Vec<Served> = replicas
            .iter()
            .filter_map(|ip| Served::parse(&readyz(cluster, ip)))
            .collect();
        seen.cas.extend(served.iter().map(|s| s.ca.clone()));
        if let Some((serial, since)) = &pending
            && served.len() == 2
            && served.iter().all(|s| &s.leaf == serial)
        {
            seen.longest_swap = seen.longest_swap.max(since.elapsed());
            pending = None;
        }
        seen.poll = seen.poll.max(poll.elapsed());
        if seen.leaves.len() >= LEAVES && seen.cas.len() >= CAS && pending.is_none() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if let Some((serial, since)) = pending {
        // Not served by both at the end: at least this long.
        println!("serving certificate {serial} not served by both replicas yet");
        seen.longest_swap = seen.longest_swap.max(since.elapsed());
    }
    seen.elapsed = started.elapsed();
    seen
}

/// The serial number of the serving certificate in the Secret, as `/readyz?verbose` writes it.
fn secret_leaf_serial(cluster: &Cluster) -> String {
    let pem = cluster.kubectl_ok(&[
        "-n",
        NAMESPACE,
        "get",
        "secret",
        SECRET,
        "-o",
        r#"go-template={{index .data "tls.crt" | base64decode}}"#,
    ]);
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .unwrap_or_else(|e| panic!("tls.crt of {SECRET}: {e}"));
    let certificate = pem
        .parse_x509()
        .unwrap_or_else(|e| panic!("tls.crt of {SECRET}: {e}"));
    certificate.raw_serial_as_string()
}

fn replica_addresses(cluster: &Cluster) -> Vec<String> {
    let addresses: Vec<String> = cluster
        .kubectl_ok(&[
            "-n",
            NAMESPACE,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/instance=poolkeeper",
            "-o",
            "jsonpath={.items[*].status.podIP}",
        ])
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(addresses.len(), 2, "two replicas: {addresses:?}");
    addresses
}

/// `/readyz?verbose` of the replica at `ip`, whatever its status.
fn readyz(cluster: &Cluster, ip: &str) -> String {
    let url = format!("http://{ip}:8081/readyz?verbose");
    let out =
        run(cluster
            .command("curl")
            .args(["--silent", "--show-error", "--max-time", "5", &url]));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What a replica serves, from its `/readyz?verbose` line `serving <leaf>; CA <ca>`.
#[derive(Debug, PartialEq, Eq)]
struct Served {
    leaf: String,
    ca: String,
}

impl Served {
    fn parse(readyz: &str) -> Option<Served> {
        let serial = |described: &str| {
            let (_, rest) = described.split_once(" serial ")?;
            rest.split_whitespace().next().map(str::to_owned)
        };
        let line = readyz.lines().find(|l| l.contains("serving "))?;
        let (_, served) = line.split_once("serving ")?;
        let (leaf, ca) = served.split_once("; CA ")?;
        Some(Served {
            leaf: serial(leaf)?,
            ca: serial(ca)?,
        })
    }
}

/// The kube-apiserver's log file, read from where it was when this was made.
struct ApiServerLog {
    path: PathBuf,
    from: u64,
}

impl ApiServerLog {
    /// `cargo xtask cluster` writes each daemon's log beside the admin's kubeconfig, in logs/.
    fn from_here(cluster: &Cluster) -> ApiServerLog {
        let path = Path::new(&cluster.kubeconfig)
            .with_file_name("logs")
            .join("kube-apiserver.log");
        let from = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .len();
        ApiServerLog { path, from }
    }

    /// Lines written since that name poolkeeper and a TLS or webhook call failure.
    fn complaints_about_poolkeeper(&self) -> Vec<String> {
        let mut file = std::fs::File::open(&self.path)
            .unwrap_or_else(|e| panic!("{}: {e}", self.path.display()));
        file.seek(SeekFrom::Start(self.from)).unwrap();
        let mut written = Vec::new();
        file.read_to_end(&mut written).unwrap();
        complaints(&String::from_utf8_lossy(&written))
    }
}

fn complaints(log: &str) -> Vec<String> {
    const FAILURES: [&str; 4] = [
        "x509",
        "tls:",
        "unknown authority",
        "failed calling webhook",
    ];
    log.lines()
        .filter(|line| line.contains("poolkeeper"))
        .filter(|line| {
            let line = line.to_lowercase();
            FAILURES.iter().any(|failure| line.contains(failure))
        })
        .map(str::to_owned)
        .collect()
}

/// The API server's count of webhook calls to poolkeeper that failed (a TLS error included):
/// `apiserver_admission_webhook_rejection_count` with `error_type="calling_webhook_error"`.
fn webhook_call_errors(cluster: &Cluster) -> u64 {
    cluster
        .kubectl_ok(&["get", "--raw", "/metrics"])
        .lines()
        .filter(|line| line.starts_with("apiserver_admission_webhook_rejection_count{"))
        .filter(|line| line.contains(r#"error_type="calling_webhook_error""#))
        .filter(|line| line.contains("poolkeeper"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[test]
fn what_a_replica_serves_parses() {
    let readyz = "[+]leader-lease ok\n[+]webhook ok: serving CN=poolkeeper-webhook.poolkeeper-system.svc \
                  serial 0a:1b notAfter 2026-12-06T10:00:00Z; CA CN=poolkeeper-ca serial 7f:02 \
                  notAfter 2026-12-06T11:00:00Z\nreadyz check passed\n";
    assert_eq!(
        Served::parse(readyz),
        Some(Served {
            leaf: "0a:1b".to_owned(),
            ca: "7f:02".to_owned()
        })
    );
    for unparsable in [
        "ok",
        "[-]webhook failed: no certificate\n",
        "[+]webhook ok: serving CN=x serial 01 notAfter 2026-12-06T10:00:00Z; CA CN=y (not in \
         ca.crt)\n",
    ] {
        assert_eq!(Served::parse(unparsable), None, "{unparsable}");
    }
}

#[test]
fn api_server_complaints_about_poolkeeper() {
    let log = r#"I1206 10:00:00 1 handler.go:1] "ok" webhook="mutate-pods.poolkeeper.io"
W1206 10:00:01 1 dispatcher.go:2] Failed calling webhook, failing closed mutate-pods.poolkeeper.io: failed calling webhook "mutate-pods.poolkeeper.io": tls: failed to verify certificate: x509: certificate signed by unknown authority
E1206 10:00:02 1 other.go:3] x509: certificate has expired (another webhook)
"#;
    let found = complaints(log);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("unknown authority"));
}
