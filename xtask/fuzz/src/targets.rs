//! The five targets and the invariants they check.
//!
//! A target returns quietly for input its parser rejects with an error, and
//! panics (a crash to libFuzzer, a failure to the replay test) when a parser
//! or a decision panics, or when an answer breaks an invariant:
//!
//! - AdmissionReview: both webhooks, with the policy and with a broken one,
//!   agree on whether (and why) the request decodes; every answer echoes the
//!   request's uid, has a status exactly when it denies, and only mutation
//!   patches; the patch applies to the Pod, and mutating the patched Pod again
//!   adds nothing.
//! - Placement policy: the default mode changes no verdict on validity, the
//!   ConfigMap path reads the same policy as `parse`, and decisions under the
//!   parsed policy keep the AdmissionReview invariants.
//! - Configuration: every error is reported (never an empty error list); a
//!   configuration that loads, written out, loads as the same configuration.
//! - Objects file: decisions over the index it builds keep the AdmissionReview
//!   invariants.
//! - Pod LIST in protobuf: the audit's decoding answers a page or an error,
//!   a page's continue token is never empty, and every Pod on it is judged
//!   by the audit's decision, which never patches.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use poolkeeper_bus::WebhookKind;
use poolkeeper_config::{Config, Mode};
use poolkeeper_index::PlacementView;
use poolkeeper_placement::{PlacementError, PlacementPolicy, build_index_from_objects};
use poolkeeper_webhook::{WebhookError, review_response};
use serde_json::{Value, json};

use crate::fixture::{POOL_LABEL, fixture};

type Policy<'a> = Result<&'a PlacementPolicy, &'a PlacementError>;

/// Well-formed JSON that a tree of `Value`s cannot hold, in a field the
/// webhooks skip (every field they read is checked when they read it): JSON
/// bounds no number (`tolerationSeconds: 1e99930`), and skipping a string
/// checks the form of its escapes, not the code points they name (a lone
/// surrogate `\uDDDD`, which the API server's Go decoder would turn into
/// U+FFFD) nor its UTF-8. Such a document still reads as JSON when nothing
/// is built from it.
fn unrepresentable(data: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(data).is_ok()
}

/// An AdmissionReview (any bytes) decided by both webhooks over the fixture.
pub fn admission_review(data: &[u8]) {
    let f = fixture();
    let view = f.index.placement();
    let mutated = review_response(WebhookKind::Mutate, data, &view, Ok(&f.policy));
    let validated = review_response(WebhookKind::Validate, data, &view, Ok(&f.policy));
    let fail_closed = review_response(WebhookKind::Validate, data, &view, Err(&f.broken));
    let unpatched = review_response(WebhookKind::Mutate, data, &view, Err(&f.broken));
    let reasons: Vec<Option<&str>> = [&mutated, &validated, &fail_closed, &unpatched]
        .iter()
        .map(|result| result.as_ref().err().map(WebhookError::reason))
        .collect();
    assert!(
        reasons.iter().all(|reason| *reason == reasons[0]),
        "decoding depends on the webhook or the policy: {reasons:?}"
    );
    if let Err(error) = &mutated {
        assert_eq!(error.status_code(), 400, "{error}");
        return;
    }
    let review = match serde_json::from_slice::<Value>(data) {
        Ok(review) => review,
        Err(_) if unrepresentable(data) => return,
        Err(error) => panic!("a review that decodes is not JSON: {error}"),
    };
    let answers = [mutated, validated, fail_closed, unpatched].map(Result::unwrap);
    for answer in &answers {
        check_answer(answer, &review);
    }
    for answer in &answers[1..] {
        assert!(
            patch_of(answer).is_none(),
            "only mutation with a valid policy patches: {answer}"
        );
    }
    check_remutation(&answers[0], &review, &view, Ok(&f.policy));
}

/// A placement policy document, parsed every way the controller reads one,
/// then used to decide a few Pods.
pub fn placement_policy(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let f = fixture();
    let enforce = PlacementPolicy::parse(text);
    let warn = PlacementPolicy::parse_with_default_mode(text, Mode::Warn);
    let config_map = BTreeMap::from([(f.source.key.clone(), text.to_owned())]);
    let from_config_map = PlacementPolicy::from_config_map_data(Some(&config_map), &f.source);
    assert_eq!(
        enforce.as_ref().ok(),
        from_config_map.as_ref().ok(),
        "the ConfigMap path reads another policy"
    );
    match (&enforce, &warn) {
        (Ok(enforce), Ok(warn)) => {
            check_policy(enforce, warn);
            decide_samples(&f.index.placement(), Ok(enforce));
        }
        (Err(error), Err(_)) => assert!(!error.to_string().is_empty()),
        _ => panic!("the default mode decides validity: {enforce:?} / {warn:?}"),
    }
}

/// A configuration file.
pub fn config_yaml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::from_yaml_str(text) {
        Ok(config) => {
            let json = serde_json::to_string(&config).expect("a configuration serializes");
            let yaml = serde_saphyr::to_string(&config).expect("a configuration serializes");
            for written in [json, yaml] {
                assert_eq!(
                    Config::from_yaml_str(&written).as_ref(),
                    Ok(&config),
                    "written out as {written}"
                );
            }
        }
        Err(errors) => {
            assert!(!errors.is_empty(), "an error without a problem");
            for error in errors.errors() {
                let _ = (error.path(), error.reason(), error.location());
                assert!(!error.to_string().is_empty());
            }
            assert!(!errors.to_string().is_empty());
        }
    }
}

/// An objects file of `poolkeeper admit`, then a few Pods decided over the
/// index it builds.
pub fn objects_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let f = fixture();
    match build_index_from_objects(text, POOL_LABEL, &f.source) {
        Ok(objects) => {
            let _ = objects.index.object_counts();
            let view = objects.index.placement();
            let policy = PlacementPolicy::load(&view, &f.source);
            decide_samples(&view, policy.as_ref());
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }
}

/// The invariants between a policy read with the default mode `enforce` and
/// the same document read with `warn`.
fn check_policy(enforce: &PlacementPolicy, warn: &PlacementPolicy) {
    assert_eq!(enforce.default_mode(), Mode::Enforce);
    assert_eq!(warn.default_mode(), Mode::Warn);
    assert_eq!(enforce.edge_tolerations(), warn.edge_tolerations());
    assert_eq!(
        enforce.is_empty(),
        enforce.bindings().count() == 0 && enforce.edge_tolerations().is_empty()
    );
    let pairs: Vec<_> = enforce.bindings().zip(warn.bindings()).collect();
    assert_eq!(pairs.len(), enforce.bindings().count());
    assert_eq!(pairs.len(), warn.bindings().count());
    for ((namespace, binding), (warn_namespace, warn_binding)) in pairs {
        assert_eq!(namespace, warn_namespace);
        assert_eq!(binding.pools, warn_binding.pools);
        assert_eq!(enforce.pools_for_namespace(namespace), Some(&binding.pools));
        assert_eq!(enforce.binding(namespace), Some(binding));
        assert_eq!(enforce.mode_for_namespace(namespace), binding.mode);
        // Only a binding without a mode of its own follows the default.
        if binding.mode != Mode::Enforce {
            assert_eq!(warn_binding.mode, binding.mode);
        } else {
            assert!(matches!(warn_binding.mode, Mode::Enforce | Mode::Warn));
        }
    }
}

/// A few Pods, each decided by both webhooks under `policy` over `view`.
fn decide_samples(view: &PlacementView<'_>, policy: Policy<'_>) {
    for sample in samples() {
        let review: Value = serde_json::from_slice(sample).expect("a sample is JSON");
        for webhook in [WebhookKind::Mutate, WebhookKind::Validate] {
            let answer = review_response(webhook, sample, view, policy)
                .unwrap_or_else(|error| panic!("a sample review is rejected: {error}"));
            check_answer(&answer, &review);
            match webhook {
                WebhookKind::Mutate => check_remutation(&answer, &review, view, policy),
                WebhookKind::Validate => assert!(patch_of(&answer).is_none(), "{answer}"),
            }
        }
    }
}

/// What every AdmissionReview answer must look like.
fn check_answer(answer: &Value, review: &Value) {
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1", "{answer}");
    assert_eq!(answer["kind"], "AdmissionReview", "{answer}");
    let response = &answer["response"];
    assert_eq!(response["uid"], review["request"]["uid"], "{answer}");
    let allowed = response["allowed"]
        .as_bool()
        .unwrap_or_else(|| panic!("`allowed` is not a bool: {answer}"));
    let status = &response["status"];
    if allowed {
        assert!(
            status.is_null(),
            "an allowed answer with a status: {answer}"
        );
    } else {
        let message = status["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "a denial without a message: {answer}");
        let code = status["code"].as_u64().unwrap_or_default();
        assert!((400..600).contains(&code), "denial code {code}: {answer}");
        assert!(
            patch_of(answer).is_none(),
            "a denial with a patch: {answer}"
        );
    }
    assert_eq!(
        response["patchType"].as_str() == Some("JSONPatch"),
        !response["patch"].is_null(),
        "a patch goes with its type: {answer}"
    );
}

/// The decoded JSON Patch of an answer, when it has one.
fn patch_of(answer: &Value) -> Option<json_patch::Patch> {
    let encoded = answer["response"]["patch"].as_str()?;
    let bytes = STANDARD
        .decode(encoded)
        .unwrap_or_else(|error| panic!("the patch is not base64 ({error}): {answer}"));
    let patch = serde_json::from_slice(&bytes)
        .unwrap_or_else(|error| panic!("the patch is not a JSON Patch ({error}): {answer}"));
    Some(patch)
}

/// Applies a mutation's patch to the Pod as the API server would and
/// mutates the result again: that must add nothing.
fn check_remutation(answer: &Value, review: &Value, view: &PlacementView<'_>, policy: Policy<'_>) {
    let Some(patch) = patch_of(answer) else {
        return;
    };
    let mut patched = review.clone();
    let object = &mut patched["request"]["object"];
    if let Err(error) = json_patch::patch(object, &patch.0) {
        panic!("the patch does not apply to the Pod ({error}): {answer}");
    }
    let body = serde_json::to_vec(&patched).expect("JSON serializes");
    let again = review_response(WebhookKind::Mutate, &body, view, policy)
        .unwrap_or_else(|error| panic!("the patched Pod is rejected ({error}): {patched}"));
    check_answer(&again, &patched);
    assert!(
        patch_of(&again).is_none(),
        "mutating the patched Pod patches again: {again} for {patched}"
    );
}

/// The Pods the policy and objects targets decide, as AdmissionReview bodies.
fn samples() -> &'static [Vec<u8>] {
    static SAMPLES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SAMPLES.get_or_init(|| {
        let plain = json!({"containers": [{"name": "web", "image": "nginx:1.27"}]});
        let selected = json!({
            "containers": [{"name": "web", "image": "nginx:1.27"}],
            "nodeSelector": {"kubernetes.io/hostname": "edge-hz-1"},
        });
        let tolerating = json!({
            "containers": [{"name": "web", "image": "nginx:1.27"}],
            "tolerations": [{"key": "node-role.kubernetes.io/edge", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}
                ]}}
            ]}},
        });
        let pinned = json!({
            "containers": [{"name": "web", "image": "nginx:1.27"}],
            "nodeName": "cloud-1",
        });
        [
            pod_review("shop-hangzhou", json!({}), plain.clone()),
            pod_review("shop-cloud", json!({}), selected),
            pod_review("shop-warn", json!({}), tolerating),
            pod_review("plain", json!({POOL_LABEL: "hangzhou"}), plain),
            pod_review("shop-dry", json!({}), pinned),
        ]
        .iter()
        .map(|review| serde_json::to_vec(review).expect("JSON serializes"))
        .collect()
    })
}

/// A Pod CREATE review in `namespace`.
fn pod_review(namespace: &str, labels: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("sample-{namespace}"),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "fuzz"},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"generateName": "web-", "namespace": namespace, "labels": labels},
                "spec": spec
            }
        }
    })
}

/// The body of a Pod LIST in the Kubernetes protobuf encoding (any bytes), as
/// the audit decodes it, each Pod judged over the fixture; the same bytes as
/// a failed request's `Status`.
pub fn pod_list_protobuf(data: &[u8]) {
    let f = fixture();
    let _ = poolkeeper_audit::testing::protobuf::decode_status(data.to_vec().into(), 500);
    let Ok(page) = poolkeeper_audit::testing::decode_page(data.to_vec(), true) else {
        return;
    };
    assert_ne!(page.continue_token.as_deref(), Some(""));
    let view = f.index.placement();
    for pod in &page.pods {
        let decision = poolkeeper_placement::audit(pod, &view, &f.policy);
        assert!(
            decision.patch.is_none() && decision.withheld_patch.is_none(),
            "the audit patched {pod:?}"
        );
    }
}
