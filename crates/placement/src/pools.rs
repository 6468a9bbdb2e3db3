//! The pools a binding places Pods on: one, or several whose union is the
//! Pods' allowed nodes.

use std::fmt;

/// What separates the pools of a namespace's pool label
/// (`hangzhou_shanghai`): a label value cannot hold a comma, and a NodePool
/// name (a DNS-1123 subdomain) never holds `_`.
pub const LABEL_POOL_SEPARATOR: char = '_';

/// A non-empty set of pool names, sorted, each once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolSet(Vec<String>);

impl PoolSet {
    pub fn one(pool: impl Into<String>) -> Self {
        Self(vec![pool.into()])
    }

    /// The set of `pools`; `None` when there is none.
    pub fn new(pools: impl IntoIterator<Item = String>) -> Option<Self> {
        let mut pools: Vec<String> = pools.into_iter().collect();
        pools.sort_unstable();
        pools.dedup();
        (!pools.is_empty()).then_some(Self(pools))
    }

    /// The pools of a namespace's pool label value, split at
    /// [`LABEL_POOL_SEPARATOR`] (empty parts dropped).
    pub fn from_label_value(value: &str) -> Option<Self> {
        Self::new(
            value
                .split(LABEL_POOL_SEPARATOR)
                .filter(|pool| !pool.is_empty())
                .map(str::to_owned),
        )
    }

    /// The names, sorted.
    pub fn names(&self) -> &[String] {
        &self.0
    }

    pub fn contains(&self, pool: &str) -> bool {
        self.0
            .binary_search_by(|name| name.as_str().cmp(pool))
            .is_ok()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true; for symmetry with `len`.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The names joined by commas: a metric label, the placement record, a
    /// report column.
    pub fn joined(&self) -> String {
        self.0.join(",")
    }
}

/// `node pool "a"` or `node pools "a", "b"`, for messages.
impl fmt::Display for PoolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "node pool {one:?}"),
            several => {
                f.write_str("node pools ")?;
                for (i, pool) in several.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{pool:?}")?;
                }
                Ok(())
            }
        }
    }
}
