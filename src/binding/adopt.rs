//! `NativeClient`'s hand-over operations: adopting another owner's lease, stopping a held
//! lock's heartbeat, and evicting a semaphore holder (see `core::session::adopt`).

use super::client::{succeeded, NativeClient};
use super::completions::Completions;
use crate::core::kind::Kind;
use crate::core::options::AutoExtend;
use crate::core::session::AdoptSpec;
use crate::runtime::clock;
use napi::bindgen_prelude::BigInt;
use napi_derive::napi;

#[napi]
impl NativeClient {
    /// Takes over the lease `owner` holds of `key` as held lock `req` (its handle from then
    /// on): a lock, which moves to `newOwner` with a new fencing token (none unless
    /// `fencing`), or with `permits` the permits of semaphore `key`, which keep their owner
    /// and `token` (the holder's fencing token as the store showed it). `extendEvery`: the
    /// heartbeat period (0: none); `maxHold`: -1 for none. Completes with the fencing token
    /// (0: none), or refused when `owner` no longer holds it.
    #[allow(clippy::too_many_arguments)]
    #[napi(catch_unwind)]
    pub fn adopt(
        &self,
        req: f64,
        key: String,
        owner: String,
        new_owner: String,
        permits: bool,
        token: BigInt,
        fencing: bool,
        ttl: f64,
        extend_every: f64,
        max_hold: f64,
    ) {
        let (_, token, _) = token.get_u64();
        let auto_extend = (extend_every > 0.0).then(|| AutoExtend {
            every: clock::from_ms(extend_every),
            max_hold: (max_hold >= 0.0).then(|| clock::from_ms(max_hold)),
        });
        let spec = AdoptSpec {
            key,
            owner,
            new_owner,
            kind: if permits { Kind::Permits } else { Kind::Lock },
            token,
            fencing,
            ttl_ms: ttl.max(1.0) as u64,
            auto_extend,
        };
        let session = self.session.clone();
        let id = req as u64;
        self.spawn(req, async move { session.adopt(id, spec).await }, granted);
    }

    /// Stops the heartbeat of held lock `id` for good (its lease lapses at its local deadline
    /// unless released; closing the client leaves it to lapse). Returns false when it is not
    /// held.
    #[napi(catch_unwind)]
    pub fn stop_extending(&self, id: f64) -> bool {
        self.session.stop_extending(id as u64)
    }

    /// Frees `owner`'s permits of semaphore `name` whoever holds them; completes with true
    /// (it held some) or false.
    #[napi(catch_unwind)]
    pub fn evict_permits(&self, req: f64, name: String, owner: String) {
        let session = self.session.clone();
        self.spawn(
            req,
            async move { session.evict_permits(&name, &owner).await },
            succeeded,
        );
    }
}

/// Completes an adoption: granted with the lock's fencing token, or refused.
fn granted(completions: &Completions, req: f64, token: Option<u64>) {
    match token {
        Some(token) => completions.granted(req, token),
        None => succeeded(completions, req, false),
    }
}
