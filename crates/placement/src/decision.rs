//! The mutating and validating admission decisions for a Pod, the audit's
//! decision for a Pod that already exists, and how a binding's mode changes
//! what a decision does.

use std::borrow::Cow;
use std::fmt;

use json_patch::Patch;
use k8s_openapi::api::core::v1::Toleration;
use poolkeeper_config::{Constraints, Mode};
use poolkeeper_index::{NodePool, PlacementView, PoolType};

use crate::affinity::NodeConstraints;
use crate::candidates::{Reach, in_pools, reach};
use crate::exceptions::{AppliedExceptions, applied_exceptions, selecting_exceptions};
use crate::messages::{
    self, missing_tolerations_message, no_match_message, outside_message, runs_outside_message,
};
use crate::patch::{add, annotation_op, pool_affinity_op, rebase, to_value};
use crate::pod::PodPlacement;
use crate::policy::{Binding, BindingOrigin, PlacementPolicy};
use crate::pools::PoolSet;
use crate::tolerations::tolerations_cover;

/// Why a decision came out the way it did; a short, stable string for
/// metrics and logs. In `warn` and `dryrun` mode it stays the reason the
/// rules gave (`outside_pool`, `patched`, ...), whatever the mode let
/// through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The request is not about a Pod or a workload (or is about a
    /// subresource).
    NotPod,
    /// Mutate: a workload other than a DaemonSet; its Pods are placed when
    /// they are created.
    TemplateNotMutated,
    /// Only `CREATE` is decided; other operations pass unchanged.
    OperationIgnored,
    /// The index is not synchronized yet.
    NotReady,
    /// The placement policy ConfigMap does not parse.
    PolicyInvalid,
    /// The Pod is bound to no pool (or its namespace is excluded).
    Unbound,
    /// The Pod is the mirror of a static Pod: the kubelet cannot act on a
    /// denial or a patch, so it is left alone (the audit still judges it).
    MirrorPod,
    /// The Pod is bound to pools none of which exists.
    PoolMissing,
    /// Mutate: nothing to add.
    Unchanged,
    /// Mutate: affinity and/or tolerations added.
    Patched,
    /// Validate: every node the Pod may land on is in its pool (audit: the
    /// node it runs on is).
    InPool,
    /// Validate: the Pod's pool label names a pool outside its namespace's
    /// binding (a label may only narrow a binding to pools inside it).
    LabelOutsideBinding,
    /// Validate: an Edge pool's tolerations are missing.
    MissingEdgeTolerations,
    /// Validate: the Pod's constraints select no node.
    NoMatchingNode,
    /// Validate: the Pod's constraints select nodes outside its pool (audit:
    /// it runs on a node outside its pool).
    OutsidePool,
    /// Audit: the Pod is scheduled onto a node the index does not know (yet,
    /// or any more), so where it runs cannot be judged.
    NodeUnknown,
    /// A PlacementException lets the Pod skip this decision (mutate: only
    /// the placement record is written).
    Excepted,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotPod => "not_pod",
            Reason::TemplateNotMutated => "template_not_mutated",
            Reason::OperationIgnored => "operation_ignored",
            Reason::NotReady => "not_ready",
            Reason::PolicyInvalid => "policy_invalid",
            Reason::Unbound => "unbound",
            Reason::MirrorPod => "mirror_pod",
            Reason::PoolMissing => "pool_missing",
            Reason::Unchanged => "unchanged",
            Reason::Patched => "patched",
            Reason::InPool => "in_pool",
            Reason::LabelOutsideBinding => "label_outside_binding",
            Reason::MissingEdgeTolerations => "missing_edge_tolerations",
            Reason::NoMatchingNode => "no_matching_node",
            Reason::OutsidePool => "outside_pool",
            Reason::NodeUnknown => "node_unknown",
            Reason::Excepted => "excepted",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of one decision, with the binding's mode applied: `allowed`,
/// `message` and `patch` are what the webhook answers; `withheld_denial`
/// and `withheld_patch` are what `enforce` would have done instead.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub allowed: bool,
    /// Why the Pod was denied (shown to the user by the API server).
    pub message: Option<String>,
    /// Mutate only: the RFC 6902 patch to apply, never an empty one.
    pub patch: Option<Patch>,
    /// Admission warnings returned to the client.
    pub warnings: Vec<String>,
    pub reason: Reason,
    /// The pool the Pod is bound to, when it is (several joined by
    /// commas, [`PoolSet::joined`]).
    pub pool: Option<String>,
    /// The mode of the Pod's binding (`Enforce` for an unbound Pod).
    pub mode: Mode,
    /// The denial `enforce` would have returned, when the mode (`warn`,
    /// `dryrun`) admitted the Pod instead.
    pub withheld_denial: Option<String>,
    /// The patch `enforce` would have applied, when the mode (`dryrun`)
    /// left the Pod unchanged instead.
    pub withheld_patch: Option<Patch>,
    /// The PlacementExceptions that applied (by name), each counted by
    /// the webhook.
    pub exceptions: Vec<String>,
}

impl Decision {
    pub fn allow(reason: Reason) -> Self {
        Self {
            allowed: true,
            message: None,
            patch: None,
            warnings: Vec::new(),
            reason,
            pool: None,
            mode: Mode::Enforce,
            withheld_denial: None,
            withheld_patch: None,
            exceptions: Vec::new(),
        }
    }

    pub fn deny(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            allowed: false,
            message: Some(message.into()),
            ..Self::allow(reason)
        }
    }

    #[must_use]
    pub fn with_warning(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }

    #[must_use]
    fn for_pools(mut self, pools: &PoolSet) -> Self {
        self.pool = Some(pools.joined());
        self
    }

    /// Whether the answer carries a patch.
    pub fn is_patched(&self) -> bool {
        self.patch.as_ref().is_some_and(|p| !p.0.is_empty())
    }

    /// Whether `enforce` would have admitted the Pod.
    pub fn enforce_allows(&self) -> bool {
        self.allowed && self.withheld_denial.is_none()
    }

    /// The patch `enforce` would apply: the one answered, or the one
    /// `dryrun` withheld.
    pub fn enforce_patch(&self) -> Option<&Patch> {
        self.patch.as_ref().or(self.withheld_patch.as_ref())
    }

    /// Whether the mode changed the answer (something was withheld).
    pub fn is_withheld(&self) -> bool {
        self.withheld_denial.is_some() || self.withheld_patch.is_some()
    }

    /// This decision as `mode` carries it out:
    /// - `enforce`: unchanged;
    /// - `warn`: a denial becomes an admission with the denial as a
    ///   warning; a patch is applied;
    /// - `dryrun`: a denial becomes a silent admission and a patch is
    ///   withheld.
    ///
    /// The reason stays the rules' reason, so what each mode would do is
    /// counted the same way.
    #[must_use]
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        if mode == Mode::Enforce {
            return self;
        }
        if !self.allowed {
            self.allowed = true;
            let denial = self.message.take().unwrap_or_default();
            if mode == Mode::Warn {
                self.warnings.push(warn_text(&denial));
            }
            self.withheld_denial = Some(denial);
        }
        if mode == Mode::Dryrun {
            self.withheld_patch = self.patch.take();
        }
        self
    }
}

/// What `warn` mode puts before a denial it returns as a warning.
pub(crate) const WARN_PREFIX: &str = "poolkeeper would deny this pod (binding mode warn): ";

/// The admission warning `warn` mode returns for a denial.
pub fn warn_text(denial: &str) -> String {
    format!("{WARN_PREFIX}{denial}")
}

/// How a Pod got its pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum BindingSource {
    /// The Pod carries the pool label: in a namespace without binding, or
    /// naming one pool of its namespace's binding.
    PodLabel,
    /// The policy ConfigMap binds the Pod's namespace.
    Namespace,
    /// The Pod's Namespace binds itself by its labels.
    NamespaceLabel,
}

impl BindingSource {
    pub fn as_str(self) -> &'static str {
        match self {
            BindingSource::PodLabel => "podLabel",
            BindingSource::Namespace => "namespace",
            BindingSource::NamespaceLabel => "namespaceLabel",
        }
    }
}

/// The pools a Pod is bound to, by what, and the mode decisions about it
/// take effect in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolBinding<'a> {
    pub pools: Cow<'a, PoolSet>,
    pub source: BindingSource,
    pub mode: Mode,
    /// The binding of the Pod's namespace, when it has one: the pools the
    /// Pod's own pool label may narrow it to.
    pub namespace_binding: Option<&'a Binding>,
    /// The Pod's pool label, when it names a pool outside its namespace's
    /// binding. The binding places the Pod all the same (`pools` are the
    /// binding's); the validating decisions refuse it.
    pub label_outside: Option<&'a str>,
    /// The PlacementExceptions that apply (the binding allows them): their
    /// pools are already in `pools`.
    pub exceptions: AppliedExceptions,
}

/// The pool a Pod belongs to, by the namespace's binding and the Pod's own
/// `pool_label` label (an empty value does not count):
/// - a namespace without binding: the label, if any, binds the Pod;
/// - a bound namespace: the label may only narrow the binding to one of its
///   pools; a label naming a pool outside it is kept in
///   [`PoolBinding::label_outside`] and the binding applies.
///
/// The mode is the namespace's binding's, else the policy's default mode.
/// An excluded namespace binds nothing, whatever its Pods' labels say.
///
/// `namespace` comes from the AdmissionRequest: on CREATE the Pod's
/// `metadata.namespace` may still be empty.
pub fn pool_binding<'a>(
    pod: &'a PodPlacement,
    namespace: &str,
    policy: &'a PlacementPolicy,
    view: &PlacementView<'_>,
) -> Option<PoolBinding<'a>> {
    if policy.is_excluded(namespace) {
        return None;
    }
    let labelled = pod
        .labels
        .get(view.pool_label())
        .map(String::as_str)
        .filter(|pool| !pool.is_empty());
    let Some(binding) = policy.binding(namespace) else {
        return labelled.map(|pool| PoolBinding {
            pools: Cow::Owned(PoolSet::one(pool)),
            source: BindingSource::PodLabel,
            mode: policy.mode_for_namespace(namespace),
            namespace_binding: None,
            label_outside: None,
            exceptions: AppliedExceptions::default(),
        });
    };
    let exceptions = applied_exceptions(&pod.labels, namespace, Some(binding), view);
    let allowed = with_pools(&binding.pools, &exceptions.pools);
    let (pools, source, label_outside) = match labelled {
        Some(pool) if allowed.contains(pool) => (
            Cow::Owned(PoolSet::one(pool)),
            BindingSource::PodLabel,
            None,
        ),
        label_outside => (
            allowed,
            match binding.origin {
                BindingOrigin::ConfigMap => BindingSource::Namespace,
                BindingOrigin::NamespaceLabel => BindingSource::NamespaceLabel,
            },
            label_outside,
        ),
    };
    Some(PoolBinding {
        pools,
        source,
        mode: binding.mode,
        namespace_binding: Some(binding),
        label_outside,
        exceptions,
    })
}

/// `pools` and the `extra` ones an exception allows, borrowed when there
/// are none.
fn with_pools<'a>(pools: &'a PoolSet, extra: &[String]) -> Cow<'a, PoolSet> {
    if extra.iter().all(|pool| pools.contains(pool)) {
        return Cow::Borrowed(pools);
    }
    let union = pools.names().iter().chain(extra).cloned();
    PoolSet::new(union).map_or(Cow::Borrowed(pools), Cow::Owned)
}

/// The refusal of a Pod whose pool label leaves its namespace's binding,
/// as `enforce` decides it (the binding's mode is in [`Decision::mode`],
/// not applied): the validating decisions ([`validate`], [`audit`]) check
/// it before anything else, so a missing pool or a Pod already running
/// inside the binding does not excuse the label.
fn label_refusal(
    binding: Option<&PoolBinding<'_>>,
    namespace: &str,
    pool_label: &str,
) -> Option<Decision> {
    let binding = binding?;
    let label = binding.label_outside?;
    let message = messages::label_outside_message(label, binding, namespace, pool_label);
    Some(Decision {
        mode: binding.mode,
        ..Decision::deny(Reason::LabelOutsideBinding, message).for_pools(&binding.pools)
    })
}

/// The pools a Pod is bound to, those of them that exist, and the binding.
pub(crate) struct Bound<'v, 'p> {
    pub(crate) existing: Vec<&'v NodePool>,
    pub(crate) binding: PoolBinding<'p>,
    /// Pools of the binding that do not exist, when some do.
    missing_warning: Option<String>,
}

impl Bound<'_, '_> {
    pub(crate) fn pools(&self) -> &PoolSet {
        &self.binding.pools
    }

    /// `decision` for these pools, in the binding's mode, with the warning
    /// about missing pools.
    fn finish(&self, decision: Decision) -> Decision {
        let mut decision = decision.for_pools(self.pools());
        decision.warnings.extend(self.missing_warning.clone());
        decision.with_mode(self.binding.mode)
    }
}

/// The pools of `binding` of which at least one exists, or the decision to
/// return instead (unbound, every pool missing).
pub(crate) fn bound_pools<'v, 'p>(
    binding: Option<PoolBinding<'p>>,
    namespace: &str,
    view: &'v PlacementView<'_>,
) -> Result<Bound<'v, 'p>, Box<Decision>> {
    let pool_label = view.pool_label();
    let Some(binding) = binding else {
        return Err(Box::new(Decision::allow(Reason::Unbound)));
    };
    let (existing, missing): (Vec<_>, Vec<_>) = binding
        .pools
        .names()
        .iter()
        .map(|name| (name, view.node_pool(name)))
        .partition(|(_, pool)| pool.is_some());
    let missing = PoolSet::new(missing.into_iter().map(|(name, _)| name.clone()));
    let existing: Vec<&NodePool> = existing.into_iter().filter_map(|(_, pool)| pool).collect();
    if existing.is_empty() {
        let warning = messages::pools_missing_warning(&binding, namespace, pool_label);
        return Err(Box::new(
            Decision::allow(Reason::PoolMissing)
                .with_warning(warning)
                .for_pools(&binding.pools)
                .with_mode(binding.mode),
        ));
    }
    let missing_warning = missing.map(|missing| {
        messages::some_pools_missing_warning(&missing, &binding, namespace, pool_label)
    });
    Ok(Bound {
        existing,
        binding,
        missing_warning,
    })
}

/// The edge tolerations the Pod lacks, in policy order, each checked against
/// the Pod's tolerations plus the ones already found missing. None when no
/// pool of `pools` is an Edge pool.
pub(crate) fn missing_edge_tolerations<'p>(
    pod: &PodPlacement,
    pools: &[&NodePool],
    policy: &'p PlacementPolicy,
) -> Vec<&'p Toleration> {
    if !pools.iter().any(|pool| pool.pool_type == PoolType::Edge) {
        return Vec::new();
    }
    let mut have: Vec<Toleration> = pod.tolerations().to_vec();
    let mut missing = Vec::new();
    for required in policy.edge_tolerations() {
        if !tolerations_cover(&have, required) {
            have.push(required.clone());
            missing.push(required);
        }
    }
    missing
}

/// The mutating decision.
///
/// - Unbound Pod -> allowed, unchanged. Missing pool -> allowed, unchanged,
///   with a warning.
/// - The pool is [`pool_binding`]'s: a pool label narrowing the namespace's
///   binding places the Pod in that one pool; a label naming a pool outside
///   the binding is not followed (the binding places the Pod, [`validate`]
///   refuses the label), so no mode ever places a Pod outside its
///   namespace's binding.
/// - `nodeName`, `nodeSelector` and required node affinity all empty -> adds
///   the required node affinity `poolLabel In [pool]` (the index's pool
///   label, [`PlacementView::pool_label`]). Only the required
///   part counts: a Pod with nothing but *preferred* node affinity terms is
///   unconstrained for the scheduler's filtering, so it gets the required
///   affinity too (its preferred terms are kept). podAffinity and
///   podAntiAffinity are never touched.
/// - A Pod with its own constraints, in a binding with `constraints:
///   narrow`: the requirement is ANDed into every required node-selector
///   term (a Pod with only a `nodeSelector` gets it as its required
///   affinity); a `nodeName` is never rewritten. With `judge` (the default)
///   such a Pod is left as written for the validating webhook to judge.
/// - Edge pool -> adds each edge toleration the Pod does not already
///   tolerate, appending to `spec.tolerations`.
/// - A patched Pod records the decision in
///   [`PLACEMENT_ANNOTATION`](crate::pod::PLACEMENT_ANNOTATION).
/// - The binding's mode applies ([`Decision::with_mode`]): `enforce` and
///   `warn` patch, `dryrun` withholds the patch.
///
/// Applying the returned patch and deciding again adds nothing.
pub fn mutate(
    pod: &PodPlacement,
    namespace: &str,
    view: &PlacementView<'_>,
    policy: &PlacementPolicy,
) -> Decision {
    if pod.is_mirror() {
        return Decision::allow(Reason::MirrorPod);
    }
    mutate_at(pod, namespace, view, policy, &PatchTarget::POD)
}

/// Where a Pod spec sits in the object under review, and whether its own
/// constraints are narrowed whatever the binding says.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PatchTarget {
    /// JSON pointer tokens of the Pod (template) inside the object.
    pub(crate) base: &'static [&'static str],
    /// A DaemonSet's template is always narrowed: its controller picks
    /// nodes from it.
    pub(crate) always_narrow: bool,
}

impl PatchTarget {
    pub(crate) const POD: PatchTarget = PatchTarget {
        base: &[],
        always_narrow: false,
    };
}

/// [`mutate`] of the Pod (template) at `target`.
pub(crate) fn mutate_at(
    pod: &PodPlacement,
    namespace: &str,
    view: &PlacementView<'_>,
    policy: &PlacementPolicy,
    target: &PatchTarget,
) -> Decision {
    // A pool label outside the namespace's binding is not followed: the
    // binding places the Pod, and `validate` refuses the label.
    let binding = pool_binding(pod, namespace, policy, view);
    let constraints = if target.always_narrow {
        Constraints::Narrow
    } else {
        policy.constraints_for_namespace(namespace)
    };
    if let Some(binding) = binding.as_ref().filter(|b| b.exceptions.skip_mutation) {
        return excepted_mutation(pod, binding, constraints, target);
    }
    let bound = match bound_pools(binding, namespace, view) {
        Ok(bound) => bound,
        Err(decision) => return *decision,
    };
    let Some(spec) = pod.spec.as_ref() else {
        return bound.finish(Decision::allow(Reason::Unchanged));
    };

    let mut ops = Vec::new();
    if let Some(op) = pool_affinity_op(pod, view.pool_label(), bound.pools(), constraints) {
        ops.push(op);
    }
    let missing = missing_edge_tolerations(pod, &bound.existing, policy);
    if !missing.is_empty() {
        match spec.tolerations {
            None => ops.push(add(&["spec", "tolerations"], to_value(&missing))),
            Some(_) => {
                for toleration in missing {
                    ops.push(add(&["spec", "tolerations", "-"], to_value(&toleration)));
                }
            }
        }
    }

    let decision = if ops.is_empty() {
        Decision::allow(Reason::Unchanged)
    } else {
        ops.push(annotation_op(pod, &bound.binding, constraints));
        let ops = ops.into_iter().map(|op| rebase(op, target.base)).collect();
        let mut decision = Decision::allow(Reason::Patched);
        decision.patch = Some(Patch(ops));
        decision
    };
    let mut decision = bound.finish(decision);
    decision
        .exceptions
        .clone_from(&bound.binding.exceptions.mutation);
    decision
}

/// A Pod an exception lets skip the mutation: left as written but for the
/// placement record, which names the exceptions.
fn excepted_mutation(
    pod: &PodPlacement,
    binding: &PoolBinding<'_>,
    constraints: Constraints,
    target: &PatchTarget,
) -> Decision {
    let record = rebase(annotation_op(pod, binding, constraints), target.base);
    let mut decision = Decision::allow(Reason::Excepted);
    decision.patch = Some(Patch(vec![record]));
    decision.exceptions.clone_from(&binding.exceptions.mutation);
    decision.for_pools(&binding.pools).with_mode(binding.mode)
}

/// Why the exceptions that select the Pod do not apply, when some do and
/// the namespace's binding does not allow exceptions: a denial says so.
fn ignored_exceptions(
    pod: &PodPlacement,
    namespace: &str,
    binding: Option<&PoolBinding<'_>>,
    view: &PlacementView<'_>,
) -> Option<String> {
    let binding = binding?;
    let found = selecting_exceptions(&pod.labels, namespace, binding.namespace_binding, view);
    if found.allowed || found.selecting.is_empty() {
        return None;
    }
    let names: Vec<&str> = found.selecting.iter().map(|e| e.name.as_str()).collect();
    Some(messages::ignored_exceptions_note(&names, namespace))
}

/// `decision` with `note` after its denial message.
fn with_ignored(mut decision: Decision, note: Option<&str>) -> Decision {
    if let (Some(message), Some(note)) = (decision.message.as_mut(), note) {
        message.push_str(note);
    }
    decision
}

/// A Pod an exception lets skip the validating rules, in the binding's mode.
fn excepted_validation(binding: &PoolBinding<'_>) -> Decision {
    let mut decision = Decision::allow(Reason::Excepted);
    decision
        .exceptions
        .clone_from(&binding.exceptions.validation);
    decision.for_pools(&binding.pools).with_mode(binding.mode)
}

/// The validating decision.
///
/// - A pool label naming a pool outside the namespace's binding
///   ([`pool_binding`]) -> denied, naming both, before any other rule.
/// - Unbound Pod -> allowed. No bound pool exists -> allowed with a warning.
/// - Any bound pool is an Edge pool whose edge tolerations the Pod does not
///   all tolerate -> denied.
/// - The nodes selected by `nodeName`, `nodeSelector` and required node
///   affinity (each absent = every node), intersected over the index:
///   none -> denied; any outside the bound pools -> denied, naming up to
///   five of them; otherwise allowed.
/// - The binding's mode applies ([`Decision::with_mode`]): `warn` admits
///   what would be denied with the denial as a warning, `dryrun` admits it
///   silently; [`Decision::withheld_denial`] keeps the denial.
///
/// Taints are deliberately not used to shrink the node set: they change
/// after admission, and a removed taint must not open a way out of the pool.
pub fn validate(
    pod: &PodPlacement,
    namespace: &str,
    view: &PlacementView<'_>,
    policy: &PlacementPolicy,
) -> Decision {
    if pod.is_mirror() {
        return Decision::allow(Reason::MirrorPod);
    }
    let binding = pool_binding(pod, namespace, policy, view);
    if let Some(binding) = binding.as_ref().filter(|b| b.exceptions.skip_validation) {
        return excepted_validation(binding);
    }
    let ignored = ignored_exceptions(pod, namespace, binding.as_ref(), view);
    if let Some(refusal) = label_refusal(binding.as_ref(), namespace, view.pool_label()) {
        let mode = refusal.mode;
        return with_ignored(refusal, ignored.as_deref()).with_mode(mode);
    }
    match bound_pools(binding, namespace, view) {
        Ok(bound) => {
            let decision = validate_in_pools(pod, &bound, view, policy);
            let mut decision = bound.finish(with_ignored(decision, ignored.as_deref()));
            decision
                .exceptions
                .clone_from(&bound.binding.exceptions.validation);
            decision
        }
        Err(decision) => *decision,
    }
}

/// The rules of [`validate`] for a Pod bound to pools of which some exist,
/// as `enforce` decides them.
fn validate_in_pools(
    pod: &PodPlacement,
    bound: &Bound<'_, '_>,
    view: &PlacementView<'_>,
    policy: &PlacementPolicy,
) -> Decision {
    let missing = missing_edge_tolerations(pod, &bound.existing, policy);
    if !missing.is_empty() {
        return Decision::deny(
            Reason::MissingEdgeTolerations,
            missing_tolerations_message(&missing, &bound.existing),
        );
    }

    let pools = bound.pools();
    let constraints = NodeConstraints::from_pod(pod);
    match reach(view, &constraints, pools) {
        Reach::NoNode => Decision::deny(
            Reason::NoMatchingNode,
            no_match_message(view, &constraints, pools),
        ),
        Reach::InPools => Decision::allow(Reason::InPool),
        Reach::Outside(outside) => Decision::deny(
            Reason::OutsidePool,
            outside_message(&outside, &constraints, pools),
        ),
    }
}

/// The audit's decision for a Pod that exists, as `enforce` judges it
/// (the binding's mode is reported in [`Decision::mode`] but not applied:
/// the audit shows what runs outside its pool in every mode).
///
/// - A pool label outside the namespace's binding: denied, as [`validate`]
///   says, wherever the Pod runs (the label claims a pool the tenant may
///   not choose).
/// - Unbound Pod, missing pool: allowed, as [`validate`] says.
/// - Scheduled Pod (`spec.nodeName` set): denied with `outside_pool` when
///   its node is not in the pool; allowed (`in_pool`) when it is; allowed
///   with `node_unknown` when the index does not know the node. Its
///   tolerations no longer matter: it runs where it runs.
/// - Pending Pod: [`validate`]'s rules, reasons and messages.
///
/// A denial is a violation.
pub fn audit(pod: &PodPlacement, view: &PlacementView<'_>, policy: &PlacementPolicy) -> Decision {
    let namespace = pod.namespace.as_str();
    let binding = pool_binding(pod, namespace, policy, view);
    if let Some(binding) = binding.as_ref().filter(|b| b.exceptions.skip_validation) {
        return excepted_validation(binding);
    }
    if let Some(refusal) = label_refusal(binding.as_ref(), namespace, view.pool_label()) {
        return refusal;
    }
    let bound = match bound_pools(binding, namespace, view) {
        Ok(bound) => bound,
        Err(decision) => return *decision,
    };
    let pools = bound.pools();
    let decision = match pod.node_name() {
        None => validate_in_pools(pod, &bound, view, policy),
        Some(node_name) => match view.node(node_name) {
            None => Decision::allow(Reason::NodeUnknown),
            Some(node) if in_pools(node, view.pool_label(), pools) => {
                Decision::allow(Reason::InPool)
            }
            Some(node) => Decision::deny(
                Reason::OutsidePool,
                runs_outside_message(node, view.pool_label(), pools),
            ),
        },
    };
    Decision {
        mode: bound.binding.mode,
        ..decision.for_pools(pools)
    }
}
