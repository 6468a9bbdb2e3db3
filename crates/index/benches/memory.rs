//! Memory held per object: poolkeeper's [`Index`] (compact projections plus
//! secondary indexes) against kube-rs's reflector `Store` holding the full
//! objects, for the same 10,000 realistic Machines and 10,000 realistic Nodes;
//! and 10,000 Secrets, which the index only ever sees as metadata
//! (`PartialObjectMeta<Secret>`), against Stores of their metadata and of the
//! whole Secrets; and 10,000 Namespaces bound by their labels.
//!
//! The global allocator is `stats_alloc`'s instrumented system allocator: it
//! counts every byte requested from and returned to the allocator (no
//! `unsafe` here, so the workspace's `forbid(unsafe_code)` holds). Each
//! figure is the change in live bytes across one phase; the objects are
//! written with the watchers' own write path (`IndexResource::apply`, which
//! converts them to projections) and fed to the store as a watcher's initial
//! list would be (`Init`, `InitApply` per object, `InitDone`).
//!
//! `cargo bench -p poolkeeper-index --bench memory` prints the table; without
//! `--bench` (as under `cargo test --benches`) it runs a quick smoke version.

use std::alloc::System;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::store;
use kube::runtime::watcher::Event;
use poolkeeper_api::Machine;
use poolkeeper_index::{Index, IndexResource, NodeSummary};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const NAME: &str = "index_memory";
const OBJECTS: usize = 10_000;
const SMOKE_OBJECTS: usize = 200;
const POOLS: usize = 50;
const CLASSES: usize = 1_000;
const POOL_LABEL: &str = "apps.openyurt.io/nodepool";

/// Live heap: bytes and allocations not yet freed.
#[derive(Clone, Copy, Debug)]
struct Live {
    bytes: i64,
    blocks: i64,
}

fn live() -> Live {
    let s = INSTRUMENTED_SYSTEM.stats();
    Live {
        // `bytes_allocated` and `bytes_deallocated` already include the size
        // changes of reallocations; `bytes_reallocated` repeats them.
        bytes: s.bytes_allocated as i64 - s.bytes_deallocated as i64,
        blocks: s.allocations as i64 - s.deallocations as i64,
    }
}

/// What one phase left allocated.
fn held(before: Live) -> Live {
    let after = live();
    Live {
        bytes: after.bytes - before.bytes,
        blocks: after.blocks - before.blocks,
    }
}

/// A small deterministic generator (splitmix64) for ids, addresses, sizes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn hex(&mut self, len: usize) -> String {
        let mut out = String::with_capacity(len + 16);
        while out.len() < len {
            write!(out, "{:016x}", self.next()).unwrap();
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

/// As a watcher gets it: JSON bytes from the API server, deserialized.
fn from_api<T: DeserializeOwned>(value: &Value) -> T {
    let bytes = serde_json::to_vec(value).expect("serializes");
    serde_json::from_slice(&bytes).expect("deserializes")
}

const ZONES: [&str; 3] = ["eu-west-1a", "eu-west-1b", "eu-west-1c"];
const INSTANCE_TYPES: [&str; 4] = ["m5.large", "m5.xlarge", "c5.2xlarge", "r5.xlarge"];
const IMAGES: [(&str, &str); 25] = [
    ("registry.k8s.io/kube-proxy", "v1.31.2"),
    ("registry.k8s.io/pause", "3.10"),
    ("registry.k8s.io/coredns/coredns", "v1.11.3"),
    ("registry.k8s.io/metrics-server/metrics-server", "v0.7.2"),
    ("registry.k8s.io/ingress-nginx/controller", "v1.11.3"),
    (
        "registry.k8s.io/sig-storage/csi-node-driver-registrar",
        "v2.12.0",
    ),
    ("registry.k8s.io/sig-storage/livenessprobe", "v2.14.0"),
    (
        "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver",
        "v1.36.0",
    ),
    ("quay.io/prometheus/node-exporter", "v1.8.2"),
    (
        "quay.io/prometheus-operator/prometheus-config-reloader",
        "v0.78.1",
    ),
    ("docker.io/calico/node", "v3.28.2"),
    ("docker.io/calico/cni", "v3.28.2"),
    ("docker.io/calico/kube-controllers", "v3.28.2"),
    ("docker.io/openyurt/yurthub", "v1.5.0"),
    ("docker.io/openyurt/yurt-manager", "v1.5.0"),
    ("docker.io/library/nginx", "1.27.2"),
    ("docker.io/library/redis", "7.4.1"),
    ("docker.io/library/postgres", "16.4"),
    ("docker.io/grafana/promtail", "3.2.1"),
    ("docker.io/fluent/fluent-bit", "3.1.9"),
    ("ghcr.io/shop/checkout-service", "2026.11.3"),
    ("ghcr.io/shop/catalog-service", "2026.11.7"),
    ("ghcr.io/shop/payment-gateway", "2026.10.28"),
    ("ghcr.io/shop/inventory-worker", "2026.11.12"),
    ("ghcr.io/shop/edge-cache", "2026.11.1"),
];

fn time(rng: &mut Rng) -> String {
    format!(
        "2026-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        10 + rng.below(2),
        1 + rng.below(28),
        rng.below(24),
        rng.below(60),
        rng.below(60)
    )
}

fn node_conditions(rng: &mut Rng) -> Value {
    let heartbeat = time(rng);
    let transition = time(rng);
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
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

/// A Node as a kubelet on a cloud VM reports it: 13 labels, 4 annotations,
/// 3 managedFields entries, an edge taint, 5 conditions, capacity and
/// allocatable, 3 addresses, nodeInfo and 25 images.
fn node_json(i: usize, rng: &mut Rng) -> Value {
    let ip = format!("10.{}.{}.{}", 1 + i / 65_536, (i / 256) % 256, i % 256);
    let name = format!("ip-{}.eu-west-1.compute.internal", ip.replace('.', "-"));
    let zone = ZONES[i % ZONES.len()];
    let instance_type = INSTANCE_TYPES[i % INSTANCE_TYPES.len()];
    let instance = format!("i-{}", rng.hex(17));
    let cidr = format!("100.{}.{}.0/24", 64 + (i / 256) % 64, i % 256);
    let pool = format!("pool-{:03}", i % POOLS);
    let mut taints = vec![json!({"key": "node-role.kubernetes.io/edge", "effect": "NoSchedule"})];
    if i.is_multiple_of(10) {
        taints.push(json!({"key": "dedicated", "value": "gpu", "effect": "NoExecute"}));
    }
    let images: Vec<Value> = IMAGES
        .iter()
        .map(|(repo, tag)| {
            json!({"names": [format!("{repo}@sha256:{}", rng.hex(64)), format!("{repo}:{tag}")],
                   "sizeBytes": 5_000_000 + rng.below(400_000_000)})
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": rng.uuid(),
            "resourceVersion": (40_000_000 + rng.below(9_000_000)).to_string(),
            "creationTimestamp": time(rng),
            "labels": {
                (POOL_LABEL): pool,
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/instance-type": instance_type,
                "beta.kubernetes.io/os": "linux",
                "failure-domain.beta.kubernetes.io/region": "eu-west-1",
                "failure-domain.beta.kubernetes.io/zone": zone,
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": instance_type,
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": zone,
                "topology.ebs.csi.aws.com/zone": zone,
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": format!("{{\"ebs.csi.aws.com\":\"{instance}\"}}"),
                "projectcalico.org/IPv4Address": format!("{ip}/20"),
            },
            "managedFields": [
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": time(rng),
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {
                     "f:annotations": {".": {}, "f:node.alpha.kubernetes.io/ttl": {},
                                       "f:volumes.kubernetes.io/controller-managed-attach-detach": {}},
                     "f:labels": {".": {}, "f:beta.kubernetes.io/arch": {}, "f:beta.kubernetes.io/os": {},
                                  "f:kubernetes.io/arch": {}, "f:kubernetes.io/hostname": {},
                                  "f:kubernetes.io/os": {}, "f:node.kubernetes.io/instance-type": {},
                                  "f:topology.kubernetes.io/region": {}, "f:topology.kubernetes.io/zone": {}}},
                     "f:spec": {"f:providerID": {}}}},
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                 "time": time(rng), "fieldsType": "FieldsV1", "fieldsV1": {
                     "f:metadata": {"f:labels": {"f:apps.openyurt.io/nodepool": {}}},
                     "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, (format!("v:\"{cidr}\"")): {}},
                                "f:taints": {}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": time(rng),
                 "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": {
                     "f:allocatable": {"f:cpu": {}, "f:ephemeral-storage": {}, "f:memory": {}, "f:pods": {}},
                     "f:capacity": {"f:cpu": {}, "f:ephemeral-storage": {}, "f:memory": {}, "f:pods": {}},
                     "f:conditions": {
                         "k:{\"type\":\"DiskPressure\"}": {"f:lastHeartbeatTime": {}},
                         "k:{\"type\":\"MemoryPressure\"}": {"f:lastHeartbeatTime": {}},
                         "k:{\"type\":\"PIDPressure\"}": {"f:lastHeartbeatTime": {}},
                         "k:{\"type\":\"Ready\"}": {"f:lastHeartbeatTime": {}, "f:lastTransitionTime": {},
                                                  "f:message": {}, "f:reason": {}, "f:status": {}}},
                     "f:images": {}, "f:nodeInfo": {"f:bootID": {}, "f:kernelVersion": {}}}}},
            ],
        },
        "spec": {
            "podCIDR": cidr,
            "podCIDRs": [cidr],
            "providerID": format!("aws:///{zone}/{instance}"),
            "taints": taints,
        },
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "InternalDNS", "address": name},
                {"type": "Hostname", "address": name},
            ],
            "allocatable": {"cpu": "3920m", "ephemeral-storage": "47233297124", "hugepages-1Gi": "0",
                            "hugepages-2Mi": "0", "memory": "14967020Ki", "pods": "58"},
            "capacity": {"cpu": "4", "ephemeral-storage": "51233772Ki", "hugepages-1Gi": "0",
                         "hugepages-2Mi": "0", "memory": "16116012Ki", "pods": "58"},
            "conditions": node_conditions(rng),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": images,
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": rng.uuid(),
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.1.112-122.189.amzn2023.x86_64",
                "kubeProxyVersion": "v1.31.2",
                "kubeletVersion": "v1.31.2",
                "machineID": format!("ec2{}", rng.hex(29)),
                "operatingSystem": "linux",
                "osImage": "Amazon Linux 2023.6.20241031",
                "systemUUID": format!("ec2{}", rng.hex(29)),
            },
        },
    })
}

/// A machine-controller-manager Machine: labels, finalizer, owner
/// reference, a managedFields entry, spec.class, providerID, nodeTemplate,
/// and a status with the node, phase, last operation and conditions.
fn machine_json(i: usize, rng: &mut Rng) -> Value {
    let set = format!("shoot-worker-{:03}-z{}", i % CLASSES, 1 + i % 3);
    let name = format!("{set}-{}-{}", rng.hex(5), rng.hex(5));
    let node = format!(
        "ip-10-{}-{}-{}.eu-west-1.compute.internal",
        1 + i / 65_536,
        (i / 256) % 256,
        i % 256
    );
    let zone = ZONES[i % ZONES.len()];
    let instance = format!("i-{}", rng.hex(17));
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": "machine-system",
            "uid": rng.uuid(),
            "resourceVersion": (40_000_000 + rng.below(9_000_000)).to_string(),
            "generation": 1,
            "creationTimestamp": time(rng),
            "labels": {"name": set, "node": node, "machine-template-hash": rng.hex(10)},
            "finalizers": ["machine.sapcloud.io/machine-controller-manager"],
            "ownerReferences": [{"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
                                 "name": format!("{set}-{}", rng.hex(5)), "uid": rng.uuid(),
                                 "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "machine-controller-manager", "operation": "Update",
                 "apiVersion": "machine.sapcloud.io/v1alpha1", "time": time(rng), "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:finalizers": {".": {},
                                 "v:\"machine.sapcloud.io/machine-controller-manager\"": {}},
                             "f:labels": {".": {}, "f:machine-template-hash": {}, "f:name": {}, "f:node": {}},
                             "f:ownerReferences": {".": {}}},
                             "f:spec": {".": {}, "f:class": {".": {}, "f:kind": {}, "f:name": {}},
                                        "f:nodeTemplate": {".": {}, "f:metadata": {}}, "f:providerID": {}},
                             "f:status": {".": {}, "f:conditions": {}, "f:currentStatus": {},
                                          "f:lastOperation": {}, "f:node": {}}}},
            ],
        },
        "spec": {
            "class": {"kind": "MachineClass", "name": format!("class-{:04}", i % CLASSES)},
            "providerID": format!("aws:///{zone}/{instance}"),
            "nodeTemplate": {"metadata": {"labels": {"worker.gardener.cloud/pool": set,
                                                     "node.kubernetes.io/role": "node"}}},
        },
        "status": {
            "node": node,
            "currentStatus": {"phase": "Running", "lastUpdateTime": time(rng), "timeoutActive": false},
            "lastOperation": {"description": "Machine is now ready", "lastUpdateTime": time(rng),
                              "state": "Successful", "type": "Create"},
            "conditions": node_conditions(rng),
        },
    })
}

/// Cloud credentials as a machine-controller-manager setup keeps them: four
/// keys, 1.5 KiB of data, two labels, the `last-applied-configuration`
/// annotation `kubectl apply` writes (which repeats the data), a
/// managedFields entry, and the Secret finalizer.
fn secret_json(i: usize, rng: &mut Rng) -> Value {
    use base64_data as b64;
    let data = json!({
        "accessKeyID": b64(&rng.hex(20)),
        "secretAccessKey": b64(&rng.hex(40)),
        "userData": b64(&rng.hex(1_000)),
        "region": b64("eu-west-1"),
    });
    let name = format!("cloudprovider-{i:05}-{}", rng.hex(6));
    let applied = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                         "metadata": {"name": name, "namespace": "machine-system"}, "data": data});
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": "machine-system",
            "uid": rng.uuid(),
            "resourceVersion": (40_000_000 + rng.below(9_000_000)).to_string(),
            "creationTimestamp": time(rng),
            "labels": {"gardener.cloud/purpose": "cloudprovider", "shoot": format!("s-{}", i % 500)},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": applied.to_string()},
            "finalizers": ["machine.sapcloud.io/machine-controller"],
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "v1",
                 "time": time(rng), "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:data": {".": {}, "f:accessKeyID": {}, "f:region": {},
                                         "f:secretAccessKey": {}, "f:userData": {}},
                              "f:metadata": {"f:annotations": {".": {},
                                  "f:kubectl.kubernetes.io/last-applied-configuration": {}},
                                  "f:labels": {".": {}}},
                              "f:type": {}}},
            ],
        },
        "data": data,
    })
}

/// A Namespace bound by its labels as a platform team labels them: the
/// API server's name label, the pool label, a mode, two team labels, the
/// `kubernetes` finalizer and a managedFields entry of `kubectl label`.
fn namespace_json(i: usize, rng: &mut Rng) -> Value {
    let name = format!("team-{i:05}-{}", rng.hex(4));
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": rng.uuid(),
            "resourceVersion": (40_000_000 + rng.below(9_000_000)).to_string(),
            "creationTimestamp": time(rng),
            "labels": {
                "kubernetes.io/metadata.name": name,
                (POOL_LABEL): format!("pool-{:03}", i % 500),
                "poolkeeper.io/mode": "enforce",
                "team": format!("t-{}", i % 50),
                "cost-center": format!("cc-{}", i % 20),
            },
            "managedFields": [
                {"manager": "kubectl-label", "operation": "Update", "apiVersion": "v1",
                 "time": time(rng), "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:apps.openyurt.io/nodepool": {},
                                                          "f:poolkeeper.io/mode": {}}}}},
            ],
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

/// Standard base64 of `text`, as the API server sends Secret data.
fn base64_data(text: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(text.len().div_ceil(3) * 4);
    for chunk in text.as_bytes().chunks(3) {
        let bytes = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(bytes[0]) << 16) | (u32::from(bytes[1]) << 8) | u32::from(bytes[2]);
        for (k, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if k <= chunk.len() {
                out.push(ALPHABET[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// What the API server sends for a Secret to a metadata-only list or watch
/// (`as=PartialObjectMetadata`): its metadata, no data.
fn metadata_only(secret: &Value) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": secret["metadata"],
    })
}

/// The rows of the Secrets: what applying their metadata adds to `index`,
/// and what reflector Stores of the metadata and of the whole Secrets hold.
fn measure_secrets(rows: &mut Vec<Row>, index: &Index, count: usize) {
    let mut rng = Rng(3);
    let full: Vec<Value> = (0..count).map(|i| secret_json(i, &mut rng)).collect();
    let metadata: Vec<PartialObjectMeta<Secret>> = full
        .iter()
        .map(|secret| from_api(&metadata_only(secret)))
        .collect();
    let before = live();
    for meta in &metadata {
        index.apply(meta.clone());
    }
    rows.push(Row {
        kind: "Secret",
        what: "poolkeeper Index (metadata projection, no data)",
        held: held(before),
    });
    rows.push(Row {
        kind: "Secret",
        what: "kube reflector Store, metadata only (PartialObjectMeta)",
        held: store_bytes(&metadata, keep_as_is),
    });
    rows.push(Row {
        kind: "Secret",
        what: "kube reflector Store, metadata only, managedFields cleared",
        held: store_bytes(&metadata, clear_managed_fields),
    });
    let secrets: Vec<Secret> = full.iter().map(from_api).collect();
    rows.push(Row {
        kind: "Secret",
        what: "kube reflector Store (full Secrets, data included)",
        held: store_bytes(&secrets, keep_as_is),
    });
    assert_eq!(index.secrets().secrets().count(), count);
}

fn generate<T: DeserializeOwned>(
    count: usize,
    seed: u64,
    build: fn(usize, &mut Rng) -> Value,
) -> Vec<T> {
    let mut rng = Rng(seed);
    (0..count).map(|i| from_api(&build(i, &mut rng))).collect()
}

/// Feeds `objects` to a fresh reflector store as a watcher's initial list,
/// after `prepare`, and returns what the store then holds.
fn store_bytes<K>(objects: &[K], prepare: fn(&mut K)) -> Live
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    let before = live();
    let (reader, mut writer) = store::<K>();
    writer.apply_watcher_event(&Event::Init);
    for object in objects {
        let mut object = object.clone();
        prepare(&mut object);
        writer.apply_watcher_event(&Event::InitApply(object));
    }
    writer.apply_watcher_event(&Event::InitDone);
    assert_eq!(reader.len(), objects.len());
    let held = held(before);
    drop((reader, writer));
    held
}

fn clear_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

fn keep_as_is<K>(_: &mut K) {}

struct Row {
    kind: &'static str,
    what: &'static str,
    held: Live,
}

/// Adds the rows of one kind: what applying `objects` adds to `index`, what
/// their projections `P` alone hold, and what reflector Stores of the full
/// objects hold.
fn measure_kind<K, P>(
    rows: &mut Vec<Row>,
    index: &Index,
    (index_what, project): (&'static str, fn(&K) -> P),
    objects: Vec<K>,
) where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
    Index: IndexResource<K>,
{
    let kind = <Index as IndexResource<K>>::KIND;
    let before = live();
    for object in &objects {
        // The clone is freed by the time `held` looks: only what the index
        // keeps counts.
        index.apply(object.clone());
    }
    rows.push(Row {
        kind: kind.as_str(),
        what: index_what,
        held: held(before),
    });
    let before = live();
    let projections: Vec<P> = objects.iter().map(project).collect();
    rows.push(Row {
        kind: kind.as_str(),
        what: "  the projections alone, strings not shared",
        held: held(before),
    });
    drop(projections);
    rows.push(Row {
        kind: kind.as_str(),
        what: "kube reflector Store (full objects)",
        held: store_bytes(&objects, keep_as_is),
    });
    rows.push(Row {
        kind: kind.as_str(),
        what: "kube reflector Store, managedFields cleared",
        held: store_bytes(&objects, clear_managed_fields),
    });
    let held_by_index = index
        .object_counts()
        .into_iter()
        .find_map(|(counted, count)| (counted == kind).then_some(count));
    assert_eq!(held_by_index, Some(objects.len()));
}

fn run(count: usize) -> Vec<Row> {
    let mut rows = Vec::new();
    // One index for both kinds, as in the controller: each kind's index row
    // is what that kind adds to it.
    let index = Index::new(POOL_LABEL);
    // A full Node projects through its summary; the clone is freed before
    // `held` looks.
    measure_kind(
        &mut rows,
        &index,
        (
            "poolkeeper Index (projection + label index)",
            |node: &Node| poolkeeper_index::Node::from(NodeSummary::from(node.clone())),
        ),
        generate::<Node>(count, 1, node_json),
    );
    measure_kind(
        &mut rows,
        &index,
        (
            "poolkeeper Index (projection + class index)",
            |machine: &Machine| poolkeeper_index::Machine::from(machine),
        ),
        generate::<Machine>(count, 2, machine_json),
    );
    measure_secrets(&mut rows, &index, count);
    measure_kind(
        &mut rows,
        &index,
        (
            "poolkeeper Index (name, UID, labels)",
            |namespace: &Namespace| poolkeeper_index::Namespace::from(namespace),
        ),
        generate::<Namespace>(count, 4, namespace_json),
    );
    rows
}

fn print(rows: &[Row], count: usize) {
    println!("{NAME}: live heap held after loading {count} objects of each kind");
    println!(
        "| kind | held by | bytes/object | allocations/object | total MiB | vs Index |\n|---|---|---|---|---|---|"
    );
    for row in rows {
        let index = rows
            .iter()
            .find(|r| r.kind == row.kind && r.what.starts_with("poolkeeper Index"))
            .expect("an index row per kind");
        let ratio = if row.what.starts_with("  ") {
            String::new()
        } else {
            format!("{:.1}x", row.held.bytes as f64 / index.held.bytes as f64)
        };
        println!(
            "| {} | {} | {} | {:.1} | {:.1} | {} |",
            row.kind,
            row.what.trim_start(),
            row.held.bytes / count as i64,
            row.held.blocks as f64 / count as f64,
            row.held.bytes as f64 / (1024.0 * 1024.0),
            ratio
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let benching = args.iter().any(|a| a == "--bench");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| NAME.contains(f.as_str())) {
        return;
    }
    let count = if benching { OBJECTS } else { SMOKE_OBJECTS };
    let rows = run(count);
    print(&rows, count);
}
