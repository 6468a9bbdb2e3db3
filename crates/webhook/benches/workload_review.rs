//! The validating webhook's cost for a Deployment review against a Pod
//! review of the same Pod (template), in one run: AdmissionReview bytes in,
//! response out, over an index of 1,000 nodes in 10 Edge pools.
//!
//! - `pod`: a Pod as the validating webhook sees it after the mutating one
//!   (a selector on its pool and a zone, the edge toleration added);
//! - `deployment`: a Deployment (3 replicas) whose template is that Pod's
//!   spec before mutation; the webhook reads the template, applies the Pod
//!   mutation to it and judges the result;
//! - `deployment_unchanged_update`: an UPDATE that leaves the template as it
//!   was (a controller scaling it): compared, not judged.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use poolkeeper_bus::WebhookKind;
use poolkeeper_index::{Index, IndexResource};
use poolkeeper_placement::{PlacementPolicy, PolicySource};
use poolkeeper_webhook::review_response;
use serde_json::{Value, json};

const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
const POLICY: &str = "bindings:\n  - {namespace: shop, nodePool: pool-003}\nedgeTolerations:\n  - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}\n";

fn index() -> Index {
    let index = Index::new(POOL_LABEL);
    for p in 0..10 {
        let pool: poolkeeper_api::NodePool = serde_json::from_value(json!({
            "apiVersion": "apps.openyurt.io/v1beta2", "kind": "NodePool",
            "metadata": {"name": format!("pool-{p:03}")}, "spec": {"type": "Edge"},
        }))
        .unwrap();
        index.apply(pool);
    }
    for i in 0..1_000 {
        let zone = ["a", "b", "c"][i % 3];
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
            "metadata": {"name": format!("node-{i:04}"), "labels": {
                POOL_LABEL: format!("pool-{:03}", i % 10),
                "topology.kubernetes.io/zone": zone,
                "kubernetes.io/hostname": format!("node-{i:04}"),
            }},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        index.apply(node);
    }
    index
}

fn spec(mutated: bool) -> Value {
    let mut spec = json!({
        "containers": [{"name": "checkout", "image": "ghcr.io/shop/checkout:2026.11.3",
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}],
        "nodeSelector": {"topology.kubernetes.io/zone": "a", POOL_LABEL: "pool-003"},
    });
    if mutated {
        spec["tolerations"] = json!([{"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"}]);
    }
    spec
}

fn review(group: &str, kind: &str, operation: &str, object: Value, old: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "7b0d0c52-0000-4000-8000-000000000001",
            "kind": {"group": group, "version": "v1", "kind": kind},
            "namespace": "shop", "operation": operation, "object": object, "oldObject": old}
    }))
    .unwrap()
}

fn deployment(replicas: u32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "checkout", "namespace": "shop", "labels": {"app": "checkout"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "checkout"}},
            "template": {"metadata": {"labels": {"app": "checkout"}}, "spec": spec(false)}}})
}

fn reviews(c: &mut Criterion) {
    let index = index();
    let source = PolicySource::from(&poolkeeper_config::Config::default().placement);
    let mut policy_map = std::collections::BTreeMap::new();
    policy_map.insert(source.key.clone(), POLICY.to_owned());
    let policy = PlacementPolicy::from_config_map_data(Some(&policy_map), &source).unwrap();
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "checkout-", "namespace": "shop", "labels": {"app": "checkout"}},
        "spec": spec(true)});
    let cases = [
        ("pod", review("", "Pod", "CREATE", pod, Value::Null)),
        (
            "deployment",
            review("apps", "Deployment", "CREATE", deployment(3), Value::Null),
        ),
        (
            "deployment_unchanged_update",
            review("apps", "Deployment", "UPDATE", deployment(5), deployment(3)),
        ),
    ];
    let mut group = c.benchmark_group("validate_review");
    for (name, body) in &cases {
        let view = index.placement();
        let answer = review_response(WebhookKind::Validate, body, &view, Ok(&policy)).unwrap();
        assert_eq!(answer["response"]["allowed"], true, "{name}: {answer}");
        drop(view);
        group.bench_function(*name, |b| {
            b.iter(|| {
                let view = index.placement();
                black_box(
                    review_response(WebhookKind::Validate, black_box(body), &view, Ok(&policy))
                        .unwrap(),
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, reviews);
criterion_main!(benches);
