//! The cost of one Node heartbeat to the Node watcher: a `MODIFIED` watch
//! event line of a kubelet's ~10 KB Node (25 images, nodeInfo, addresses,
//! capacity, 6 annotations, 4 managedFields entries, 13 labels, 3 taints,
//! 5 conditions; `fixtures/node-heartbeat.json`) decoded as kube's watch
//! decodes it (`serde_json::from_str::<WatchEvent<K>>`) and written into an
//! index that already holds the Node, so the projection is unchanged and
//! nothing is published, as for every heartbeat.
//!
//! - `full_node`: `K` = k8s-openapi's `Node`, written through
//!   `IndexResource<Node>`;
//! - `summary`: `K` = [`NodeSummary`], what the watcher decodes.
//!
//! Before the timings it prints the allocations per event (count and bytes
//! requested), counted by `stats_alloc`'s instrumented system allocator.

use std::alloc::System;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use kube::core::WatchEvent;
use poolkeeper_index::{Index, IndexResource, NodeSummary};
use serde::de::DeserializeOwned;
use serde_json::Value;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
const NODE: &str = include_str!("../fixtures/node-heartbeat.json");
/// Events per allocation count.
const COUNTED: u64 = 1_000;

/// The watch event line as the API server sends it: one line, no spaces.
fn event_line() -> String {
    let node: Value = serde_json::from_str(NODE).expect("fixture is JSON");
    format!(r#"{{"type":"MODIFIED","object":{node}}}"#)
}

/// What the Node watcher does with one event line.
fn handle<K: Resource + DeserializeOwned>(index: &Index, line: &str)
where
    Index: IndexResource<K>,
{
    match serde_json::from_str::<WatchEvent<K>>(line).expect("event decodes") {
        WatchEvent::Modified(node) => {
            let changed = index.apply(node);
            debug_assert!(changed.is_none(), "a heartbeat changes nothing");
            black_box(changed);
        }
        _ => unreachable!("the fixture is a MODIFIED event"),
    }
}

/// An index holding the fixture's Node.
fn index_with_node(line: &str) -> Index {
    let index = Index::new(POOL_LABEL);
    if let WatchEvent::Modified(node) =
        serde_json::from_str::<WatchEvent<Node>>(line).expect("event decodes")
    {
        index.apply(node);
    }
    index
}

/// Allocations and bytes requested per event.
fn allocations<K: Resource + DeserializeOwned>(index: &Index, line: &str) -> (f64, f64)
where
    Index: IndexResource<K>,
{
    let before = INSTRUMENTED_SYSTEM.stats();
    for _ in 0..COUNTED {
        handle::<K>(index, line);
    }
    let after = INSTRUMENTED_SYSTEM.stats();
    let count =
        (after.allocations + after.reallocations) - (before.allocations + before.reallocations);
    let bytes = after.bytes_allocated - before.bytes_allocated;
    (count as f64 / COUNTED as f64, bytes as f64 / COUNTED as f64)
}

fn heartbeat(c: &mut Criterion) {
    let line = event_line();
    let index = index_with_node(&line);
    let full = allocations::<Node>(&index, &line);
    let summary = allocations::<NodeSummary>(&index, &line);
    println!(
        "node_heartbeat: one {} byte MODIFIED event, decoded and applied (unchanged)",
        line.len()
    );
    println!("| decoded into | allocations/event | bytes allocated/event |\n|---|---|---|");
    for (what, (count, bytes)) in [("k8s-openapi Node", full), ("NodeSummary", summary)] {
        println!("| {what} | {count:.1} | {bytes:.0} |");
    }
    let mut group = c.benchmark_group("node_heartbeat");
    group.bench_function("full_node", |b| b.iter(|| handle::<Node>(&index, &line)));
    group.bench_function("summary", |b| {
        b.iter(|| handle::<NodeSummary>(&index, &line))
    });
    group.finish();
}

criterion_group!(benches, heartbeat);
criterion_main!(benches);
