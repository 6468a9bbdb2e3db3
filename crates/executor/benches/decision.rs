//! The MachineClass decision for every class: 1,000 classes, 10,000
//! Machines in the index. One iteration is one full pass, as the executor
//! does it per dirty class: take the index's `machines()` view, copy the
//! class and the number of Machines referencing it (O(1) from the class
//! index), release the view, then `decide`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use poolkeeper_config::Config;
use poolkeeper_executor::ExecutorSettings;
use poolkeeper_executor::bench::{decide, finalizer_patch};
use poolkeeper_index::{Index, IndexResource, MachineClass, ObjectKey};
use serde_json::json;

const CLASSES: usize = 1_000;
const MACHINES: usize = 10_000;
/// Classes `USED..CLASSES` are referenced by no Machine.
const USED: usize = 900;
const NAMESPACE: &str = "machine-system";

fn class_name(i: usize) -> String {
    format!("shoot-worker-class-{i:04}")
}

/// A realistic mix: most used classes already protected (steady state), some
/// just gained Machines (finalizer to add), unused ones partly still
/// protected (finalizer to remove), a few being deleted.
fn populated_index(finalizer: &str) -> (Index, Vec<ObjectKey>) {
    let index = Index::new("apps.openyurt.io/nodepool");
    let mut keys = Vec::with_capacity(CLASSES);
    for i in 0..CLASSES {
        let key = ObjectKey::namespaced(NAMESPACE, class_name(i));
        let protected = if i < USED {
            !i.is_multiple_of(10)
        } else {
            i.is_multiple_of(2)
        };
        let mut finalizers = Vec::new();
        if i.is_multiple_of(7) {
            finalizers.push("example.com/backup-protection".to_owned());
        }
        if protected {
            finalizers.push(finalizer.to_owned());
        }
        let mut metadata = json!({
            "name": key.name,
            "namespace": NAMESPACE,
            "finalizers": finalizers,
            "resourceVersion": (40_000_000 + i).to_string(),
        });
        if i.is_multiple_of(50) {
            metadata["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
        }
        let class: poolkeeper_api::MachineClass = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineClass",
            "metadata": metadata,
            "providerSpec": {"machineType": "m5.large", "generation": i},
        }))
        .expect("a MachineClass parses");
        index.apply(class);
        keys.push(key);
    }
    for i in 0..MACHINES {
        let mut metadata = json!({
            "name": format!("{}-z{}-{i:05}", class_name(i % USED), 1 + i % 3),
            "namespace": NAMESPACE,
        });
        if i.is_multiple_of(100) {
            metadata["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
        }
        let machine: poolkeeper_api::Machine = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "Machine",
            "metadata": metadata,
            "spec": {"class": {"kind": "MachineClass", "name": class_name(i % USED)}},
        }))
        .expect("a Machine parses");
        index.apply(machine);
    }
    (index, keys)
}

/// One class as the executor snapshots it: class copy and Machine count.
fn snapshot(index: &Index, key: &ObjectKey) -> Option<(MachineClass, usize)> {
    let view = index.machines();
    view.machine_class(key).map(|class| {
        (
            class.clone(),
            view.machine_count_of_class(NAMESPACE, &key.name),
        )
    })
}

fn decision(c: &mut Criterion) {
    let settings = ExecutorSettings::from(&Config::default());
    let (finalizer, retries) = (settings.finalizer.as_str(), settings.retries);
    let (index, keys) = populated_index(finalizer);
    let mut group = c.benchmark_group("machineclass_decision");
    group.throughput(Throughput::Elements(CLASSES as u64));
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));

    group.bench_function("full_pass", |b| {
        b.iter(|| {
            for key in &keys {
                let (class, in_use) = snapshot(&index, key).expect("class exists");
                black_box(decide(&class, in_use, finalizer, (false, false), &retries));
            }
        })
    });

    group.bench_function("full_pass_with_patches", |b| {
        b.iter(|| {
            let mut patches = 0;
            for key in &keys {
                let (class, in_use) = snapshot(&index, key).expect("class exists");
                let decision = decide(&class, in_use, finalizer, (false, false), &retries);
                if let Some(change) = decision.patch
                    && let Some(patch) = finalizer_patch(&class, change, finalizer)
                {
                    black_box(patch);
                    patches += 1;
                }
            }
            patches
        })
    });

    // Reference: the same pass counting each class's Machines by a scan of
    // every Machine instead of the class index.
    group.sample_size(10);
    group.bench_function("full_pass_counting_by_scan", |b| {
        b.iter(|| {
            for key in &keys {
                let view = index.machines();
                let Some(class) = view.machine_class(key).cloned() else {
                    continue;
                };
                let in_use = view
                    .machines()
                    .filter(|m| m.class_name == key.name && m.key.namespace == key.namespace)
                    .count();
                drop(view);
                black_box(decide(&class, in_use, finalizer, (false, false), &retries));
            }
        })
    });
    group.finish();
}

criterion_group!(benches, decision);
criterion_main!(benches);
