//! PlacementExceptions: which of a namespace's exceptions apply to a Pod,
//! merged into one allowance. Only a binding with `exceptions: allowed`
//! lets them take effect; an expired one never does.

use std::collections::BTreeMap;

use poolkeeper_index::{Exception, PlacementView};

use crate::policy::{Binding, Exceptions};

/// The exceptions that apply to one Pod (or Pod template), merged: each
/// allowance is the union of theirs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppliedExceptions {
    /// The exceptions' names, in name order.
    pub names: Vec<String>,
    pub skip_mutation: bool,
    pub skip_validation: bool,
    /// Pools allowed besides the binding's, sorted and deduplicated.
    pub pools: Vec<String>,
    /// Those that change what the mutating webhook does (skip it, or add
    /// pools): counted for a mutation.
    pub mutation: Vec<String>,
    /// Those that change what the validating webhook and the audit decide
    /// (skip them, or add pools): counted for a validation.
    pub validation: Vec<String>,
}

impl AppliedExceptions {
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The names joined by commas, as the placement record and `explain`
    /// show them.
    pub fn joined(&self) -> String {
        self.names.join(",")
    }
}

/// The exceptions of `namespace` that select a Pod with `labels` at the
/// view's time, and whether `binding` lets them apply.
pub struct SelectingExceptions<'v> {
    pub selecting: Vec<&'v Exception>,
    pub allowed: bool,
}

/// The exceptions of `namespace` selecting `labels` now (not expired, valid).
pub fn selecting_exceptions<'v>(
    labels: &BTreeMap<String, String>,
    namespace: &str,
    binding: Option<&Binding>,
    view: &'v PlacementView<'_>,
) -> SelectingExceptions<'v> {
    let now = view.now();
    SelectingExceptions {
        selecting: view
            .exceptions_in(namespace)
            .filter(|exception| exception.selects(labels, now))
            .collect(),
        allowed: binding.is_some_and(|binding| binding.exceptions == Exceptions::Allowed),
    }
}

/// What the exceptions selecting `labels` allow; nothing where the
/// namespace's binding does not allow exceptions (or there is none).
pub fn applied_exceptions(
    labels: &BTreeMap<String, String>,
    namespace: &str,
    binding: Option<&Binding>,
    view: &PlacementView<'_>,
) -> AppliedExceptions {
    let found = selecting_exceptions(labels, namespace, binding, view);
    if !found.allowed {
        return AppliedExceptions::default();
    }
    let mut applied = AppliedExceptions::default();
    for exception in found.selecting {
        applied.names.push(exception.name.clone());
        let adds_pools = !exception.pools.is_empty();
        if exception.skip_mutation || adds_pools {
            applied.mutation.push(exception.name.clone());
        }
        if exception.skip_validation || adds_pools {
            applied.validation.push(exception.name.clone());
        }
        applied.skip_mutation |= exception.skip_mutation;
        applied.skip_validation |= exception.skip_validation;
        applied.pools.extend(exception.pools.iter().cloned());
    }
    applied.pools.sort_unstable();
    applied.pools.dedup();
    applied
}
