//! Workloads: the Pod template of Deployments, ReplicaSets, StatefulSets,
//! DaemonSets, Jobs, CronJobs and ReplicationControllers, decided like the
//! Pods it becomes, so that a denial reaches whoever applied the workload
//! instead of a `FailedCreate` Event on an object nobody looks at.
//!
//! - [`validate_workload`]: the template as the Pod it becomes (the Pod
//!   mutation applied, as the mutating webhook will apply it to each Pod),
//!   judged with [`validate`]'s rules, modes and messages. A DaemonSet's
//!   template is judged as written: its Pods get their nodes from it, not
//!   from the Pod mutation, so only a template the mutating webhook has
//!   narrowed stays in the pool (one created before its namespace was bound
//!   is reported by the audit until an update narrows it).
//! - [`mutate_workload`]: only a DaemonSet's template is patched: its
//!   controller picks nodes from the template (and gives each Pod an
//!   affinity to its one node), so the template gets the pool requirement
//!   ANDed into every term and the edge tolerations. The other templates
//!   are left as written; their Pods are placed when they are created.

use std::fmt;

use poolkeeper_index::PlacementView;
use serde_json::Value;

use crate::decision::{Decision, PatchTarget, Reason, WARN_PREFIX, mutate_at, validate};
use crate::error::PlacementError;
use crate::explain::{Explanation, explain};
use crate::pod::{PodPlacement, single_document};
use crate::policy::PlacementPolicy;

/// A kind of object that carries a Pod template.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
    ReplicationController,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 7] = [
        WorkloadKind::Deployment,
        WorkloadKind::ReplicaSet,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
        WorkloadKind::Job,
        WorkloadKind::CronJob,
        WorkloadKind::ReplicationController,
    ];

    /// The kind of an AdmissionRequest's `kind` (group, version, kind).
    pub fn from_type(group: &str, version: &str, kind: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|w| w.group() == group && version == "v1" && w.kind() == kind)
    }

    /// The kind of a manifest's `apiVersion` and `kind`.
    pub fn from_api_version(api_version: &str, kind: &str) -> Option<Self> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        Self::from_type(group, version, kind)
    }

    pub fn kind(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::ReplicaSet => "ReplicaSet",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::Job => "Job",
            WorkloadKind::CronJob => "CronJob",
            WorkloadKind::ReplicationController => "ReplicationController",
        }
    }

    pub fn group(self) -> &'static str {
        match self {
            WorkloadKind::Deployment
            | WorkloadKind::ReplicaSet
            | WorkloadKind::StatefulSet
            | WorkloadKind::DaemonSet => "apps",
            WorkloadKind::Job | WorkloadKind::CronJob => "batch",
            WorkloadKind::ReplicationController => "",
        }
    }

    /// JSON pointer tokens of the Pod template inside the object.
    pub fn template_path(self) -> &'static [&'static str] {
        match self {
            WorkloadKind::CronJob => &["spec", "jobTemplate", "spec", "template"],
            _ => &["spec", "template"],
        }
    }

    fn target(self) -> PatchTarget {
        PatchTarget {
            base: self.template_path(),
            always_narrow: self == WorkloadKind::DaemonSet,
        }
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

/// A workload object as placement reads it: its kind, name and Pod template.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub namespace: String,
    /// `metadata.name`, else `metadata.generateName`.
    pub name: String,
    /// `metadata.uid` (empty before the object is created).
    pub uid: String,
    /// The Pod template, as a Pod (its `metadata` and `spec`).
    pub template: PodPlacement,
    template_json: Value,
}

impl Workload {
    /// Reads the object's JSON; a missing template is an empty one.
    pub fn from_json(kind: WorkloadKind, json: &str) -> Result<Self, PlacementError> {
        let object: Value =
            serde_json::from_str(json).map_err(|error| PlacementError::InvalidPod { error })?;
        Self::from_value(kind, object)
    }

    pub fn from_value(kind: WorkloadKind, mut object: Value) -> Result<Self, PlacementError> {
        let text = |object: &Value, pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let namespace = text(&object, "/metadata/namespace");
        let uid = text(&object, "/metadata/uid");
        let name = match text(&object, "/metadata/name") {
            name if name.is_empty() => text(&object, "/metadata/generateName"),
            name => name,
        };
        let pointer: String = kind
            .template_path()
            .iter()
            .map(|token| format!("/{token}"))
            .collect();
        let template_json = object
            .pointer_mut(&pointer)
            .map(Value::take)
            .filter(|t| !t.is_null())
            .unwrap_or_else(|| Value::Object(Default::default()));
        let template = serde_json::from_value(template_json.clone())
            .map_err(|error| PlacementError::InvalidPod { error })?;
        Ok(Self {
            kind,
            namespace,
            name,
            uid,
            template,
            template_json,
        })
    }

    /// This workload with a patch of [`mutate_workload`] applied to it (its
    /// paths start at the object; only the template is kept of it).
    pub fn patched(&self, patch: &json_patch::Patch) -> Workload {
        let mut object = self.template_json.clone();
        for token in self.kind.template_path().iter().rev() {
            object = serde_json::json!({ *token: object });
        }
        if json_patch::patch(&mut object, &patch.0).is_err() {
            return self.clone();
        }
        let mut patched = self.clone();
        if let Ok(read) = Workload::from_value(self.kind, object) {
            patched.template = read.template;
            patched.template_json = read.template_json;
        }
        patched
    }

    /// Whether `other` has the same Pod template, as written.
    pub fn same_template(&self, other: &Workload) -> bool {
        self.template_json == other.template_json
    }

    /// `Kind namespace/name`, for messages.
    pub fn display_name(&self, namespace: &str) -> String {
        if namespace.is_empty() {
            format!("{} {}", self.kind, self.name)
        } else {
            format!("{} {namespace}/{}", self.kind, self.name)
        }
    }

    /// The template as the Pod it becomes: with the patch the mutating
    /// webhook gives each of its Pods, as `enforce` would apply it. A
    /// DaemonSet's as written: its controller places each Pod by the
    /// template.
    pub fn as_admitted_pod(
        &self,
        namespace: &str,
        view: &PlacementView<'_>,
        policy: &PlacementPolicy,
    ) -> PodPlacement {
        if self.kind == WorkloadKind::DaemonSet {
            return self.template.clone();
        }
        let mutation = mutate_at(&self.template, namespace, view, policy, &PatchTarget::POD);
        let Some(patch) = mutation.enforce_patch() else {
            return self.template.clone();
        };
        let mut admitted = self.template_json.clone();
        match json_patch::patch(&mut admitted, &patch.0) {
            Ok(()) => serde_json::from_value(admitted).unwrap_or_else(|_| self.template.clone()),
            // The patch is built from this very template: it always applies.
            Err(_) => self.template.clone(),
        }
    }
}

/// The validating decision for a workload: its template, as the Pod it
/// becomes, under [`validate`]'s rules in the binding's mode; a denial names
/// the workload.
pub fn validate_workload(
    workload: &Workload,
    namespace: &str,
    view: &PlacementView<'_>,
    policy: &PlacementPolicy,
) -> Decision {
    let pod = workload.as_admitted_pod(namespace, view, policy);
    let mut decision = validate(&pod, namespace, view, policy);
    for text in [&mut decision.message, &mut decision.withheld_denial]
        .into_iter()
        .flatten()
    {
        *text = format!("the pod template of {}: {text}", workload.kind);
    }
    for warning in decision.warnings.iter_mut() {
        if let Some(denial) = warning.strip_prefix(WARN_PREFIX) {
            *warning = format!(
                "{WARN_PREFIX}the pod template of {}: {denial}",
                workload.kind
            );
        }
    }
    decision
}

/// The mutating decision for a workload: a DaemonSet's template gets the
/// pool requirement ANDed into every required term (existing constraints
/// kept) and the edge tolerations, in the binding's mode; other templates
/// are not patched.
pub fn mutate_workload(
    workload: &Workload,
    namespace: &str,
    view: &PlacementView<'_>,
    policy: &PlacementPolicy,
) -> Decision {
    if workload.kind != WorkloadKind::DaemonSet {
        return Decision::allow(Reason::TemplateNotMutated);
    }
    mutate_at(
        &workload.template,
        namespace,
        view,
        policy,
        &workload.kind.target(),
    )
}

/// A manifest `explain` reads: a Pod, or a workload whose template it explains.
#[derive(Clone, Debug, PartialEq)]
pub enum Manifest {
    Pod(PodPlacement),
    Workload(Workload),
}

impl Manifest {
    /// Exactly one document: a `v1` Pod or one of the workload kinds.
    pub fn from_yaml(yaml: &str) -> Result<Self, PlacementError> {
        let document = single_document(yaml)?;
        let text = |pointer: &str| {
            document
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (api_version, kind) = (text("/apiVersion"), text("/kind"));
        if api_version == "v1" && kind == "Pod" {
            let pod = serde_json::from_value(document)
                .map_err(|error| PlacementError::InvalidPod { error })?;
            return Ok(Manifest::Pod(pod));
        }
        match WorkloadKind::from_api_version(&api_version, &kind) {
            Some(kind) => Ok(Manifest::Workload(Workload::from_value(kind, document)?)),
            None => Err(PlacementError::NotAPod {
                found: format!("kind {kind:?}, apiVersion {api_version:?}"),
            }),
        }
    }

    /// `metadata.namespace`, empty when the manifest names none.
    pub fn namespace(&self) -> &str {
        match self {
            Manifest::Pod(pod) => &pod.namespace,
            Manifest::Workload(workload) => &workload.namespace,
        }
    }
}

/// [`explain`] of a Pod, or of a workload's template with the workload's
/// verdicts (a DaemonSet's template narrowed, the others' left as written).
pub fn explain_manifest(
    manifest: &Manifest,
    namespace: &str,
    view: &PlacementView<'_>,
    policy: &PlacementPolicy,
) -> Explanation {
    match manifest {
        Manifest::Pod(pod) => explain(pod, namespace, view, policy),
        Manifest::Workload(workload) => {
            let mut explained = explain(&workload.template, namespace, view, policy);
            explained.pod = format!("{} (its pod template)", workload.display_name(namespace));
            let mutation = mutate_workload(workload, namespace, view, policy);
            // The validating webhook sees the workload as the mutating one left it.
            let mutated = match &mutation.patch {
                Some(patch) => workload.patched(patch),
                None => workload.clone(),
            };
            explained.validate = validate_workload(&mutated, namespace, view, policy).into();
            explained.mutate = mutation.into();
            explained
        }
    }
}
