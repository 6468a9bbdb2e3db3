//! An in-memory API server for MachineClass finalizer patches.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use json_patch::Patch as JsonPatch;
use parking_lot::Mutex;
use poolkeeper_bus::ObjectKey;
use poolkeeper_index::{Index, MachineClass};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::writer::{ClassWriter, WriteError};

/// One call the fake answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Call {
    pub at: Instant,
    pub key: ObjectKey,
    pub result: Result<(), WriteError>,
}

#[derive(Default)]
struct FakeState {
    objects: HashMap<ObjectKey, Value>,
    /// Accepted writes are copied here, as the watch would.
    index: Option<Arc<Index>>,
    latency: Duration,
    /// Answers for the next calls, before the patch is even looked at.
    injected: VecDeque<WriteError>,
    calls: Vec<Call>,
    in_flight: usize,
    max_in_flight: usize,
    keys_in_flight: HashSet<ObjectKey>,
    /// Calls for a key that was already being written.
    overlaps: usize,
}

/// Applies JSON patches to stored JSON objects for real, so that the
/// patches' `test` guards behave as on an API server.
#[derive(Clone, Default)]
pub(crate) struct FakeWriter {
    state: Arc<Mutex<FakeState>>,
}

impl FakeWriter {
    /// Stores `class` as the API server would hold it.
    pub fn insert(&self, class: &MachineClass) {
        let mut object = json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineClass",
            "metadata": {
                "name": class.key.name,
                "namespace": class.key.namespace,
                "resourceVersion": class.resource_version,
            },
            "providerSpec": {"hash": class.spec_hash},
        });
        if !class.finalizers.is_empty() {
            object["metadata"]["finalizers"] = json!(class.finalizers);
        }
        self.state.lock().objects.insert(class.key.clone(), object);
    }

    pub fn mirror_to(&self, index: Arc<Index>) {
        self.state.lock().index = Some(index);
    }

    pub fn set_latency(&self, latency: Duration) {
        self.state.lock().latency = latency;
    }

    pub fn fail_next(&self, error: WriteError) {
        self.state.lock().injected.push_back(error);
    }

    pub fn finalizers(&self, key: &ObjectKey) -> Option<Vec<String>> {
        let state = self.state.lock();
        let object = state.objects.get(key)?;
        Some(
            object["metadata"]["finalizers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect(),
        )
    }

    pub fn resource_version(&self, key: &ObjectKey) -> Option<String> {
        let state = self.state.lock();
        state.objects.get(key)?["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_owned)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().calls.clone()
    }

    pub fn max_in_flight(&self) -> usize {
        self.state.lock().max_in_flight
    }

    pub fn overlaps(&self) -> usize {
        self.state.lock().overlaps
    }

    fn apply(state: &mut FakeState, key: &ObjectKey, patch: &JsonPatch) -> Result<(), WriteError> {
        if let Some(error) = state.injected.pop_front() {
            return Err(error);
        }
        let Some(object) = state.objects.get_mut(key) else {
            return Err(WriteError::NotFound);
        };
        let mut patched = object.clone();
        json_patch::patch(&mut patched, patch).map_err(|e| WriteError::Conflict(e.to_string()))?;
        let version: u64 = object["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        patched["metadata"]["resourceVersion"] = json!((version + 1).to_string());
        *object = patched.clone();
        if let Some(index) = &state.index {
            let current = index.machines().machine_class(key).cloned();
            if let Some(current) = current {
                index.upsert_machine_class(MachineClass {
                    finalizers: patched["metadata"]["finalizers"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|f| f.as_str().map(str::to_owned))
                        .collect(),
                    resource_version: (version + 1).to_string(),
                    ..current
                });
            }
        }
        Ok(())
    }
}

impl ClassWriter for FakeWriter {
    async fn patch_finalizers(&self, key: &ObjectKey, patch: &JsonPatch) -> Result<(), WriteError> {
        let latency = {
            let mut state = self.state.lock();
            state.in_flight += 1;
            state.max_in_flight = state.max_in_flight.max(state.in_flight);
            if !state.keys_in_flight.insert(key.clone()) {
                state.overlaps += 1;
            }
            state.latency
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut state = self.state.lock();
        let result = Self::apply(&mut state, key, patch);
        state.in_flight -= 1;
        state.keys_in_flight.remove(key);
        state.calls.push(Call {
            at: Instant::now(),
            key: key.clone(),
            result: result.clone(),
        });
        result
    }
}
