//! What the SQL stores' batched extensions (heartbeats) share around their own statements:
//! which leases a batch extends, and the path of a batch of at most one item, which is a
//! plain extension.

use crate::store::{ExtendItem, LockStore, StoreResult};

/// What a batch of extensions extends: lock leases, or holders' permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leases {
    /// Rows of the lock table, found by name.
    Locks,
    /// Holders in the permit table, found by name and owner.
    Permits,
}

impl Leases {
    /// The operation named in errors.
    pub fn operation(self) -> &'static str {
        match self {
            Leases::Locks => "extend",
            Leases::Permits => "extend_permits",
        }
    }

    /// Extends each of `items` with its own call to `store`'s `extend` or `extend_permits`:
    /// what a batch of at most one item comes down to.
    ///
    /// # Cancel Safety
    /// As the store's extensions: an extension abandoned may still take effect.
    pub async fn one_by_one<S: LockStore>(
        self,
        store: &S,
        items: &[ExtendItem],
    ) -> Vec<StoreResult<bool>> {
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(match self {
                Leases::Locks => {
                    store
                        .extend(&item.key, &item.owner, item.ttl_ms, item.has_data)
                        .await
                }
                Leases::Permits => {
                    store
                        .extend_permits(&item.key, &item.owner, item.ttl_ms)
                        .await
                }
            });
        }
        out
    }
}
