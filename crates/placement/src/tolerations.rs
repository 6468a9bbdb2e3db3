//! Toleration semantics of `k8s.io/api/core/v1` (`Toleration.ToleratesTaint`).
//!
//! A toleration tolerates a taint when
//! 1. its effect is empty (all effects) or equal to the taint's effect, and
//! 2. its key is empty (all keys) or equal to the taint's key, and
//! 3. its operator is `Exists` (any value), or `Equal`/empty and its value
//!    equals the taint's value.
//!
//! Any other operator tolerates nothing (`Gt`/`Lt` exist only behind the
//! alpha `TaintTolerationComparisonOperators` feature gate, off by default).
//! An empty key with `Equal` is forbidden by API validation; should one get
//! here it behaves as the Kubernetes code does: it matches every key whose
//! taint value equals its value.

use k8s_openapi::api::core::v1::Toleration;
#[cfg(test)]
use poolkeeper_index::Taint;

pub(crate) const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// `Toleration.ToleratesTaint`: the semantics [`tolerations_cover`] is
/// checked against.
#[cfg(test)]
pub(crate) fn toleration_tolerates_taint(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

/// Whether some toleration in `tolerations` tolerates `taint`.
#[cfg(test)]
pub(crate) fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations
        .iter()
        .any(|toleration| toleration_tolerates_taint(toleration, taint))
}

/// Whether `tolerations` tolerate every taint that `required` tolerates, so
/// adding `required` to them would tolerate nothing new.
///
/// `required` stands for a set of taints (a key or all keys, a value or all
/// values, an effect or all three effects). Values and keys are unbounded, so
/// only a single toleration can cover an `Exists` or an empty key; an empty
/// effect is covered effect by effect, possibly by different tolerations.
pub(crate) fn tolerations_cover(tolerations: &[Toleration], required: &Toleration) -> bool {
    let required_effect = required.effect.as_deref().unwrap_or_default();
    let effects: &[&str] = if required_effect.is_empty() {
        &TAINT_EFFECTS
    } else {
        std::slice::from_ref(&required_effect)
    };
    effects.iter().all(|effect| {
        tolerations
            .iter()
            .any(|toleration| covers_for_effect(toleration, required, effect))
    })
}

fn covers_for_effect(toleration: &Toleration, required: &Toleration, effect: &str) -> bool {
    let own_effect = toleration.effect.as_deref().unwrap_or_default();
    if !own_effect.is_empty() && own_effect != effect {
        return false;
    }
    let own_key = toleration.key.as_deref().unwrap_or_default();
    let required_key = required.key.as_deref().unwrap_or_default();
    // A toleration with a key covers only that key; an empty required key
    // stands for every key.
    if !own_key.is_empty() && own_key != required_key {
        return false;
    }
    let required_exists = match required.operator.as_deref().unwrap_or_default() {
        "Exists" => true,
        "" | "Equal" => false,
        _ => return true, // tolerates no taint: trivially covered
    };
    match toleration.operator.as_deref().unwrap_or_default() {
        "Exists" => true,
        "" | "Equal" => {
            !required_exists
                && toleration.value.as_deref().unwrap_or_default()
                    == required.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

/// `{key: k, operator: Exists, effect: NoSchedule}`-style rendering for messages.
pub(crate) fn describe_toleration(toleration: &Toleration) -> String {
    let mut parts = Vec::new();
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() {
        parts.push(format!("key: {key}"));
    }
    parts.push(format!(
        "operator: {}",
        toleration
            .operator
            .as_deref()
            .filter(|op| !op.is_empty())
            .unwrap_or("Equal")
    ));
    if let Some(value) = toleration.value.as_deref().filter(|v| !v.is_empty()) {
        parts.push(format!("value: {value}"));
    }
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty()) {
        parts.push(format!("effect: {effect}"));
    }
    if let Some(seconds) = toleration.toleration_seconds {
        parts.push(format!("tolerationSeconds: {seconds}"));
    }
    format!("{{{}}}", parts.join(", "))
}
