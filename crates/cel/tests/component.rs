//! The `cel-policies` leader against a real kube-apiserver, acting as
//! poolkeeper's ServiceAccount under `deploy/rbac.yaml`, with the webhook
//! configurations of `deploy/webhooks` registered with selectors that match
//! no namespace (nothing serves them: the Pods here are placed by the API
//! server alone).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, MutatingWebhookConfiguration,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use poolkeeper_bus::{Bus, Event, ResourceKind};
use poolkeeper_cel::{
    CelPolicies, CelSettings, EngineResolver, EngineState, MUTATING_POLICY, PolicyTexts,
};
use poolkeeper_config::{Config, Engine, EngineChoice};
use poolkeeper_index::{Changed, Index, IndexResource};
use poolkeeper_kube::{LEADER_EPOCH_ANNOTATION, stamp};
use poolkeeper_placement::PolicyCache;
use poolkeeper_supervisor::LeaderTerm;
use poolkeeper_supervisor::testing::{BusRecorder, Running, spawn};
use poolkeeper_testenv::{TestEnv, WebhookCert, WebhookRegistration, eventually};
use serde_json::json;
use tokio::time::Instant;

const SERVICE_ACCOUNT: &str = "system:serviceaccount:poolkeeper-system:poolkeeper";
const WAIT: Duration = Duration::from_secs(30);
/// No webhook server listens here.
const UNSERVED_PORT: u16 = 9;
const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
/// Binding changes timed.
const CHANGES: usize = 10;
/// How often the leaders here read the API server's evaluation errors.
const READ_INTERVAL: Duration = Duration::from_secs(1);

struct Setup {
    env: TestEnv,
    identity: Client,
    config: Config,
    policy: PolicyCache,
    bus: Bus,
    index: Arc<Index>,
    state: EngineState,
}

impl Setup {
    async fn start() -> Self {
        let env = TestEnv::builder()
            .controller_manager(true)
            .start()
            .await
            .expect("start the local control plane (see xtask/testenv)");
        env.apply_installed_rbac()
            .await
            .expect("apply deploy/namespace.yaml and deploy/rbac.yaml");
        for namespace in ["shop", "free"] {
            env.create_namespace(namespace).await.unwrap();
        }
        let ca_pem = WebhookCert::generate().unwrap().ca_pem;
        let registration = WebhookRegistration::installed(UNSERVED_PORT, ca_pem)
            .expect("deploy/webhooks parses")
            .matching_no_namespace();
        env.register_webhooks(registration).await.unwrap();
        let identity = env.impersonating(SERVICE_ACCOUNT).await.unwrap();
        let config = Config::default();
        let bus = Bus::default();
        let setup = Self {
            identity,
            policy: PolicyCache::from(&config.placement),
            index: Arc::new(Index::new(&config.placement.pool_label)),
            config,
            bus,
            env,
            state: EngineState::default(),
        };
        for (pool, kind) in [("hangzhou", "Edge"), ("cloud", "Cloud")] {
            let pool: poolkeeper_api::NodePool = serde_json::from_value(json!({
                "apiVersion": "apps.openyurt.io/v1beta2", "kind": "NodePool",
                "metadata": {"name": pool}, "spec": {"type": kind},
            }))
            .unwrap();
            let changed = setup.index.apply(pool);
            setup.publish(ResourceKind::NodePool, changed);
        }
        setup
    }

    fn publish(&self, kind: ResourceKind, changed: Option<Changed>) {
        if let Some(changed) = changed {
            self.bus.publish(Event::ResourceChanged {
                kind,
                key: changed.key,
                change: changed.change,
                initial: false,
                related: changed.related,
            });
        }
    }

    /// The placement ConfigMap, as the watchers would bring it.
    fn set_policy(&self, policy: &str) {
        let source = self.policy.source();
        let config_map: ConfigMap = serde_json::from_value(json!({
            "metadata": {"namespace": source.namespace, "name": source.name},
            "data": {source.key.clone(): policy},
        }))
        .unwrap();
        let changed = self.index.apply(config_map);
        self.publish(ResourceKind::ConfigMap, changed);
    }

    fn leader(&self, engine: Engine) -> Running {
        self.leader_with(engine, PolicyTexts::EMBEDDED)
    }

    /// The CEL engine's leader component as this setup runs it.
    fn component(&self, engine: Engine) -> CelPolicies {
        CelPolicies::new(
            CelSettings::from(&self.config),
            engine,
            &self.bus,
            self.identity.clone(),
            self.index.clone(),
            self.policy.clone(),
            self.state.clone(),
        )
    }

    /// A leader whose term `epoch` holds for the whole test.
    fn leader_in(&self, engine: Engine, epoch: i64) -> Running {
        let term = LeaderTerm::new();
        term.confirm(epoch, Instant::now() + Duration::from_secs(3600));
        let component = self.component(engine).guarded_by(term);
        spawn(Box::new(component))
    }

    /// Every object of the engine: `Kind/name`, its epoch and resourceVersion.
    async fn epochs(&self) -> Vec<(String, Option<String>, Option<String>)> {
        fn of<K: kube::Resource<DynamicType = ()>>(
            items: Vec<K>,
        ) -> impl Iterator<Item = (String, Option<String>, Option<String>)> {
            items.into_iter().map(|item| {
                let meta = item.meta();
                (
                    format!("{}/{}", K::kind(&()), meta.name.clone().unwrap_or_default()),
                    meta.annotations
                        .as_ref()
                        .and_then(|a| a.get(LEADER_EPOCH_ANNOTATION).cloned()),
                    meta.resource_version.clone(),
                )
            })
        }
        let admin = self.env.client();
        let all = Default::default();
        let mut objects: Vec<_> = of(Api::<MutatingAdmissionPolicy>::all(admin.clone())
            .list(&all)
            .await
            .unwrap()
            .items)
        .collect();
        objects.extend(of(Api::<MutatingAdmissionPolicyBinding>::all(
            admin.clone(),
        )
        .list(&all)
        .await
        .unwrap()
        .items));
        objects.extend(of(Api::<ValidatingAdmissionPolicy>::all(admin.clone())
            .list(&all)
            .await
            .unwrap()
            .items));
        objects.extend(of(Api::<ValidatingAdmissionPolicyBinding>::all(admin)
            .list(&all)
            .await
            .unwrap()
            .items));
        objects
    }

    /// Waits until the engine's objects exist and each carries `epoch`.
    async fn stamped(&self, epoch: &str) -> Vec<(String, Option<String>, Option<String>)> {
        eventually(
            &format!("every CEL object stamped with epoch {epoch}"),
            WAIT,
            || async {
                let objects = self.epochs().await;
                // Each policy and binding: the mutating ones, and the
                // validating ones of the three modes and of the warnings.
                (objects.len() == 2 + 2 * 4
                    && objects.iter().all(|(_, e, _)| e.as_deref() == Some(epoch)))
                .then_some(objects)
            },
        )
        .await
        .unwrap_or_else(|error| panic!("{error}; the leader reports: {:?}", self.state.problem()))
    }

    /// Waits until the leader reports that a newer term than `epoch` owns the objects.
    async fn deposed(&self, epoch: i64) {
        let said = format!("newer than this replica's {epoch}");
        eventually(&format!("the term {epoch} deposed"), WAIT, || async {
            self.state
                .problem()
                .filter(|problem| problem.contains(&said))
        })
        .await
        .unwrap_or_else(|error| panic!("{error}; the leader reports: {:?}", self.state.problem()));
    }

    fn leader_with(&self, engine: Engine, texts: PolicyTexts) -> Running {
        let component = self
            .component(engine)
            .with_texts(texts)
            .reading_errors_every(READ_INTERVAL);
        spawn(Box::new(component))
    }

    /// Creates a plain Pod in `namespace`; the pool its stored affinity names.
    async fn placed_pool(&self, namespace: &str, name: &str) -> Option<String> {
        self.try_placed_pool(namespace, name)
            .await
            .unwrap_or_else(|error| panic!("create {namespace}/{name}: {error}"))
    }

    /// The pool a plain Pod of `namespace` would be placed into (a dry
    /// run), or why it would be refused.
    async fn dry_run_pool(&self, namespace: &str) -> Result<Option<String>, kube::Error> {
        self.create_pool_of(namespace, "probe", true).await
    }

    /// [`Self::placed_pool`], or why the Pod was refused.
    async fn try_placed_pool(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<String>, kube::Error> {
        self.create_pool_of(namespace, name, false).await
    }

    async fn create_pool_of(
        &self,
        namespace: &str,
        name: &str,
        dry_run: bool,
    ) -> Result<Option<String>, kube::Error> {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }))
        .unwrap();
        let created = Api::<Pod>::namespaced(self.env.client(), namespace)
            .create(
                &PostParams {
                    dry_run,
                    ..PostParams::default()
                },
                &pod,
            )
            .await?;
        let value = serde_json::to_value(created).unwrap();
        let term = &value["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"][0];
        Ok((term["key"] == POOL_LABEL)
            .then(|| term["values"][0].as_str().unwrap_or_default().to_owned()))
    }

    async fn objects_present(&self) -> [bool; 4] {
        let admin = self.env.client();
        [
            Api::<MutatingAdmissionPolicy>::all(admin.clone())
                .get_opt(MUTATING_POLICY)
                .await
                .unwrap()
                .is_some(),
            Api::<MutatingAdmissionPolicyBinding>::all(admin.clone())
                .get_opt(MUTATING_POLICY)
                .await
                .unwrap()
                .is_some(),
            !Api::<ValidatingAdmissionPolicy>::all(admin.clone())
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .is_empty(),
            !Api::<ValidatingAdmissionPolicyBinding>::all(admin)
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .is_empty(),
        ]
    }
}

/// With engine `cel` the leader writes the objects (owned by the installer's
/// MutatingWebhookConfiguration, managed by `poolkeeper`); a plain Pod of a
/// bound namespace is placed while nothing serves the webhooks; a binding
/// change reaches the next Pod; after the leader stops the objects stay in
/// force; a leader with engine `webhook` removes every one of them.
#[tokio::test]
async fn the_leader_keeps_the_cel_objects_and_removes_them_under_the_webhook_engine() {
    let setup = Setup::start().await;
    setup.set_policy("bindings: [{namespace: shop, nodePool: hangzhou}]");
    setup.bus.start();
    let mut leader = setup.leader(Engine::Cel);
    leader.wait_ready(WAIT).await;

    let mut attempt = 0;
    let placed = eventually(
        "a plain Pod placed by the MutatingAdmissionPolicy",
        WAIT,
        || {
            attempt += 1;
            let name = format!("first-{attempt}");
            let setup = &setup;
            async move {
                match Api::<MutatingAdmissionPolicyBinding>::all(setup.env.client())
                    .get_opt(MUTATING_POLICY)
                    .await
                {
                    Ok(Some(_)) => setup.placed_pool("shop", &name).await,
                    _ => None,
                }
            }
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error}; the leader reports: {:?}", setup.state.problem()));
    assert_eq!(placed, "hangzhou");
    assert_eq!(setup.state_problem(), None);

    let owner = Api::<MutatingWebhookConfiguration>::all(setup.env.client())
        .get("poolkeeper")
        .await
        .unwrap();
    let policy = Api::<MutatingAdmissionPolicy>::all(setup.env.client())
        .get(MUTATING_POLICY)
        .await
        .unwrap();
    let references = policy.metadata.owner_references.unwrap_or_default();
    assert_eq!(references.len(), 1);
    assert_eq!(references[0].uid, owner.metadata.uid.unwrap());
    let managers: Vec<String> = policy
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["poolkeeper"]);

    // A binding changes: the next Pod follows it. While the API server
    // reloads the policies one by one, a Pod placed by the new mutating
    // policy may meet the validating policy of the old binding and be
    // refused; the times and the refusals are printed.
    let mut took = Vec::new();
    let mut refused = 0;
    for round in 0..CHANGES {
        let pool = if round % 2 == 0 { "cloud" } else { "hangzhou" };
        let changed_at = Instant::now();
        setup.set_policy(&format!(
            "bindings: [{{namespace: shop, nodePool: {pool}}}]"
        ));
        loop {
            match setup.dry_run_pool("shop").await {
                Ok(Some(placed)) if placed == pool => break,
                Ok(_) => {}
                Err(_) => refused += 1,
            }
            assert!(
                changed_at.elapsed() < WAIT,
                "round {round}: {pool} not followed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        took.push(changed_at.elapsed());
    }
    took.sort_unstable();
    eprintln!(
        "binding change to the next Pod placed, {CHANGES} changes: median {:?}, max {:?}; \
         {refused} dry-run creates refused meanwhile",
        took[CHANGES / 2],
        took[CHANGES - 1]
    );
    setup.set_policy("bindings: [{namespace: shop, nodePool: cloud}]");
    eventually("the last binding in force", WAIT, || async {
        (setup.dry_run_pool("shop").await.ok()?.as_deref() == Some("cloud")).then_some(())
    })
    .await
    .expect("cloud again");

    // Every replica gone: the API server still places.
    leader.stop().await.unwrap();
    assert_eq!(
        setup.placed_pool("shop", "while-down").await.as_deref(),
        Some("cloud")
    );
    assert_eq!(setup.placed_pool("free", "unbound").await, None);
    // A Namespace label binds without any leader: the policies read it.
    let labelled_at = Instant::now();
    Api::<Namespace>::all(setup.env.client())
        .patch(
            "free",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {POOL_LABEL: "hangzhou"}}})),
        )
        .await
        .unwrap();
    eventually(
        "a label binding in force while no leader runs",
        WAIT,
        || async {
            (setup.dry_run_pool("free").await.ok()?.as_deref() == Some("hangzhou")).then_some(())
        },
    )
    .await
    .expect("placed by the label");
    eprintln!(
        "namespace label to the next Pod placed, no leader running: {:?}",
        labelled_at.elapsed()
    );

    // The engine switched to webhook: the next leader leaves nothing behind.
    assert_eq!(setup.objects_present().await, [true; 4]);
    let mut leader = setup.leader(Engine::Webhook);
    leader.wait_ready(WAIT).await;
    eventually("every CEL object removed", WAIT, || async {
        (setup.objects_present().await == [false; 4]).then_some(())
    })
    .await
    .expect("removed");
    leader.stop().await.unwrap();
}

impl Setup {
    fn state_problem(&self) -> Option<String> {
        self.state.problem()
    }
}

/// A broken expression surfaces in the leader's report (on `/readyz?verbose`
/// beside the engine, and in the log): one the API server refuses to take
/// (the mutating policy does not compile), and one it takes but the
/// controller manager's type checking flags (a validating policy reads a
/// field Pods do not have).
#[tokio::test]
async fn a_broken_expression_surfaces_in_the_leaders_report() {
    let setup = Setup::start().await;
    setup.set_policy("bindings: [{namespace: shop, nodePool: hangzhou}]");
    let published = BusRecorder::new(&setup.bus);
    setup.bus.start();
    let leak = |text: String| -> &'static str { Box::leak(text.into_boxed_str()) };

    let uncompilable = PolicyTexts {
        mutating: leak(
            PolicyTexts::EMBEDDED
                .mutating
                .replace("!variables.celDecides ||", "!variables.celDecides )( ||"),
        ),
        ..PolicyTexts::EMBEDDED
    };
    let mut leader = setup.leader_with(Engine::Cel, uncompilable);
    leader.wait_ready(WAIT).await;
    let problem = eventually("the refused policy reported", WAIT, || async {
        setup
            .state
            .problem()
            .filter(|p| p.contains("applying MutatingAdmissionPolicy poolkeeper-placement"))
    })
    .await
    .unwrap_or_else(|error| panic!("{error}: {:?}", setup.state.problem()));
    assert!(problem.contains("compilation failed"), "{problem}");
    // For a Warning Event on the policy (the recorder's).
    published
        .wait_for(WAIT, |event| {
            matches!(event, Event::AdmissionPolicyProblem { kind, name, .. }
                if kind == "MutatingAdmissionPolicy" && name == MUTATING_POLICY)
        })
        .await;
    leader.stop().await.unwrap();

    let mistyped = PolicyTexts {
        validating: leak(PolicyTexts::EMBEDDED.validating.replace(
            "variables.mode != 'MODE' || !variables.celDecides || size(variables.namespaceBinding) != 4 ||",
            "variables.mode != 'MODE' || !variables.celDecides || size(variables.namespaceBinding) != 4 || object.spec.nodeNam == '' ||",
        )),
        ..PolicyTexts::EMBEDDED
    };
    assert_ne!(mistyped.validating, PolicyTexts::EMBEDDED.validating);
    let mut leader = setup.leader_with(Engine::Cel, mistyped);
    leader.wait_ready(WAIT).await;
    let problem = eventually("the type-checking warning reported", WAIT, || async {
        setup
            .state
            .problem()
            .filter(|p| p.contains("ValidatingAdmissionPolicy poolkeeper-placement-enforce"))
    })
    .await
    .unwrap_or_else(|error| panic!("{error}: {:?}", setup.state.problem()));
    assert!(problem.contains("nodeNam"), "{problem}");
    let event = published
        .wait_for(WAIT, |event| {
            matches!(event, Event::AdmissionPolicyProblem { kind, name, .. }
                if kind == "ValidatingAdmissionPolicy" && name == "poolkeeper-placement-enforce")
        })
        .await;
    let Event::AdmissionPolicyProblem { uid, message, .. } = event else {
        unreachable!()
    };
    assert!(!uid.is_empty());
    assert!(message.contains("nodeNam"), "{message}");

    // Fixed (the embedded policies again): the report clears.
    leader.stop().await.unwrap();
    let mut leader = setup.leader(Engine::Cel);
    leader.wait_ready(WAIT).await;
    eventually("the report cleared", WAIT, || async {
        setup.state.problem().is_none().then_some(())
    })
    .await
    .unwrap_or_else(|error| panic!("{error}: {:?}", setup.state.problem()));
    leader.stop().await.unwrap();

    // Uninstalled (the installer's MutatingWebhookConfiguration deleted):
    // the garbage collector removes every object the leader wrote.
    Api::<MutatingWebhookConfiguration>::all(setup.env.client())
        .delete("poolkeeper", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "every CEL object collected with its owner",
        WAIT,
        || async { (setup.objects_present().await == [false; 4]).then_some(()) },
    )
    .await
    .expect("collected");
}

/// An expression that compiles but fails while the API server evaluates a
/// Pod (`int()` of a pool name) surfaces from the API server's `/metrics`:
/// in the leader's report (`/readyz?verbose`), as a problem of the policy
/// (for its Warning Event) and in `poolkeeper_cel_policy_errors_total`; the
/// embedded policies written again, the report clears (the API server's
/// counters keep the errors counted before: the next leader's first read
/// is its baseline). A /metrics the leader may not read is reported, not
/// fatal.
#[tokio::test]
async fn a_runtime_error_surfaces_from_the_api_servers_metrics() {
    let setup = Setup::start().await;
    let mut registry = prometheus_client::registry::Registry::with_prefix("poolkeeper");
    let _resolver = EngineResolver::new(
        EngineChoice::Cel,
        setup.env.client(),
        setup.state.clone(),
        &mut registry,
    );
    setup.set_policy("bindings: [{namespace: shop, nodePool: hangzhou}]");
    let published = BusRecorder::new(&setup.bus);
    setup.bus.start();

    let failing = PolicyTexts {
        mutating: Box::leak(
            PolicyTexts::EMBEDDED
                .mutating
                .replace(
                    "variables.binding[2] + '\",\"binding\"",
                    "string(int(variables.binding[2])) + '\",\"binding\"",
                )
                .into_boxed_str(),
        ),
        ..PolicyTexts::EMBEDDED
    };
    assert_ne!(failing.mutating, PolicyTexts::EMBEDDED.mutating);
    let mut leader = setup.leader_with(Engine::Cel, failing);
    leader.wait_ready(WAIT).await;
    let mut attempt = 0;
    let problem = eventually("the runtime error reported", WAIT, || {
        attempt += 1;
        let setup = &setup;
        async move {
            // Refused: the policy fails and its failurePolicy is Fail.
            let created = setup
                .try_placed_pool("shop", &format!("failing-{attempt}"))
                .await;
            if let Ok(Some(pool)) = created {
                panic!("placed in {pool} by a policy that cannot evaluate");
            }
            tokio::time::sleep(READ_INTERVAL).await;
            setup.state.problem().filter(|p| {
                p.contains("MutatingAdmissionPolicy poolkeeper-placement: ")
                    && p.contains("(invalid_error) counted by the API server")
            })
        }
    })
    .await
    .unwrap_or_else(|error| panic!("{error}: {:?}", setup.state.problem()));
    assert!(!problem.contains("/metrics"), "{problem}");
    let event = published
        .wait_for(WAIT, |event| {
            matches!(event, Event::AdmissionPolicyProblem { kind, name, message, .. }
                if kind == "MutatingAdmissionPolicy" && name == MUTATING_POLICY
                    && message.contains("invalid_error"))
        })
        .await;
    let Event::AdmissionPolicyProblem { uid, .. } = event else {
        unreachable!()
    };
    let stored = Api::<MutatingAdmissionPolicy>::all(setup.env.client())
        .get(MUTATING_POLICY)
        .await
        .unwrap();
    assert_eq!(Some(uid), stored.metadata.uid);
    let mut exposition = String::new();
    prometheus_client::encoding::text::encode(&mut exposition, &registry).unwrap();
    let counted: f64 = exposition
        .lines()
        .find(|line| {
            line.starts_with("poolkeeper_cel_policy_errors_total{")
                && line.contains("kind=\"MutatingAdmissionPolicy\"")
                && line.contains("name=\"poolkeeper-placement\"")
                && line.contains("error_type=\"invalid_error\"")
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no counted error in:\n{exposition}"));
    assert!(counted >= 1.0, "{exposition}");
    leader.stop().await.unwrap();

    // Fixed: the embedded policies written again. The API server still
    // counts the earlier errors; the next leader reads them as its baseline
    // and reports nothing, and Pods are placed again.
    let mut leader = setup.leader(Engine::Cel);
    leader.wait_ready(WAIT).await;
    let mut attempt = 0;
    eventually("a Pod placed by the fixed policy", WAIT, || {
        attempt += 1;
        let setup = &setup;
        async move {
            let pool = setup
                .try_placed_pool("shop", &format!("fixed-{attempt}"))
                .await
                .ok()??;
            (pool == "hangzhou").then_some(())
        }
    })
    .await
    .unwrap_or_else(|error| panic!("{error}: {:?}", setup.state.problem()));
    // Pods that met the failing policy before the API server reloaded it
    // may have been counted in this term (read within two reads): reported
    // until ten quiet reads.
    tokio::time::sleep(READ_INTERVAL * 2).await;
    eventually("the report cleared", WAIT, || async {
        setup.state.problem().is_none().then_some(())
    })
    .await
    .unwrap_or_else(|error| panic!("{error}: {:?}", setup.state.problem()));
    setup.placed_pool("shop", "after").await;
    tokio::time::sleep(READ_INTERVAL * 3).await;
    assert_eq!(setup.state.problem(), None);

    // The metrics not readable (the rule taken from the ClusterRole): the
    // report says so, the leader keeps running, and it clears once allowed.
    let roles = Api::<ClusterRole>::all(setup.env.client());
    let granted = roles.get("poolkeeper").await.unwrap();
    let mut denied = granted.clone();
    denied
        .rules
        .get_or_insert_default()
        .retain(|rule| rule.non_resource_urls.is_none());
    assert_ne!(denied.rules, granted.rules);
    roles
        .replace("poolkeeper", &PostParams::default(), &denied)
        .await
        .unwrap();
    let problem = eventually("the failed read reported", WAIT, || async {
        setup
            .state
            .problem()
            .filter(|p| p.contains("the policies' evaluation errors are not known"))
    })
    .await
    .unwrap_or_else(|error| panic!("{error}: {:?}", setup.state.problem()));
    assert!(
        problem.contains("/metrics") && problem.contains("forbidden"),
        "{problem}"
    );
    let mut granted_again = granted;
    granted_again.metadata.resource_version = None;
    roles
        .replace("poolkeeper", &PostParams::default(), &granted_again)
        .await
        .unwrap();
    eventually(
        "the report cleared once /metrics is readable",
        WAIT,
        || async { setup.state.problem().is_none().then_some(()) },
    )
    .await
    .unwrap_or_else(|error| panic!("{error}: {:?}", setup.state.problem()));
    leader.stop().await.unwrap();
}

/// Each object carries the epoch of the term that applied it last and each
/// write the resourceVersion its term saw: a deposed leader's late apply or
/// delete is refused by the API server (409), and the old leader, reading the
/// newer epoch, stops writing; a replica of an older term writes nothing.
#[tokio::test]
async fn a_deposed_leaders_late_writes_are_refused_by_the_api_server() {
    let setup = Setup::start().await;
    setup.set_policy("bindings: [{namespace: shop, nodePool: hangzhou}]");
    setup.bus.start();
    let mut old = setup.leader_in(Engine::Cel, 3);
    old.wait_ready(WAIT).await;
    let seen_by_old = setup.stamped("3").await;

    let mut new = setup.leader_in(Engine::Cel, 4);
    new.wait_ready(WAIT).await;
    let stamped = setup.stamped("4").await;
    new.stop().await.unwrap();

    // The old term's in-flight writes, as it computed them before the stamp.
    let policies = Api::<MutatingAdmissionPolicy>::all(setup.identity.clone());
    let mut late = policies.get(MUTATING_POLICY).await.unwrap();
    let (_, _, version) = seen_by_old
        .iter()
        .find(|(key, _, _)| *key == format!("MutatingAdmissionPolicy/{MUTATING_POLICY}"))
        .unwrap()
        .clone();
    stamp(&mut late.metadata, 3, version.clone());
    late.metadata.managed_fields = None;
    let applied = policies
        .patch(
            MUTATING_POLICY,
            &PatchParams::apply("poolkeeper").force(),
            &Patch::Apply(&late),
        )
        .await;
    assert!(
        matches!(&applied, Err(kube::Error::Api(status)) if status.code == 409),
        "the late apply is refused: {applied:?}"
    );
    let deleted = policies
        .delete(
            MUTATING_POLICY,
            &DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    resource_version: version,
                    uid: None,
                }),
                ..DeleteParams::default()
            },
        )
        .await;
    assert!(
        matches!(&deleted, Err(kube::Error::Api(status)) if status.code == 409),
        "the late delete is refused: {deleted:?}"
    );

    // The old leader, still believing in its term, is asked for a change:
    // its apply is refused, it reads epoch 4 and stops.
    setup.set_policy("bindings: [{namespace: shop, nodePool: cloud}]");
    setup.deposed(3).await;
    assert_eq!(setup.epochs().await, stamped, "nothing written by term 3");
    old.stop().await.unwrap();

    // A replica of an older term reads epoch 4 and neither applies nor deletes.
    for engine in [Engine::Cel, Engine::Webhook] {
        setup.state.report_problem(None);
        let older = setup.leader_in(engine, 2);
        setup.deposed(2).await;
        older.stop().await.unwrap();
        assert_eq!(
            setup.epochs().await,
            stamped,
            "nothing written by term 2 ({engine})"
        );
    }
}
