//! The `audit-reports` leader against a real kube-apiserver with the
//! upstream OpenReports CRDs, acting as poolkeeper's ServiceAccount under
//! `deploy/rbac.yaml`: the reports are fenced by the leader's epoch.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    Preconditions,
};
use kube::{Api, Client};
use poolkeeper_bus::{AuditCount, AuditViolation, Bus, Event, Mode};
use poolkeeper_kube::{LEADER_EPOCH_ANNOTATION, stamp};
use poolkeeper_reports::{AuditReports, ReportSettings};
use poolkeeper_supervisor::testing::{Running, spawn};
use poolkeeper_supervisor::{Health, LeaderTerm};
use poolkeeper_testenv::{TestEnv, eventually, openreports_crds};
use tokio::time::Instant;

const SERVICE_ACCOUNT: &str = "system:serviceaccount:poolkeeper-system:poolkeeper";
const WAIT: Duration = Duration::from_secs(30);
/// Set by `cargo xtask test`; else what `cargo xtask control-plane` fetched.
fn reports(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("openreports.io", "v1alpha1", "Report"),
        "reports",
    );
    Api::namespaced_with(client.clone(), namespace, &resource)
}

fn violation(namespace: &str, pod: &str) -> AuditViolation {
    AuditViolation {
        namespace: namespace.to_owned(),
        pod: pod.to_owned(),
        kind: "Pod",
        api_version: "v1",
        name: pod.to_owned(),
        uid: format!("uid-{pod}"),
        mode: Mode::Enforce,
        first_found: false,
        pool: "hangzhou".to_owned(),
        reason: "outside_pool",
        node: Some("edge-1".to_owned()),
        message: format!("pod {pod} is outside node pool \"hangzhou\""),
    }
}

struct Setup {
    env: TestEnv,
    identity: Client,
    bus: Bus,
    health: Health,
}

impl Setup {
    async fn start() -> Self {
        let env = TestEnv::builder()
            .crd_files(openreports_crds())
            .start()
            .await
            .expect("start the local control plane (see xtask/testenv)");
        env.apply_installed_rbac()
            .await
            .expect("apply deploy/namespace.yaml and deploy/rbac.yaml");
        for namespace in ["shop", "lab"] {
            env.create_namespace(namespace).await.unwrap();
        }
        let identity = env.impersonating(SERVICE_ACCOUNT).await.unwrap();
        let bus = Bus::default();
        bus.start();
        Self {
            env,
            identity,
            bus,
            health: Health::default(),
        }
    }

    /// A leader whose term `epoch` holds for the whole test.
    fn leader(&self, epoch: i64) -> Running {
        let term = LeaderTerm::new();
        term.confirm(epoch, Instant::now() + Duration::from_secs(3600));
        let settings = ReportSettings {
            enabled: true,
            concurrency: 2,
        };
        let reports = AuditReports::new(
            settings,
            &self.bus,
            self.identity.clone(),
            self.health.clone(),
        )
        .guarded_by(term);
        spawn(Box::new(reports))
    }

    /// An audit round that found `pods` (namespace, Pod) outside their pool.
    fn round(&self, pods: &[(&str, &str)]) {
        let results: Vec<AuditViolation> =
            pods.iter().map(|(ns, pod)| violation(ns, pod)).collect();
        let counts = pods
            .iter()
            .map(|(namespace, _)| AuditCount {
                namespace: (*namespace).to_owned(),
                pool: "hangzhou".to_owned(),
                reason: "outside_pool",
                pods: 1,
            })
            .collect();
        self.bus.publish(Event::AuditCompleted {
            pods: pods.len(),
            duration: Duration::from_millis(1),
            counts,
            violations: results.clone(),
            truncated: false,
            results: Arc::from(results),
        });
    }

    /// Each stored report: namespace, epoch, resourceVersion.
    async fn stored(&self) -> Vec<(String, Option<String>, Option<String>)> {
        let mut stored = Vec::new();
        for namespace in ["shop", "lab"] {
            let list = reports(&self.env.client(), namespace)
                .list(&ListParams::default())
                .await
                .unwrap();
            stored.extend(list.items.into_iter().map(|report| {
                let meta = report.metadata;
                let epoch = meta
                    .annotations
                    .and_then(|mut a| a.remove(LEADER_EPOCH_ANNOTATION));
                (namespace.to_owned(), epoch, meta.resource_version)
            }));
        }
        stored
    }

    /// Waits until both namespaces' reports exist, each with `epoch`.
    async fn stamped(&self, epoch: &str) -> Vec<(String, Option<String>, Option<String>)> {
        eventually(
            &format!("both reports stamped with epoch {epoch}"),
            WAIT,
            || async {
                let stored = self.stored().await;
                (stored.len() == 2 && stored.iter().all(|(_, e, _)| e.as_deref() == Some(epoch)))
                    .then_some(stored)
            },
        )
        .await
        .unwrap_or_else(|error| panic!("{error}: {:?}", self.health.readiness()))
    }

    /// Waits until the leader says a newer term than `epoch` owns the reports.
    async fn deposed(&self, epoch: i64) {
        let said = format!("newer than this replica's {epoch}");
        eventually(&format!("the term {epoch} deposed"), WAIT, || async {
            self.health.readiness().into_iter().find(|check| {
                check.name == AuditReports::NAME
                    && check.detail.as_deref().is_some_and(|d| d.contains(&said))
            })
        })
        .await
        .unwrap_or_else(|error| panic!("{error}: {:?}", self.health.readiness()));
    }
}

/// Each report carries the epoch of the term that wrote it last and each
/// write the resourceVersion its term saw: a deposed leader's late apply or
/// delete is refused by the API server (409); the old leader, refused, reads
/// the newer epoch and stops writing; a replica of an older term writes nothing.
#[tokio::test]
async fn a_deposed_leaders_late_writes_are_refused_by_the_api_server() {
    let setup = Setup::start().await;
    let old = setup.leader(3);
    setup.round(&[("shop", "web-1"), ("lab", "probe")]);
    let seen_by_old = setup.stamped("3").await;

    let new = setup.leader(4);
    setup.round(&[("shop", "web-1"), ("lab", "probe")]);
    let stamped = setup.stamped("4").await;
    new.stop().await.unwrap();

    // The old term's in-flight writes, as it computed them before the stamp.
    let shop = reports(&setup.identity, "shop");
    let mut late = reports(&setup.env.client(), "shop")
        .get("poolkeeper-placement")
        .await
        .unwrap();
    let (_, _, version) = seen_by_old
        .iter()
        .find(|(namespace, _, _)| namespace == "shop")
        .unwrap()
        .clone();
    stamp(&mut late.metadata, 3, version.clone());
    late.metadata.managed_fields = None;
    let applied = shop
        .patch(
            "poolkeeper-placement",
            &PatchParams::apply("poolkeeper").force(),
            &Patch::Apply(&late),
        )
        .await;
    assert!(
        matches!(&applied, Err(kube::Error::Api(status)) if status.code == 409),
        "the late apply is refused: {applied:?}"
    );
    let precondition = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: version,
            uid: None,
        }),
        ..DeleteParams::default()
    };
    let deleted = shop.delete("poolkeeper-placement", &precondition).await;
    assert!(
        matches!(&deleted, Err(kube::Error::Api(status)) if status.code == 409),
        "the late delete is refused: {deleted:?}"
    );

    // The old leader, still believing in its term, writes a round that
    // changes shop's report and removes lab's: both are refused, it reads
    // epoch 4 and stops.
    setup.round(&[("shop", "web-2")]);
    setup.deposed(3).await;
    assert_eq!(setup.stored().await, stamped, "nothing written by term 3");
    old.stop().await.unwrap();

    // A replica of an older term reads epoch 4 and writes nothing.
    let older = setup.leader(2);
    setup.round(&[("shop", "web-2")]);
    setup.deposed(2).await;
    older.stop().await.unwrap();
    assert_eq!(setup.stored().await, stamped, "nothing written by term 2");
}
