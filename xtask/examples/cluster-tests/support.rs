//! Driving the cluster of `cargo xtask cluster test` as a user does: kubectl, helm, bash and
//! curl run inside its network namespace with its admin kubeconfig; ctr talks to its
//! containerd over the socket.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The name the README's commands give the pushed image; the tests "push" by importing the
/// image archive into the node's containerd under this name.
pub const REGISTRY_IMAGE: &str = "registry.example.com/poolkeeper:0.1.0";
pub const NAMESPACE: &str = "poolkeeper-system";

/// The tests share one cluster (one installation at a time): each holds this while it runs.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The cluster and the tools, from the environment `cargo xtask cluster test` sets.
pub struct Cluster {
    pub netns: String,
    pub kubeconfig: String,
    pub containerd: String,
    pub node: String,
    pub image_archive: String,
    /// How `cargo xtask image` tags the image (`poolkeeper:0.1.0`).
    pub image: String,
    /// The image the tests' own workloads run (the node's pause image).
    pub workload_image: String,
    /// PATH with kubectl and helm.
    pub path: String,
}

fn var(name: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "{name} is not set: these tests run against the cluster that `cargo xtask cluster \
             test` (or `cargo xtask test`) brings up"
            )
        })
}

impl Cluster {
    pub fn from_env() -> Cluster {
        Cluster {
            netns: var("POOLKEEPER_CLUSTER_NETNS"),
            kubeconfig: var("POOLKEEPER_CLUSTER_KUBECONFIG"),
            containerd: var("POOLKEEPER_CLUSTER_CONTAINERD"),
            node: var("POOLKEEPER_CLUSTER_NODE"),
            image_archive: var("POOLKEEPER_CLUSTER_IMAGE_ARCHIVE"),
            image: var("POOLKEEPER_CLUSTER_IMAGE"),
            workload_image: var("POOLKEEPER_CLUSTER_WORKLOAD_IMAGE"),
            path: var("POOLKEEPER_CLUSTER_PATH"),
        }
    }

    /// `program` inside the namespace, as the cluster's admin.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/run/netns/{}", self.netns))
            .arg("--")
            .arg(program)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", &self.path)
            .stdin(Stdio::null());
        command
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        run(self.command("kubectl").args(args))
    }

    /// kubectl that must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        if !out.status.success() {
            panic!(
                "kubectl {} failed: {}\n{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr),
                self.diagnostics()
            );
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// poolkeeper's Lease at `jsonpath`, when it can be read.
    pub fn lease(&self, jsonpath: &str) -> Option<String> {
        let jsonpath = format!("jsonpath={jsonpath}");
        let out = self.kubectl(&[
            "-n",
            NAMESPACE,
            "get",
            "lease",
            "poolkeeper",
            "-o",
            &jsonpath,
        ]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The Lease holder's Pod name (holders are `<pod>_<suffix>`), if any.
    pub fn leader(&self) -> Option<String> {
        let holder = self.lease("{.spec.holderIdentity}")?;
        let (pod, _) = holder.rsplit_once('_')?;
        Some(pod.to_owned()).filter(|pod| !pod.is_empty())
    }

    /// Waits up to `timeout` for a leader other than `old` that is a running Pod; its name.
    pub fn wait_for_new_leader(&self, old: &str, timeout: Duration) -> String {
        eventually("another replica leading", timeout, || {
            let leader = self.leader()?;
            let pods = self.kubectl_ok(&["-n", NAMESPACE, "get", "pods", "-o", "name"]);
            (leader != old && pods.contains(&format!("pod/{leader}\n"))).then_some(leader)
        })
    }

    /// `kubectl apply -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) -> Output {
        let mut command = self.command("kubectl");
        command.args(["apply", "-f", "-"]);
        run_with_input(&mut command, yaml)
    }

    pub fn apply_ok(&self, yaml: &str) {
        let out = self.apply(yaml);
        assert!(
            out.status.success(),
            "kubectl apply failed: {}\n--- manifest ---\n{yaml}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A script run by bash (`-e`, `-o pipefail`) in `dir`, as a user pastes it.
    pub fn bash(&self, dir: &Path, script: &str) -> Output {
        let mut command = self.command("bash");
        command
            .args(["-e", "-o", "pipefail", "-c", script])
            .current_dir(dir);
        run(&mut command)
    }

    pub fn bash_ok(&self, dir: &Path, script: &str) -> String {
        let out = self.bash(dir, script);
        if !out.status.success() {
            panic!(
                "this script failed ({}):\n{script}\n--- stdout ---\n{}\n--- stderr ---\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.diagnostics()
            );
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The image archive imported into the node's containerd and tagged as the registry's
    /// image: what a push and a pull would have done.
    pub fn import_image(&self) {
        let ctr = |args: &[&str]| {
            let out = run(Command::new("ctr")
                .arg(format!("--address={}", self.containerd))
                .args(["--namespace", "k8s.io"])
                .args(args)
                .stdin(Stdio::null()));
            assert!(
                out.status.success(),
                "ctr {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        ctr(&["images", "import", &self.image_archive]);
        let imported = format!("docker.io/library/{}", self.image);
        ctr(&["images", "tag", "--force", &imported, REGISTRY_IMAGE]);
    }

    /// GET of a URL from inside the namespace (a Pod's address); the body.
    pub fn curl(&self, url: &str) -> String {
        let out = run(self.command("curl").args([
            "--silent",
            "--show-error",
            "--fail",
            "--max-time",
            "10",
            url,
        ]));
        assert!(
            out.status.success(),
            "GET {url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What a failed test prints: poolkeeper's Pods and recent events, and its logs' tails.
    pub fn diagnostics(&self) -> String {
        let text = |args: &[&str]| {
            let out = self.kubectl(args);
            format!(
                "$ kubectl {}\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        };
        [
            text(&["get", "pods", "-A", "-o", "wide"]),
            text(&["-n", NAMESPACE, "get", "events", "--sort-by=.lastTimestamp"]),
            text(&[
                "-n",
                NAMESPACE,
                "logs",
                "-l",
                "app.kubernetes.io/name=poolkeeper",
                "--tail=30",
                "--prefix",
            ]),
        ]
        .join("\n")
    }
}

pub fn run(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("starting {command:?}: {e}"))
}

pub fn run_with_input(command: &mut Command, input: &str) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input.as_bytes())
        .expect("writing stdin");
    child.wait_with_output().expect("waiting for the command")
}

/// Polls `check` every half second until it gives a value; panics after `timeout`.
pub fn eventually<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        if started.elapsed() > timeout {
            panic!("{what}: not within {}s", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
        .to_owned()
}

/// The shell block that follows `<!-- cluster-test: NAME -->` (and other comment lines) in
/// README.md's Install section.
pub fn readme_block(name: &str) -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let marker = format!("<!-- cluster-test: {name} -->");
    let after = readme
        .split_once(&marker)
        .unwrap_or_else(|| panic!("README.md has no {marker}"))
        .1;
    let mut rest = after.trim_start();
    while rest.starts_with("<!--") {
        rest = rest.split_once('\n').map_or("", |(_, r)| r).trim_start();
    }
    let block = rest
        .strip_prefix("```sh\n")
        .unwrap_or_else(|| panic!("{marker} is not followed by a ```sh block"));
    block
        .split_once("\n```")
        .unwrap_or_else(|| panic!("the block after {marker} is not closed"))
        .0
        .to_owned()
}

/// A fresh directory for one test with a copy of deploy/ in it, as a user's checkout has it
/// next to their overlay.
pub fn work_dir(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(|d| root().join(d))
        .unwrap_or_else(|| root().join("target"));
    let dir = target.join("cluster-tests").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&root().join("deploy"), &dir.join("deploy"));
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Both replicas Ready, and the Pods' names.
pub fn wait_for_replicas(cluster: &Cluster, selector: &str) -> Vec<String> {
    eventually("two Ready replicas", Duration::from_secs(180), || {
        let ready = cluster.kubectl_ok(&[
            "-n",
            NAMESPACE,
            "get",
            "pods",
            "-l",
            selector,
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#,
        ]);
        let names: Vec<String> = ready
            .lines()
            .filter_map(|line| {
                let mut parts = line.split(' ');
                let name = parts.next()?;
                let deleting = parts.next()?;
                (deleting.is_empty() && parts.next() == Some("True")).then(|| name.to_owned())
            })
            .collect();
        (names.len() == 2 && ready.lines().count() == 2).then_some(names)
    })
}

/// Neither webhook configuration exists: nothing blocks Pod creation after an uninstall.
/// The image poolkeeper's Deployment runs.
pub fn deployment_image(cluster: &Cluster) -> String {
    cluster.kubectl_ok(&[
        "-n",
        NAMESPACE,
        "get",
        "deployment",
        "poolkeeper",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ])
}

pub fn no_webhook_configuration_left(cluster: &Cluster) {
    for kind in [
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
    ] {
        let left = cluster.kubectl_ok(&["get", kind, "-o", "name"]);
        assert!(left.trim().is_empty(), "left after the uninstall: {left}");
    }
}

/// No installation of poolkeeper, whatever an earlier (failed) test left: the webhook
/// configurations first, then the namespaces and the cluster-wide RBAC.
pub fn fresh_start(cluster: &Cluster) {
    let delete = |args: &[&str]| {
        let mut all = vec!["delete", "--ignore-not-found", "--timeout=120s"];
        all.extend_from_slice(args);
        cluster.kubectl_ok(&all);
    };
    delete(&[
        "mutatingwebhookconfiguration/poolkeeper",
        "validatingwebhookconfiguration/poolkeeper",
    ]);
    delete(&["namespace", NAMESPACE, "shop"]);
    delete(&["clusterrolebinding/poolkeeper", "clusterrole/poolkeeper"]);
    if cluster
        .kubectl(&["get", "namespace", "machine-system"])
        .status
        .success()
    {
        delete(&[
            "-n",
            "machine-system",
            "rolebinding/poolkeeper-machines",
            "role/poolkeeper-machines",
        ]);
    }
}

/// The README's blocks the tests run, in the README's order: a new block there needs a test.
const README_BLOCKS: [&str; 5] = [
    "prerequisites",
    "kustomize-install",
    "kustomize-uninstall",
    "helm-install",
    "helm-uninstall",
];

#[test]
fn every_cluster_test_block_of_the_readme_is_run() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let marked: Vec<&str> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("<!-- cluster-test: "))
        .filter_map(|l| l.strip_suffix(" -->"))
        .collect();
    assert_eq!(marked, README_BLOCKS);
    let sources = ["kustomize.rs", "helm.rs"].map(|f| {
        std::fs::read_to_string(root().join("xtask/examples/cluster-tests").join(f)).unwrap()
    });
    for name in README_BLOCKS {
        let call = format!("readme_block(\"{name}\")");
        assert!(
            sources.iter().any(|s| s.contains(&call)),
            "no test runs the README's block {name}"
        );
    }
}
