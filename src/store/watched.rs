//! The names this process's waiters watch for releases, each counted: a store's release
//! channel (PostgreSQL's LISTEN, MySQL's doorbell, SQLite's datagrams, Redlock's
//! subscriptions) starts listening for a name at its first `watch` and stops at its last
//! `unwatch`, whatever the number of waiters in between.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// How many `watch`es of each name are outstanding in this process.
#[derive(Debug, Default)]
pub struct Watched(Mutex<HashMap<String, usize>>);

impl Watched {
    fn names(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a `watch` of `key`; true when it is the first.
    pub fn add(&self, key: &str) -> bool {
        let mut names = self.names();
        let count = names.entry(key.to_owned()).or_insert(0);
        *count += 1;
        *count == 1
    }

    /// Counts an `unwatch` of `key`; true when it was the last (an `unwatch` of a name not
    /// watched counts nothing and is false).
    pub fn remove(&self, key: &str) -> bool {
        let mut names = self.names();
        match names.get_mut(key) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            Some(_) => {
                names.remove(key);
                true
            }
            None => false,
        }
    }

    /// Whether anyone here watches `key`.
    pub fn contains(&self, key: &str) -> bool {
        self.names().contains_key(key)
    }

    /// The watched names, in no particular order.
    pub fn keys(&self) -> Vec<String> {
        self.names().keys().cloned().collect()
    }

    /// How many distinct names are watched.
    pub fn len(&self) -> usize {
        self.names().len()
    }

    /// Whether no name is watched.
    pub fn is_empty(&self) -> bool {
        self.names().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::Watched;

    #[test]
    fn a_name_is_watched_from_its_first_watch_to_its_last_unwatch() {
        let w = Watched::default();
        assert!(w.add("k"));
        assert!(!w.add("k"));
        assert!(!w.remove("k"));
        assert!(w.contains("k"));
        assert!(w.remove("k"));
        assert!(!w.contains("k"));
        assert!(!w.remove("k"), "an unwatch of a name not watched");
        assert!(w.is_empty());
    }
}
