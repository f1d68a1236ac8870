//! Which names a store has already checked for a version-0.1 fencing counter.
//!
//! Version 0.1 kept one counter per name (`{key}:fence`, see
//! [`super::keys::legacy_fence_key`]); this version draws tokens from one counter per hash
//! slot. The first acquisition of a name must therefore continue from the name's old counter,
//! if there is one, and delete it (the acquire script does both in one step). Reading that key
//! on every acquisition costs a command each time for a key that, once deleted, never comes
//! back: only version 0.1 creates it.
//!
//! So the store remembers the names it has locked (a grant came back from a script that looked,
//! or from one that found the caller's own lock, which some earlier grant of this name produced)
//! and asks the script to look only for the others. This is sound because a cache hit only
//! ever skips a look that has already been made: the name is in the set only after a script of
//! this store was granted it with the look requested, and that script deleted the old counter
//! (or found none). Another process's first acquisition looks for itself. The set is bounded;
//! forgetting costs one more look, never a token out of order. (A 0.1 process still running on
//! the same name would make a new counter starting again from 1: running the two versions side
//! by side on one name was never sound, with or without this cache.)

use std::collections::HashSet;
use std::sync::Mutex;

/// Most names remembered; the set starts over when full.
const MAX_NAMES: usize = 65_536;
/// Most bytes of names remembered (so long names cannot make the set large).
const MAX_BYTES: usize = 4 << 20;

/// Names already checked for a 0.1 counter by this store.
#[derive(Default)]
pub(super) struct CheckedNames {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Looked up at every acquisition: hashed with foldhash's seeded quality hasher (a
    /// random per-process seed, as SipHash's, at a fraction of its cost).
    names: HashSet<Box<str>, foldhash::quality::RandomState>,
    bytes: usize,
}

impl CheckedNames {
    /// Whether `key`'s acquisition must look for a 0.1 counter.
    pub(super) fn must_check(&self, key: &str) -> bool {
        !self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .names
            .contains(key)
    }

    /// Records that a grant of `key` came back from a script that looked.
    pub(super) fn checked(&self, key: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.names.contains(key) {
            return;
        }
        if inner.names.len() >= MAX_NAMES || inner.bytes + key.len() > MAX_BYTES {
            // Forgetting only costs a look per name: start over rather than track recency.
            inner.names.clear();
            inner.bytes = 0;
        }
        inner.bytes += key.len();
        inner.names.insert(key.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_checked_until_a_grant_is_recorded() {
        let names = CheckedNames::default();
        assert!(names.must_check("a"));
        names.checked("a");
        assert!(!names.must_check("a"));
        assert!(names.must_check("b"));
    }

    #[test]
    fn the_set_is_bounded_and_forgetting_means_checking_again() {
        let names = CheckedNames::default();
        for i in 0..MAX_NAMES {
            names.checked(&i.to_string());
        }
        assert!(!names.must_check("0"));
        names.checked("one more");
        assert!(names.must_check("0"), "started over");
        assert!(!names.must_check("one more"));
        let long = "x".repeat(MAX_BYTES);
        names.checked(&long);
        assert!(names.must_check("one more"));
        assert!(!names.must_check(&long));
    }
}
