//! The UIDs of MachineClasses, learned from lookups, so that repeated Events
//! of a class (a failure every `shortRetry`) cost no extra API call.

use std::collections::HashMap;

use poolkeeper_bus::ObjectKey;

/// Known UIDs by key. A class deleted or created under a key makes the key
/// unknown (a new object of the same name has a new UID); `generation`
/// changes with every such forget, so that a lookup that was under way
/// meanwhile cannot bring the old UID back.
#[derive(Debug, Default)]
pub(crate) struct Uids {
    known: HashMap<ObjectKey, String>,
    generation: u64,
}

impl Uids {
    pub(crate) fn get(&self, key: &ObjectKey) -> Option<&str> {
        self.known.get(key).map(String::as_str)
    }

    /// To pass to [`Uids::learn`] with the result of a lookup started now.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn forget(&mut self, key: &ObjectKey) {
        self.known.remove(key);
        self.generation += 1;
    }

    /// After missed bus events, any key may have been deleted or recreated.
    pub(crate) fn forget_all(&mut self) {
        self.known.clear();
        self.generation += 1;
    }

    /// Keeps `uid` unless something was forgotten since the lookup began.
    pub(crate) fn learn(&mut self, key: ObjectKey, uid: String, looked_up_at: u64) {
        if looked_up_at == self.generation {
            self.known.insert(key, uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::namespaced("machine-system", name)
    }

    #[test]
    fn learned_uids_are_kept_until_forgotten() {
        let mut uids = Uids::default();
        uids.learn(key("a"), "uid-a".into(), uids.generation());
        uids.learn(key("b"), "uid-b".into(), uids.generation());
        assert_eq!(uids.get(&key("a")), Some("uid-a"));
        uids.forget(&key("a"));
        assert_eq!(uids.get(&key("a")), None);
        assert_eq!(uids.get(&key("b")), Some("uid-b"));
        uids.forget_all();
        assert_eq!(uids.get(&key("b")), None);
    }

    #[test]
    fn a_lookup_overtaken_by_a_forget_is_not_kept() {
        let mut uids = Uids::default();
        let started = uids.generation();
        // The class is deleted (and perhaps recreated) while the lookup runs.
        uids.forget(&key("a"));
        uids.learn(key("a"), "old-uid".into(), started);
        assert_eq!(uids.get(&key("a")), None);
        uids.learn(key("a"), "new-uid".into(), uids.generation());
        assert_eq!(uids.get(&key("a")), Some("new-uid"));
    }
}
