//! `cargo xtask cluster up|down|status|build|exec|test`: a real one-node cluster for the install
//! path. etcd, kube-apiserver, kube-controller-manager and kube-scheduler (the control plane's
//! binaries), containerd and runc (Debian's), the CNI bridge, kube-proxy and a kubelet (built
//! from the same Kubernetes module) all run inside the network namespace `poolkeeper-cluster`,
//! which has no link to the host's network: the node's address sits on a veth pair whose both
//! ends are inside it, so nothing the cluster does reaches an address outside it. Images are
//! never pulled: the pause image and poolkeeper's image are OCI archives written here and
//! imported into containerd.
//!
//! Pods reach the API server through the `kubernetes` Service (kube-proxy in iptables mode
//! translates its ClusterIP to the API server's address in the namespace), and the API server
//! reaches webhooks through their Service the same way, as on any node.
//!
//! `down` kills every process of the cluster's cgroup (daemons, shims, containers), unmounts
//! what lies below /run/poolkeeper-cluster, removes the cgroups, the namespace and the files
//! the node wrote on the host, and puts back the kernel settings the kubelet changed. Logs stay
//! in target/cluster/logs.

mod configs;
mod daemons;
mod host;
mod pki;
pub(crate) mod process;
pub(crate) mod suite;
mod teardown;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::run::display;
use crate::{Error, Result, controlplane, oci, target_dir, workspace_root};
use daemons::Daemon;
use host::Host;

pub const NETNS: &str = "poolkeeper-cluster";
const RUN_DIR: &str = "/run/poolkeeper-cluster";
pub const NODE_NAME: &str = "poolkeeper-node";
/// The node's address, on one end of a veth pair inside the namespace (the kubelet refuses a
/// loopback node IP).
pub const NODE_IP: &str = "10.240.0.1";
const NODE_PREFIX: &str = "24";
const NODE_LINKS: (&str, &str) = ("pk-node0", "pk-node1");
pub const POD_SUBNET: &str = "10.244.0.0/24";
pub const POD_GATEWAY: &str = "10.244.0.1";
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
const SERVICE_CIDR: &str = "10.96.0.0/24";
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";
const APISERVER_PORT: u16 = 6443;

const APISERVER_TIMEOUT: Duration = Duration::from_secs(90);
const CONTAINERD_TIMEOUT: Duration = Duration::from_secs(30);
const NODE_TIMEOUT: Duration = Duration::from_secs(120);
/// `cluster restart`: SIGKILL when SIGTERM has not stopped the daemon within this (a kubelet's
/// default grace period).
const RESTART_GRACE: Duration = Duration::from_secs(30);

const USAGE: &str = "\
usage: cargo xtask cluster <up|down|status|build|exec -- COMMAND...|restart DAEMON|test>
  up       build what is missing, then start the one-node cluster in the network namespace
           poolkeeper-cluster (needs root, cgroups; installs containerd, runc, CNI plugins,
           iptables with apt-get when missing)
  down     stop it and remove everything it made (logs stay in target/cluster/logs)
  status   the cluster's processes and whether they run
  build    kubelet, kube-proxy, pause, helm, promtool and the control plane, cached by version
  exec     run COMMAND in the namespace with KUBECONFIG set and kubectl and helm on the PATH
  restart DAEMON
           stop a daemon of the cluster (e.g. kube-apiserver) by its recorded pid and start it
           again with the same command line, its log appended to
  test [FILTER]...
           build, up, the cluster tests (xtask/examples/cluster-tests), down";

/// Where the cluster keeps its files: target/cluster (configuration, certificates, logs) and
/// /run/poolkeeper-cluster (sockets, containerd's and the kubelet's state).
#[derive(Debug, Clone)]
pub struct Layout {
    pub dir: PathBuf,
    pub run: PathBuf,
}

impl Layout {
    pub fn new(root: &Path) -> Self {
        Self {
            dir: target_dir(root).join("cluster"),
            run: PathBuf::from(RUN_DIR),
        }
    }

    #[cfg(test)]
    fn for_test() -> Self {
        Self {
            dir: PathBuf::from("/work/target/cluster"),
            run: PathBuf::from(RUN_DIR),
        }
    }

    pub fn pki(&self) -> PathBuf {
        self.dir.join("pki")
    }

    pub fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// The API server's audit policy ([`configs::audit_policy`]).
    pub fn audit_policy(&self) -> PathBuf {
        self.dir.join("audit-policy.yaml")
    }

    /// The API server's audit log, JSON lines: the chaos run's oracle reads it.
    pub fn audit_log(&self) -> PathBuf {
        self.logs().join("kube-apiserver-audit.log")
    }

    pub fn log(&self, name: &str) -> PathBuf {
        self.logs().join(format!("{name}.log"))
    }

    /// The admin's kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    pub fn component_kubeconfig(&self, name: &str) -> PathBuf {
        self.pki().join(format!("{name}.kubeconfig"))
    }

    pub fn containerd_socket(&self) -> PathBuf {
        self.run.join("containerd.sock")
    }

    pub fn pids_file(&self) -> PathBuf {
        self.dir.join("pids")
    }

    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("cni")
    }

    pub fn pod_logs(&self) -> PathBuf {
        self.run.join("pod-logs")
    }

    pub fn server(&self) -> String {
        format!("https://{NODE_IP}:{APISERVER_PORT}")
    }
}

/// The binaries and images the cluster runs, built or found.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl.
    pub control_plane: PathBuf,
    /// kubelet, kube-proxy, pause, and the pause image's archive.
    pub node: PathBuf,
    pub helm: Option<PathBuf>,
    /// Built with helm: the chart tests check the monitoring pack's rules with it.
    pub promtool: Option<PathBuf>,
    pub kustomize: PathBuf,
    pub pause_image: String,
    /// The control plane's kubectl alone, for the chart's `helm test` Pod (the node pulls
    /// no image from a registry).
    pub kubectl_image: String,
}

impl Binaries {
    pub fn kubectl(&self) -> PathBuf {
        self.control_plane.join("kubectl")
    }

    fn pause_archive(&self) -> PathBuf {
        self.node.join("pause.oci.tar")
    }

    fn kubectl_archive(&self) -> PathBuf {
        self.node.join("kubectl.oci.tar")
    }
}

pub fn command(args: &[String]) -> Result<()> {
    let root = workspace_root();
    let layout = Layout::new(&root);
    let (first, rest) = match args.split_first() {
        Some((first, rest)) => (first.as_str(), rest),
        None => ("", &[][..]),
    };
    match first {
        "up" => {
            // What the machine lacks is said before the long builds.
            let host = host::check()?;
            let binaries = build(&root, false)?;
            up(&layout, &host, &binaries)?;
            print_usage(&layout);
            Ok(())
        }
        "down" => teardown::down(&layout),
        "status" => status(&layout),
        "build" => build(&root, true).map(drop),
        "exec" => exec(&root, &layout, rest),
        "restart" => restart(&layout, rest),
        "test" => suite::command(&root, &layout, rest),
        _ => Err(Error::Usage(USAGE.to_owned())),
    }
}

/// The cluster tests for the pipeline: built, run on a fresh cluster by `run_tests` (which
/// counts them), the cluster taken down whatever happened.
pub fn test<T: Default>(
    root: &Path,
    layout: &Layout,
    run_tests: impl FnOnce(&mut Command) -> Result<T, (T, Error)>,
) -> Result<T, (T, Error)> {
    suite::run(root, layout, &[], crate::dist::Variant::Shipped, run_tests)
}

/// Builds what is missing: the control plane, the node's binaries, the pause image's archive,
/// and helm and promtool when asked for.
pub fn build(root: &Path, with_helm: bool) -> Result<Binaries> {
    let control_plane = controlplane::ensure(root, false)?;
    let node = controlplane::node(root)?;
    let (helm, promtool) = if with_helm {
        (
            Some(controlplane::helm(root)?),
            Some(controlplane::promtool(root)?),
        )
    } else {
        (None, None)
    };
    let version = node
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let kubectl_version = control_plane
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let binaries = Binaries {
        pause_image: format!("localhost/pause:{version}"),
        kubectl_image: format!("localhost/kubectl:{kubectl_version}"),
        control_plane,
        node,
        helm,
        promtool,
        kustomize: controlplane::kustomize(root)?,
    };
    write_pause_archive(&binaries)?;
    write_kubectl_archive(&binaries)?;
    Ok(binaries)
}

/// The `helm test` image: kubectl alone (a static Go binary), as registry.k8s.io/kubectl is.
fn write_kubectl_archive(binaries: &Binaries) -> Result<()> {
    let program = binaries.kubectl();
    let contents = std::fs::read(&program)
        .map_err(|e| Error::io(format!("reading {}", program.display()), e))?;
    let image = oci::Image {
        reference: binaries.kubectl_image.clone(),
        files: vec![oci::Entry {
            path: "kubectl".to_owned(),
            mode: 0o755,
            contents,
        }],
        user: Some("65532:65532".to_owned()),
        entrypoint: vec!["/kubectl".to_owned()],
        ..oci::Image::default()
    };
    oci::write_archive(&image, &binaries.kubectl_archive()).map(drop)
}

/// The sandbox image: the pause binary alone, as registry.k8s.io/pause is.
fn write_pause_archive(binaries: &Binaries) -> Result<()> {
    let program = binaries.node.join("pause");
    let contents = std::fs::read(&program)
        .map_err(|e| Error::io(format!("reading {}", program.display()), e))?;
    let image = oci::Image {
        reference: binaries.pause_image.clone(),
        files: vec![oci::Entry {
            path: "pause".to_owned(),
            mode: 0o755,
            contents,
        }],
        user: Some("65535:65535".to_owned()),
        entrypoint: vec!["/pause".to_owned()],
        ..oci::Image::default()
    };
    oci::write_archive(&image, &binaries.pause_archive()).map(drop)
}

/// Starts the cluster; on failure everything started is removed again (logs kept).
pub fn up(layout: &Layout, host: &Host, binaries: &Binaries) -> Result<()> {
    if netns_exists() {
        return Err(Error::Check(format!(
            "the network namespace {NETNS} exists: a cluster is up (`cargo xtask cluster down` \
             stops it)"
        )));
    }
    teardown::cleanup(layout, &host.cgroups)?;
    prepare_dirs(layout)?;
    let started = std::time::Instant::now();
    let result = create_netns()
        .and_then(|()| pki::create(layout))
        .and_then(|()| write_configs(layout, host, binaries))
        .and_then(|()| start_control_plane(layout, host, binaries))
        .and_then(|()| start_node(layout, host, binaries));
    if let Err(error) = result {
        eprintln!("cluster: start failed; removing what was started");
        if let Err(cleanup) = teardown::cleanup(layout, &host.cgroups) {
            eprintln!("cluster: cleanup after the failed start: {cleanup}");
        }
        return Err(error);
    }
    eprintln!(
        "cluster: node {NODE_NAME} Ready in {}",
        crate::run::elapsed(started.elapsed())
    );
    Ok(())
}

/// Fresh target/cluster (old logs go), the run directory, and the record of what the node
/// will change on the host.
fn prepare_dirs(layout: &Layout) -> Result<()> {
    if layout.dir.exists() {
        std::fs::remove_dir_all(&layout.dir)
            .map_err(|e| Error::io(format!("removing {}", layout.dir.display()), e))?;
    }
    for dir in [&layout.logs(), &layout.run, &layout.cni_conf_dir()] {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    }
    teardown::record_host_state(layout)
}

pub fn netns_exists() -> bool {
    Path::new("/run/netns").join(NETNS).exists()
}

fn ip(args: &[&str]) -> Result<()> {
    let mut command = Command::new("ip");
    command.args(args);
    let shown = display(&command);
    let out = command
        .output()
        .map_err(|e| Error::io(format!("starting `{shown}` (iproute2)"), e))?;
    if out.status.success() {
        return Ok(());
    }
    Err(Error::Check(format!(
        "`{shown}` failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// The namespace, its loopback, and the node's address on a veth pair inside it. Only the
/// Service range is routed (to the node's link, where kube-proxy's rules take over): any other
/// destination is unreachable.
fn create_netns() -> Result<()> {
    let (node, peer) = NODE_LINKS;
    ip(&["netns", "add", NETNS])?;
    ip(&["-n", NETNS, "link", "set", "lo", "up"])?;
    ip(&[
        "-n", NETNS, "link", "add", node, "type", "veth", "peer", "name", peer,
    ])
    .map_err(|e| Error::Check(format!("{e} (the kernel needs veth support: CONFIG_VETH)")))?;
    ip(&[
        "-n",
        NETNS,
        "addr",
        "add",
        &format!("{NODE_IP}/{NODE_PREFIX}"),
        "dev",
        node,
    ])?;
    ip(&["-n", NETNS, "link", "set", peer, "up"])?;
    ip(&["-n", NETNS, "link", "set", node, "up"])?;
    ip(&["-n", NETNS, "route", "add", SERVICE_CIDR, "dev", node])
}

fn write_configs(layout: &Layout, host: &Host, binaries: &Binaries) -> Result<()> {
    let cni_bin = host.cni_bin_dir.to_string_lossy();
    let cgroup_root = format!("/{}", daemons::CGROUP);
    let files = [
        (
            layout.dir.join("containerd.toml"),
            configs::containerd_toml(layout, &binaries.pause_image, &cni_bin),
        ),
        (
            layout.cni_conf_dir().join("10-bridge.conflist"),
            configs::cni_conflist(layout),
        ),
        (
            layout.dir.join("kubelet.yaml"),
            configs::kubelet_yaml(layout, &cgroup_root),
        ),
        (
            layout.dir.join("kube-proxy.yaml"),
            configs::kube_proxy_yaml(layout),
        ),
        // No cluster DNS runs and nothing may resolve names outside: Pods get no resolver.
        (layout.dir.join("resolv.conf"), String::new()),
        (layout.audit_policy(), configs::audit_policy()),
    ];
    for (path, text) in files {
        std::fs::write(&path, text)
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    }
    daemons::create_cgroups(host)
}

fn start_control_plane(layout: &Layout, host: &Host, binaries: &Binaries) -> Result<()> {
    let cp = &binaries.control_plane;
    let etcd_dir = layout.run.join("etcd");
    let etcd = Daemon {
        name: "etcd",
        program: cp.join("etcd"),
        args: strings(&[
            "--data-dir",
            &etcd_dir.to_string_lossy(),
            "--listen-client-urls=http://127.0.0.1:2379",
            "--advertise-client-urls=http://127.0.0.1:2379",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--unsafe-no-fsync",
        ]),
    };
    daemons::start(layout, host, &etcd)?;
    daemons::start(layout, host, &apiserver(layout, binaries))?;
    daemons::wait_until(layout, "kube-apiserver /readyz", APISERVER_TIMEOUT, || {
        kubectl(layout, binaries, &["get", "--raw=/readyz"]).is_ok_and(|o| o.status.success())
    })?;
    let component = |name: &'static str, port: &str, extra: &[&str]| {
        let kubeconfig = layout.component_kubeconfig(name);
        let kubeconfig = kubeconfig.to_string_lossy();
        let mut args = strings(&[
            &format!("--kubeconfig={kubeconfig}"),
            &format!("--authentication-kubeconfig={kubeconfig}"),
            &format!("--authorization-kubeconfig={kubeconfig}"),
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            &format!("--secure-port={port}"),
        ]);
        args.extend(strings(extra));
        Daemon {
            name,
            program: cp.join(name),
            args,
        }
    };
    let pki = layout.pki();
    let ca = format!("--root-ca-file={}", pki.join("ca.crt").display());
    let sa_key = format!(
        "--service-account-private-key-file={}",
        pki.join("service-account.key").display()
    );
    let controller_manager = component(
        "kube-controller-manager",
        "10257",
        &[
            "--use-service-account-credentials=true",
            &ca,
            &sa_key,
            "--controllers=*",
        ],
    );
    daemons::start(layout, host, &controller_manager)?;
    daemons::start(layout, host, &component("kube-scheduler", "10259", &[]))?;
    Ok(())
}

/// The API server as in a kubeadm cluster: Node and RBAC authorization, NodeRestriction,
/// ServiceAccount tokens, reachable at the node's address (and through the `kubernetes`
/// Service's ClusterIP).
fn apiserver(layout: &Layout, binaries: &Binaries) -> Daemon {
    let pki = layout.pki();
    let file = |name: &str| pki.join(name).to_string_lossy().into_owned();
    Daemon {
        name: "kube-apiserver",
        program: binaries.control_plane.join("kube-apiserver"),
        args: strings(&[
            "--etcd-servers=http://127.0.0.1:2379",
            "--bind-address=0.0.0.0",
            &format!("--secure-port={APISERVER_PORT}"),
            &format!("--advertise-address={NODE_IP}"),
            &format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            &format!("--client-ca-file={}", file("ca.crt")),
            &format!("--tls-cert-file={}", file("apiserver.crt")),
            &format!("--tls-private-key-file={}", file("apiserver.key")),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            &format!("--service-account-key-file={}", file("service-account.pub")),
            &format!(
                "--service-account-signing-key-file={}",
                file("service-account.key")
            ),
            &format!(
                "--kubelet-client-certificate={}",
                file("apiserver-kubelet-client.crt")
            ),
            &format!(
                "--kubelet-client-key={}",
                file("apiserver-kubelet-client.key")
            ),
            "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false",
            &format!("--audit-policy-file={}", layout.audit_policy().display()),
            &format!("--audit-log-path={}", layout.audit_log().display()),
            "--audit-log-format=json",
            // Written as the requests complete: the oracle reads the log right after a run.
            "--audit-log-mode=blocking",
            "--audit-log-maxsize=200",
            "--audit-log-maxbackup=1",
        ]),
    }
}

fn start_node(layout: &Layout, host: &Host, binaries: &Binaries) -> Result<()> {
    let config = |name: &str| layout.dir.join(name).to_string_lossy().into_owned();
    let containerd = Daemon {
        name: "containerd",
        program: PathBuf::from("containerd"),
        args: strings(&["--config", &config("containerd.toml")]),
    };
    daemons::start(layout, host, &containerd)?;
    daemons::wait_until(layout, "containerd", CONTAINERD_TIMEOUT, || {
        ctr(layout, &["version"]).is_ok()
    })?;
    import_image(layout, &binaries.pause_archive())?;
    import_image(layout, &binaries.kubectl_archive())?;
    let kubelet = Daemon {
        name: "kubelet",
        program: binaries.node.join("kubelet"),
        args: strings(&[
            &format!("--config={}", config("kubelet.yaml")),
            &format!(
                "--kubeconfig={}",
                layout.component_kubeconfig("kubelet").display()
            ),
            &format!("--hostname-override={NODE_NAME}"),
            &format!("--node-ip={NODE_IP}"),
            &format!("--root-dir={}", layout.run.join("kubelet").display()),
            &format!("--cert-dir={}", layout.run.join("kubelet-pki").display()),
        ]),
    };
    daemons::start(layout, host, &kubelet)?;
    let proxy = Daemon {
        name: "kube-proxy",
        program: binaries.node.join("kube-proxy"),
        args: strings(&[&format!("--config={}", config("kube-proxy.yaml"))]),
    };
    daemons::start(layout, host, &proxy)?;
    let ready = r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#;
    daemons::wait_until(layout, "the node Ready", NODE_TIMEOUT, || {
        kubectl(layout, binaries, &["get", "node", NODE_NAME, "-o", ready])
            .is_ok_and(|o| o.stdout == b"True")
    })?;
    // Pods need their namespace's ServiceAccount and the cluster CA ConfigMap, which the
    // controller manager creates.
    daemons::wait_until(layout, "the default ServiceAccount", NODE_TIMEOUT, || {
        kubectl(
            layout,
            binaries,
            &[
                "-n",
                "default",
                "get",
                "serviceaccount/default",
                "configmap/kube-root-ca.crt",
            ],
        )
        .is_ok_and(|o| o.status.success())
    })
}

/// `ctr images import` into the namespace the kubelet's images live in.
pub fn import_image(layout: &Layout, archive: &Path) -> Result<()> {
    let archive = archive.to_string_lossy();
    ctr(layout, &["images", "import", &archive]).map(drop)
}

/// ctr against the cluster's containerd, in the Kubernetes namespace.
pub fn ctr(layout: &Layout, args: &[&str]) -> Result<Output> {
    let mut command = Command::new("ctr");
    command
        .arg(format!(
            "--address={}",
            layout.containerd_socket().display()
        ))
        .args(["--namespace", "k8s.io"])
        .args(args)
        .stdin(Stdio::null());
    checked_output(&mut command)
}

fn checked_output(command: &mut Command) -> Result<Output> {
    let shown = display(command);
    let out = command
        .output()
        .map_err(|e| Error::io(format!("starting `{shown}`"), e))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(Error::Check(format!(
            "`{shown}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// A command run inside the namespace (the host's mount namespace kept).
pub fn in_netns(program: &Path) -> Command {
    let mut command = Command::new("nsenter");
    command
        .arg(format!("--net=/run/netns/{NETNS}"))
        .arg("--")
        .arg(program)
        .stdin(Stdio::null());
    command
}

/// kubectl as the cluster's admin; the output whatever the exit status.
fn kubectl(layout: &Layout, binaries: &Binaries, args: &[&str]) -> Result<Output> {
    let mut command = in_netns(&binaries.kubectl());
    command
        .arg("--kubeconfig")
        .arg(layout.kubeconfig())
        .args(args);
    command
        .output()
        .map_err(|e| Error::io(format!("starting `{}`", display(&command)), e))
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn status(layout: &Layout) -> Result<()> {
    let recorded = daemons::recorded(layout);
    if recorded.is_empty() && !netns_exists() {
        println!("no cluster is up");
        return Ok(());
    }
    for (name, pid) in &recorded {
        let state = if daemons::alive(*pid) {
            "running"
        } else {
            "EXITED"
        };
        println!("{name:<24} pid {pid:<8} {state}");
    }
    println!("logs: {}", layout.logs().display());
    Ok(())
}

/// `cargo xtask cluster exec -- COMMAND...`: COMMAND in the namespace, as the admin.
fn exec(root: &Path, layout: &Layout, args: &[String]) -> Result<()> {
    let args = match args.split_first() {
        Some((first, rest)) if first == "--" => rest,
        _ => args,
    };
    let Some((program, rest)) = args.split_first() else {
        return Err(Error::Usage(USAGE.to_owned()));
    };
    if !netns_exists() {
        return Err(Error::Check(
            "no cluster is up: `cargo xtask cluster up`".to_owned(),
        ));
    }
    let binaries = build(root, true)?;
    let mut command = in_netns(Path::new(program));
    command
        .args(rest)
        .env("KUBECONFIG", layout.kubeconfig())
        .env("PATH", tool_path(&binaries))
        .stdin(Stdio::inherit());
    crate::run::status(&mut command)
}

/// `cargo xtask cluster restart DAEMON`.
fn restart(layout: &Layout, args: &[String]) -> Result<()> {
    let [name] = args else {
        return Err(Error::Usage(USAGE.to_owned()));
    };
    let pid = process::restart(
        &layout.pids_file(),
        name,
        &layout.log(name),
        &Path::new("/run/netns").join(NETNS),
        RESTART_GRACE,
        Duration::ZERO,
    )
    .map_err(|e| Error::io("cluster restart", e))?;
    println!(
        "{name} restarted: pid {pid} (log {})",
        layout.log(name).display()
    );
    Ok(())
}

/// PATH with kubectl and helm first.
pub fn tool_path(binaries: &Binaries) -> String {
    let mut dirs = vec![binaries.control_plane.to_string_lossy().into_owned()];
    if let Some(dir) = binaries.helm.as_deref().and_then(Path::parent) {
        dirs.push(dir.to_string_lossy().into_owned());
    }
    dirs.push(std::env::var("PATH").unwrap_or_default());
    dirs.join(":")
}

fn print_usage(layout: &Layout) {
    println!(
        "cluster up: one node ({NODE_NAME}, {NODE_IP}) in the network namespace {NETNS}\n\
         \n  cargo xtask cluster exec -- kubectl get nodes\n\
         \n  or: sudo ip netns exec {NETNS} kubectl --kubeconfig {} get nodes\n\
         \nimport an image: ctr --address {} -n k8s.io images import IMAGE.oci.tar\
         \nstop it:         cargo xtask cluster down",
        layout.kubeconfig().display(),
        layout.containerd_socket().display()
    );
}
