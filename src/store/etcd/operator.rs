//! The operator's tools of the etcd store: free a lock whoever holds it (a plain delete of its
//! key), and list the held locks under a prefix (one range read).

use super::client::{self, b64, int, kvs};
use super::{keys, lock_key, EtcdStore};
use crate::store::Call;
use crate::store::{HeldLock, OperatorTools, StoreResult};
use futures_util::FutureExt;
use serde_json::json;

impl EtcdStore {
    async fn force_release_inner(&self, key: &str) -> StoreResult<bool> {
        let k = lock_key(key);
        let reply = self
            .request("/v3/kv/deleterange", &json!({"key": b64(&k)}))
            .await?;
        self.held.forget(&k);
        Ok(int(reply.get("deleted")) > 0)
    }

    async fn list_inner(&self, prefix: &str, limit: usize) -> StoreResult<Vec<HeldLock>> {
        let from = lock_key(prefix);
        let end = client::prefix_end(&from);
        let reply = self
            .request(
                "/v3/kv/range",
                &json!({"key": b64(&from), "range_end": b64(&end), "limit": limit.to_string()}),
            )
            .await?;
        let mut out = Vec::new();
        for kv in kvs(&reply) {
            let Some(name) = keys::lock_name(&kv.key) else {
                continue;
            };
            if let Some(info) = self.info(&kv).await? {
                out.push(HeldLock { key: name, info });
            }
        }
        out.truncate(limit);
        Ok(out)
    }
}

impl OperatorTools for EtcdStore {
    fn force_release<'a>(&'a self, key: &'a str) -> Call<'a, bool> {
        self.force_release_inner(key).boxed()
    }

    fn list<'a>(&'a self, prefix: &'a str, limit: usize) -> Call<'a, Vec<HeldLock>> {
        self.list_inner(prefix, limit).boxed()
    }
}
