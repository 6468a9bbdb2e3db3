//! Time of one admission decision (`mutate` / `validate`) per Pod against an
//! index of 100, 1,000 and 10,000 nodes, split into 10 Edge pools (so the
//! Pod's pool grows with the cluster), plus 10,000 nodes in 500 pools of 20.
//!
//! Each iteration is what the webhook does per request once the
//! AdmissionReview is parsed: take the index's placement view, decide with
//! the (cached, already parsed) placement policy.
//!
//! Pods (namespace `shop`, bound to `pool-003` by the policy):
//! - `plain`: no node constraints;
//! - `node_selector`: `nodeSelector` on the pool label and a zone;
//! - `affinity`: required node affinity `pool In [pool-003]` and
//!   `instance-type In [m5.large, m5.xlarge]`.
//!
//! `mutate` gets them as written (no tolerations). `validate` gets them with
//! the edge toleration, as the mutating webhook leaves them; `plain_mutated`
//! is the plain Pod with the mutating webhook's patch applied (what a plain
//! Pod looks like to the validating webhook in a cluster running both).
//! An unmutated `plain` Pod is validated by scanning every node (it may land
//! anywhere) and is denied.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Node;
use poolkeeper_api::NodePool;
use poolkeeper_index::{Index, IndexResource};
use poolkeeper_placement::{Decision, PlacementPolicy, PodPlacement, Reason, mutate, validate};
use serde_json::{Value, json};

const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
const NAMESPACE: &str = "shop";
const POOL: &str = "pool-003";
const ZONES: [&str; 3] = ["eu-west-1a", "eu-west-1b", "eu-west-1c"];
const INSTANCE_TYPES: [&str; 4] = ["m5.large", "m5.xlarge", "c5.2xlarge", "r5.xlarge"];

const POLICY: &str = "
bindings:
  - namespace: shop
    nodePool: pool-003
  - namespace: warehouse
    nodePool: pool-004
edgeTolerations:
  - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}
";

fn edge_taint() -> Value {
    json!({"key": "node-role.kubernetes.io/edge", "effect": "NoSchedule"})
}

/// `nodes` nodes with about ten labels each, spread over `pools` Edge pools.
fn populated_index(nodes: usize, pools: usize) -> Index {
    let index = Index::new(POOL_LABEL);
    for p in 0..pools {
        let pool: NodePool = serde_json::from_value(json!({
            "apiVersion": "apps.openyurt.io/v1beta2", "kind": "NodePool",
            "metadata": {"name": format!("pool-{p:03}")},
            "spec": {"type": "Edge", "taints": [edge_taint()]},
        }))
        .expect("the pool parses");
        index.apply(pool);
    }
    for i in 0..nodes {
        let name = format!(
            "ip-10-{}-{}-{}.eu-west-1.compute.internal",
            1 + i / 65_536,
            (i / 256) % 256,
            i % 256
        );
        let zone = ZONES[i % ZONES.len()];
        let instance_type = INSTANCE_TYPES[(i / 3) % INSTANCE_TYPES.len()];
        let labels: serde_json::Map<String, Value> = [
            (POOL_LABEL, format!("pool-{:03}", i % pools)),
            ("kubernetes.io/arch", "amd64".to_owned()),
            ("kubernetes.io/os", "linux".to_owned()),
            ("kubernetes.io/hostname", name.clone()),
            ("node.kubernetes.io/instance-type", instance_type.to_owned()),
            ("topology.kubernetes.io/region", "eu-west-1".to_owned()),
            ("topology.kubernetes.io/zone", zone.to_owned()),
            ("beta.kubernetes.io/arch", "amd64".to_owned()),
            ("beta.kubernetes.io/os", "linux".to_owned()),
            ("beta.kubernetes.io/instance-type", instance_type.to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Value::String(v)))
        .collect();
        let mut taints = vec![edge_taint()];
        if i.is_multiple_of(10) {
            taints.push(json!({"key": "dedicated", "value": "gpu", "effect": "NoExecute"}));
        }
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("the node parses");
        index.apply(node);
    }
    index
}

fn pod_json(spec_extra: Value) -> Value {
    let mut spec = json!({
        "containers": [{
            "name": "checkout",
            "image": "ghcr.io/shop/checkout-service:2026.11.3",
            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                          "limits": {"memory": "512Mi"}},
        }],
        "serviceAccountName": "checkout",
    });
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), spec_extra) {
        spec.extend(extra);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "checkout-7d9c5b6f4-", "namespace": NAMESPACE,
                     "labels": {"app": "checkout", "pod-template-hash": "7d9c5b6f4"}},
        "spec": spec,
    })
}

fn plain() -> Value {
    pod_json(json!({}))
}

fn node_selector() -> Value {
    pod_json(
        json!({"nodeSelector": {(POOL_LABEL): POOL, "topology.kubernetes.io/zone": "eu-west-1a"}}),
    )
}

fn affinity() -> Value {
    pod_json(
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": POOL_LABEL, "operator": "In", "values": [POOL]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In",
                 "values": ["m5.large", "m5.xlarge"]},
            ]}]
        }}}}),
    )
}

fn tolerating(mut pod: Value) -> Value {
    pod["spec"]["tolerations"] = json!([
        {"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"}
    ]);
    pod
}

/// The projection the decisions read, straight from the Pod's JSON.
fn parse(pod: &Value) -> PodPlacement {
    serde_json::from_value(pod.clone()).expect("pod parses")
}

/// The plain Pod with the mutating webhook's patch applied.
fn plain_mutated(index: &Index, policy: &PlacementPolicy) -> Value {
    let mut pod = plain();
    let decision = mutate(&parse(&pod), NAMESPACE, &index.placement(), policy);
    let patch = decision.patch.expect("the plain pod is patched");
    json_patch::patch(&mut pod, &patch).expect("the patch applies");
    pod
}

fn check(what: &str, decision: &Decision, allowed: bool, reason: Reason) {
    assert_eq!(
        (decision.allowed, decision.reason),
        (allowed, reason),
        "{what}: {decision:?}"
    );
}

fn placement(c: &mut Criterion) {
    let policy = PlacementPolicy::parse(POLICY).expect("policy parses");
    let layouts: [(usize, usize); 4] = [(100, 10), (1_000, 10), (10_000, 10), (10_000, 500)];
    let mut group = c.benchmark_group("placement");
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_millis(1_500));
    group.sample_size(30);
    for (nodes, pools) in layouts {
        let index = populated_index(nodes, pools);
        let layout = format!("{nodes}_nodes_{pools}_pools");

        let mutate_pods = [
            ("plain", parse(&plain())),
            ("node_selector", parse(&node_selector())),
            ("affinity", parse(&affinity())),
        ];
        for (name, pod) in &mutate_pods {
            let decision = mutate(pod, NAMESPACE, &index.placement(), &policy);
            check(name, &decision, true, Reason::Patched);
            group.bench_with_input(
                BenchmarkId::new(format!("mutate/{name}"), &layout),
                pod,
                |b, pod| {
                    b.iter(|| {
                        let view = index.placement();
                        black_box(mutate(pod, NAMESPACE, &view, &policy))
                    })
                },
            );
        }

        let validate_pods = [
            (
                "plain",
                parse(&tolerating(plain())),
                false,
                Reason::OutsidePool,
            ),
            (
                "plain_mutated",
                parse(&plain_mutated(&index, &policy)),
                true,
                Reason::InPool,
            ),
            (
                "node_selector",
                parse(&tolerating(node_selector())),
                true,
                Reason::InPool,
            ),
            (
                "affinity",
                parse(&tolerating(affinity())),
                true,
                Reason::InPool,
            ),
        ];
        for (name, pod, allowed, reason) in &validate_pods {
            let decision = validate(pod, NAMESPACE, &index.placement(), &policy);
            check(name, &decision, *allowed, *reason);
            group.bench_with_input(
                BenchmarkId::new(format!("validate/{name}"), &layout),
                pod,
                |b, pod| {
                    b.iter(|| {
                        let view = index.placement();
                        black_box(validate(pod, NAMESPACE, &view, &policy))
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, placement);
criterion_main!(benches);
