//! Strings stored once and shared by every Node that has them, and the
//! interner that hands them out.
//!
//! A Node's ~13 labels repeat across the cluster (the same keys on every
//! Node, a handful of zones, instance types and pools). The placement half
//! keeps one copy of each in an [`Interner`]; every Node, and every label
//! index entry, holds a counted reference to it. When the last Node that used
//! a string goes, the interner forgets it, so it never outgrows the Nodes the
//! index holds.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use serde::{Serialize, Serializer};

/// An immutable string shared by reference count: a Node's name, label keys
/// and label values. Reads like a `String` (it dereferences to one, so
/// `as_str()`, `len()` and `&str` coercion work) and compares, orders and
/// hashes as its text. `Arc<String>` rather than `Arc<str>` keeps the
/// reference one word wide, half the size in every label and index entry.
#[derive(Clone)]
pub struct SharedString(Arc<String>);

impl SharedString {
    /// Whether both are the same allocation (not just the same text).
    pub(crate) fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Deref for SharedString {
    type Target = String;

    fn deref(&self) -> &String {
        &self.0
    }
}

impl AsRef<str> for SharedString {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for SharedString {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<String> for SharedString {
    fn from(text: String) -> Self {
        Self(Arc::new(text))
    }
}

impl From<&str> for SharedString {
    fn from(text: &str) -> Self {
        Self(Arc::new(text.to_owned()))
    }
}

impl PartialEq for SharedString {
    fn eq(&self, other: &Self) -> bool {
        self.same(other) || self.as_str() == other.as_str()
    }
}

impl Eq for SharedString {}

impl PartialOrd for SharedString {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SharedString {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

/// As `str` hashes, so that sets of shared strings can be looked up by `&str`.
impl Hash for SharedString {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

// Comparisons with plain strings, both ways round, as `String` has them.
macro_rules! eq_with_text {
    ($($text:ty),*) => {$(
        impl PartialEq<$text> for SharedString {
            fn eq(&self, other: &$text) -> bool {
                self.as_str() == AsRef::<str>::as_ref(other)
            }
        }

        impl PartialEq<SharedString> for $text {
            fn eq(&self, other: &SharedString) -> bool {
                AsRef::<str>::as_ref(self) == other.as_str()
            }
        }
    )*};
}

eq_with_text!(str, &str, String);

impl fmt::Debug for SharedString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SharedString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

impl Serialize for SharedString {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self)
    }
}

/// Releases between two sweeps at least, so that small interners are not
/// swept on every delete.
const MIN_RELEASES_PER_SWEEP: usize = 1_024;

/// One copy of each distinct value in use. [`share`](Self::share) swaps a
/// freshly converted value for the stored copy (or stores it);
/// [`release`](Self::release) drops a handle and forgets the value when no
/// one else holds it.
///
/// A handle cloned out of the index (a caller cloning a `Node` from a view)
/// can outlive the Node's removal and keep its strings stored after that
/// clone is dropped; a sweep after as many releases as the interner holds
/// values (at least [`MIN_RELEASES_PER_SWEEP`]) forgets those too, so the
/// cost stays O(1) per release on average.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    values: HashSet<SharedString>,
    releases_since_sweep: usize,
}

impl Interner {
    /// Makes `value` the stored copy of its text: the existing one when
    /// there is one (the fresh allocation is dropped), else `value` itself.
    pub(crate) fn share(&mut self, value: &mut SharedString) {
        match self.values.get(value) {
            Some(stored) => *value = stored.clone(),
            None => {
                self.values.insert(value.clone());
            }
        }
    }

    /// Drops `value`, a handle this interner gave out, and forgets the value
    /// when that was the last handle outside the interner. Release every
    /// handle a removed Node held, after the index has dropped its own.
    pub(crate) fn release(&mut self, value: SharedString) {
        // The interner's copy and `value`: no Node holds it any more.
        let last = Arc::strong_count(&value.0) == 2;
        if last
            && self
                .values
                .get(&value)
                .is_some_and(|stored| stored.same(&value))
        {
            self.values.remove(&value);
        }
        drop(value);
        self.releases_since_sweep += 1;
        if self.releases_since_sweep >= self.values.len().max(MIN_RELEASES_PER_SWEEP) {
            self.sweep();
        }
    }

    /// Forgets every value only the interner still holds.
    pub(crate) fn sweep(&mut self) {
        self.values.retain(|value| Arc::strong_count(&value.0) > 1);
        self.releases_since_sweep = 0;
    }

    /// How many distinct values are stored.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_string_reads_like_a_string() {
        let shared = SharedString::from("zone-a");
        assert_eq!(shared.as_str(), "zone-a");
        assert_eq!(shared.len(), 6);
        let text = String::from("zone-a");
        assert_eq!(shared, "zone-a");
        assert_eq!("zone-a", shared);
        assert_eq!(shared, *"zone-a");
        assert_eq!(*"zone-a", shared);
        assert_eq!(shared, text);
        assert_eq!(text, shared);
        assert_ne!(shared, SharedString::from("zone-b"));
        let later = SharedString::from("zone-b");
        assert!(shared < later, "ordered as text");
        assert_eq!(format!("{shared} {shared:?}"), "zone-a \"zone-a\"");
        assert_eq!(serde_json::to_string(&shared).unwrap(), "\"zone-a\"");
        let set: HashSet<SharedString> = HashSet::from([shared.clone()]);
        assert!(set.contains("zone-a"), "looked up by &str");
    }

    /// Two separately allocated strings compare, order and hash as their
    /// texts do, so maps keyed by them behave as maps keyed by `String`.
    #[test]
    fn compares_orders_and_hashes_as_text() {
        use std::hash::BuildHasher;
        let hasher = std::collections::hash_map::RandomState::new();
        let cases: &[(&str, &str)] = &[
            ("", ""),
            ("a", "a"),
            ("a", "b"),
            ("b", "a"),
            ("zone", "zone-a"),
            ("Zone", "zone"),
            ("ü", "u"),
        ];
        for (a, b) in cases {
            let (x, y) = (SharedString::from(*a), SharedString::from(*b));
            assert!(!x.same(&y), "{a} {b}: two allocations");
            assert_eq!(x == y, a == b, "{a} {b}: equality");
            assert_eq!(x.cmp(&y), a.cmp(b), "{a} {b}: order");
            assert_eq!(
                x.partial_cmp(&y),
                a.partial_cmp(b),
                "{a} {b}: partial order"
            );
            assert_eq!(hasher.hash_one(&x), hasher.hash_one(*a), "{a}: hash");
            assert_eq!(x.clone(), x, "{a}: a clone");
        }
    }

    /// What, the steps (share a fresh value, or release a handle of the
    /// values shared so far, by index), the distinct values stored after
    /// each step.
    type Case = (&'static str, &'static [Step], &'static [usize]);

    #[derive(Clone, Copy)]
    enum Step {
        Share(&'static str),
        Release(usize),
    }
    use Step::{Release, Share};

    #[test]
    fn interner_shares_and_releases() {
        let cases: &[Case] = &[
            ("one value", &[Share("a")], &[1]),
            (
                "same text twice is one value",
                &[Share("a"), Share("a")],
                &[1, 1],
            ),
            ("two texts", &[Share("a"), Share("b")], &[1, 2]),
            ("released last handle", &[Share("a"), Release(0)], &[1, 0]),
            (
                "released one of two handles",
                &[Share("a"), Share("a"), Release(0)],
                &[1, 1, 1],
            ),
            (
                "released both handles",
                &[Share("a"), Share("a"), Release(1), Release(0)],
                &[1, 1, 1, 0],
            ),
            (
                "released one of two texts",
                &[Share("a"), Share("b"), Release(0)],
                &[1, 2, 1],
            ),
            (
                "shared again after release",
                &[Share("a"), Release(0), Share("a")],
                &[1, 0, 1],
            ),
        ];
        for (what, steps, stored) in cases {
            let mut interner = Interner::default();
            let mut handles: Vec<Option<SharedString>> = Vec::new();
            let mut seen = Vec::new();
            for step in *steps {
                match *step {
                    Share(text) => {
                        let mut value = SharedString::from(text);
                        interner.share(&mut value);
                        if let Some(first) = handles.iter().flatten().find(|h| **h == value) {
                            assert!(first.same(&value), "{what}: {text} is one allocation");
                        }
                        handles.push(Some(value));
                    }
                    Release(i) => interner.release(handles[i].take().expect("held")),
                }
                seen.push(interner.len());
            }
            assert_eq!(seen, *stored, "{what}");
        }
    }

    #[test]
    fn release_of_a_value_it_did_not_give_out_keeps_the_stored_one() {
        let mut interner = Interner::default();
        let mut stored = SharedString::from("a");
        interner.share(&mut stored);
        let stranger = SharedString::from("a");
        let also_stranger = stranger.clone();
        interner.release(stranger);
        assert_eq!(interner.len(), 1);
        drop(also_stranger);
        interner.release(stored);
        assert_eq!(interner.len(), 0);
    }

    #[test]
    fn sweep_forgets_values_whose_clones_outlived_their_release() {
        let mut interner = Interner::default();
        let mut value = SharedString::from("a");
        interner.share(&mut value);
        let kept_outside = value.clone();
        interner.release(value);
        assert_eq!(interner.len(), 1, "still held outside");
        drop(kept_outside);
        interner.sweep();
        assert_eq!(interner.len(), 0);
    }

    #[test]
    fn releases_trigger_a_sweep() {
        let mut interner = Interner::default();
        let mut stray = SharedString::from("stray");
        interner.share(&mut stray);
        let kept_outside = stray.clone();
        interner.release(stray);
        drop(kept_outside);
        for i in 1..MIN_RELEASES_PER_SWEEP {
            let mut value = SharedString::from(i.to_string());
            interner.share(&mut value);
            interner.release(value);
        }
        assert_eq!(interner.len(), 0, "the stray went in the sweep");
    }
}
