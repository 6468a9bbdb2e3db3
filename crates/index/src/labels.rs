//! A Node's labels, compact: one allocation of key/value pairs sorted by
//! key, each string shared with every other Node that has it.

use std::collections::BTreeMap;
use std::fmt;
use std::iter::FusedIterator;
use std::slice;

use serde::{Serialize, Serializer};

use crate::shared::{Interner, SharedString};

/// The labels of a Node: reads like the `BTreeMap<String, String>` it
/// replaces (`get`, `contains_key`, `iter` in key order yielding
/// `(&String, &String)`, `keys`, `values`, `len`), serializes as a map, and
/// compares equal to a map with the same pairs. Build one from a map or any
/// iterator of pairs (a repeated key keeps its last value, as a map would).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Labels(Box<[(SharedString, SharedString)]>);

impl Labels {
    /// The value of label `key`, in O(log labels).
    pub fn get<Q: AsRef<str> + ?Sized>(&self, key: &Q) -> Option<&String> {
        let key = key.as_ref();
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    pub fn contains_key<Q: AsRef<str> + ?Sized>(&self, key: &Q) -> bool {
        self.get(key).is_some()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The pairs in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.0.iter())
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.0.iter().map(|(key, _)| &**key)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.0.iter().map(|(_, value)| &**value)
    }

    /// The pairs with their shared strings.
    #[cfg(test)]
    pub(crate) fn shared_pairs(&self) -> &[(SharedString, SharedString)] {
        &self.0
    }

    /// Swaps every key and value for the interner's copy.
    pub(crate) fn share(&mut self, strings: &mut Interner) {
        for (key, value) in self.0.iter_mut() {
            strings.share(key);
            strings.share(value);
        }
    }

    /// Every key and value, for the interner to release.
    pub(crate) fn into_strings(self) -> impl Iterator<Item = SharedString> {
        self.0.into_iter().flat_map(|(key, value)| [key, value])
    }
}

/// The pairs of [`Labels`] in key order, as `(&String, &String)`.
#[derive(Clone, Debug)]
pub struct Iter<'a>(slice::Iter<'a, (SharedString, SharedString)>);

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a String, &'a String);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(key, value)| (&**key, &**value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(key, value)| (&**key, &**value))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl FusedIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Labels {
    type Item = (&'a String, &'a String);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The map's pairs are already sorted and unique: no sort, one allocation.
impl From<BTreeMap<String, String>> for Labels {
    fn from(map: BTreeMap<String, String>) -> Self {
        Self(
            map.into_iter()
                .map(|(key, value)| (SharedString::from(key), SharedString::from(value)))
                .collect(),
        )
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Labels {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let map: BTreeMap<String, String> = pairs
            .into_iter()
            .map(|(key, value)| (key.into(), value.into()))
            .collect();
        Self::from(map)
    }
}

impl PartialEq<BTreeMap<String, String>> for Labels {
    fn eq(&self, map: &BTreeMap<String, String>) -> bool {
        self.len() == map.len() && self.iter().eq(map.iter())
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Labels {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().copied().collect()
    }

    #[test]
    fn reads_like_a_map() {
        type Pairs = &'static [(&'static str, &'static str)];
        // What, the pairs in, the pairs in key order.
        let cases: &[(&str, Pairs, Pairs)] = &[
            ("none", &[], &[]),
            ("one", &[("zone", "a")], &[("zone", "a")]),
            (
                "sorted by key",
                &[("zone", "a"), ("arch", "amd64"), ("pool", "p1")],
                &[("arch", "amd64"), ("pool", "p1"), ("zone", "a")],
            ),
            (
                "a repeated key keeps its last value",
                &[("zone", "a"), ("zone", "b")],
                &[("zone", "b")],
            ),
            ("empty value", &[("edge", "")], &[("edge", "")]),
        ];
        for (what, input, sorted) in cases {
            let labels = labels(input);
            let map: BTreeMap<String, String> = sorted
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            assert_eq!(labels, map, "{what}");
            assert_eq!(labels.len(), sorted.len(), "{what}");
            assert_eq!(labels.is_empty(), sorted.is_empty(), "{what}");
            let pairs: Vec<(&str, &str)> = labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            assert_eq!(pairs, *sorted, "{what}: iteration in key order");
            assert!(labels.iter().rev().eq(map.iter().rev()), "{what}: reversed");
            assert!(labels.keys().eq(map.keys()), "{what}: keys");
            assert!(labels.values().eq(map.values()), "{what}: values");
            for (key, value) in *sorted {
                assert_eq!(labels.get(key).map(String::as_str), Some(*value), "{what}");
                assert_eq!(labels.get(&(*key).to_owned()), map.get(*key), "{what}");
                assert!(labels.contains_key(key), "{what}");
            }
            for missing in ["", "a", "zzz", "zone-"] {
                assert_eq!(labels.get(missing), map.get(missing), "{what}: {missing}");
            }
            assert_eq!(Labels::from(map.clone()), labels, "{what}: from the map");
            assert_eq!(
                serde_json::to_value(&labels).unwrap(),
                serde_json::to_value(&map).unwrap(),
                "{what}: serialized"
            );
            assert_eq!(format!("{labels:?}"), format!("{map:?}"), "{what}: debug");
        }
    }

    #[test]
    fn unequal_to_a_map_with_other_pairs() {
        let labels = labels(&[("zone", "a")]);
        for pairs in [&[][..], &[("zone", "b")], &[("zone", "a"), ("x", "y")]] {
            let map: BTreeMap<String, String> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            assert_ne!(labels, map, "{pairs:?}");
        }
    }

    /// Labels built apart compare and hash as their pairs' texts.
    #[test]
    fn compare_and_hash_as_text() {
        use std::hash::BuildHasher;
        let hasher = std::collections::hash_map::RandomState::new();
        type Pairs = &'static [(&'static str, &'static str)];
        let cases: &[(Pairs, Pairs, bool)] = &[
            (&[], &[], true),
            (&[("zone", "a")], &[("zone", "a")], true),
            (&[("a", "1"), ("b", "2")], &[("b", "2"), ("a", "1")], true),
            (&[("zone", "a")], &[("zone", "b")], false),
            (&[("zone", "a")], &[("zone-", "a")], false),
            (&[("zone", "a")], &[("zone", "a"), ("pool", "p")], false),
            (&[("zone", "")], &[], false),
        ];
        for (left, right, equal) in cases {
            let (l, r) = (labels(left), labels(right));
            assert_eq!(l == r, *equal, "{left:?} {right:?}");
            if *equal {
                assert_eq!(hasher.hash_one(&l), hasher.hash_one(&r), "{left:?}: hash");
            }
        }
    }

    #[test]
    fn sharing_keeps_the_pairs_and_shares_equal_strings() {
        let mut strings = Interner::default();
        let mut first = labels(&[("zone", "a"), ("pool", "p1")]);
        let mut second = labels(&[("zone", "a"), ("pool", "p2")]);
        let before = second.clone();
        first.share(&mut strings);
        second.share(&mut strings);
        assert_eq!(second, before, "sharing changes no pair");
        assert_eq!(strings.len(), 5, "pool, zone, a, p1, p2: {strings:?}");
        let zone = |labels: &Labels| labels.shared_pairs()[1].clone();
        assert!(zone(&first).0.same(&zone(&second).0), "one key");
        assert!(zone(&first).1.same(&zone(&second).1), "one value");
    }
}
