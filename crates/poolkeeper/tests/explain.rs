//! `poolkeeper explain` offline: on the shipped examples it names the pool
//! and its source, the node sets and the verdicts; on a table of Pods
//! covering every denial reason in every mode its JSON verdicts are
//! exactly `poolkeeper admit`'s answers for the same Pods.

use std::path::Path;

use k8s_openapi::ByteString;
use serde_json::{Value, json};

mod cli;

use cli::{admit, describe, example, run, stdout_of};

const POOL: &str = "apps.openyurt.io/nodepool";

fn explain_text(objects: &str, pod: &str) -> String {
    stdout_of(&run(&["explain", "--objects", objects, "--pod", pod]))
}

fn explain_json(objects: &str, pod: &Path) -> Value {
    let output = run(&[
        "explain",
        "--objects",
        objects,
        "--pod",
        pod.to_str().unwrap(),
        "-o",
        "json",
    ]);
    serde_json::from_str(&stdout_of(&output)).expect("explain -o json prints JSON")
}

#[test]
fn the_examples_are_explained_like_kubectl_describe() {
    let rollout = example("rollout.yaml");
    let mut texts = Vec::new();
    let text = explain_text(&rollout, &example("pod-foreign-selector.yaml"));
    for expected in [
        "Pod:                    shop-beijing/api-zone-a",
        "Node pool:              beijing (Cloud, 2 nodes)",
        "Bound by:               the binding of namespace shop-beijing",
        "Mode:                   warn",
        "  nodeSelector topology.kubernetes.io/zone=a:\n    2 nodes: cloud-bj-1, spare-1",
        "  Outside node pool \"beijing\":\n    1 node: spare-1",
        "Mutating webhook:       allowed (reason unchanged, mode warn)",
        "Validating webhook:     allowed (reason outside_pool, mode warn)",
        "  Warning:              poolkeeper would deny this pod (binding mode warn)",
    ] {
        assert!(text.contains(expected), "lacks {expected:?}:\n{text}");
    }
    texts.push(text);

    let text = explain_text(&rollout, &example("pod-labelled.yaml"));
    for expected in [
        "Bound by:               the pod's label apps.openyurt.io/nodepool=hangzhou",
        "  Required node affinity term 0: topology.kubernetes.io/zone In (hz-a, hz-b):\n    2 nodes: edge-hz-1, edge-hz-2",
        "  Required node affinity term 1: cores Gt (many):\n    0 nodes\n    matches nothing: matchExpressions[0].values[0]",
        "Missing edge tolerations:\n  {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}",
        "  Patch:                add /spec/tolerations",
        "Validating webhook:     denied (reason missing_edge_tolerations, mode enforce)",
    ] {
        assert!(text.contains(expected), "lacks {expected:?}:\n{text}");
    }
    texts.push(text);

    let text = explain_text(&rollout, &example("pod-canary.yaml"));
    for expected in [
        "Mode:                   dryrun",
        "  No node constraints: every node:\n    5 nodes:",
        "  Enforce would patch:  add /spec/affinity",
        "  Enforce would deny:   pod is bound to node pool \"beijing\" but has no node constraints",
    ] {
        assert!(text.contains(expected), "lacks {expected:?}:\n{text}");
    }
    texts.push(text);
    for text in &texts {
        assert!(
            text.lines().all(|line| line.chars().count() <= 100),
            "fits a terminal:\n{text}"
        );
    }
}

#[test]
fn the_admit_examples_are_explained_too() {
    let dir = tempfile::tempdir().unwrap();
    let review: Value =
        serde_json::from_slice(&std::fs::read(example("review-foreign-selector.json")).unwrap())
            .unwrap();
    let pod = dir.path().join("pod.json");
    std::fs::write(&pod, review["request"]["object"].to_string()).unwrap();
    let explained = explain_json(&example("cluster.yaml"), &pod);
    assert_eq!(explained["binding"]["pool"], "hangzhou");
    assert_eq!(explained["binding"]["source"], "namespace");
    assert_eq!(explained["binding"]["mode"], "enforce");
    assert_eq!(explained["nodeSets"][0]["names"], json!(["cloud-1"]));
    assert_eq!(explained["outsidePool"]["names"], json!(["cloud-1"]));
    assert_eq!(explained["validate"]["reason"], "outside_pool");
    assert_eq!(explained["validate"]["allowed"], false);
}

/// One Pod of the table: where it is, what it carries, and the reason the
/// validating webhook gives.
struct Case {
    namespace: &'static str,
    labels: Value,
    spec: Value,
    validate: &'static str,
}

fn case(namespace: &'static str, labels: Value, spec: Value, validate: &'static str) -> Case {
    Case {
        namespace,
        labels,
        spec,
        validate,
    }
}

fn tolerant(mut spec: Value) -> Value {
    spec["tolerations"] = json!([{"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"}]);
    spec
}

fn affinity(terms: Value) -> Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})
}

fn in_pool(pool: &str) -> Value {
    affinity(json!([{"matchExpressions": [{"key": POOL, "operator": "In", "values": [pool]}]}]))
}

/// Every validating reason, in enforce (shop-hangzhou, shop-empty, labels),
/// warn (shop-beijing, shop-east) and dryrun (shop-canary, shop-east-canary)
/// over `rollout.yaml` and its two-pool bindings.
fn cases() -> Vec<Case> {
    let none = json!({});
    let pooled = |pool: &str| json!({(POOL): pool});
    vec![
        case("default", none.clone(), json!({}), "unbound"),
        case("shop-gone", none.clone(), json!({}), "pool_missing"),
        case(
            "shop-hangzhou",
            none.clone(),
            tolerant(affinity(
                json!([{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["hz-a"]}]}]),
            )),
            "in_pool",
        ),
        case(
            "shop-hangzhou",
            none.clone(),
            json!({}),
            "missing_edge_tolerations",
        ),
        case(
            "shop-hangzhou",
            none.clone(),
            json!({"affinity": {"podAntiAffinity": {}}}),
            "missing_edge_tolerations",
        ),
        case(
            "shop-hangzhou",
            none.clone(),
            tolerant(json!({"nodeSelector": {"topology.kubernetes.io/zone": "a"}})),
            "outside_pool",
        ),
        case(
            "shop-hangzhou",
            none.clone(),
            tolerant(json!({"nodeName": "edge-hz-1"})),
            "in_pool",
        ),
        case(
            "shop-hangzhou",
            none.clone(),
            tolerant(json!({"nodeName": "cloud-bj-2"})),
            "outside_pool",
        ),
        case(
            "shop-hangzhou",
            none.clone(),
            tolerant(json!({"nodeSelector": {"topology.kubernetes.io/zone": "nowhere"}})),
            "no_matching_node",
        ),
        case(
            "shop-hangzhou",
            none.clone(),
            tolerant(affinity(
                json!([{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["many"]}]}]),
            )),
            "no_matching_node",
        ),
        case(
            "shop-hangzhou",
            none.clone(),
            tolerant(affinity(json!([]))),
            "no_matching_node",
        ),
        case(
            "shop-hangzhou",
            none.clone(),
            tolerant(affinity(
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["edge-hz-2"]}]}]),
            )),
            "in_pool",
        ),
        case(
            "shop-empty",
            none.clone(),
            tolerant(in_pool("empty")),
            "no_matching_node",
        ),
        case("shop-beijing", none.clone(), json!({}), "outside_pool"),
        case(
            "shop-beijing",
            none.clone(),
            json!({"nodeSelector": {"disk": "ssd"}}),
            "outside_pool",
        ),
        case("shop-beijing", none.clone(), in_pool("beijing"), "in_pool"),
        case(
            "shop-beijing",
            none.clone(),
            json!({"nodeSelector": {"topology.kubernetes.io/zone": "nowhere"}}),
            "no_matching_node",
        ),
        case(
            "shop-beijing",
            pooled("hangzhou"),
            json!({}),
            "label_outside_binding",
        ),
        case(
            "shop-east",
            pooled("hangzhou"),
            json!({}),
            "missing_edge_tolerations",
        ),
        case("shop-east", pooled("beijing"), json!({}), "outside_pool"),
        case("shop-canary", none.clone(), json!({}), "outside_pool"),
        case(
            "shop-canary",
            none.clone(),
            json!({"nodeName": "spare-1"}),
            "outside_pool",
        ),
        case("shop-canary", none.clone(), in_pool("beijing"), "in_pool"),
        case(
            "shop-canary",
            none.clone(),
            affinity(json!([{}])),
            "no_matching_node",
        ),
        case(
            "shop-canary",
            pooled("hangzhou"),
            json!({}),
            "label_outside_binding",
        ),
        case(
            "shop-east-canary",
            pooled("hangzhou"),
            json!({}),
            "missing_edge_tolerations",
        ),
        case(
            "default",
            pooled("hangzhou"),
            json!({}),
            "missing_edge_tolerations",
        ),
        case(
            "default",
            pooled("beijing"),
            json!({"nodeName": "cloud-bj-1"}),
            "in_pool",
        ),
        case("default", pooled("gone"), json!({}), "pool_missing"),
        case(
            "shop-hangzhou",
            pooled("beijing"),
            json!({}),
            "label_outside_binding",
        ),
        case(
            "shop-hangzhou",
            pooled("hangzhou"),
            tolerant(in_pool("hangzhou")),
            "in_pool",
        ),
    ]
}

/// `rollout.yaml` with two bindings to both pools more, in warn
/// (`shop-east`) and dryrun (`shop-east-canary`): a Pod's pool label may
/// narrow those to the Edge pool.
fn rollout_with_two_pool_bindings(dir: &Path) -> String {
    let rollout = std::fs::read_to_string(example("rollout.yaml")).unwrap();
    let extended = rollout.replace(
        "    edgeTolerations:\n",
        "      - {namespace: shop-east, nodePools: [hangzhou, beijing], mode: warn}\n      \
         - {namespace: shop-east-canary, nodePools: [hangzhou, beijing], mode: dryrun}\n    \
         edgeTolerations:\n",
    );
    assert_ne!(extended, rollout, "the bindings are added");
    let path = dir.join("rollout.yaml");
    std::fs::write(&path, extended).unwrap();
    path.to_str().unwrap().to_owned()
}

fn pod(i: usize, case: &Case) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "nginx:1.27"}]});
    for (key, value) in case.spec.as_object().unwrap() {
        spec[key] = value.clone();
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("pod-{i}"), "namespace": case.namespace, "labels": case.labels},
        "spec": spec,
    })
}

fn review(i: usize, pod: &Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": format!("00000000-0000-4000-8000-{i:012}"),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": pod["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "test"},
            "object": pod,
        }
    })
}

/// `admit`'s response, in the shape of explain's verdict.
fn admitted(objects: &str, review: &Path, webhook: &str) -> Value {
    let output = admit(objects, review.to_str().unwrap(), webhook);
    let review: Value = serde_json::from_str(&stdout_of(&output)).expect("admit prints JSON");
    let response = &review["response"];
    let patch = match response.get("patch") {
        Some(patch) => {
            let bytes: ByteString = serde_json::from_value(patch.clone()).expect("base64");
            serde_json::from_slice(&bytes.0).expect("a JSON patch")
        }
        None => Value::Null,
    };
    json!({
        "allowed": response["allowed"],
        "message": response.pointer("/status/message").cloned().unwrap_or(Value::Null),
        "warnings": response.get("warnings").cloned().unwrap_or(json!([])),
        "patch": patch,
    })
}

/// explain's verdict, reduced to what an AdmissionReview response says.
fn answered(verdict: &Value) -> Value {
    json!({
        "allowed": verdict["allowed"],
        "message": verdict.get("message").cloned().unwrap_or(Value::Null),
        "warnings": verdict.get("warnings").cloned().unwrap_or(json!([])),
        "patch": verdict.get("patch").cloned().unwrap_or(Value::Null),
    })
}

#[test]
fn json_verdicts_equal_admits_answers_for_every_reason_and_mode() {
    let dir = tempfile::tempdir().unwrap();
    let objects = rollout_with_two_pool_bindings(dir.path());
    let cases = cases();
    assert!(cases.len() >= 20);
    let mut covered = std::collections::BTreeSet::new();
    for (i, case) in cases.iter().enumerate() {
        let pod = pod(i, case);
        let pod_file = dir.path().join(format!("pod-{i}.json"));
        let review_file = dir.path().join(format!("review-{i}.json"));
        std::fs::write(&pod_file, pod.to_string()).unwrap();
        std::fs::write(&review_file, review(i, &pod).to_string()).unwrap();

        let explained = explain_json(&objects, &pod_file);
        let what = format!("pod {i} in {}: {}", case.namespace, explained["validate"]);
        assert_eq!(explained["validate"]["reason"], case.validate, "{what}");
        for webhook in ["mutate", "validate"] {
            assert_eq!(
                answered(&explained[webhook]),
                admitted(&objects, &review_file, webhook),
                "{what}: {webhook}"
            );
        }
        let mode = explained["validate"]["mode"].as_str().unwrap().to_owned();
        covered.insert((case.validate, mode));
    }
    for reason in [
        "label_outside_binding",
        "missing_edge_tolerations",
        "no_matching_node",
        "outside_pool",
    ] {
        for mode in ["enforce", "warn", "dryrun"] {
            assert!(
                covered.contains(&(reason, mode.to_owned())),
                "{reason} in {mode} is not covered: {covered:?}"
            );
        }
    }
}

#[test]
fn unusable_input_exits_2_with_the_reason() {
    let rollout = example("rollout.yaml");
    let cases: [(Vec<&str>, &str); 4] = [
        (
            vec![
                "explain",
                "--objects",
                &rollout,
                "--pod",
                "/nonexistent.yaml",
            ],
            "/nonexistent.yaml",
        ),
        (
            vec!["explain", "--objects", &rollout, "--pod", &rollout],
            "expected one Pod",
        ),
        (
            vec![
                "explain",
                "--objects",
                &rollout,
                "--namespace",
                "a",
                "--name",
                "b",
            ],
            "--kubeconfig",
        ),
        (vec!["explain", "--pod", &rollout], "--objects"),
    ];
    for (args, mentions) in cases {
        let output = run(&args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            describe(&output)
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(mentions), "{args:?}: {}", describe(&output));
    }
}

/// A workload manifest is explained through its Pod template, with the
/// workload's verdicts: a Deployment reaching outside its pool is refused, a
/// DaemonSet's template is narrowed into its pool.
#[test]
fn workload_manifests_are_explained_through_their_template() {
    let cluster = example("cluster.yaml");
    let text = explain_text(&cluster, &example("deployment-outside.yaml"));
    assert!(
        text.contains("Pod:                    Deployment shop-hangzhou/web (its pod template)"),
        "{text}"
    );
    assert!(
        text.contains("Validating webhook:     denied (reason outside_pool"),
        "{text}"
    );
    assert!(
        text.contains("the pod template of Deployment: pod is bound to node pool"),
        "{text}"
    );
    assert!(
        text.contains("Mutating webhook:       allowed (reason template_not_mutated"),
        "{text}"
    );

    let text = explain_text(&cluster, &example("daemonset-agent.yaml"));
    assert!(
        text.contains("DaemonSet shop-hangzhou/agent (its pod template)"),
        "{text}"
    );
    assert!(
        text.contains("Mutating webhook:       allowed, patched"),
        "{text}"
    );
    assert!(text.contains("add /spec/template/spec/affinity"), "{text}");
    assert!(
        text.contains("Validating webhook:     allowed (reason in_pool"),
        "{text}"
    );
}

/// In a bound namespace a Pod's pool label may only narrow the binding: a
/// label naming another pool is shown as refused, the binding places the Pod
/// and the validating webhook denies it naming both.
#[test]
fn a_pool_label_outside_the_namespace_binding_is_explained_as_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pod = dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: escape\n  namespace: shop-hangzhou\n  \
         labels: {apps.openyurt.io/nodepool: cloud}\nspec:\n  containers: [{name: c, image: busybox}]\n",
    )
    .unwrap();
    let text = explain_text(&example("cluster.yaml"), pod.to_str().unwrap());
    for expected in [
        "Node pool:              hangzhou (Edge,",
        "Bound by:               the binding of namespace shop-hangzhou",
        "Refused pool label:     apps.openyurt.io/nodepool=cloud: outside the namespace's binding",
        "Mutating webhook:       allowed, patched (reason patched, mode enforce)",
        "Validating webhook:     denied (reason label_outside_binding, mode enforce)",
        "  Message:              pod's label apps.openyurt.io/nodepool=cloud names node pool \"cloud\",",
    ] {
        assert!(text.contains(expected), "lacks {expected:?}:\n{text}");
    }
    let explained = explain_json(&example("cluster.yaml"), &pod);
    assert_eq!(
        explained["binding"]["refusedLabel"],
        "apps.openyurt.io/nodepool=cloud"
    );
    assert_eq!(
        explained["validate"]["message"],
        "pod's label apps.openyurt.io/nodepool=cloud names node pool \"cloud\", but namespace \"shop-hangzhou\" is bound to node pool \"hangzhou\": a pod's pool label may only name pools of its namespace's binding"
    );
    // A label naming one pool of a two-pool binding narrows it.
    let narrowed = dir.path().join("narrowed.yaml");
    std::fs::write(
        &narrowed,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: narrowed\n  namespace: shop-east\n  \
         labels: {apps.openyurt.io/nodepool: hangzhou}\nspec:\n  containers: [{name: c, image: busybox}]\n",
    )
    .unwrap();
    let objects = rollout_with_two_pool_bindings(dir.path());
    let text = explain_text(&objects, narrowed.to_str().unwrap());
    let expected = "Bound by:               the pod's label apps.openyurt.io/nodepool=hangzhou, one pool of the binding\n                        of namespace shop-east (beijing,hangzhou)";
    assert!(text.contains(expected), "lacks {expected:?}:\n{text}");
    assert!(
        text.contains("Node pool:              hangzhou (Edge, 2 nodes)"),
        "{text}"
    );
}

/// An exception in the objects file: `explain` names it where the binding
/// allows exceptions, and says why it is ignored where it does not.
#[test]
fn explain_names_a_placement_exception_or_why_it_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects.yaml");
    std::fs::write(
        &objects,
        r#"
apiVersion: apps.openyurt.io/v1beta2
kind: NodePool
metadata: {name: hangzhou}
spec: {type: Cloud}
---
apiVersion: v1
kind: Node
metadata: {name: hz-1, labels: {apps.openyurt.io/nodepool: hangzhou}}
---
apiVersion: v1
kind: Node
metadata: {name: spare-1, labels: {disk: ssd}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: poolkeeper-placement, namespace: poolkeeper-system}
data:
  placement.yaml: |
    bindings:
      - {namespace: lab, nodePool: hangzhou, exceptions: allowed}
      - {namespace: shop, nodePool: hangzhou}
---
apiVersion: poolkeeper.io/v1alpha1
kind: PlacementException
metadata: {name: gpu-probe, namespace: lab}
spec:
  selector: {matchLabels: {app: probe}}
  reason: the probe measures the spare node
  allow: {skipValidation: true}
---
apiVersion: poolkeeper.io/v1alpha1
kind: PlacementException
metadata: {name: gpu-probe, namespace: shop}
spec:
  selector: {matchLabels: {app: probe}}
  reason: the probe measures the spare node
  allow: {skipValidation: true}
"#,
    )
    .unwrap();
    let pod = |namespace: &str| {
        let path = dir.path().join(format!("{namespace}.yaml"));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: probe, namespace: {namespace}, labels: {{app: probe}}}}\n\
                 spec: {{nodeSelector: {{disk: ssd}}, containers: [{{name: c, image: busybox}}]}}\n"
            ),
        )
        .unwrap();
        path
    };
    let objects = objects.to_str().unwrap();
    let lab = explain_text(objects, pod("lab").to_str().unwrap());
    for expected in [
        "Exception:              gpu-probe: skips the validation (the probe measures the spare node)",
        "Validating webhook:     allowed (reason excepted, mode enforce)",
    ] {
        assert!(lab.contains(expected), "lacks {expected:?}:\n{lab}");
    }
    let shop = explain_text(objects, pod("shop").to_str().unwrap());
    for expected in [
        "Ignored exception:      gpu-probe: skips the validation (the probe measures the spare node): the\n                        namespace's binding does not allow exceptions",
        "Validating webhook:     denied (reason outside_pool, mode enforce)",
    ] {
        assert!(shop.contains(expected), "lacks {expected:?}:\n{shop}");
    }
}
