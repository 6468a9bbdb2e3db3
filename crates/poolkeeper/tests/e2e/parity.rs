//! Two engines, one semantics: every placement fixture is created (a dry
//! run) through the real API server, once with `placement.engine: webhook`
//! and once with `cel`, and the stored objects and the allow/deny/warning
//! answers are compared field by field. The API server's wording around a
//! webhook's or a policy's message is stripped (the text itself must be the
//! same); the one difference of `crates/cel/README.md` these fixtures reach
//! (a written pool requirement naming a foreign pool: refused by both,
//! with different reasons) is allowed and printed, any other fails.
//!
//! | node | pool |
//! |---|---|
//! | `edge-1` | `edge` (Edge, tainted) |
//! | `east-1` | `east` (Edge, tainted) |
//! | `cloud-1` | `cloud` (Cloud) |

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use poolkeeper_api::{NodePoolType, PlacementException};
use poolkeeper_config::{Config, EngineChoice};
use poolkeeper_testenv::TestEnv;
use serde_json::{Value, json};

use crate::harness::register_webhooks_at_a_fixed_port;
use crate::harness::{Running, control_plane, serving_cert, test_config, wait_until};
use crate::objects::{CONTROLLER_NAMESPACE, EDGE_TAINT, POOL_LABEL, create_pool, write_policy};

/// Namespaces: bound by the ConfigMap (modes, several pools, a missing
/// pool, PlacementExceptions allowed), by their labels, not at all, and
/// excluded.
const NAMESPACES: [&str; 9] = [
    "shop",
    "east",
    "lab",
    "gone",
    "team",
    "free",
    "kube-public",
    "half",
    "open",
];

/// A create's answer, normalized for comparison.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    /// For an admitted object, what placement writes of it; for a refusal,
    /// the refusal's own text.
    outcome: Value,
    /// The warnings' own texts, sorted.
    warnings: Vec<String>,
}

/// Strips the framing the API server puts around a webhook's or a policy's
/// message, and the prefix `warn` mode puts before a denial.
fn own_text(message: &str) -> String {
    let text = [
        "denied the request: ",
        "denied request: ",
        "' with binding '",
    ]
    .iter()
    .filter_map(|marker| message.split_once(marker).map(|(_, rest)| rest))
    .next()
    .unwrap_or(message);
    // A Warn action: "...' with binding 'name': text".
    let text = match text.split_once("': ") {
        Some((binding, rest)) if !binding.contains(' ') => rest,
        _ => text,
    };
    text.strip_prefix("poolkeeper would deny this pod (binding mode warn): ")
        .unwrap_or(text)
        .to_owned()
}

/// The text of a `Warning` header (`299 - "text"`, quotes escaped).
fn warning_text(header: &str) -> String {
    let text = header.strip_prefix("299 - \"").unwrap_or(header);
    let text = text.strip_suffix('"').unwrap_or(text);
    own_text(&text.replace("\\\"", "\"").replace("\\\\", "\\"))
}

async fn create(client: &Client, namespace: &str, path: &str, object: &Value) -> Answer {
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let request =
        kube::core::Request::new(format!("{path}/namespaces/{namespace}/{}", plural(object)))
            .create(&params, serde_json::to_vec(object).unwrap())
            .unwrap();
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .expect("the apiserver answers");
    let status = response.status().as_u16();
    let mut warnings: Vec<String> = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|value| warning_text(&String::from_utf8_lossy(value.as_bytes())))
        .collect();
    warnings.sort();
    warnings.dedup();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let outcome = if status == 201 {
        let spec = if body["kind"] == "Pod" {
            &body["spec"]
        } else {
            &body["spec"]["template"]["spec"]
        };
        json!({
            "affinity": spec["affinity"],
            "tolerations": spec["tolerations"],
            "record": body["metadata"]["annotations"]["poolkeeper.io/placement"],
        })
    } else {
        json!(own_text(body["message"].as_str().unwrap_or_default()))
    };
    Answer {
        status,
        outcome,
        warnings,
    }
}

fn plural(object: &Value) -> &'static str {
    match object["kind"].as_str() {
        Some("Deployment") => "deployments",
        _ => "pods",
    }
}

fn pod(name: &str, labels: Value, annotations: Value, spec: Value) -> Value {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "app", "image": "busybox"}]);
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": labels, "annotations": annotations},
           "spec": spec})
}

/// (name, namespace, object): every fixture Pod and workload.
fn fixtures() -> Vec<(String, &'static str, Value)> {
    let term = |values: Value| {
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": POOL_LABEL, "operator": "In", "values": values}]}]}}}})
    };
    let specs: Vec<(&str, Value, Value)> = vec![
        ("plain", json!({}), json!({})),
        (
            "anti-affinity",
            json!({"app": "a"}),
            json!({"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector":
                {"matchLabels": {"app": "a"}}, "topologyKey": "kubernetes.io/hostname"}]}}}),
        ),
        (
            "preferred",
            json!({}),
            json!({"affinity": {"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference":
                {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}}),
        ),
        (
            "tolerates",
            json!({}),
            json!({"tolerations": [{"key": EDGE_TAINT, "operator": "Exists"}]}),
        ),
        (
            "tolerates-all",
            json!({}),
            json!({"tolerations": [{"operator": "Exists"}]}),
        ),
        ("label-edge", json!({POOL_LABEL: "edge"}), json!({})),
        ("label-cloud", json!({POOL_LABEL: "cloud"}), json!({})),
        ("term-edge", json!({}), term(json!(["edge"]))),
        (
            "selector-cloud",
            json!({}),
            json!({"nodeSelector": {POOL_LABEL: "cloud"}}),
        ),
        (
            "selector-edge",
            json!({}),
            json!({"nodeSelector": {POOL_LABEL: "edge"},
            "tolerations": [{"operator": "Exists"}]}),
        ),
        ("named", json!({}), json!({"nodeName": "cloud-1"})),
        // Selected by the exception `probe` where one exists (`open`).
        ("probe-plain", json!({"app": "probe"}), json!({})),
        (
            "probe-outside",
            json!({"app": "probe"}),
            json!({"nodeSelector": {POOL_LABEL: "edge"}, "tolerations": [{"operator": "Exists"}]}),
        ),
    ];
    let mut fixtures = Vec::new();
    for namespace in NAMESPACES {
        for (name, labels, spec) in &specs {
            fixtures.push((
                format!("{namespace}/{name}"),
                namespace,
                pod(name, labels.clone(), json!({}), spec.clone()),
            ));
        }
        fixtures.push((
            format!("{namespace}/mirror"),
            namespace,
            pod(
                "mirror",
                json!({}),
                json!({"kubernetes.io/config.mirror": "abc"}),
                json!({"nodeName": "cloud-1"}),
            ),
        ));
        fixtures.push((
            format!("{namespace}/annotated"),
            namespace,
            pod("annotated", json!({}), json!({"team": "a"}), json!({})),
        ));
        fixtures.push((
            format!("{namespace}/deployment-outside"),
            namespace,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "outside"},
                   "spec": {"selector": {"matchLabels": {"app": "w"}},
                            "template": {"metadata": {"labels": {"app": "w"}},
                                         "spec": {"nodeSelector": {POOL_LABEL: "cloud"},
                                                  "containers": [{"name": "app", "image": "busybox"}]}}}}),
        ));
    }
    fixtures
}

async fn answers(client: &Client) -> BTreeMap<String, Answer> {
    let mut answers = BTreeMap::new();
    for (name, namespace, object) in fixtures() {
        let path = if object["kind"] == "Pod" {
            "/api/v1"
        } else {
            "/apis/apps/v1"
        };
        answers.insert(name, create(client, namespace, path, &object).await);
    }
    answers
}

async fn setup() -> (TestEnv, Config, tempfile::TempDir) {
    let env = control_plane(
        TestEnv::builder().controller_manager(true),
        &[
            CONTROLLER_NAMESPACE,
            "shop",
            "east",
            "lab",
            "gone",
            "team",
            "free",
            "half",
            "open",
        ],
    )
    .await;
    let client = env.client();
    create_pool(&env, "edge", NodePoolType::Edge, &["edge-1"]).await;
    create_pool(&env, "east", NodePoolType::Edge, &["east-1"]).await;
    create_pool(&env, "cloud", NodePoolType::Cloud, &["cloud-1"]).await;
    write_policy(
        &client,
        &[
            ("shop", "edge", "enforce"),
            ("east", "edge,east", "warn"),
            ("lab", "cloud", "dryrun"),
            ("gone", "missing", "enforce"),
            ("half", "cloud,missing", "enforce"),
            ("open", "cloud", "enforce, exceptions: allowed"),
        ],
    )
    .await;
    // Skips the mutation and the validation of the Pods labelled app=probe of
    // `open`: under either engine only the webhooks read it.
    let probe: PlacementException = serde_json::from_value(json!({
        "apiVersion": "poolkeeper.io/v1alpha1",
        "kind": "PlacementException",
        "metadata": {"name": "probe", "namespace": "open"},
        "spec": {
            "selector": {"matchLabels": {"app": "probe"}},
            "reason": "measures the edge pool",
            "allow": {"skipMutation": true, "skipValidation": true}
        }
    }))
    .unwrap();
    Api::<PlacementException>::namespaced(client.clone(), "open")
        .create(&PostParams::default(), &probe)
        .await
        .unwrap();
    Api::<Namespace>::all(client.clone())
        .patch(
            "team",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {POOL_LABEL: "cloud"}}})),
        )
        .await
        .unwrap();
    let (cert_dir, cert) = serving_cert();
    let mut config = test_config(CONTROLLER_NAMESPACE, cert_dir.path());
    config.machine_classes.enabled = false;
    register_webhooks_at_a_fixed_port(&env, &mut config, &cert.ca_pem).await;
    (env, config, cert_dir)
}

/// A difference `crates/cel/README.md` lists: a written pool requirement
/// naming a pool outside the binding is refused by both, the webhook naming
/// the nodes it reaches, CEL (which knows no nodes) the requirement.
fn is_documented(webhook: &Answer, cel: &Answer) -> bool {
    let text = |answer: &Answer| answer.outcome.as_str().unwrap_or_default().to_owned();
    webhook.status == 403
        && cel.status == 403
        && webhook.warnings == cel.warnings
        && text(webhook).contains("matches its required node affinity")
        && text(cel)
            .ends_with("but its required node affinity names node pools outside its binding")
}

/// Waits until a plain Pod of `shop` is placed by the engine in force.
async fn wait_in_force(client: &Client, engine: &str) {
    wait_until(&format!("the {engine} engine placing"), || async {
        let answer = create(
            client,
            "shop",
            "/api/v1",
            &pod("probe", json!({}), json!({}), json!({})),
        )
        .await;
        (answer.status == 201 && answer.outcome["record"].is_string()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_engines_store_and_answer_every_fixture_alike() {
    let (env, mut config, _cert_dir) = setup().await;
    let client = env.client();

    config.placement.engine = EngineChoice::Webhook;
    let running = Running::start(&config, &env).await;
    running.wait_ready().await;
    wait_in_force(&client, "webhook").await;
    let by_webhook = answers(&client).await;
    running.stop().await;

    config.placement.engine = EngineChoice::Cel;
    let running = Running::start(&config, &env).await;
    running.wait_ready().await;
    wait_until("the mutating policy and the webhooks' routing", || async {
        let (_, readyz) = running.get("/readyz?verbose").await;
        let policy =
            Api::<k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicy>::all(
                client.clone(),
            )
            .get_opt("poolkeeper-placement")
            .await
            .ok()
            .flatten();
        (readyz.contains("placement-engine ok: cel") && policy.is_some()).then_some(())
    })
    .await;
    wait_in_force(&client, "cel").await;
    // The API server loads policies and configurations asynchronously.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let by_cel = answers(&client).await;
    running.stop().await;

    let mut differences = Vec::new();
    let mut documented = 0;
    for (name, webhook) in &by_webhook {
        let cel = &by_cel[name];
        if cel == webhook {
            continue;
        }
        if is_documented(webhook, cel) {
            documented += 1;
            println!(
                "{name}: documented difference: {:?} / {:?}",
                webhook.outcome, cel.outcome
            );
        } else {
            differences.push(format!("{name}:\n  webhook {webhook:?}\n  cel     {cel:?}"));
        }
    }
    println!(
        "{} fixtures compared, {documented} documented differences",
        by_webhook.len()
    );
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
