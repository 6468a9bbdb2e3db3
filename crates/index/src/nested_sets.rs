//! The shape shared by the secondary indexes: sets of members filed under an
//! outer name, then an inner name (label key, then value; namespace, then
//! class). Neither a set nor an inner map is left empty, so an index never
//! outgrows the members it holds and "no entry" always means "no member".

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The inner level of [`NestedSets`]: member sets by inner name. Implemented
/// for `HashMap`, for indexes that are only looked up by name, and for
/// `BTreeMap`, for indexes whose readers list the inner names in order.
pub(crate) trait SetsByName: Default {
    type Member: Ord;

    fn set(&self, name: &str) -> Option<&BTreeSet<Self::Member>>;
    fn set_mut(&mut self, name: &str) -> Option<&mut BTreeSet<Self::Member>>;
    fn insert_empty_set(&mut self, name: String) -> &mut BTreeSet<Self::Member>;
    fn remove_set(&mut self, name: &str);
    fn has_no_sets(&self) -> bool;
    #[cfg(test)]
    fn sets(&self) -> impl Iterator<Item = &BTreeSet<Self::Member>>;
}

// Both maps offer the same by-name API under the same method names, so one
// body serves both.
macro_rules! impl_sets_by_name {
    ($map:ident) => {
        impl<T: Ord> SetsByName for $map<String, BTreeSet<T>> {
            type Member = T;

            fn set(&self, name: &str) -> Option<&BTreeSet<T>> {
                self.get(name)
            }

            fn set_mut(&mut self, name: &str) -> Option<&mut BTreeSet<T>> {
                self.get_mut(name)
            }

            fn insert_empty_set(&mut self, name: String) -> &mut BTreeSet<T> {
                self.entry(name).or_default()
            }

            fn remove_set(&mut self, name: &str) {
                self.remove(name);
            }

            fn has_no_sets(&self) -> bool {
                self.is_empty()
            }

            #[cfg(test)]
            fn sets(&self) -> impl Iterator<Item = &BTreeSet<T>> {
                self.values()
            }
        }
    };
}

impl_sets_by_name!(HashMap);
impl_sets_by_name!(BTreeMap);

/// Member sets by outer name, then inner name; `Inner` picks the inner map.
#[derive(Debug, Default)]
pub(crate) struct NestedSets<Inner> {
    by_outer: HashMap<String, Inner>,
}

impl<Inner: SetsByName> NestedSets<Inner> {
    pub(crate) fn insert(&mut self, outer: &str, inner: &str, member: Inner::Member) {
        // Look up before `entry` so that the names are only copied for a new
        // entry, not on every insert.
        let sets = match self.by_outer.get_mut(outer) {
            Some(sets) => sets,
            None => self.by_outer.entry(outer.to_owned()).or_default(),
        };
        let set = match sets.set_mut(inner) {
            Some(set) => set,
            None => sets.insert_empty_set(inner.to_owned()),
        };
        set.insert(member);
    }

    /// Removes `member` and whatever that leaves empty.
    pub(crate) fn remove<Q>(&mut self, outer: &str, inner: &str, member: &Q)
    where
        Inner::Member: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let Some(sets) = self.by_outer.get_mut(outer) else {
            return;
        };
        if let Some(set) = sets.set_mut(inner) {
            set.remove(member);
            if set.is_empty() {
                sets.remove_set(inner);
            }
        }
        if sets.has_no_sets() {
            self.by_outer.remove(outer);
        }
    }

    /// The members under `outer`, `inner`; `None` when there are none.
    pub(crate) fn members(&self, outer: &str, inner: &str) -> Option<&BTreeSet<Inner::Member>> {
        self.by_outer.get(outer)?.set(inner)
    }

    /// The sets under `outer`; `None` when there are none.
    pub(crate) fn sets_under(&self, outer: &str) -> Option<&Inner> {
        self.by_outer.get(outer)
    }

    #[cfg(test)]
    pub(crate) fn member_count(&self) -> usize {
        self.all_sets().map(BTreeSet::len).sum()
    }

    #[cfg(test)]
    pub(crate) fn set_count(&self) -> usize {
        self.all_sets().count()
    }

    #[cfg(test)]
    pub(crate) fn outer_count(&self) -> usize {
        self.by_outer.len()
    }

    #[cfg(test)]
    fn all_sets(&self) -> impl Iterator<Item = &BTreeSet<Inner::Member>> {
        self.by_outer.values().flat_map(SetsByName::sets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy)]
    enum Step {
        Insert(&'static str, &'static str, u32),
        Remove(&'static str, &'static str, u32),
    }
    use Step::{Insert, Remove};

    /// What, steps, every "outer/inner={members}" left, and the member, set
    /// and outer-name counts left.
    type Case = (
        &'static str,
        &'static [Step],
        &'static [&'static str],
        [usize; 3],
    );

    fn run<Inner: SetsByName<Member = u32>>(steps: &[Step]) -> (Vec<String>, [usize; 3]) {
        let mut sets = NestedSets::<Inner>::default();
        for step in steps {
            match *step {
                Insert(outer, inner, member) => sets.insert(outer, inner, member),
                Remove(outer, inner, member) => sets.remove(outer, inner, &member),
            }
        }
        let mut listed = Vec::new();
        for outer in ["a", "b"] {
            let listed_before = listed.len();
            for inner in ["x", "y"] {
                if let Some(members) = sets.members(outer, inner) {
                    listed.push(format!("{outer}/{inner}={members:?}"));
                }
            }
            let has_members = listed.len() > listed_before;
            assert_eq!(sets.sets_under(outer).is_some(), has_members, "{outer}");
        }
        let counts = [sets.member_count(), sets.set_count(), sets.outer_count()];
        (listed, counts)
    }

    #[test]
    fn never_left_empty() {
        let cases: &[Case] = &[
            ("nothing", &[], &[], [0, 0, 0]),
            (
                "one member",
                &[Insert("a", "x", 1)],
                &["a/x={1}"],
                [1, 1, 1],
            ),
            (
                "same member twice",
                &[Insert("a", "x", 1), Insert("a", "x", 1)],
                &["a/x={1}"],
                [1, 1, 1],
            ),
            (
                "members in order",
                &[Insert("a", "x", 2), Insert("a", "x", 1)],
                &["a/x={1, 2}"],
                [2, 1, 1],
            ),
            (
                "same member under other names",
                &[
                    Insert("a", "x", 1),
                    Insert("a", "y", 1),
                    Insert("b", "x", 1),
                ],
                &["a/x={1}", "a/y={1}", "b/x={1}"],
                [3, 3, 2],
            ),
            (
                "removing one of two keeps the set",
                &[
                    Insert("a", "x", 1),
                    Insert("a", "x", 2),
                    Remove("a", "x", 1),
                ],
                &["a/x={2}"],
                [1, 1, 1],
            ),
            (
                "removing the last member drops its set",
                &[
                    Insert("a", "x", 1),
                    Insert("a", "y", 2),
                    Remove("a", "x", 1),
                ],
                &["a/y={2}"],
                [1, 1, 1],
            ),
            (
                "removing the last set drops its outer name",
                &[
                    Insert("a", "x", 1),
                    Insert("b", "x", 2),
                    Remove("a", "x", 1),
                ],
                &["b/x={2}"],
                [1, 1, 1],
            ),
            (
                "removing everything leaves nothing",
                &[Insert("a", "x", 1), Remove("a", "x", 1)],
                &[],
                [0, 0, 0],
            ),
            (
                "removing a member that is not there",
                &[Insert("a", "x", 1), Remove("a", "x", 2)],
                &["a/x={1}"],
                [1, 1, 1],
            ),
            (
                "removing under names that are not there",
                &[
                    Insert("a", "x", 1),
                    Remove("a", "y", 1),
                    Remove("b", "x", 1),
                ],
                &["a/x={1}"],
                [1, 1, 1],
            ),
            (
                "removing from nothing",
                &[Remove("a", "x", 1)],
                &[],
                [0, 0, 0],
            ),
        ];
        for (what, steps, listed, counts) in cases {
            let expected = (listed.iter().map(|l| (*l).to_owned()).collect(), *counts);
            assert_eq!(
                run::<HashMap<String, BTreeSet<u32>>>(steps),
                expected,
                "HashMap: {what}"
            );
            assert_eq!(
                run::<BTreeMap<String, BTreeSet<u32>>>(steps),
                expected,
                "BTreeMap: {what}"
            );
        }
    }
}
