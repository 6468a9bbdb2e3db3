//! The selector keeper against a real kube-apiserver and etcd, acting as
//! poolkeeper's ServiceAccount under `deploy/rbac.yaml`, on the webhook
//! configurations of `deploy/webhooks` (nothing serves them: no Pod is
//! created here).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use poolkeeper_bus::{Bus, Event, ResourceKind};
use poolkeeper_config::{Config, Engine};
use poolkeeper_index::{Index, IndexResource};
use poolkeeper_placement::PolicyCache;
use poolkeeper_selectors::{SelectorSettings, WebhookSelectors};
use poolkeeper_supervisor::testing::{Running, spawn};
use poolkeeper_testenv::{TestEnv, WebhookCert, WebhookRegistration, eventually};
use serde_json::{Value, json};

const SERVICE_ACCOUNT: &str = "system:serviceaccount:poolkeeper-system:poolkeeper";
const WAIT: Duration = Duration::from_secs(30);
/// No webhook server listens here: the configurations are only read.
const UNSERVED_PORT: u16 = 9;

/// A client acting as poolkeeper's ServiceAccount with the RBAC of `deploy/`.
async fn controller_identity(env: &TestEnv) -> Client {
    env.apply_installed_rbac()
        .await
        .expect("apply deploy/namespace.yaml and deploy/rbac.yaml");
    env.impersonating(SERVICE_ACCOUNT)
        .await
        .expect("a client acting as poolkeeper's ServiceAccount")
}

struct Setup {
    env: TestEnv,
    settings: SelectorSettings,
    policy: PolicyCache,
    bus: Bus,
    index: Arc<Index>,
    ca_pem: String,
    running: Option<Running>,
}

impl Setup {
    /// A control plane, the selector keeper running as poolkeeper, and the
    /// placement policy binding `bound`; the webhook configurations are
    /// registered when `register` says so.
    async fn start(bound: &[&str], register: bool) -> Self {
        Self::start_with_engine(bound, register, Engine::Webhook).await
    }

    async fn start_with_engine(bound: &[&str], register: bool, engine: Engine) -> Self {
        let env = TestEnv::builder()
            .start()
            .await
            .expect("start the local control plane (see xtask/testenv)");
        let identity = controller_identity(&env).await;
        let config = Config::default();
        let settings = SelectorSettings::from(&config);
        let policy = PolicyCache::from(&config.placement);
        let bus = Bus::default();
        let index = Arc::new(Index::new(&config.placement.pool_label));
        let ca_pem = WebhookCert::generate().unwrap().ca_pem;
        let mut setup = Self {
            env,
            settings: settings.clone(),
            policy: policy.clone(),
            bus: bus.clone(),
            index: index.clone(),
            ca_pem,
            running: None,
        };
        setup.set_bindings(bound);
        if register {
            setup.register().await;
        }
        let component =
            WebhookSelectors::new(settings, &bus, identity, index, policy).with_engine(engine);
        bus.start();
        let mut running = spawn(Box::new(component));
        running.wait_ready(WAIT).await;
        setup.running = Some(running);
        setup
    }

    /// `deploy/webhooks`, registered (again) as they are shipped.
    async fn register(&self) {
        let registration = WebhookRegistration::installed(UNSERVED_PORT, self.ca_pem.clone())
            .expect("deploy/webhooks parses");
        self.env.register_webhooks(registration).await.unwrap();
    }

    /// The placement ConfigMap with these bindings, as the watchers would
    /// bring it: into the index, then `ResourceChanged` on the bus.
    fn set_bindings(&self, bound: &[&str]) {
        let mut policy = String::from("bindings:\n");
        for namespace in bound {
            policy.push_str(&format!(
                "  - {{namespace: {namespace}, nodePool: pool-a}}\n"
            ));
        }
        if bound.is_empty() {
            policy = "bindings: []\n".to_owned();
        }
        self.set_policy(&policy);
    }

    fn set_policy(&self, policy: &str) {
        let source = self.policy.source();
        let config_map: ConfigMap = serde_json::from_value(json!({
            "metadata": {"namespace": source.namespace, "name": source.name},
            "data": {source.key.clone(): policy},
        }))
        .unwrap();
        if let Some(changed) = self.index.apply(config_map) {
            self.bus.publish(Event::ResourceChanged {
                kind: ResourceKind::ConfigMap,
                key: changed.key,
                change: changed.change,
                initial: false,
                related: changed.related,
            });
        }
    }

    fn admin(&self) -> Client {
        self.env.client()
    }

    async fn stored(&self) -> (Value, Value) {
        let mutating = Api::<MutatingWebhookConfiguration>::all(self.admin())
            .get(&self.settings.mutating.name)
            .await
            .unwrap();
        let validating = Api::<ValidatingWebhookConfiguration>::all(self.admin())
            .get(&self.settings.validating.name)
            .await
            .unwrap();
        (
            serde_json::to_value(mutating).unwrap(),
            serde_json::to_value(validating).unwrap(),
        )
    }

    /// Entry name -> (namespaceSelector, objectSelector) of both
    /// configurations.
    async fn selectors(&self) -> BTreeMap<String, (Value, Value)> {
        let (mutating, validating) = self.stored().await;
        [mutating, validating]
            .iter()
            .flat_map(|configuration| configuration["webhooks"].as_array().unwrap().clone())
            .map(|entry| {
                (
                    entry["name"].as_str().unwrap().to_owned(),
                    (
                        entry["namespaceSelector"].clone(),
                        entry["objectSelector"].clone(),
                    ),
                )
            })
            .collect()
    }

    /// What `selectors` must show for these bindings: the bound-namespaces
    /// entries list them (or the placeholder), the pool-labelled entries
    /// leave them out with the default excluded namespaces.
    fn expected(&self, bound: &[&str]) -> BTreeMap<String, (Value, Value)> {
        let by_name = |operator: &str, values: Vec<&str>| {
            json!({"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": operator, "values": values},
            ]})
        };
        let mut listed: Vec<&str> = bound.to_vec();
        listed.sort_unstable();
        listed.dedup();
        let mut not_in = listed.clone();
        not_in.extend([
            "kube-node-lease",
            "kube-public",
            "kube-system",
            "poolkeeper-system",
        ]);
        not_in.sort_unstable();
        if listed.is_empty() {
            listed.push("no-binding.poolkeeper.io");
        }
        let bound_entry = (by_name("In", listed), json!({}));
        let labelled_entry = (
            by_name("NotIn", not_in),
            json!({"matchExpressions": [{"key": self.settings.pool_label, "operator": "Exists"}]}),
        );
        let mut expected = BTreeMap::new();
        for managed in self.settings.configurations() {
            expected.insert(managed.bound_namespaces_entry.clone(), bound_entry.clone());
            expected.insert(managed.pool_labelled_entry.clone(), labelled_entry.clone());
        }
        expected
    }

    async fn wait_selectors(&self, bound: &[&str]) -> Duration {
        let started = tokio::time::Instant::now();
        let expected = self.expected(bound);
        let waited = eventually(&format!("selectors for {bound:?}"), WAIT, || async {
            (self.selectors().await == expected).then_some(())
        })
        .await;
        if let Err(error) = waited {
            panic!("{error}: stored {:#?}", self.selectors().await);
        }
        started.elapsed()
    }

    async fn resource_versions(&self) -> (String, String) {
        let (mutating, validating) = self.stored().await;
        let version = |object: &Value| {
            object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        (version(&mutating), version(&validating))
    }

    /// `deploy/webhooks` applied again as an installer does: server-side
    /// apply under its own field manager, without force (a conflict fails).
    async fn apply_as_installer(&self) {
        let registration = WebhookRegistration::installed(UNSERVED_PORT, self.ca_pem.clone())
            .expect("deploy/webhooks parses");
        let (mutating, validating) = registration.rewritten();
        let params = PatchParams::apply("kubectl");
        for configuration in mutating {
            let name = configuration.metadata.name.clone().unwrap();
            Api::<MutatingWebhookConfiguration>::all(self.admin())
                .patch(&name, &params, &Patch::Apply(configuration))
                .await
                .expect("no field conflict");
        }
        for configuration in validating {
            let name = configuration.metadata.name.clone().unwrap();
            Api::<ValidatingWebhookConfiguration>::all(self.admin())
                .patch(&name, &params, &Patch::Apply(configuration))
                .await
                .expect("no field conflict");
        }
    }

    /// `metadata.generation` of both: it counts the changes of `webhooks`.
    async fn generations(&self) -> (i64, i64) {
        let (mutating, validating) = self.stored().await;
        let generation = |object: &Value| object["metadata"]["generation"].as_i64().unwrap();
        (generation(&mutating), generation(&validating))
    }

    async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.stop().await.expect("stops cleanly");
        }
    }
}

/// The configurations are shipped without selectors (the API server stores
/// `{}`); the keeper writes those of "nothing bound", fills in the bindings, follows a change of them, and in a steady state writes
/// nothing, while every other field (the caBundle above all) stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_follow_the_bindings_and_a_steady_state_writes_nothing() {
    let setup = Setup::start(&[], true).await;
    // Brought from the shipped `{}` to the selectors of no binding.
    setup.wait_selectors(&[]).await;
    let before = setup.resource_versions().await;
    let (mutating_before, validating_before) = setup.stored().await;

    setup.set_bindings(&["shop", "lab", "shop-b"]);
    let took = setup.wait_selectors(&["lab", "shop", "shop-b"]).await;
    println!("selectors followed a new binding in {took:?}");
    let after = setup.resource_versions().await;
    assert_ne!(before.0, after.0);
    assert_ne!(before.1, after.1);

    let (mutating, validating) = setup.stored().await;
    for (now, was) in [
        (&mutating, &mutating_before),
        (&validating, &validating_before),
    ] {
        for i in 0..2 {
            let entry = &now["webhooks"][i];
            let old = &was["webhooks"][i];
            for field in [
                "clientConfig",
                "rules",
                "failurePolicy",
                "sideEffects",
                "timeoutSeconds",
            ] {
                assert_eq!(entry[field], old[field], "{field} of {}", entry["name"]);
            }
        }
        assert_eq!(
            now["metadata"]["annotations"],
            was["metadata"]["annotations"]
        );
        let managers: Vec<&str> = now["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|entry| entry["manager"].as_str())
            .collect();
        assert!(managers.contains(&"poolkeeper"), "{managers:?}");
    }

    // The same bindings again (another key of the ConfigMap changed, say),
    // and an update of the order only: nothing is written.
    setup.set_policy(
        "bindings:\n  - {namespace: shop-b, nodePool: p}\n  - {namespace: lab, nodePool: p}\n  - {namespace: shop, nodePool: q}\n",
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        setup.resource_versions().await,
        after,
        "no write in a steady state"
    );

    setup.set_bindings(&["lab"]);
    setup.wait_selectors(&["lab"]).await;
    setup.set_bindings(&[]);
    setup.wait_selectors(&[]).await;
    setup.stop().await;
}

/// Configurations that appear after the keeper started are brought in step
/// without any change of the bindings: the keeper watches them. Applying
/// them again as the installer ships them (no selectors; server-side apply
/// under another field manager, without force, as `kubectl apply
/// --server-side` or a GitOps sync does) meets no field conflict and leaves
/// the selectors and the keeper's own matchConditions entries as they are:
/// `webhooks` and `matchConditions` are lists keyed by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configurations_created_later_are_brought_in_step_and_a_reapply_keeps_them() {
    let setup = Setup::start(&["shop"], false).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    setup.register().await;
    let took = setup.wait_selectors(&["shop"]).await;
    println!("registered configurations in step after {took:?}");

    // A condition written under the controller's field manager (named
    // outside `poolkeeper.io/engine-*`, which this keeper under the webhook
    // engine would remove at once).
    let engine_condition = json!({"name": "poolkeeper.io/test-owned", "expression": "true"});
    let add = json_patch::Patch(vec![json_patch::PatchOperation::Add(
        json_patch::AddOperation {
            path: json_patch::jsonptr::PointerBuf::parse("/webhooks/0/matchConditions/-").unwrap(),
            value: engine_condition.clone(),
        },
    )]);
    Api::<MutatingWebhookConfiguration>::all(setup.admin())
        .patch(
            &setup.settings.mutating.name,
            &PatchParams {
                field_manager: Some("poolkeeper".to_owned()),
                ..PatchParams::default()
            },
            &Patch::Json::<()>(add),
        )
        .await
        .unwrap();
    let before = setup.generations().await;
    let selectors = setup.selectors().await;

    setup.apply_as_installer().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        setup.generations().await,
        before,
        "the re-apply changed nothing"
    );
    assert_eq!(setup.selectors().await, selectors);
    let (mutating, _) = setup.stored().await;
    let conditions: Vec<&str> = mutating["webhooks"][0]["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        conditions,
        ["poolkeeper.io/not-excluded", "poolkeeper.io/test-owned"],
        "the installer's entry and the controller's"
    );
    setup.stop().await;
}

/// An invalid placement policy leaves the selectors as they are (the
/// validating webhook reports it for the Pods it still gets); the next
/// valid one applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_policy_leaves_the_selectors_alone() {
    let setup = Setup::start(&["shop"], true).await;
    setup.wait_selectors(&["shop"]).await;
    let versions = setup.resource_versions().await;
    setup.set_policy("bindings:\n  - {namespace: Not_A_Namespace, nodePool: p}\n");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(setup.resource_versions().await, versions);
    setup.set_bindings(&["lab"]);
    setup.wait_selectors(&["lab"]).await;
    setup.stop().await;
}

/// A configuration lacking one of the managed entries is not made up: it is
/// reported, and the other configuration is still brought in step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_without_a_managed_entry_does_not_hold_up_the_other() {
    let setup = Setup::start(&["shop"], true).await;
    setup.wait_selectors(&["shop"]).await;
    // The validating configuration loses its pool-labelled entry.
    let validating = Api::<ValidatingWebhookConfiguration>::all(setup.admin());
    let remove = json_patch::Patch(vec![json_patch::PatchOperation::Remove(
        json_patch::RemoveOperation {
            path: json_patch::jsonptr::PointerBuf::parse("/webhooks/1").unwrap(),
        },
    )]);
    validating
        .patch(
            &setup.settings.validating.name,
            &PatchParams::default(),
            &Patch::Json::<()>(remove),
        )
        .await
        .unwrap();
    let validating_version = setup.resource_versions().await.1;

    setup.set_bindings(&["lab"]);
    let expected = setup.expected(&["lab"]);
    eventually("the mutating configuration in step", WAIT, || async {
        let selectors = setup.selectors().await;
        let mutating = &setup.settings.mutating;
        (selectors.get(&mutating.bound_namespaces_entry)
            == expected.get(&mutating.bound_namespaces_entry)
            && selectors.get(&mutating.pool_labelled_entry)
                == expected.get(&mutating.pool_labelled_entry))
        .then_some(())
    })
    .await
    .unwrap();
    assert_eq!(
        setup.resource_versions().await.1,
        validating_version,
        "the incomplete configuration is left alone"
    );
    setup.stop().await;
}

/// Under the CEL engine every managed entry carries the engine's
/// `matchConditions` (the API server compiles the expression when it takes
/// the patch); a Pod the admission policies decide is then created although
/// nothing serves the webhooks, one with its own node selector still needs
/// poolkeeper and is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_cel_engine_the_entries_call_poolkeeper_only_for_what_cel_cannot_decide() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::PostParams;

    let setup = Setup::start_with_engine(&["shop"], true, Engine::Cel).await;
    setup.wait_selectors(&["shop"]).await;
    let conditions = || async {
        let (mutating, validating) = setup.stored().await;
        [mutating, validating]
            .iter()
            .flat_map(|c| c["webhooks"].as_array().unwrap().clone())
            .filter(|entry| entry["name"].as_str().unwrap().contains("poolkeeper.io"))
            .map(|entry| {
                entry["matchConditions"]
                    .as_array()
                    .map(|list| list.iter().map(|c| c["name"].clone()).collect::<Vec<_>>())
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
    };
    eventually(
        "the engine's conditions on every managed entry",
        WAIT,
        || async {
            conditions()
                .await
                .iter()
                .all(|names| names.contains(&json!("poolkeeper.io/engine-cel-cannot-decide")))
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error}"));

    setup.env.create_namespace("shop").await.unwrap();
    let pods = Api::<Pod>::namespaced(setup.admin(), "shop");
    let pod = |name: &str, spec: Value| -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    pods.create(&PostParams::default(), &pod("plain", json!({})))
        .await
        .expect("a plain Pod is not sent to poolkeeper");
    let refused = pods
        .create(
            &PostParams::default(),
            &pod("own-selector", json!({"nodeSelector": {"disk": "ssd"}})),
        )
        .await
        .expect_err("a Pod with its own nodeSelector needs poolkeeper, which is down");
    assert!(refused.to_string().contains("poolkeeper.io"), "{refused}");
    setup.stop().await;
}
