//! The objects of the loaded cluster, as JSON the way their controllers write them:
//! Nodes as a kubelet on a cloud VM reports itself, NodePools as OpenYurt's yurt-manager
//! keeps them, MachineClasses and Machines as Gardener's machine-controller-manager has them.
//!
//! Every object is a function of its index and a per-object seed, so a run can create them
//! in any order (concurrently) and still get the same cluster.

use std::fmt::Write as _;

use serde_json::{Value, json};

pub const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
pub const EDGE_TAINT: &str = "node-role.kubernetes.io/edge";
pub const MACHINE_API_VERSION: &str = "machine.sapcloud.io/v1alpha1";
const REGION: &str = "eu-west-1";
const ZONES: [&str; 3] = ["eu-west-1a", "eu-west-1b", "eu-west-1c"];
const INSTANCE_TYPES: [(&str, &str, &str); 4] = [
    ("m5.large", "2", "8Gi"),
    ("m5.xlarge", "4", "16Gi"),
    ("c5.2xlarge", "8", "16Gi"),
    ("r5.xlarge", "4", "32Gi"),
];
/// What a node of a shop's edge site has pulled: system images, agents, the shop's services.
const IMAGES: [(&str, &str); 30] = [
    ("registry.k8s.io/kube-proxy", "v1.36.3"),
    ("registry.k8s.io/pause", "3.10"),
    ("registry.k8s.io/coredns/coredns", "v1.12.1"),
    ("registry.k8s.io/metrics-server/metrics-server", "v0.8.0"),
    ("registry.k8s.io/ingress-nginx/controller", "v1.13.2"),
    (
        "registry.k8s.io/sig-storage/csi-node-driver-registrar",
        "v2.14.0",
    ),
    ("registry.k8s.io/sig-storage/livenessprobe", "v2.16.0"),
    (
        "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver",
        "v1.44.0",
    ),
    ("quay.io/prometheus/node-exporter", "v1.9.1"),
    (
        "quay.io/prometheus-operator/prometheus-config-reloader",
        "v0.84.0",
    ),
    ("docker.io/calico/node", "v3.30.2"),
    ("docker.io/calico/cni", "v3.30.2"),
    ("docker.io/calico/kube-controllers", "v3.30.2"),
    ("docker.io/openyurt/yurthub", "v1.6.1"),
    ("docker.io/openyurt/yurt-manager", "v1.6.1"),
    ("docker.io/openyurt/raven-agent", "v0.4.2"),
    ("docker.io/library/nginx", "1.29.1"),
    ("docker.io/library/redis", "8.2.1"),
    ("docker.io/library/postgres", "17.6"),
    ("docker.io/grafana/promtail", "3.5.3"),
    ("docker.io/grafana/alloy", "v1.10.2"),
    ("docker.io/fluent/fluent-bit", "4.0.7"),
    ("ghcr.io/shop/checkout-service", "2026.11.3"),
    ("ghcr.io/shop/catalog-service", "2026.11.7"),
    ("ghcr.io/shop/payment-gateway", "2026.10.28"),
    ("ghcr.io/shop/inventory-worker", "2026.11.12"),
    ("ghcr.io/shop/edge-cache", "2026.11.1"),
    ("ghcr.io/shop/pos-sync", "2026.11.9"),
    ("ghcr.io/shop/price-feed", "2026.11.4"),
    ("ghcr.io/shop/receipt-printer", "2026.09.30"),
];

/// How many objects of each kind the cluster gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    pub nodes: usize,
    pub pools: usize,
    pub classes: usize,
    /// Classes (the last ones) no Machine references: candidates for single changes.
    pub unused_classes: usize,
    pub machines: usize,
}

impl Sizes {
    /// Classes the Machines are spread over.
    pub fn used_classes(&self) -> usize {
        self.classes - self.unused_classes
    }
}

/// A small deterministic generator (splitmix64) for ids, hashes and sizes.
pub struct Rng(u64);

impl Rng {
    /// The generator of object `index` of a kind (`kind` tells the kinds apart).
    pub fn for_object(kind: u64, index: usize) -> Self {
        let mut rng = Self(kind.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ index as u64);
        rng.next();
        rng
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn hex(&mut self, len: usize) -> String {
        let mut out = String::with_capacity(len + 16);
        while out.len() < len {
            let _ = write!(out, "{:016x}", self.next());
        }
        out.truncate(len);
        out
    }

    fn uuid(&mut self) -> String {
        let h = self.hex(32);
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const NODE_SEED: u64 = 1;
const MACHINE_SEED: u64 = 2;
const CLASS_SEED: u64 = 3;

pub fn pool_name(pool: usize) -> String {
    format!("pool-{pool:03}")
}

/// Even pools are shops' edge sites, odd ones cloud regions.
pub fn pool_is_edge(pool: usize) -> bool {
    pool.is_multiple_of(2)
}

fn pool_zone(pool: usize) -> &'static str {
    ZONES[pool % ZONES.len()]
}

pub fn node_name(node: usize) -> String {
    let ip = node_ip(node);
    format!("ip-{}.{REGION}.compute.internal", ip.replace('.', "-"))
}

fn node_ip(node: usize) -> String {
    format!(
        "10.{}.{}.{}",
        1 + node / 65_536,
        (node / 256) % 256,
        node % 256
    )
}

/// Node `i` is in pool `i % pools`.
pub fn pool_of_node(node: usize, sizes: &Sizes) -> usize {
    node % sizes.pools
}

pub fn class_name(class: usize) -> String {
    format!("shoot--tenant-{:03}--worker-{class:04}", class % 100)
}

/// Machine `i` uses class `i % used_classes`.
pub fn machine_class(machine: usize, sizes: &Sizes) -> usize {
    machine % sizes.used_classes()
}

pub fn machine_name(machine: usize) -> String {
    let mut rng = Rng::for_object(MACHINE_SEED, machine);
    format!("machine-{machine:05}-{}", rng.hex(5))
}

fn timestamp(rng: &mut Rng) -> String {
    format!(
        "2026-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        10 + rng.below(2),
        1 + rng.below(28),
        rng.below(24),
        rng.below(60),
        rng.below(60)
    )
}

/// A NodePool with its labels and, for an edge site, the edge taint.
pub fn node_pool(pool: usize) -> Value {
    let name = pool_name(pool);
    let (pool_type, taints) = if pool_is_edge(pool) {
        ("Edge", json!([{"key": EDGE_TAINT, "effect": "NoSchedule"}]))
    } else {
        ("Cloud", json!([]))
    };
    json!({
        "apiVersion": "apps.openyurt.io/v1beta2",
        "kind": "NodePool",
        "metadata": {
            "name": name,
            "labels": {"shop.example/site": format!("site-{pool:03}"), "topology.kubernetes.io/zone": pool_zone(pool)},
            "annotations": {"shop.example/owner": format!("team-{:02}", pool % 40)},
        },
        "spec": {
            "type": pool_type,
            "hostNetwork": false,
            "labels": {"shop.example/site": format!("site-{pool:03}")},
            "taints": taints,
        },
    })
}

/// The status yurt-manager writes: the pool's node names and counts.
pub fn node_pool_status(pool: usize, sizes: &Sizes) -> Value {
    let nodes: Vec<String> = (pool..sizes.nodes)
        .step_by(sizes.pools)
        .map(node_name)
        .collect();
    json!({"status": {"readyNodeNum": nodes.len(), "unreadyNodeNum": 0, "nodes": nodes}})
}

/// A Node as a kubelet on a cloud VM registers it (status included, as a kubelet's
/// registration does): 13 labels, 4 annotations, the edge taint on edge sites, 5 conditions,
/// capacity and allocatable, 3 addresses, nodeInfo and 30 images.
pub fn node(index: usize, sizes: &Sizes) -> Value {
    let mut rng = Rng::for_object(NODE_SEED, index);
    let pool = pool_of_node(index, sizes);
    let name = node_name(index);
    let instance = format!("i-{}", rng.hex(17));
    let zone = pool_zone(pool);
    let cidr = format!("100.{}.{}.0/24", 64 + (index / 256) % 64, index % 256);
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels(index, pool, &name),
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": format!("{{\"ebs.csi.aws.com\":\"{instance}\"}}"),
                "projectcalico.org/IPv4Address": format!("{}/20", node_ip(index)),
            },
        },
        "spec": {
            "podCIDR": cidr,
            "podCIDRs": [cidr],
            "providerID": format!("aws:///{zone}/{instance}"),
            "taints": node_taints(pool),
        },
        "status": node_status(index, &name, &mut rng),
    })
}

/// Exactly the taints a Node should end with (the apiserver adds a not-ready taint on
/// creation that a node lifecycle controller would remove).
pub fn node_taints(pool: usize) -> Value {
    if pool_is_edge(pool) {
        json!([{"key": EDGE_TAINT, "effect": "NoSchedule"}])
    } else {
        json!([])
    }
}

fn node_labels(index: usize, pool: usize, name: &str) -> Value {
    let (instance_type, _, _) = INSTANCE_TYPES[index % INSTANCE_TYPES.len()];
    let zone = pool_zone(pool);
    json!({
        (POOL_LABEL): pool_name(pool),
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": instance_type,
        "beta.kubernetes.io/os": "linux",
        "failure-domain.beta.kubernetes.io/region": REGION,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/region": REGION,
        "topology.kubernetes.io/zone": zone,
        "openyurt.io/is-edge-worker": pool_is_edge(pool).to_string(),
    })
}

fn node_status(index: usize, name: &str, rng: &mut Rng) -> Value {
    let (_, cpu, memory) = INSTANCE_TYPES[index % INSTANCE_TYPES.len()];
    let images: Vec<Value> = IMAGES
        .iter()
        .map(|(repo, tag)| {
            json!({"names": [format!("{repo}@sha256:{}", rng.hex(64)), format!("{repo}:{tag}")],
                   "sizeBytes": 5_000_000 + rng.below(400_000_000)})
        })
        .collect();
    let resources = json!({"cpu": cpu, "ephemeral-storage": "51233772Ki", "hugepages-1Gi": "0",
                           "hugepages-2Mi": "0", "memory": memory, "pods": "58"});
    json!({
        "addresses": [
            {"type": "InternalIP", "address": node_ip(index)},
            {"type": "InternalDNS", "address": name},
            {"type": "Hostname", "address": name},
        ],
        "allocatable": resources,
        "capacity": resources,
        "conditions": conditions(rng),
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "images": images,
        "nodeInfo": {
            "architecture": "amd64",
            "bootID": rng.uuid(),
            "containerRuntimeVersion": "containerd://2.1.4",
            "kernelVersion": "6.12.40-64.114.amzn2023.x86_64",
            "kubeProxyVersion": "",
            "kubeletVersion": "v1.36.3",
            "machineID": format!("ec2{}", rng.hex(29)),
            "operatingSystem": "linux",
            "osImage": "Amazon Linux 2023.8.20250818",
            "systemUUID": format!("ec2{}", rng.hex(29)),
        },
    })
}

fn conditions(rng: &mut Rng) -> Value {
    let heartbeat = timestamp(rng);
    let transition = timestamp(rng);
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": heartbeat, "lastTransitionTime": transition})
    };
    json!([
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status"
        ),
        condition(
            "NetworkUnavailable",
            "False",
            "CalicoIsUp",
            "Calico is running on this node"
        ),
    ])
}

/// An AWS MachineClass of machine-controller-manager (fields at the top level).
pub fn machine_class_object(class: usize, namespace: &str) -> Value {
    let mut rng = Rng::for_object(CLASS_SEED, class);
    let (instance_type, cpu, memory) = INSTANCE_TYPES[class % INSTANCE_TYPES.len()];
    let shoot = format!("shoot--tenant-{:03}", class % 100);
    let zone = ZONES[class % ZONES.len()];
    json!({
        "apiVersion": MACHINE_API_VERSION,
        "kind": "MachineClass",
        "metadata": {
            "name": class_name(class),
            "namespace": namespace,
            "labels": {"worker.gardener.cloud/pool": format!("worker-{class:04}"), "shoot": shoot},
        },
        "provider": "AWS",
        "providerSpec": {
            "ami": format!("ami-{}", rng.hex(17)),
            "region": REGION,
            "machineType": instance_type,
            "iam": {"name": format!("{shoot}-nodes")},
            "keyName": format!("{shoot}-ssh-publickey"),
            "networkInterfaces": [{"securityGroupIDs": [format!("sg-{}", rng.hex(17))],
                                   "subnetID": format!("subnet-{}", rng.hex(17))}],
            "tags": {format!("kubernetes.io/cluster/{shoot}"): "1", "kubernetes.io/role/node": "1",
                     "worker.gardener.cloud/pool": format!("worker-{class:04}")},
            "blockDevices": [{"ebs": {"volumeSize": 50, "volumeType": "gp3", "deleteOnTermination": true, "encrypted": true}}],
            "srcAndDstChecksEnabled": false,
        },
        "secretRef": {"name": format!("{shoot}-cloudprovider"), "namespace": namespace},
        "credentialsSecretRef": {"name": format!("{shoot}-credentials"), "namespace": namespace},
        "nodeTemplate": {"architecture": "amd64", "capacity": {"cpu": cpu, "memory": memory, "gpu": "0"},
                         "instanceType": instance_type, "region": REGION, "zone": zone},
    })
}

/// A Machine of a MachineSet, referencing class `class`; the finalizer is MCM's own.
pub fn machine(index: usize, class: usize, namespace: &str) -> Value {
    let mut rng = Rng::for_object(MACHINE_SEED, index);
    let _ = rng.hex(5); // the name's suffix, see machine_name
    let set = format!("{}-z{}", class_name(class), 1 + index % 3);
    let zone = ZONES[index % ZONES.len()];
    json!({
        "apiVersion": MACHINE_API_VERSION,
        "kind": "Machine",
        "metadata": {
            "name": machine_name(index),
            "namespace": namespace,
            "labels": {"name": set, "node": node_name(index), "machine-template-hash": rng.hex(10)},
            "finalizers": ["machine.sapcloud.io/machine-controller-manager"],
            "ownerReferences": [{"apiVersion": MACHINE_API_VERSION, "kind": "MachineSet",
                                 "name": format!("{set}-{}", rng.hex(5)), "uid": rng.uuid(),
                                 "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "class": {"kind": "MachineClass", "name": class_name(class)},
            "providerID": format!("aws:///{zone}/i-{}", rng.hex(17)),
            "nodeTemplate": {"metadata": {"labels": {"worker.gardener.cloud/pool": set,
                                                     "node.kubernetes.io/role": "node"}}},
        },
    })
}

/// The status machine-controller-manager writes once the VM runs.
pub fn machine_status(index: usize) -> Value {
    let mut rng = Rng::for_object(MACHINE_SEED ^ 0xff, index);
    json!({"status": {
        "node": node_name(index),
        "currentStatus": {"phase": "Running", "lastUpdateTime": timestamp(&mut rng), "timeoutActive": false},
        "lastOperation": {"description": "Machine is now ready", "lastUpdateTime": timestamp(&mut rng),
                          "state": "Successful", "type": "Create"},
        "conditions": conditions(&mut rng),
    }})
}

/// The placement document: one tenant namespace per pool, bound to the pool `shift` after its
/// own (0: its own, where its Pods run; 1: the next, so that every Pod runs outside its pool),
/// and the edge toleration.
pub fn placement_policy(sizes: &Sizes, shift: usize) -> String {
    let mut policy = String::from("bindings:\n");
    for pool in 0..sizes.pools {
        let _ = writeln!(
            policy,
            "  - namespace: {}\n    nodePool: {}",
            tenant_namespace(pool),
            pool_name((pool + shift) % sizes.pools)
        );
    }
    let _ = writeln!(
        policy,
        "edgeTolerations:\n  - {{key: {EDGE_TAINT}, operator: Exists, effect: NoSchedule}}"
    );
    policy
}

/// The namespace bound to `pool` by the placement policy.
pub fn tenant_namespace(pool: usize) -> String {
    format!("tenant-{pool:03}")
}

/// A Pod of a shop service: one container with requests, no placement of its own.
pub fn pod(index: usize) -> Value {
    let (repo, tag) = IMAGES[22 + index % 8];
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": format!("scale-{index:05}"), "labels": {"app": "scale", "shop.example/service": repo.rsplit('/').next()}},
        "spec": {
            "containers": [{
                "name": "app",
                "image": format!("{repo}:{tag}"),
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            }],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZES: Sizes = Sizes {
        nodes: 50,
        pools: 5,
        classes: 20,
        unused_classes: 4,
        machines: 100,
    };

    #[test]
    fn objects_are_a_function_of_their_index() {
        assert_eq!(node(7, &SIZES), node(7, &SIZES));
        assert_ne!(node(7, &SIZES), node(8, &SIZES));
        assert_eq!(machine(3, 1, "ns"), machine(3, 1, "ns"));
        assert_eq!(machine_status(3), machine_status(3));
        assert_eq!(
            machine(3, 1, "ns")["metadata"]["name"],
            json!(machine_name(3))
        );
    }

    #[test]
    fn nodes_look_like_kubelet_registrations() {
        let node = node(2, &SIZES);
        let labels = node["metadata"]["labels"].as_object().unwrap();
        assert_eq!(labels.len(), 13);
        assert_eq!(labels[POOL_LABEL], json!("pool-002"));
        assert_eq!(labels["kubernetes.io/hostname"], node["metadata"]["name"]);
        assert_eq!(node["status"]["images"].as_array().unwrap().len(), 30);
        assert_eq!(node["status"]["conditions"].as_array().unwrap().len(), 5);
        assert_eq!(node["spec"]["taints"][0]["key"], json!(EDGE_TAINT));
        let cloud = super::node(3, &SIZES);
        assert_eq!(cloud["spec"]["taints"], json!([]));
    }

    #[test]
    fn machines_spread_over_the_used_classes_only() {
        let used: std::collections::BTreeSet<usize> = (0..SIZES.machines)
            .map(|m| machine_class(m, &SIZES))
            .collect();
        assert_eq!(used.len(), SIZES.used_classes());
        assert!(used.iter().all(|&c| c < SIZES.used_classes()));
    }

    #[test]
    fn pool_status_lists_the_pool_nodes() {
        let status = node_pool_status(1, &SIZES);
        let nodes = status["status"]["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 10);
        assert!(nodes.contains(&json!(node_name(11))));
    }

    #[test]
    fn the_policy_binds_one_namespace_per_pool() {
        let policy = placement_policy(&SIZES, 0);
        assert_eq!(policy.matches("nodePool:").count(), SIZES.pools);
        assert!(policy.contains("namespace: tenant-004\n    nodePool: pool-004"));
        let shifted = placement_policy(&SIZES, 1);
        assert!(shifted.contains("namespace: tenant-003\n    nodePool: pool-004"));
        assert!(shifted.contains("namespace: tenant-004\n    nodePool: pool-000"));
        assert!(policy.contains("edgeTolerations"));
    }
}
