//! The store contract: [`LockStore`], the operations every store implements, each one round
//! trip and atomic on the server, plus optional capabilities the engine discovers through the
//! trait ([`LockStore::release_notifications`]). Nothing here knows about retries,
//! heartbeats or JavaScript. Adding a store is its module here and its entry in [`registry`]
//! (CONTRIBUTING.md, "Add a store").

pub mod bounded;
pub mod connect;
mod delegate;
pub mod dynamodb;
pub mod error;
pub mod etcd;
pub mod http;
pub mod memory;
pub mod mysql;
pub mod open;
pub mod permits;
pub mod postgres;
pub mod protocol;
mod redact;
pub mod redis;
pub mod redlock;
pub mod refused;
pub mod registry;
pub mod reopen;
pub mod sql;
pub mod sqlite;
pub mod tls;
pub mod topology;
pub mod watched;

#[cfg(test)]
mod conformance;
#[cfg(test)]
pub(crate) mod permit_conformance;
#[cfg(test)]
pub mod test_servers;

pub use error::{ErrorKind, StoreError, StoreResult};
use futures_util::future::BoxFuture;
pub use permits::{PermitHandoff, PermitHolder, PermitRequest};
use std::sync::Arc;
use tokio::sync::broadcast;

/// What a store knows about a held lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// Owner token of the current holder.
    pub owner: String,
    /// The holder's fencing token; 0 when the store cannot tell (a Redis lock taken by
    /// redislock or the redislock face, whose value is the bare owner).
    pub fencing_token: u64,
    /// Remaining lease in milliseconds, by the store's clock (-1: no expiry).
    pub remaining_ms: i64,
    /// Payload stored with the lock, if any.
    pub data: Option<Vec<u8>>,
}

/// How an acquisition writes the lock's value, and whether it draws a fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ValueFormat {
    /// The owner and a fresh fencing token (the modern API's default).
    #[default]
    Fenced,
    /// The owner alone, the redislock wire format (Redis only; other stores store no value
    /// a peer reads). A token is still drawn and returned.
    Plain,
    /// The owner alone, as [`ValueFormat::Plain`], and no token needed, as
    /// [`ValueFormat::Unfenced`]: exactly what redislock writes. On Redis an uncontended
    /// acquisition is then redislock's own command, one top-level `SET key owner PX ttl NX`.
    PlainUnfenced,
    /// No token is needed (`fencing: false`). A store may skip drawing one and return 0 for
    /// the grant; one whose token costs nothing extra returns it as usual. On Redis this is
    /// what lets an uncontended acquisition be one top-level `SET NX PX` instead of a script.
    Unfenced,
}

impl ValueFormat {
    /// This format for a store that must draw a token whatever the caller needs (Redlock
    /// raises the quorum's token on every server): [`ValueFormat::Unfenced`] becomes
    /// [`ValueFormat::Fenced`] and [`ValueFormat::PlainUnfenced`] [`ValueFormat::Plain`], the
    /// others stay.
    pub fn with_token(self) -> ValueFormat {
        match self {
            ValueFormat::Unfenced => ValueFormat::Fenced,
            ValueFormat::PlainUnfenced => ValueFormat::Plain,
            other => other,
        }
    }

    /// Whether the caller needs no token ([`ValueFormat::Unfenced`] or
    /// [`ValueFormat::PlainUnfenced`]): a store may skip drawing one and grant 0.
    pub fn unfenced(self) -> bool {
        matches!(self, ValueFormat::Unfenced | ValueFormat::PlainUnfenced)
    }

    /// Whether the value is the bare owner, redislock's ([`ValueFormat::Plain`] or
    /// [`ValueFormat::PlainUnfenced`]).
    pub fn plain(self) -> bool {
        matches!(self, ValueFormat::Plain | ValueFormat::PlainUnfenced)
    }
}

/// One lease to extend in a batch (heartbeats).
#[derive(Debug, Clone)]
pub struct ExtendItem {
    /// Lock name.
    pub key: String,
    /// Owner token.
    pub owner: String,
    /// New remaining lease in milliseconds.
    pub ttl_ms: u64,
    /// Whether a payload was stored with the lock (its lease is extended too).
    pub has_data: bool,
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseOutcome {
    /// Whether the caller held the lock (and this call freed it).
    pub released: bool,
    /// Whether waiters in other processes are known to be listening for this release
    /// (Redis: subscribers other than this process; PostgreSQL: another store was refused
    /// the lock since it was granted; other stores, MySQL included, cannot tell).
    pub others_waiting: bool,
}

impl ReleaseOutcome {
    /// The outcome of a release that no waiter in another process is known to listen for
    /// (`others_waiting: false`): what a release that freed nothing answers, and every
    /// release of a store that cannot tell.
    pub fn unannounced(released: bool) -> Self {
        Self {
            released,
            others_waiting: false,
        }
    }
}

/// Who an acquisition takes a lock for, and how ([`LockStore::try_acquire`]).
#[derive(Debug, Clone, Copy)]
pub struct Acquisition<'a> {
    /// Owner token of the new holder.
    pub owner: &'a str,
    /// Its lease in ms.
    pub ttl_ms: u64,
    /// Its payload, if any.
    pub data: Option<&'a [u8]>,
    /// How its value is written, and whether it needs a fencing token.
    pub format: ValueFormat,
}

impl<'a> Acquisition<'a> {
    /// An acquisition for `owner` of a `ttl_ms` lease, without a payload, its value
    /// [`ValueFormat::Fenced`]; set the other fields with struct update syntax
    /// (`Acquisition { data, ..Acquisition::fenced(owner, ttl_ms) }`).
    pub fn fenced(owner: &'a str, ttl_ms: u64) -> Self {
        Acquisition {
            owner,
            ttl_ms,
            data: None,
            format: ValueFormat::Fenced,
        }
    }
}

/// A holder's new lease for its lock ([`LockStore::extend`]), or for its permits of a
/// semaphore ([`LockStore::extend_permits`]).
#[derive(Debug, Clone, Copy)]
pub struct Renewal<'a> {
    /// Owner token of the holder.
    pub owner: &'a str,
    /// Its new remaining lease in ms.
    pub ttl_ms: u64,
    /// Whether it stored a payload (whose lease is extended too).
    pub has_data: bool,
}

impl<'a> Renewal<'a> {
    /// A renewal of `owner`'s lease for `ttl_ms` without a payload: of a lock that stored
    /// none, or of permits, which carry none.
    pub fn new(owner: &'a str, ttl_ms: u64) -> Self {
        Renewal {
            owner,
            ttl_ms,
            has_data: false,
        }
    }
}

/// A holder's release of its lock ([`LockStore::release`]) or of its permits of a semaphore
/// ([`LockStore::release_permits`]).
#[derive(Debug, Clone, Copy)]
pub struct Release<'a> {
    /// Owner token of the holder.
    pub owner: &'a str,
    /// Whether the holder may have stored a payload with the lock; `false` only from a holder
    /// that knows it stored none, so that a store keeping payloads apart may leave the payload
    /// alone (Redis: one key less in the script). Permits carry none: stores ignore it there.
    pub had_data: bool,
}

impl<'a> Release<'a> {
    /// A release by `owner` that does not say whether it stored a payload (`had_data: true`:
    /// a store keeping payloads apart clears one if there is one); for permits, the release.
    pub fn new(owner: &'a str) -> Self {
        Release {
            owner,
            had_data: true,
        }
    }
}

/// Who a lock is handed to by [`LockStore::handoff`].
#[derive(Debug, Clone, Copy)]
pub struct NextOwner<'a> {
    /// Owner token of the next holder.
    pub owner: &'a str,
    /// Its lease in ms.
    pub ttl_ms: u64,
    /// Its payload, if any.
    pub data: Option<&'a [u8]>,
    /// Whether the current holder stored a payload (that must not leak to the next one).
    pub previous_had_data: bool,
    /// How its value is written, as for [`LockStore::try_acquire`]: a handoff to an
    /// unfenced owner ([`ValueFormat::unfenced`]) may skip drawing a token (and give it 0).
    pub format: ValueFormat,
}

/// A handoff from the holder `from` to `next`: of a lock ([`LockStore::handoff`], `next` a
/// [`NextOwner`]) or of a semaphore's permits ([`LockStore::handoff_permits`], `next` the
/// [`PermitRequest`] the permits are asked for).
#[derive(Debug)]
pub struct Handoff<'a, N = NextOwner<'a>> {
    /// Owner token of the current holder.
    pub from: &'a str,
    /// Who it goes to.
    pub next: &'a N,
}

// By hand: a derive would ask `N: Clone`, and a handoff only holds a reference to it.
impl<N> Clone for Handoff<'_, N> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<N> Copy for Handoff<'_, N> {}

impl<'a, N> Handoff<'a, N> {
    /// A handoff from the holder `from` to `next`.
    pub fn new(from: &'a str, next: &'a N) -> Self {
        Handoff { from, next }
    }
}

/// What [`LockStore::handoff_or_release`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoffOutcome {
    /// The lock went straight to the next owner, with this fencing token.
    Handed(u64),
    /// It was not handed over; the caller's lock was released instead (or was not held:
    /// `released: false`), so the next owner has to acquire it as anyone would.
    Released(ReleaseOutcome),
}

/// A connected store, shared by every engine user; cloning the `Arc` shares its connections.
pub type SharedStore = Arc<dyn LockStore>;

/// What a store call returns: a boxed future of its result (boxed so that the contract stays
/// object safe: the engine holds stores as `dyn LockStore`).
pub type Call<'a, T> = BoxFuture<'a, StoreResult<T>>;

/// What a batched store call returns: one result per item, in order.
pub type Batch<'a> = BoxFuture<'a, Vec<StoreResult<bool>>>;

/// The operations every store offers. Each is one round trip where the store allows it and
/// atomic on the server (compare-and-act), decided by the store's clock.
pub trait LockStore: Send + Sync + 'static {
    /// Takes `key` for `acq.owner` for `acq.ttl_ms` if it is free or expired, with
    /// `acq.data` stored alongside, its value written as `acq.format` says. Returns the new
    /// fencing token, strictly greater than any token issued for `key` before (0 for an
    /// unfenced grant, [`ValueFormat::unfenced`], by a store that skipped drawing one), or
    /// `None` when someone else holds it.
    ///
    /// # Cancel Safety
    /// Not cancel safe: dropping the future after the request was sent may leave the lock taken.
    fn try_acquire<'a>(&'a self, key: &'a str, acq: Acquisition<'a>) -> Call<'a, Option<u64>>;

    /// Sets the remaining lease of `key` to `renewal.ttl_ms` if `renewal.owner` still holds it
    /// (and of its payload, `renewal.has_data`). Returns whether it did.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    fn extend<'a>(&'a self, key: &'a str, renewal: Renewal<'a>) -> Call<'a, bool>;

    /// Extends many leases in as few round trips as the store allows (one pipeline on Redis,
    /// one statement per batch on MySQL). One result per item, in order.
    ///
    /// # Cancel Safety
    /// Cancel safe: each extension is idempotent.
    fn extend_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a>;

    /// Frees `key` if `r.owner` still holds it, and announces it to waiters where the store
    /// can (`r.had_data`: see [`Release`]).
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent (a repeat after a lost reply reports `released: false`).
    fn release<'a>(&'a self, key: &'a str, r: Release<'a>) -> Call<'a, ReleaseOutcome>;

    /// If `h.from` holds `key`, gives it straight to `h.next` (new lease, new fencing token)
    /// in one atomic step and returns the token; `None` if `h.from` no longer holds it.
    ///
    /// # Cancel Safety
    /// Not cancel safe: the lock may have changed hands when the future is dropped.
    fn handoff<'a>(&'a self, key: &'a str, h: Handoff<'a>) -> Call<'a, Option<u64>>;

    /// Hands `key` over like [`LockStore::handoff`], for a store that cannot always do it in
    /// one step (Redlock: the handoff may reach too few servers); it then releases the
    /// caller's lock instead and says so. What the engine calls. The default is
    /// [`LockStore::handoff`], whose `None` means the caller no longer held the lock.
    ///
    /// # Cancel Safety
    /// Not cancel safe: the lock may have changed hands when the future is dropped.
    fn handoff_or_release<'a>(&'a self, key: &'a str, h: Handoff<'a>) -> Call<'a, HandoffOutcome> {
        use futures_util::FutureExt;
        self.handoff(key, h)
            .map(|r| {
                r.map(|handed| match handed {
                    Some(token) => HandoffOutcome::Handed(token),
                    None => HandoffOutcome::Released(ReleaseOutcome::unannounced(false)),
                })
            })
            .boxed()
    }

    /// Reads who holds `key`, or `None` when it is free or expired.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    fn inspect<'a>(&'a self, key: &'a str) -> Call<'a, Option<LockInfo>>;

    /// Checks that the store answers.
    ///
    /// # Cancel Safety
    /// Cancel safe.
    fn ping(&self) -> Call<'_, ()>;

    /// Closes connections. Operations afterwards fail with [`ErrorKind::Closed`].
    ///
    /// # Cancel Safety
    /// Cancel safe: closing again is harmless.
    fn close(&self) -> BoxFuture<'_, ()>;

    /// Takes `req.permits` permits of the counting semaphore `req.name` for `req.owner` if
    /// they are free and no queued request would be delayed by it, by the rules of
    /// [`permits`](crate::store::permits); queues a refused request when
    /// `req.queue_ttl_ms > 0`. Returns the new fencing token (strictly greater than any
    /// issued for the semaphore before), the owner's own token if it already holds permits
    /// of it, or `None` when refused.
    /// `req.permits` is from 1 to `req.limit`: the engine refuses any other request before it
    /// reaches a store ([`permits::check_permits`]).
    ///
    /// # Cancel Safety
    /// Not cancel safe: dropping the future after the request was sent may leave the permits
    /// taken until their lease ends.
    fn acquire_permits<'a>(&'a self, req: &'a PermitRequest<'a>) -> Call<'a, Option<u64>> {
        let _ = req;
        unsupported("semaphores")
    }

    /// Sets the remaining lease of `renewal.owner`'s permits of semaphore `name` to
    /// `renewal.ttl_ms` if it still holds them ([`Renewal::new`]). Returns whether it
    /// did.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    fn extend_permits<'a>(&'a self, name: &'a str, renewal: Renewal<'a>) -> Call<'a, bool> {
        let _ = (name, renewal);
        unsupported("semaphores")
    }

    /// Extends many holders' permits (`key`: the semaphore, `has_data` unused) in as few round
    /// trips as the store allows. One result per item, in order. The default asks one by one.
    ///
    /// # Cancel Safety
    /// Cancel safe: each extension is idempotent.
    fn extend_permits_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a> {
        use futures_util::FutureExt;
        async move {
            let mut out = Vec::with_capacity(items.len());
            for i in items {
                let renewal = Renewal::new(&i.owner, i.ttl_ms);
                out.push(self.extend_permits(&i.key, renewal).await);
            }
            out
        }
        .boxed()
    }

    /// Frees `r.owner`'s permits of semaphore `name` and its place in the queue (a waiter
    /// giving up calls it too), and announces it to waiters where the store can.
    /// `released`: whether it held live permits.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    fn release_permits<'a>(&'a self, name: &'a str, r: Release<'a>) -> Call<'a, ReleaseOutcome> {
        let _ = (name, r);
        unsupported("semaphores")
    }

    /// Frees `h.from`'s permits of semaphore `h.next.name` and asks for `h.next`'s permits by
    /// the rules of [`LockStore::acquire_permits`], in one step where the store allows: a local
    /// release hands its permits to the next local waiter without a round trip of its own.
    /// The default releases, then asks (two round trips, the same outcome; a failure of the
    /// second is reported as not granted, so the waiter asks for itself).
    ///
    /// # Cancel Safety
    /// Not cancel safe: `next` may be granted permits nobody hears of until their lease ends.
    fn handoff_permits<'a>(&'a self, h: Handoff<'a, PermitRequest<'a>>) -> Call<'a, PermitHandoff> {
        use futures_util::FutureExt;
        async move {
            let released = self.release_permits(h.next.name, Release::new(h.from));
            let released = released.await?.released;
            let granted = self.acquire_permits(h.next).await.unwrap_or(None);
            Ok(PermitHandoff {
                released,
                granted,
                room: None,
            })
        }
        .boxed()
    }

    /// The live holders of semaphore `name`, in no particular order.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    fn permits<'a>(&'a self, name: &'a str) -> Call<'a, Vec<PermitHolder>> {
        let _ = name;
        unsupported("semaphores")
    }

    /// Announcements of releases made anywhere (other processes included), if the store has
    /// them. Without them, waiters in other processes poll.
    fn release_notifications(&self) -> Option<&dyn ReleaseNotifications> {
        None
    }

    /// An operator's tools (force release, listing held locks), if the store has them.
    fn operator(&self) -> Option<&dyn OperatorTools> {
        None
    }
}

/// The reply of a contract method a store does not offer.
fn unsupported<'a, T: Send + 'a>(what: &str) -> Call<'a, T> {
    use futures_util::FutureExt;
    futures_util::future::ready(Err(StoreError::invalid(format!(
        "this store does not offer {what}"
    ))))
    .boxed()
}

/// A held lock as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    /// Lock name.
    pub key: String,
    /// What the store knows about it.
    pub info: LockInfo,
}

/// A store capability for operators: free a lock whoever holds it, list held locks.
pub trait OperatorTools: Send + Sync {
    /// Frees `key` whoever holds it, and announces the release where the store can. Returns
    /// whether a live lock was freed. Its holder learns of it at its next extension.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    fn force_release<'a>(&'a self, key: &'a str) -> Call<'a, bool>;

    /// Up to `limit` held locks whose names start with `prefix`, in no particular order.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    fn list<'a>(&'a self, prefix: &'a str, limit: usize) -> Call<'a, Vec<HeldLock>>;
}

/// A grant that ended without its holder (an operator deleted it, the store itself ended it),
/// as the store saw it happen ([`ReleaseNotifications::losses`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    /// The lock's name, or the semaphore's.
    pub key: String,
    /// Owner token of the holder that lost it.
    pub owner: String,
}

/// A store capability: release announcements from other processes (for example Redis pub/sub,
/// PostgreSQL `LISTEN`/`NOTIFY`; which stores have it: their
/// [`LockStore::release_notifications`]).
pub trait ReleaseNotifications: Send + Sync {
    /// A stream of released lock names, for keys being watched. A receiver that lags loses
    /// messages, which costs the waiters one poll each.
    fn releases(&self) -> broadcast::Receiver<String>;

    /// Starts listening for releases of `key`. Each `watch` needs a matching `unwatch`. A
    /// failure to subscribe is not an error: waiters fall back to polling.
    ///
    /// # Cancel Safety
    /// Cancel safe: at worst the subscription is made late or not at all.
    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()>;

    /// Stops listening for releases of `key` when no local waiter is left.
    ///
    /// # Cancel Safety
    /// Cancel safe.
    fn unwatch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()>;

    /// Number of keys listened to (for diagnostics and leak checks).
    fn watched(&self) -> usize;

    /// Grants of this store that ended without their holder, announced as soon as the store
    /// sees it, if it can tell (etcd: its watch sees a held key deleted by someone else).
    /// Without it, or for an announcement missed, the holder hears of the loss at its next
    /// extension.
    fn losses(&self) -> Option<broadcast::Receiver<Loss>> {
        None
    }

    /// Whether this store's releases tell when waiters elsewhere listen
    /// ([`ReleaseOutcome::others_waiting`]). MySQL's waiters look at the lease rows rather
    /// than being told, so its releases never know.
    fn tells_others_waiting(&self) -> bool {
        true
    }
}
