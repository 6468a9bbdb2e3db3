//! The embedded admission policies in a real kube-apiserver (no poolkeeper
//! process, no webhook): each fixture Pod is created where the policies and
//! the params compiled from one placement policy are installed, and the
//! stored Pod, the allow/deny answer and the warnings are compared with the
//! webhook's pure decisions (`poolkeeper_placement::mutate` and `validate`)
//! for the same Pod, field by field.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use poolkeeper_cel::{Objects, Placement, PolicyTexts, compile};
use poolkeeper_config::PlacementConfig;
use poolkeeper_index::Namespace as IndexedNamespace;
use poolkeeper_placement::{
    PlacementPolicy, PodPlacement, PolicySource, build_index_from_objects, mutate, validate,
};
use poolkeeper_testenv::{TestEnv, eventually};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);
const POOL_LABEL: &str = "apps.openyurt.io/nodepool";

const POLICY: &str = r#"
bindings:
  - {namespace: shop, nodePool: hangzhou}
  - {namespace: east, nodePools: [shanghai, hangzhou], mode: warn}
  - {namespace: lab, nodePool: cloud, mode: dryrun}
  - {namespace: gone, nodePool: missing}
  - {namespace: half, nodePools: [cloud, missing]}
edgeTolerations:
  - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}
  - {key: dedicated, value: edge, effect: NoExecute, tolerationSeconds: 30}
"#;

/// Namespaces bound by their labels: (name, labels).
const LABELLED: [(&str, &[(&str, &str)]); 3] = [
    ("team", &[(POOL_LABEL, "cloud")]),
    (
        "team-edge",
        &[(POOL_LABEL, "hangzhou"), ("poolkeeper.io/mode", "warn")],
    ),
    // The ConfigMap binds `shop`: its label takes no effect.
    ("shop", &[(POOL_LABEL, "cloud")]),
];

/// Every namespace a fixture uses; `free` is bound to nothing.
const NAMESPACES: [&str; 8] = [
    "shop",
    "east",
    "lab",
    "gone",
    "half",
    "team",
    "team-edge",
    "free",
];

fn objects_yaml() -> String {
    let mut text = String::new();
    for (pool, kind) in [
        ("hangzhou", "Edge"),
        ("shanghai", "Edge"),
        ("cloud", "Cloud"),
    ] {
        text.push_str(&format!(
            "---\napiVersion: apps.openyurt.io/v1beta2\nkind: NodePool\nmetadata: {{name: {pool}}}\nspec: {{type: {kind}}}\n---\napiVersion: v1\nkind: Node\nmetadata: {{name: {pool}-1, labels: {{{POOL_LABEL}: {pool}}}}}\n"
        ));
    }
    let data = serde_json::to_string(&json!({"placement.yaml": POLICY})).unwrap();
    text.push_str(&format!(
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: poolkeeper-placement, namespace: poolkeeper-system}}\ndata: {data}\n"
    ));
    text
}

/// One fixture: a Pod spec and labels, in a namespace.
struct Fixture {
    name: &'static str,
    namespace: &'static str,
    pod: Value,
}

fn pod(name: &str, labels: Value, spec: Value) -> Value {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    })
}

fn fixtures() -> Vec<Fixture> {
    let plain = |name, namespace| Fixture {
        name,
        namespace,
        pod: pod(name, json!({}), json!({})),
    };
    let with = |name, namespace, labels: Value, spec: Value| Fixture {
        name,
        namespace,
        pod: pod(name, labels, spec),
    };
    let pool_term = |values: Value| {
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": POOL_LABEL, "operator": "In", "values": values}]}]}}}})
    };
    vec![
        plain("plain-edge", "shop"),
        plain("plain-several", "east"),
        plain("plain-dryrun", "lab"),
        plain("plain-missing", "gone"),
        plain("plain-half", "half"),
        plain("plain-label-bound", "team"),
        plain("plain-label-bound-edge", "team-edge"),
        plain("plain-free", "free"),
        with(
            "pod-anti-affinity",
            "shop",
            json!({"app": "a"}),
            json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "kubernetes.io/hostname"}]}}}),
        ),
        with(
            "preferred-only",
            "shop",
            json!({}),
            json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [
                    {"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}}),
        ),
        with(
            "tolerates-one",
            "shop",
            json!({}),
            json!({"tolerations": [{"key": "node-role.kubernetes.io/edge", "operator": "Exists"}]}),
        ),
        with(
            "tolerates-all",
            "shop",
            json!({}),
            json!({"tolerations": [{"operator": "Exists"}]}),
        ),
        {
            let mut fixture = plain("annotated", "shop");
            fixture.pod["metadata"]["annotations"] = json!({"team": "a"});
            fixture
        },
        with(
            "label-narrows",
            "east",
            json!({POOL_LABEL: "shanghai"}),
            json!({}),
        ),
        with(
            "label-outside",
            "shop",
            json!({POOL_LABEL: "cloud"}),
            json!({}),
        ),
        with(
            "label-outside-warn",
            "east",
            json!({POOL_LABEL: "cloud"}),
            json!({}),
        ),
        with(
            "label-unbound-namespace",
            "free",
            json!({POOL_LABEL: "hangzhou"}),
            json!({}),
        ),
        with(
            "pool-term-written",
            "shop",
            json!({}),
            pool_term(json!(["hangzhou"])),
        ),
        with("pool-term-tolerated", "shop", json!({}), {
            let mut spec = pool_term(json!(["hangzhou"]));
            spec["tolerations"] = json!([{"operator": "Exists"}]);
            spec
        }),
    ]
}

/// The policy and index the webhook would decide with.
struct Webhook {
    offline: poolkeeper_placement::OfflineObjects,
    policy: PlacementPolicy,
}

impl Webhook {
    fn new(source: &PolicySource) -> Self {
        let offline = build_index_from_objects(&objects_yaml(), POOL_LABEL, source).unwrap();
        let labels = source.namespace_labels.clone().unwrap();
        let namespaces: Vec<IndexedNamespace> = LABELLED
            .iter()
            .map(|(name, labels)| IndexedNamespace {
                name: (*name).to_owned(),
                uid: format!("uid-{name}"),
                labels: labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            })
            .collect();
        let view = offline.index.placement();
        let policy = PlacementPolicy::load(&view, source)
            .unwrap()
            .with_namespace_labels(&namespaces, &labels);
        drop(view);
        Self { offline, policy }
    }

    /// What the webhook makes of `pod` (as the API server sends it, its
    /// defaults applied): the mutated Pod, and the validating answer (denial
    /// or warnings).
    fn decide(&self, pod: &Value, namespace: &str) -> (Value, Result<Vec<String>, String>) {
        let view = self.offline.index.placement();
        let placement: PodPlacement = serde_json::from_value(pod.clone()).unwrap();
        let mutated = mutate(&placement, namespace, &view, &self.policy);
        let mut patched = pod.clone();
        if let Some(patch) = &mutated.patch {
            json_patch::patch(&mut patched, patch).unwrap();
        }
        let placement: PodPlacement = serde_json::from_value(patched.clone()).unwrap();
        let validated = validate(&placement, namespace, &view, &self.policy);
        let mut warnings = mutated.warnings.clone();
        warnings.extend(validated.warnings.iter().cloned());
        let answer = if validated.allowed {
            Ok(warnings)
        } else {
            Err(validated.message.unwrap_or_default())
        };
        (patched, answer)
    }
}

/// The outcome of one create through the API server.
#[derive(Debug)]
struct Created {
    status: u16,
    body: Value,
    warnings: Vec<String>,
}

async fn create(client: &Client, namespace: &str, pod: &Value, dry_run: bool) -> Created {
    let params = PostParams {
        dry_run,
        ..PostParams::default()
    };
    let request = kube::core::Request::new(format!("/api/v1/namespaces/{namespace}/pods"))
        .create(&params, serde_json::to_vec(pod).unwrap())
        .unwrap();
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .expect("the apiserver answers");
    let status = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .collect();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    Created {
        status,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        warnings,
    }
}

async fn apply<K>(api: &Api<K>, object: &K)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let name = object.meta().name.clone().unwrap();
    api.patch(
        &name,
        &PatchParams::apply("poolkeeper").force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap_or_else(|error| panic!("apply {name}: {error}"));
}

async fn install(client: &Client, objects: &Objects) {
    apply(
        &Api::<MutatingAdmissionPolicy>::all(client.clone()),
        &objects.mutating,
    )
    .await;
    for policy in &objects.validating {
        apply(
            &Api::<ValidatingAdmissionPolicy>::all(client.clone()),
            policy,
        )
        .await;
    }
    apply(
        &Api::<MutatingAdmissionPolicyBinding>::all(client.clone()),
        &objects.mutating_binding,
    )
    .await;
    for binding in &objects.validating_bindings {
        apply(
            &Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()),
            binding,
        )
        .await;
    }
}

/// The fields placement writes, for comparison.
fn placed_fields(pod: &Value) -> Value {
    json!({
        "affinity": pod["spec"]["affinity"],
        "tolerations": pod["spec"]["tolerations"],
        "placement": pod["metadata"]["annotations"]["poolkeeper.io/placement"],
        "labels": pod["metadata"]["labels"],
    })
}

#[tokio::test]
async fn the_policies_place_and_judge_every_fixture_as_the_webhook_does() {
    // The controller manager type-checks the validating policies (their status).
    let env = TestEnv::builder()
        .controller_manager(true)
        .start()
        .await
        .expect("start the control plane");
    let client = env.client();
    env.create_namespace("poolkeeper-system").await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in NAMESPACES.iter().chain(["baseline"].iter()) {
        let labels: BTreeMap<String, String> = LABELLED
            .iter()
            .filter(|(ns, _)| ns == name)
            .flat_map(|(_, labels)| labels.iter())
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let namespace = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some((*name).to_owned()),
                labels: Some(labels),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
    }

    // `baseline` is where a fixture is created unplaced, to see the Pod the API server sends.
    let mut placement = PlacementConfig::default();
    placement.excluded_namespaces.push("baseline".to_owned());
    let source = PolicySource::from(&placement);
    let webhook = Webhook::new(&source);
    let view = webhook.offline.index.placement();
    let data = compile(
        &webhook.policy,
        &source.excluded_namespaces,
        view.node_pools(),
        POOL_LABEL,
        Some(&placement.namespace_labels),
    );
    drop(view);
    let objects = Placement {
        texts: PolicyTexts::EMBEDDED,
        excluded: source.excluded_namespaces.iter().cloned().collect(),
        owner: None,
    }
    .objects(&data)
    .unwrap();
    install(&client, &objects).await;

    // The policies compile: no type-checking warning on any of them.
    for policy in &objects.validating {
        let name = policy.metadata.name.clone().unwrap();
        let api = Api::<ValidatingAdmissionPolicy>::all(client.clone());
        let warnings = eventually("the policy's type checking", WAIT, || async {
            let stored = api.get(&name).await.ok()?;
            let status = stored.status?;
            (status.observed_generation == stored.metadata.generation).then(|| {
                status
                    .type_checking
                    .and_then(|t| t.expression_warnings)
                    .unwrap_or_default()
            })
        })
        .await;
        let Ok(warnings) = warnings else {
            panic!(
                "{warnings:?}: {:#?}",
                api.get(&name).await.map(|p| p.status)
            );
        };
        assert!(warnings.is_empty(), "{name}: {warnings:#?}");
    }

    // Policies take effect once the API server has loaded them.
    let last = std::sync::Mutex::new(None);
    let placed = eventually("the mutating policy placing a plain Pod", WAIT, || async {
        let probe = pod("probe", json!({}), json!({}));
        let created = create(&client, "shop", &probe, true).await;
        let placed = created.status == 201
            && !created.body["metadata"]["annotations"]["poolkeeper.io/placement"].is_null();
        *last.lock().unwrap() = Some(created);
        placed.then_some(())
    })
    .await;
    assert!(placed.is_ok(), "last answer: {:#?}", last.lock().unwrap());

    let mut differences = Vec::new();
    for fixture in fixtures() {
        // The Pod as the webhook would receive it: the API server's defaults applied.
        let baseline = create(&client, "baseline", &fixture.pod, true).await;
        assert_eq!(
            baseline.status, 201,
            "{}: {:?}",
            fixture.name, baseline.body
        );
        let mut sent = baseline.body.clone();
        sent["metadata"]["namespace"] = json!(fixture.namespace);
        let (expected, answer) = webhook.decide(&sent, fixture.namespace);
        let created = create(&client, fixture.namespace, &fixture.pod, false).await;
        match answer {
            Ok(warnings) => {
                if created.status != 201 {
                    differences.push(format!(
                        "{}: webhook admits, CEL answers {}: {}",
                        fixture.name, created.status, created.body["message"]
                    ));
                    continue;
                }
                if placed_fields(&created.body) != placed_fields(&expected) {
                    differences.push(format!(
                        "{}: stored {:#}\nwebhook {:#}",
                        fixture.name,
                        placed_fields(&created.body),
                        placed_fields(&expected)
                    ));
                }
                for warning in warnings {
                    let denial = warning
                        .strip_prefix("poolkeeper would deny this pod (binding mode warn): ")
                        .unwrap_or(&warning);
                    if !created
                        .warnings
                        .iter()
                        .any(|w| unquoted(w).contains(denial))
                    {
                        differences.push(format!(
                            "{}: warning {warning:?} missing from {:?}",
                            fixture.name, created.warnings
                        ));
                    }
                }
            }
            Err(denial) => {
                let message = created.body["message"].as_str().unwrap_or_default();
                if created.status == 201 || !message.ends_with(&denial) {
                    differences.push(format!(
                        "{}: webhook denies {denial:?}, CEL answers {}: {message}",
                        fixture.name, created.status
                    ));
                }
            }
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n\n"));
}

/// The text of a `Warning` header (`299 - "text"`, quotes escaped).
fn unquoted(header: &str) -> String {
    let text = header.strip_prefix("299 - \"").unwrap_or(header);
    let text = text.strip_suffix('"').unwrap_or(text);
    text.replace("\\\"", "\"").replace("\\\\", "\\")
}
