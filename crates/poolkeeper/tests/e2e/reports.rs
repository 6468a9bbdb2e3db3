//! The audit's findings as OpenReports end to end: the upstream CRDs
//! (`github.com/openreports/reports-api`, fetched by `cargo xtask test`)
//! installed into a real kube-apiserver, the controller as poolkeeper's
//! ServiceAccount with `audit.reports` on. Nodes and pools as in `audit.rs`.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client};
use poolkeeper_testenv::{TestEnv, eventually, openreports_crds};
use serde_json::{Value, json};

use crate::audit::{Violations, audit_config, cluster_from, next_round, schedule, set, start_with};
use crate::harness::TIMEOUT;
use crate::objects::{pinned, write_policy};

/// Set by `cargo xtask test`; else what `cargo xtask control-plane` fetched.
fn reports(client: &Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("openreports.io", "v1alpha1", "Report"),
        "reports",
    );
    Api::all_with(client.clone(), &resource)
}

/// Every stored report as `namespace → report`.
async fn stored_reports(client: &Client) -> Vec<(String, Value)> {
    let list = reports(client).list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .map(|report| {
            let namespace = report.metadata.namespace.clone().unwrap_or_default();
            (namespace, serde_json::to_value(report).unwrap())
        })
        .collect()
}

/// `namespace/name` of every result of the stored reports.
fn reported(stored: &[(String, Value)]) -> Violations {
    stored
        .iter()
        .flat_map(|(namespace, report)| {
            report["results"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |result| {
                    format!(
                        "{namespace}/{}",
                        result["resources"][0]["name"].as_str().unwrap()
                    )
                })
        })
        .collect()
}

async fn reports_holding(
    client: &Client,
    what: &str,
    expected: &Violations,
) -> Vec<(String, Value)> {
    eventually(what, TIMEOUT, || async {
        let stored = stored_reports(client).await;
        (reported(&stored) == *expected).then_some(stored)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// `kubectl get reports -A` after a round lists exactly the violations the
/// round found, each with its object's UID, the webhook's message and
/// fail/warn by mode; fixing them removes them, and a namespace whose last
/// violation is gone has no report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_findings_are_openreports_that_go_away_when_fixed() {
    const SHOP: &str = "shop-reported";
    const LAB: &str = "lab-reported";
    let builder = TestEnv::builder()
        .scheduler(true)
        .crd_files(openreports_crds());
    let env = cluster_from(builder, &[SHOP, LAB]).await;
    let client = env.client();
    write_policy(
        &client,
        &[(SHOP, "cloud", "enforce"), (LAB, "cloud", "warn")],
    )
    .await;
    schedule(
        &env,
        SHOP,
        &[
            pinned("out-edge", "edge-1"),
            pinned("out-loose", "loose-1"),
            pinned("in-1", "cloud-1"),
        ],
    )
    .await;
    schedule(&env, LAB, &[pinned("probe", "loose-1")]).await;

    let cert_dir = tempfile::tempdir().unwrap();
    let mut config = audit_config(cert_dir.path());
    config.audit.reports = true;
    let mut running = start_with(&env, config).await;
    let expected = set(&[
        "lab-reported/probe",
        "shop-reported/out-edge",
        "shop-reported/out-loose",
    ]);
    let round = next_round(&mut running, "the three Pods outside", |v| *v == expected).await;

    let stored =
        reports_holding(&client, "a report per namespace with violations", &expected).await;
    assert_eq!(
        stored
            .iter()
            .map(|(ns, _)| ns.as_str())
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([LAB, SHOP])
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), SHOP);
    for (namespace, report) in &stored {
        assert_eq!(report["metadata"]["name"], "poolkeeper-placement");
        assert_eq!(report["source"], "poolkeeper");
        let managers: Vec<&str> = report["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["manager"].as_str())
            .collect();
        assert_eq!(managers, ["poolkeeper"], "{report}");
        for result in report["results"].as_array().unwrap() {
            let name = result["resources"][0]["name"].as_str().unwrap();
            let found = round["violations"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["namespace"] == json!(namespace) && v["pod"] == json!(name))
                .unwrap_or_else(|| panic!("{namespace}/{name} is not a violation of the round"));
            assert_eq!(result["message"], found["message"], "the webhook's text");
            assert_eq!(result["rule"], found["reason"]);
            assert_eq!(result["policy"], "poolkeeper-placement");
            if namespace == SHOP {
                assert_eq!(result["result"], "fail");
                let uid = pods.get(name).await.unwrap().metadata.uid.unwrap();
                assert_eq!(result["resources"][0]["uid"], json!(uid));
            } else {
                assert_eq!(result["result"], "warn");
            }
        }
    }
    let summary = |namespace: &str| {
        stored.iter().find(|(ns, _)| ns == namespace).unwrap().1["summary"].clone()
    };
    assert_eq!(
        summary(SHOP),
        json!({"pass": 0, "fail": 2, "warn": 0, "error": 0, "skip": 0})
    );
    assert_eq!(
        summary(LAB),
        json!({"pass": 0, "fail": 0, "warn": 1, "error": 0, "skip": 0})
    );
    let version =
        stored.iter().find(|(ns, _)| ns == SHOP).unwrap().1["metadata"]["resourceVersion"].clone();
    next_round(&mut running, "the same violations", |v| *v == expected).await;
    next_round(&mut running, "the same violations again", |v| {
        *v == expected
    })
    .await;
    let again = stored_reports(&client).await;
    let unchanged =
        again.iter().find(|(ns, _)| ns == SHOP).unwrap().1["metadata"]["resourceVersion"].clone();
    assert_eq!(
        unchanged, version,
        "a round that changes nothing writes nothing"
    );
    let (status, readyz) = running.get("/readyz?verbose").await;
    assert_eq!(status, 200, "{readyz}");
    assert!(
        readyz
            .contains("[+]audit-reports ok: writing openreports.io/v1alpha1 Reports: 2 namespaces"),
        "{readyz}"
    );

    for name in ["out-edge", "out-loose"] {
        pods.delete(name, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    let remaining = set(&["lab-reported/probe"]);
    let stored = reports_holding(&client, "the fixed namespace's report gone", &remaining).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    Api::<Pod>::namespaced(client.clone(), LAB)
        .delete("probe", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    reports_holding(&client, "no report left", &Violations::new()).await;
    assert!(stored_reports(&client).await.is_empty());
    running.stop().await;
}

/// Without the CRDs the audit goes on, and `/readyz?verbose` says why no
/// report is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_openreports_crds_readyz_says_no_report_is_written() {
    const SHOP: &str = "shop-unreported";
    let env = cluster_from(TestEnv::builder().scheduler(true), &[SHOP]).await;
    let client = env.client();
    write_policy(&client, &[(SHOP, "cloud", "enforce")]).await;
    schedule(&env, SHOP, &[pinned("out-edge", "edge-1")]).await;
    let cert_dir = tempfile::tempdir().unwrap();
    let mut config = audit_config(cert_dir.path());
    config.audit.reports = true;
    let mut running = start_with(&env, config).await;
    let expected = set(&["shop-unreported/out-edge"]);
    next_round(&mut running, "the Pod outside", |v| *v == expected).await;
    let readyz = eventually("the reports' line", TIMEOUT, || async {
        let (status, body) = running.get("/readyz?verbose").await;
        (status == 200 && body.contains("audit-reports")).then_some(body)
    })
    .await
    .unwrap();
    assert!(
        readyz.contains("[+]audit-reports ok: openreports.io/v1alpha1 Report is not served (install the OpenReports CRDs)"),
        "{readyz}"
    );
    running.stop().await;
}
