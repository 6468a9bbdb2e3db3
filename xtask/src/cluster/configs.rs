//! The configuration files of the node's daemons, as text. Pure: paths and addresses in, file
//! contents out.

use super::{CLUSTER_CIDR, Layout, NODE_IP, NODE_NAME, POD_GATEWAY, POD_SUBNET};

/// containerd 1.6 with its CRI plugin: everything below the cluster's run directory, runc with
/// cgroupfs, the locally imported pause image as the sandbox image, the CNI bridge.
pub fn containerd_toml(layout: &Layout, sandbox_image: &str, cni_bin_dir: &str) -> String {
    let run = layout.run.display();
    let cni_conf = layout.cni_conf_dir();
    let cni_conf = cni_conf.display();
    format!(
        r#"# Written by `cargo xtask cluster up`.
version = 2
root = "{run}/containerd/root"
state = "{run}/containerd/state"
# Snapshotters the node does not use would only log errors at start.
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{run}/opt"

[ttrpc]
  address = "{socket}.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  # Without CAP_SYS_RESOURCE (as in many CI sandboxes) runc cannot give the pause container
  # a lower oom_score_adj than containerd's own; this keeps it at containerd's.
  restrict_oom_score_adj = true
  # Pod network namespaces below the state directory, not in /var/run/netns.
  netns_mounts_under_state_dir = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{run}/runc"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin_dir}"
    conf_dir = "{cni_conf}"
"#,
        socket = layout.containerd_socket().display(),
    )
}

/// One bridge for every Pod, the gateway on the node; addresses from a fixed subnet.
pub fn cni_conflist(layout: &Layout) -> String {
    let ipam_dir = layout.run.join("cni-ipam");
    format!(
        r#"{{
  "cniVersion": "0.4.0",
  "name": "poolkeeper-cluster",
  "plugins": [
    {{
      "type": "bridge",
      "bridge": "pk-cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {{
        "type": "host-local",
        "ranges": [[{{"subnet": "{POD_SUBNET}", "gateway": "{POD_GATEWAY}"}}]],
        "routes": [{{"dst": "0.0.0.0/0"}}],
        "dataDir": "{ipam}"
      }}
    }},
    {{"type": "portmap", "capabilities": {{"portMappings": true}}}}
  ]
}}
"#,
        ipam = ipam_dir.display()
    )
}

/// The kubelet: cgroupfs below the cluster's own cgroup, no image garbage collection and no
/// disk-pressure eviction (the imported images cannot be pulled again, and a build machine's
/// disk is often fuller than a node's thresholds).
pub fn kubelet_yaml(layout: &Layout, cgroup_root: &str) -> String {
    let pki = layout.pki();
    format!(
        r#"# Written by `cargo xtask cluster up`.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
failCgroupV1: false
address: {NODE_IP}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://{socket}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: Webhook}}
clusterDomain: cluster.local
resolvConf: {resolv}
podLogsDir: {pod_logs}
failSwapOn: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "0%"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
"#,
        socket = layout.containerd_socket().display(),
        ca = pki.join("ca.crt").display(),
        resolv = layout.dir.join("resolv.conf").display(),
        pod_logs = layout.pod_logs().display(),
    )
}

/// kube-proxy in iptables mode: Pods reach the `kubernetes` Service (in-cluster config) and
/// the API server reaches poolkeeper's Service, as on any node.
pub fn kube_proxy_yaml(layout: &Layout) -> String {
    format!(
        r#"# Written by `cargo xtask cluster up`.
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: {kubeconfig}
hostnameOverride: {NODE_NAME}
clusterCIDR: {CLUSTER_CIDR}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# The conntrack table size is a host-wide setting: left as it is.
conntrack:
  maxPerCore: 0
"#,
        kubeconfig = layout.component_kubeconfig("kube-proxy").display()
    )
}

/// The ServiceAccounts whose writes the API server audits: those of poolkeeper's namespace.
pub const AUDITED_GROUP: &str = "system:serviceaccounts:poolkeeper-system";

/// The API server's audit policy: the oracle of leader safety (`xtask/src/chaos/oracle.rs`).
/// Every write (create, update, patch, delete) by a ServiceAccount of poolkeeper's namespace at
/// `Metadata` level — who (the token's Pod name is in `user.extra`), what, when, the answer —
/// and their Lease writes at `Request` level, because the holder a write names (a renewal, a
/// takeover or a release all are updates) is in the body. Reads and everyone else's requests
/// are not logged.
pub fn audit_policy() -> String {
    format!(
        r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Request
    userGroups: ["{AUDITED_GROUP}"]
    verbs: [create, update, patch]
    resources: [{{group: coordination.k8s.io, resources: [leases]}}]
  - level: Metadata
    userGroups: ["{AUDITED_GROUP}"]
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
"#
    )
}

/// A kubeconfig with certificate files, for one identity.
pub fn kubeconfig(server: &str, ca: &str, cert: &str, key: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Config
clusters:
  - name: poolkeeper-cluster
    cluster: {{server: "{server}", certificate-authority: "{ca}"}}
users:
  - name: user
    user: {{client-certificate: "{cert}", client-key: "{key}"}}
contexts:
  - name: poolkeeper-cluster
    context: {{cluster: poolkeeper-cluster, user: user}}
current-context: poolkeeper-cluster
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerd_config_keeps_everything_below_the_run_directory() {
        let layout = Layout::for_test();
        let text = containerd_toml(&layout, "localhost/pause:v1", "/usr/lib/cni");
        assert!(text.contains("restrict_oom_score_adj = true"));
        assert!(text.contains("SystemdCgroup = false"));
        assert!(text.contains(r#"sandbox_image = "localhost/pause:v1""#));
        for line in text.lines().filter(|l| l.contains("= \"/")) {
            let path = line.split('"').nth(1).unwrap();
            assert!(
                path.starts_with(&*layout.run.to_string_lossy())
                    || path.starts_with(&*layout.dir.to_string_lossy())
                    || path == "/usr/lib/cni",
                "{line}"
            );
        }
    }

    #[test]
    fn kubelet_runs_on_cgroupfs_with_cgroup_v1_allowed() {
        let layout = Layout::for_test();
        let text = kubelet_yaml(&layout, "/poolkeeper-cluster");
        assert!(text.contains("cgroupDriver: cgroupfs"));
        assert!(text.contains("failCgroupV1: false"));
        assert!(text.contains(&format!("address: {NODE_IP}")));
        assert!(text.contains("cgroupRoot: /poolkeeper-cluster"));
    }

    #[test]
    fn the_audit_policy_logs_poolkeeper_s_writes_and_its_lease_bodies() {
        let text = audit_policy();
        let rules: Vec<&str> = text.split("  - level: ").skip(1).collect();
        assert_eq!(rules.len(), 3, "{text}");
        assert!(
            rules[0].starts_with("Request") && rules[0].contains("leases"),
            "{text}"
        );
        assert!(
            rules[1].starts_with("Metadata") && rules[1].contains("delete"),
            "{text}"
        );
        assert!(
            rules[2].starts_with("None"),
            "the rest is not logged: {text}"
        );
        assert!(rules[..2].iter().all(|rule| rule.contains(AUDITED_GROUP)));
        assert!(!text.contains("get"), "reads are not logged: {text}");
    }

    #[test]
    fn cni_config_is_json_with_the_pod_subnet() {
        let text = cni_conflist(&Layout::for_test());
        assert!(text.contains(&format!(r#""subnet": "{POD_SUBNET}""#)));
        // Balanced braces and brackets: the format! escapes are easy to get wrong.
        let depth = text.chars().fold(0i32, |d, c| match c {
            '{' | '[' => d + 1,
            '}' | ']' => d - 1,
            _ => d,
        });
        assert_eq!(depth, 0);
    }
}
