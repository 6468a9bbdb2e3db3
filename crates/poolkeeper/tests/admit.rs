//! `poolkeeper admit` offline (DESIGN §7): the binary decides the shipped
//! example AdmissionReviews against `config/examples/cluster.yaml`, exactly
//! as the webhook would, and refuses unusable input with exit code 2.

use std::process::Output;

use k8s_openapi::ByteString;
use serde_json::{Value, json};

mod cli;

use cli::{admit, describe, example, stdout_of};

/// The printed AdmissionReview of a run that must succeed.
fn response_of(output: &Output) -> Value {
    let review: Value = serde_json::from_str(&stdout_of(output))
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", describe(output)));
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1", "{review}");
    assert_eq!(review["kind"], "AdmissionReview", "{review}");
    review["response"].clone()
}

fn read_json(path: &str) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The JSON patch of a response, decoded from base64.
fn patch_of(response: &Value) -> json_patch::Patch {
    assert_eq!(response["patchType"], "JSONPatch", "{response}");
    let bytes: ByteString =
        serde_json::from_value(response["patch"].clone()).expect("the patch is base64");
    serde_json::from_slice(&bytes.0).expect("the patch is an RFC 6902 JSON patch")
}

fn assert_exit_2(output: &Output, mentions: &str) {
    assert_eq!(output.status.code(), Some(2), "{}", describe(output));
    assert!(output.stdout.is_empty(), "{}", describe(output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("poolkeeper admit:") && stderr.contains(mentions),
        "stderr should explain the problem and name {mentions:?}: {}",
        describe(output)
    );
}

#[test]
fn mutate_pins_a_plain_pod_to_its_edge_pool() {
    let review_path = example("review-plain-pod.json");
    let output = admit(&example("cluster.yaml"), &review_path, "mutate");
    let response = response_of(&output);
    assert_eq!(
        response["uid"], "3f1d2a6c-0000-4000-8000-000000000001",
        "{response}"
    );
    assert_eq!(response["allowed"], true, "{response}");

    // Applied to the Pod of the review, the patch adds the pool's required
    // node affinity and the edge toleration.
    let request = read_json(&review_path);
    let mut pod = request["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch_of(&response)).expect("the patch applies to the Pod");
    assert_eq!(
        pod["spec"]["affinity"],
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "apps.openyurt.io/nodepool", "operator": "In", "values": ["hangzhou"]},
            ]}],
        }}}),
        "{pod}"
    );
    assert_eq!(
        pod["spec"]["tolerations"],
        json!([{"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"}]),
        "{pod}"
    );
    assert_eq!(
        pod["spec"]["containers"],
        request["request"]["object"]["spec"]["containers"]
    );

    // The mutated Pod passes validation, as it does behind the apiserver.
    let dir = tempfile::tempdir().unwrap();
    let mut mutated = request.clone();
    mutated["request"]["object"] = pod;
    let mutated_path = dir.path().join("mutated.json");
    std::fs::write(&mutated_path, serde_json::to_vec(&mutated).unwrap()).unwrap();
    let output = admit(
        &example("cluster.yaml"),
        mutated_path.to_str().unwrap(),
        "validate",
    );
    let response = response_of(&output);
    assert_eq!(response["allowed"], true, "{response}");

    // The plain Pod itself does not.
    let output = admit(&example("cluster.yaml"), &review_path, "validate");
    let response = response_of(&output);
    assert_eq!(response["allowed"], false, "{response}");
}

#[test]
fn validate_denies_a_selector_for_a_node_of_another_pool() {
    let review_path = example("review-foreign-selector.json");
    let output = admit(&example("cluster.yaml"), &review_path, "validate");
    let response = response_of(&output);
    assert_eq!(
        response["uid"], "3f1d2a6c-0000-4000-8000-000000000002",
        "{response}"
    );
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 403, "{response}");
    assert_eq!(
        response["status"]["message"],
        r#"pod is bound to node pool "hangzhou" but 1 node outside the pool matches its nodeSelector: cloud-1"#,
        "{response}"
    );
    assert!(response.get("patch").is_none(), "{response}");

    // Mutation leaves a constrained Pod that already tolerates the edge
    // taint alone: validation is what stops it.
    let output = admit(&example("cluster.yaml"), &review_path, "mutate");
    let response = response_of(&output);
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response.get("patch").is_none(), "{response}");
}

#[test]
fn missing_files_exit_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.yaml");
    let missing = missing.to_str().unwrap();

    let output = admit(missing, &example("review-plain-pod.json"), "mutate");
    assert_exit_2(&output, missing);
    let output = admit(&example("cluster.yaml"), missing, "validate");
    assert_exit_2(&output, missing);
}

#[test]
fn malformed_input_exits_2_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, contents: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        path.to_str().unwrap().to_owned()
    };

    let not_json = write("not-json.json", "{\"apiVersion\": ");
    assert_exit_2(
        &admit(&example("cluster.yaml"), &not_json, "mutate"),
        &not_json,
    );

    let not_a_review = write(
        "pod.json",
        r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}"#,
    );
    assert_exit_2(
        &admit(&example("cluster.yaml"), &not_a_review, "validate"),
        &not_a_review,
    );

    let no_request = write(
        "empty-review.json",
        r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#,
    );
    assert_exit_2(
        &admit(&example("cluster.yaml"), &no_request, "validate"),
        &no_request,
    );

    let broken_objects = write("objects.yaml", "kind: Node\nmetadata: [unclosed\n");
    assert_exit_2(
        &admit(&broken_objects, &example("review-plain-pod.json"), "mutate"),
        &broken_objects,
    );
}

#[test]
fn an_unknown_webhook_is_a_usage_error() {
    let output = admit(
        &example("cluster.yaml"),
        &example("review-plain-pod.json"),
        "both",
    );
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(output.stdout.is_empty(), "{}", describe(&output));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--webhook"),
        "{}",
        describe(&output)
    );
}

/// A Pod of a bound namespace whose pool label names another pool: the
/// validating webhook refuses it naming both, the mutating one places it by
/// the namespace's binding, never into the labelled pool.
#[test]
fn a_pool_label_outside_the_namespace_binding_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut review = read_json(&example("review-plain-pod.json"));
    review["request"]["object"]["metadata"]["labels"] =
        json!({"apps.openyurt.io/nodepool": "cloud"});
    let review_path = dir.path().join("review-escape.json");
    std::fs::write(&review_path, review.to_string()).unwrap();
    let review_path = review_path.to_str().unwrap();

    let response = response_of(&admit(&example("cluster.yaml"), review_path, "validate"));
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 403, "{response}");
    assert_eq!(
        response["status"]["message"],
        "pod's label apps.openyurt.io/nodepool=cloud names node pool \"cloud\", but namespace \"shop-hangzhou\" is bound to node pool \"hangzhou\": a pod's pool label may only name pools of its namespace's binding",
        "{response}"
    );

    let response = response_of(&admit(&example("cluster.yaml"), review_path, "mutate"));
    let mut pod = review["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch_of(&response)).expect("the patch applies to the Pod");
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["values"],
        json!(["hangzhou"]),
        "{pod}"
    );
}
