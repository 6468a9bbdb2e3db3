//! An in-memory API server for MachineClass and Secret finalizer patches.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use json_patch::Patch as JsonPatch;
use kube::core::Status;
use parking_lot::Mutex;
use poolkeeper_bus::ObjectKey;
use poolkeeper_index::{Index, IndexResource};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::writer::{ClassWriter, WriteError, classify_status};

/// The message of kube-apiserver's generic 422.
pub(crate) const REJECTED: &str = "the server rejected our request due to an error in our request";

/// An error status as the API server sends it.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> Box<Status> {
    status_from(json!({
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }))
}

/// [`status`] with one cause in its details.
pub(crate) fn status_with_cause(
    code: u16,
    reason: &str,
    message: &str,
    cause: &str,
) -> Box<Status> {
    let mut status = status(code, reason, message);
    status.details = Some(
        serde_json::from_value(json!({
            "causes": [{"reason": "UnexpectedServerResponse", "message": cause}],
        }))
        .expect("status details parse"),
    );
    status
}

/// What kube-apiserver answers a JSON patch whose `test` failed.
pub(crate) fn bare_unprocessable() -> Box<Status> {
    status_from(json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": REJECTED,
        "reason": "Invalid",
        "details": {},
        "code": 422,
    }))
}

fn status_from(value: Value) -> Box<Status> {
    Box::new(serde_json::from_value(value).expect("a status parses"))
}

/// How the fake answered one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Accepted,
    Conflict,
    NotFound,
    Failed,
}

impl Answer {
    fn of(result: &Result<(), WriteError>) -> Self {
        match result {
            Ok(()) => Answer::Accepted,
            Err(WriteError::Conflict(_)) => Answer::Conflict,
            Err(WriteError::NotFound) => Answer::NotFound,
            Err(_) => Answer::Failed,
        }
    }
}

/// One call the fake answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Call {
    pub at: Instant,
    pub key: ObjectKey,
    pub answer: Answer,
}

#[derive(Default)]
struct FakeState {
    objects: HashMap<ObjectKey, Value>,
    /// Secrets, apart: a Secret may share its key with a class.
    secrets: HashMap<ObjectKey, Value>,
    /// Accepted writes are applied here, as the watch would.
    index: Option<Arc<Index>>,
    latency: Duration,
    /// Error statuses for the next calls per key, before the patch is even
    /// looked at.
    injected: HashMap<ObjectKey, VecDeque<Box<Status>>>,
    calls: Vec<Call>,
    /// Classes whose patches never get an answer.
    hanging: HashSet<ObjectKey>,
    /// When each class patch came in, answered or not.
    attempts: Vec<(Instant, ObjectKey)>,
    in_flight: usize,
    max_in_flight: usize,
    keys_in_flight: HashSet<ObjectKey>,
    /// Calls for a key that was already being written.
    overlaps: usize,
}

/// Applies JSON patches to stored JSON objects for real, so that the
/// patches' `test` guards behave as on an API server, and answers with the
/// statuses kube-apiserver sends.
#[derive(Clone, Default)]
pub(crate) struct FakeWriter {
    state: Arc<Mutex<FakeState>>,
}

impl FakeWriter {
    /// Stores `class` as the API server holds it.
    pub fn insert(&self, class: &poolkeeper_api::MachineClass) {
        let key = ObjectKey::namespaced(
            class.metadata.namespace.clone().unwrap_or_default(),
            class.metadata.name.clone().unwrap_or_default(),
        );
        let object = serde_json::to_value(class).expect("a MachineClass serializes");
        self.state.lock().objects.insert(key, object);
    }

    /// Stores a Secret with `finalizers` and some data, as the API server
    /// holds it.
    pub fn insert_secret(&self, key: &ObjectKey, finalizers: &[&str]) {
        let object = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {
                "name": key.name, "namespace": key.namespace, "uid": format!("uid-{}", key.name),
                "resourceVersion": "1", "finalizers": finalizers,
            },
            "data": {"token": "c2VjcmV0"},
        });
        self.state.lock().secrets.insert(key.clone(), object);
    }

    pub fn secret_finalizers(&self, key: &ObjectKey) -> Option<Vec<String>> {
        self.state.lock().secrets.get(key).map(finalizers_of)
    }

    /// The Secret's data, which the patches must leave alone.
    pub fn secret_data(&self, key: &ObjectKey) -> Option<Value> {
        Some(self.state.lock().secrets.get(key)?["data"].clone())
    }

    pub fn mirror_to(&self, index: Arc<Index>) {
        self.state.lock().index = Some(index);
    }

    pub fn set_latency(&self, latency: Duration) {
        self.state.lock().latency = latency;
    }

    /// Patches of class `key` hang, as on an API server that never answers,
    /// until [`FakeWriter::answer`].
    pub fn hang(&self, key: &ObjectKey) {
        self.state.lock().hanging.insert(key.clone());
    }

    /// Patches of class `key` that come in from now on are answered again.
    pub fn answer(&self, key: &ObjectKey) {
        self.state.lock().hanging.remove(key);
    }

    /// `(when, class)` of every class patch that came in, answered or not.
    pub fn attempts(&self) -> Vec<(Instant, ObjectKey)> {
        self.state.lock().attempts.clone()
    }

    /// The next call for `key` is answered with `status`.
    pub fn answer_next(&self, key: &ObjectKey, status: Box<Status>) {
        let mut state = self.state.lock();
        state
            .injected
            .entry(key.clone())
            .or_default()
            .push_back(status);
    }

    pub fn finalizers(&self, key: &ObjectKey) -> Option<Vec<String>> {
        self.state.lock().objects.get(key).map(finalizers_of)
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

    /// Applies `patch` to `object` as the API server does: all or nothing,
    /// a failed `test` as the bare 422, a new resourceVersion. Returns the
    /// patched object.
    fn patch_object(object: &mut Value, patch: &JsonPatch) -> Result<Value, WriteError> {
        let mut patched = object.clone();
        if json_patch::patch(&mut patched, patch).is_err() {
            return Err(classify_status(bare_unprocessable()));
        }
        let version: u64 = object["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        patched["metadata"]["resourceVersion"] = json!((version + 1).to_string());
        *object = patched.clone();
        Ok(patched)
    }

    fn apply_secret(
        state: &mut FakeState,
        key: &ObjectKey,
        patch: &JsonPatch,
    ) -> Result<(), WriteError> {
        if let Some(status) = state.injected.get_mut(key).and_then(VecDeque::pop_front) {
            return Err(classify_status(status));
        }
        let Some(object) = state.secrets.get_mut(key) else {
            let message = format!("secrets \"{}\" not found", key.name);
            return Err(classify_status(status(404, "NotFound", &message)));
        };
        let patched = Self::patch_object(object, patch)?;
        if let Some(index) = &state.index {
            let mut meta: kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Secret> =
                serde_json::from_value(json!({"metadata": patched["metadata"]}))
                    .expect("the metadata of a patched Secret parses");
            meta.metadata.namespace = key.namespace.clone();
            index.apply(meta);
        }
        Ok(())
    }

    fn apply(state: &mut FakeState, key: &ObjectKey, patch: &JsonPatch) -> Result<(), WriteError> {
        if let Some(status) = state.injected.get_mut(key).and_then(VecDeque::pop_front) {
            return Err(classify_status(status));
        }
        let Some(object) = state.objects.get_mut(key) else {
            let message = format!("machineclasses \"{}\" not found", key.name);
            return Err(classify_status(status(404, "NotFound", &message)));
        };
        let patched = Self::patch_object(object, patch)?;
        if let Some(index) = &state.index
            && index.machines().machine_class(key).is_some()
        {
            let class: poolkeeper_api::MachineClass =
                serde_json::from_value(patched).expect("a patched MachineClass parses");
            index.apply(class);
        }
        Ok(())
    }
}

impl ClassWriter for FakeWriter {
    async fn patch_secret_finalizers(
        &self,
        key: &ObjectKey,
        patch: &JsonPatch,
    ) -> Result<(), WriteError> {
        let mut state = self.state.lock();
        let result = Self::apply_secret(&mut state, key, patch);
        state.calls.push(Call {
            at: Instant::now(),
            key: key.clone(),
            answer: Answer::of(&result),
        });
        result
    }

    async fn patch_finalizers(&self, key: &ObjectKey, patch: &JsonPatch) -> Result<(), WriteError> {
        let (latency, hangs) = {
            let mut state = self.state.lock();
            state.in_flight += 1;
            state.max_in_flight = state.max_in_flight.max(state.in_flight);
            if !state.keys_in_flight.insert(key.clone()) {
                state.overlaps += 1;
            }
            state.attempts.push((Instant::now(), key.clone()));
            (state.latency, state.hanging.contains(key))
        };
        // A caller that gives up drops this future: the call ends then.
        let _in_flight = InFlight {
            state: self.state.clone(),
            key: key.clone(),
        };
        if hangs {
            std::future::pending::<()>().await;
        }
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut state = self.state.lock();
        let result = Self::apply(&mut state, key, patch);
        state.calls.push(Call {
            at: Instant::now(),
            key: key.clone(),
            answer: Answer::of(&result),
        });
        result
    }
}

/// One class patch in progress, counted out when it ends or is given up.
struct InFlight {
    state: Arc<Mutex<FakeState>>,
    key: ObjectKey,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.state.lock();
        state.in_flight -= 1;
        state.keys_in_flight.remove(&self.key);
    }
}

/// `metadata.finalizers` of a stored object.
fn finalizers_of(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_owned))
        .collect()
}
