//! Rounds with several LISTs in flight: the same result as one at a time,
//! in less (paused-clock) time, never more pages in flight than allowed.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use poolkeeper_index::{Index, IndexResource};
use poolkeeper_placement::{PodPlacement, Workload, WorkloadKind};
use serde_json::json;
use tokio::time::Instant;

use super::{
    FAKE_VERSION, FakePods, POOL, Start, assert_failed_listing, cluster, labels, namespace_query,
    on, pod, policy, policy_config_map, settings,
};
use crate::lister::PodQuery;
use crate::{ReportKey, Round, audit_round};

fn namespace(i: usize) -> String {
    format!("ns-{i:02}")
}

/// `namespaces` bound namespaces, alternately to hangzhou and beijing.
fn bind(index: &Index, namespaces: usize) {
    let mut yaml = String::from("bindings:\n");
    for i in 0..namespaces {
        let pool = if i % 2 == 0 { "hangzhou" } else { "beijing" };
        yaml.push_str(&format!(
            "  - {{namespace: {}, nodePool: {pool}}}\n",
            namespace(i)
        ));
    }
    if namespaces == 0 {
        yaml = String::new();
    }
    index.apply(policy_config_map(&yaml));
}

/// Per bound namespace: a third outside its pool, a third inside, a third
/// pending with a selector no node matches; then labelled Pods elsewhere.
fn pods(namespaces: usize, per_namespace: usize) -> Vec<PodPlacement> {
    let mut pods = Vec::new();
    for i in 0..namespaces {
        let (inside, outside) = if i % 2 == 0 {
            ("hz-1", "bj-1")
        } else {
            ("bj-1", "hz-2")
        };
        for j in 0..per_namespace {
            let name = format!("p-{i:02}-{j:02}");
            let spec = match j % 3 {
                0 => on(outside),
                1 => on(inside),
                _ => json!({"nodeSelector": {"x": "y"}}),
            };
            pods.push(pod(&namespace(i), &name, json!({}), spec));
        }
    }
    for j in 0..4 {
        let pool = if j % 2 == 0 { "beijing" } else { "hangzhou" };
        let name = format!("labelled-{j}");
        pods.push(pod("default", &name, labels(&[(POOL, pool)]), on("hz-1")));
    }
    pods
}

fn workloads() -> Vec<Workload> {
    let deployment = |namespace: &str, name: &str, node: &str| {
        let template =
            json!({"spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}});
        let object = json!({"metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}")},
            "spec": {"template": template}});
        Workload::from_value(WorkloadKind::Deployment, object).unwrap()
    };
    vec![
        deployment(&namespace(0), "stray-0", "bj-1"),
        deployment(&namespace(1), "stray-1", "hz-1"),
    ]
}

/// Later namespaces answer sooner, so LISTs finish out of their order.
fn reversed_latency(query: &PodQuery, _token: Option<&str>) -> Duration {
    match query {
        PodQuery::Namespace { namespace, .. } => {
            let i: u64 = namespace.trim_start_matches("ns-").parse().unwrap();
            Duration::from_millis(100u64.saturating_sub(7 * i).max(1))
        }
        PodQuery::Labelled { .. } => Duration::from_millis(3),
    }
}

/// The round, and the pages each query was asked for, in order.
async fn run(
    namespaces: usize,
    per_namespace: usize,
    (page_size, max_reported, concurrency): (u32, usize, usize),
    previous: &HashSet<ReportKey>,
) -> (Round, BTreeMap<String, Vec<Option<String>>>) {
    let mut settings = settings();
    (
        settings.page_size,
        settings.max_reported,
        settings.concurrency,
    ) = (page_size, max_reported, concurrency);
    let index = cluster();
    bind(&index, namespaces);
    let lister = FakePods::new(pods(namespaces, per_namespace))
        .with_workloads(workloads())
        .with_latency(reversed_latency);
    let mut round = audit_round(&lister, &index, &policy(), &settings, previous)
        .await
        .unwrap();
    assert!(lister.max_in_flight.load(Ordering::SeqCst) <= concurrency);
    round.duration = Duration::ZERO;
    let mut pages: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    let calls = lister.calls.lock().clone();
    // The LISTs that started before the round's first answer read the
    // latest Pods; every later one reads from its resourceVersion.
    let latest = calls.iter().filter(|(_, _, start)| *start == Start::Latest);
    assert!((1..=concurrency).contains(&latest.count()));
    for (query, _, start) in &calls {
        pages
            .entry(query.to_string())
            .or_default()
            .push(start.continue_token().map(str::to_owned));
        if let Start::NotOlderThan(version) = start {
            assert_eq!(version, FAKE_VERSION);
        }
    }
    (round, pages)
}

/// Whatever the concurrency: the same Pods, counts, findings in the same
/// order, truncation and still-reported keys as one LIST at a time, and
/// each query's pages asked for one after another.
#[tokio::test(start_paused = true)]
async fn any_concurrency_finds_what_one_list_at_a_time_finds() {
    let previous: HashSet<ReportKey> = [
        ReportKey::new("uid-p-03-00", "ns-03", "p-03-00", "outside_pool"),
        ReportKey::new("uid-p-11-02", "ns-11", "p-11-02", "no_matching_node"),
        ReportKey::new("uid-stray-1", "ns-01", "Deployment/stray-1", "outside_pool"),
        ReportKey::new("uid-gone", "ns-01", "gone", "outside_pool"),
    ]
    .into_iter()
    .collect();
    // (namespaces, Pods per namespace, page size, max reported)
    let cases = [
        (12, 5, 2, 100),
        (12, 5, 2, 1),
        (12, 5, 3, 7),
        (12, 6, 1, 40),
        (12, 6, 500, 51),
        (12, 6, 500, 52),
        (0, 0, 2, 100),
        (1, 9, 2, 3),
    ];
    for (namespaces, per_namespace, page_size, max_reported) in cases {
        let case =
            format!("{namespaces}x{per_namespace}, pages of {page_size}, {max_reported} reported");
        let (sequential, sequential_pages) = run(
            namespaces,
            per_namespace,
            (page_size, max_reported, 1),
            &previous,
        )
        .await;
        assert!(
            sequential.violations() > 0 && sequential.findings.len() <= max_reported,
            "{case}"
        );
        for concurrency in [2, 4, 8, 32] {
            let (round, pages) = run(
                namespaces,
                per_namespace,
                (page_size, max_reported, concurrency),
                &previous,
            )
            .await;
            assert_eq!(round, sequential, "{case}, concurrency {concurrency}");
            assert_eq!(pages, sequential_pages, "{case}, concurrency {concurrency}");
        }
    }
}

/// The table's edge: 12 namespaces of 6 Pods hold 4 violations each, the
/// labelled Pods 2 and the workloads 2.
#[tokio::test(start_paused = true)]
async fn the_table_truncates_at_the_edge() {
    let (all, _) = run(12, 6, (500, 1000, 1), &HashSet::new()).await;
    assert_eq!(all.violations(), 52);
    assert_eq!(all.findings.len(), 52);
    let (at_edge, _) = run(12, 6, (500, 52, 4), &HashSet::new()).await;
    assert!(!at_edge.truncated);
    assert_eq!(at_edge.findings, all.findings);
    let (one_short, _) = run(12, 6, (500, 51, 4), &HashSet::new()).await;
    assert!(one_short.truncated);
    assert_eq!(one_short.findings[..], all.findings[..51]);
    assert_eq!(one_short.counts, all.counts);
}

/// `namespaces` bound namespaces of `per_namespace` Pods in pages of
/// `page_size`, every Pod page taking 100 ms (those of `ns-00` `first`, the
/// labelled Pods none): how long the round took on tokio's clock, and the
/// most pages in flight.
async fn timed(
    (namespaces, per_namespace): (usize, usize),
    page_size: u32,
    concurrency: usize,
    first: Duration,
) -> (Duration, usize) {
    let mut settings = settings();
    (settings.page_size, settings.concurrency) = (page_size, concurrency);
    let index = cluster();
    bind(&index, namespaces);
    let lister =
        FakePods::new(pods(namespaces, per_namespace)).with_latency(move |query, _| match query {
            PodQuery::Namespace { namespace, .. } if namespace == "ns-00" => first,
            PodQuery::Namespace { .. } => Duration::from_millis(100),
            PodQuery::Labelled { .. } => Duration::ZERO,
        });
    let started = Instant::now();
    let round = audit_round(&lister, &index, &policy(), &settings, &HashSet::new())
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(round.duration, elapsed);
    let on_their_pools_nodes = (0..per_namespace).filter(|j| j % 3 == 1).count();
    assert_eq!(
        round.pods,
        namespaces * (per_namespace - on_their_pools_nodes) + 4,
        "4 labelled elsewhere; those on their pools' Nodes left out"
    );
    (elapsed, lister.max_in_flight.load(Ordering::SeqCst))
}

#[tokio::test(start_paused = true)]
async fn lists_in_flight_shorten_the_round_up_to_the_limit() {
    // (namespaces, Pods each, page size, concurrency, round, pages in flight at most)
    let cases = [
        (40, 3, 500, 1, 4000, 1),
        (40, 3, 500, 3, 1400, 3),
        (40, 3, 500, 8, 500, 8),
        (40, 3, 500, 32, 200, 32),
        (40, 3, 500, 40, 100, 40),
        // One namespace of 10 pages (30 Pods read, the 15 on its pool's Node
        // left out): its pages one after another (the labelled Pods' LIST
        // beside them).
        (1, 45, 3, 8, 1000, 2),
        // 8 namespaces of 4 pages each, 4 at a time: 2 × 4 pages.
        (8, 18, 3, 4, 800, 4),
    ];
    for (namespaces, per_namespace, page_size, concurrency, millis, most) in cases {
        let (elapsed, in_flight) = timed(
            (namespaces, per_namespace),
            page_size,
            concurrency,
            Duration::from_millis(100),
        )
        .await;
        let case =
            format!("{namespaces}x{per_namespace} in pages of {page_size}, {concurrency} at once");
        assert_eq!(elapsed, Duration::from_millis(millis), "{case}");
        assert_eq!(in_flight, most, "{case}");
    }
}

/// A LIST far slower than the others (a namespace of many pages, an API
/// server's slow answer) keeps one place; the other LISTs go on in the rest.
#[tokio::test(start_paused = true)]
async fn a_slow_list_holds_back_no_other() {
    let (elapsed, in_flight) = timed((40, 3), 500, 4, Duration::from_secs(10)).await;
    // The 39 others take 1.3 s three at a time, beside the slow one; held
    // behind it they would start after it, 0.9 s later.
    assert_eq!(elapsed, Duration::from_secs(10));
    assert_eq!(in_flight, 4);
}

#[tokio::test(start_paused = true)]
async fn a_failed_list_fails_the_round_naming_its_query() {
    let mut settings = settings();
    settings.concurrency = 8;
    let index = cluster();
    bind(&index, 40);
    let lister = FakePods::new(pods(40, 3)).with_latency(reversed_latency);
    // ns-17 is bound to beijing.
    *lister.failing_query.lock() = Some(namespace_query(&namespace(17), &["bj-1"]));
    let error = audit_round(&lister, &index, &policy(), &settings, &HashSet::new())
        .await
        .unwrap_err();
    assert_failed_listing(&error, "ns-17");
    assert!(lister.max_in_flight.load(Ordering::SeqCst) <= 8);
}
