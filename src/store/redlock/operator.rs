//! The operator's tools over N servers: a force release frees the lock on every server; a
//! listing gathers candidate names from every server and keeps those a quorum holds.

use super::quorum::{ask_all, no_quorum, Tally};
use super::RedlockStore;
use crate::store::Call;
use crate::store::{HeldLock, OperatorTools};
use futures_util::FutureExt;
use std::collections::BTreeSet;

impl OperatorTools for RedlockStore {
    /// Frees the lock on every server; true if any server held it.
    fn force_release<'a>(&'a self, key: &'a str) -> Call<'a, bool> {
        async move {
            let calls = self
                .servers
                .iter()
                .map(|s| OperatorTools::force_release(&**s, key))
                .collect();
            let answers = ask_all(calls, None, |_| false).await;
            let t = Tally::of(&answers, |freed| *freed);
            if t.yes > 0 {
                Ok(true)
            } else if t.failed > self.servers.len() - self.quorum {
                Err(no_quorum(&answers, "force release"))
            } else {
                Ok(false)
            }
        }
        .boxed()
    }

    /// Names listed by any server are looked up through the quorum ([`RedlockStore::inspect`]),
    /// in name order, until `limit` held ones are found.
    fn list<'a>(&'a self, prefix: &'a str, limit: usize) -> Call<'a, Vec<HeldLock>> {
        async move {
            let calls = self
                .servers
                .iter()
                .map(|s| OperatorTools::list(&**s, prefix, limit))
                .collect();
            let answers = ask_all(calls, None, |_| false).await;
            let t = Tally::of(&answers, |_| true);
            if t.failed > self.servers.len() - self.quorum {
                return Err(no_quorum(&answers, "list"));
            }
            let names: BTreeSet<String> = answers
                .into_iter()
                .flatten()
                .flatten()
                .flatten()
                .map(|l| l.key)
                .collect();
            let mut out = Vec::new();
            for key in names {
                if out.len() >= limit {
                    break;
                }
                if let Some(info) = self.inspect(&key).await? {
                    if info.remaining_ms != 0 {
                        out.push(HeldLock { key, info });
                    }
                }
            }
            Ok(out)
        }
        .boxed()
    }
}
