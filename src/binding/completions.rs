//! The completion queue between tokio tasks and the JS thread.

use super::direct_drain::{self, Deferred, DirectDrain};
use crate::core::error::{LockError, LostReason};
use crate::core::session::EventSink;
use crate::store::{HeldLock, LockInfo, PermitHolder};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Locks `m` even if poisoned: completions must still be delivered after a bug elsewhere.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Status of one completion record, as JavaScript reads it.
#[repr(u8)]
#[derive(Clone, Copy)]
pub enum Kind {
    /// Acquired: value is the fencing token.
    Granted = 0,
    /// Succeeded (released, extended, pinged, closed): value is unused.
    Succeeded = 1,
    /// Refused (busy, not owned, not found): value is unused.
    Refused = 2,
    /// Failed: value indexes the batch's errors.
    Failed = 3,
    /// Lock `req` was lost: value is the reason code.
    Lost = 4,
    /// Inspect found a holder: value indexes the batch's infos.
    Info = 5,
    /// A listing: value indexes the batch's lists.
    List = 6,
    /// A semaphore's holders: value indexes the batch's permit lists.
    PermitList = 7,
    /// A heartbeat extended held lock `req`: value is unused.
    Extended = 8,
    /// Acquired, but no longer live when JavaScript took the record (its local deadline
    /// passed, or it was released or lost, while the event loop was busy): value as for
    /// [`Kind::Granted`]. Only the drain writes it (see [`mark_late`]): the check rides in
    /// the drain's one crossing instead of one crossing per grant.
    GrantedLate = 9,
}

/// Turns each [`Kind::Granted`] record of `records` (triplets) whose lock `live` says may no
/// longer be acted on into a [`Kind::GrantedLate`] one.
pub fn mark_late(records: &mut [f64], mut live: impl FnMut(u64) -> bool) {
    for r in records.chunks_exact_mut(3) {
        if r[1] == Kind::Granted as u8 as f64 && !live(r[0] as u64) {
            r[1] = Kind::GrantedLate as u8 as f64;
        }
    }
}

/// What one drain hands to JavaScript.
#[derive(Default)]
pub struct Batch {
    /// Triplets `[request id, kind, value]`.
    pub records: Vec<f64>,
    /// `(code, cause code, message)` of failed requests; the cause code names the store
    /// error's kind (empty when the failure is not the store's).
    pub errors: Vec<(&'static str, &'static str, String)>,
    /// Lock infos returned by inspect.
    pub infos: Vec<LockInfo>,
    /// Held locks returned by listings.
    pub lists: Vec<Vec<HeldLock>>,
    /// Holders of semaphores.
    pub permit_lists: Vec<Vec<PermitHolder>>,
    /// Fencing tokens above 2^53, which a record's `f64` value cannot carry exactly: a grant
    /// with such a token has value `-(index + 1)`.
    pub big_tokens: Vec<u64>,
}

/// Largest integer an `f64` holds exactly.
const MAX_EXACT: u64 = 1 << 53;

pub type DrainFn = ThreadsafeFunction<(), (), (), Status, false, true>;

/// Results waiting for the JS thread, and the function that wakes it.
pub struct Completions {
    batch: Mutex<Batch>,
    /// Behind a lock because ref/unref need `&mut`; it is only touched on the first
    /// completion of a batch and on keep-alive changes. `None` once disposed: the function
    /// holds the JavaScript client alive, so a closed client lets go of it.
    drain: Mutex<Option<DrainFn>>,
    /// The same function, called directly at the end of one of Node's callbacks on the
    /// client's thread (see `direct_drain`).
    direct: Option<DirectDrain>,
    me: Weak<Completions>,
}

/// Why a lock was lost, as JavaScript names it: the value of a `Kind::Lost` record indexes
/// this table (exported by `protocol()`).
pub const LOST_REASONS: [&str; 5] = [
    "not-owned",
    "expired",
    "unreachable",
    "max-hold",
    "store-replaced",
];

/// The value of a `Kind::Lost` record for `reason`.
pub fn lost_code(reason: LostReason) -> f64 {
    match reason {
        LostReason::NotOwned => 0.0,
        LostReason::Expired => 1.0,
        LostReason::Unreachable => 2.0,
        LostReason::MaxHold => 3.0,
        LostReason::StoreReplaced => 4.0,
    }
}

impl Completions {
    /// A queue that wakes JavaScript with `drain`, or calls `direct` where it can.
    pub fn new(drain: DrainFn, direct: Option<DirectDrain>) -> Arc<Self> {
        Arc::new_cyclic(|me| Completions {
            batch: Mutex::new(Batch::default()),
            drain: Mutex::new(Some(drain)),
            direct,
            me: me.clone(),
        })
    }

    /// Wakes the JS thread through the threadsafe function.
    fn wake_drain(&self) {
        if let Some(drain) = lock(&self.drain).as_ref() {
            drain.call((), ThreadsafeFunctionCallMode::NonBlocking);
        }
    }

    /// Appends one record; `fill` stores any payload and returns the record's value slot.
    fn push(&self, req: f64, kind: Kind, fill: impl FnOnce(&mut Batch) -> f64) {
        let first = {
            let mut batch = lock(&self.batch);
            let value = fill(&mut batch);
            let first = batch.records.is_empty();
            batch
                .records
                .extend_from_slice(&[req, kind as u8 as f64, value]);
            first
        };
        // Only the completion that makes the queue non-empty wakes the JS thread; the others
        // ride along in the same drain.
        if first {
            let deferred = self.direct.is_some()
                && direct_drain::active()
                && self
                    .me
                    .upgrade()
                    .is_some_and(|me| direct_drain::defer(me as Arc<dyn Deferred>));
            if !deferred {
                self.wake_drain();
            }
        }
    }

    /// Records a plain outcome.
    pub fn record(&self, req: f64, kind: Kind, value: f64) {
        self.push(req, kind, |_| value);
    }

    /// Records a grant with its fencing token, exactly whatever its size.
    pub fn granted(&self, req: f64, token: u64) {
        self.push(req, Kind::Granted, |b| {
            if token <= MAX_EXACT {
                token as f64
            } else {
                b.big_tokens.push(token);
                -(b.big_tokens.len() as f64)
            }
        });
    }

    /// Records a failure.
    pub fn error(&self, req: f64, err: LockError) {
        let entry = (err.code(), err.cause_code(), err.to_string());
        self.push(req, Kind::Failed, |b| {
            b.errors.push(entry);
            (b.errors.len() - 1) as f64
        });
    }

    /// Records an inspect result.
    pub fn info(&self, req: f64, info: Option<LockInfo>) {
        match info {
            None => self.record(req, Kind::Refused, 0.0),
            Some(info) => self.push(req, Kind::Info, |b| {
                b.infos.push(info);
                (b.infos.len() - 1) as f64
            }),
        }
    }

    /// Records a listing.
    pub fn list(&self, req: f64, locks: Vec<HeldLock>) {
        self.push(req, Kind::List, |b| {
            b.lists.push(locks);
            (b.lists.len() - 1) as f64
        });
    }

    /// Records a semaphore's holders.
    pub fn permit_list(&self, req: f64, holders: Vec<PermitHolder>) {
        self.push(req, Kind::PermitList, |b| {
            b.permit_lists.push(holders);
            (b.permit_lists.len() - 1) as f64
        });
    }

    /// Copies the records queued so far into `into` and returns how many numbers it wrote,
    /// keeping the queue's allocation for the next batch; `None` (nothing taken) when they do
    /// not fit or the batch carries more than records (errors, infos, listings, big
    /// tokens): [`take`](Self::take) then takes it whole.
    pub fn take_into(&self, into: &mut [f64]) -> Option<usize> {
        let mut batch = lock(&self.batch);
        let n = batch.records.len();
        let plain = batch.errors.is_empty()
            && batch.infos.is_empty()
            && batch.lists.is_empty()
            && batch.permit_lists.is_empty()
            && batch.big_tokens.is_empty();
        if !plain || n > into.len() {
            return None;
        }
        into[..n].copy_from_slice(&batch.records);
        batch.records.clear();
        Some(n)
    }

    /// Takes everything queued so far.
    pub fn take(&self) -> Batch {
        std::mem::take(&mut *lock(&self.batch))
    }

    /// Makes the pending-work wake-up hold the event loop open (or not).
    #[allow(deprecated)]
    pub fn keep_alive(&self, env: &napi::Env, on: bool) -> napi::Result<()> {
        match lock(&self.drain).as_mut() {
            Some(drain) if on => drain.refer(env),
            Some(drain) => drain.unref(env),
            None => Ok(()),
        }
    }

    /// Lets go of the JavaScript wake-up function; nothing is delivered afterwards.
    pub fn dispose(&self) {
        lock(&self.drain).take();
        if let Some(direct) = &self.direct {
            direct.release();
        }
    }
}

impl Deferred for Completions {
    fn drain_now(&self) -> bool {
        // Disposed: nothing is delivered any more.
        if lock(&self.drain).is_none() {
            return true;
        }
        self.direct.as_ref().is_some_and(DirectDrain::call)
    }

    fn wake(&self) {
        self.wake_drain();
    }
}

impl EventSink for Completions {
    fn lost(&self, id: u64, reason: LostReason) {
        self.record(id as f64, Kind::Lost, lost_code(reason));
    }

    fn extended(&self, id: u64) {
        self.record(id as f64, Kind::Extended, 0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::{mark_late, Kind};

    fn kind(k: Kind) -> f64 {
        k as u8 as f64
    }

    #[test]
    fn only_grants_of_locks_no_longer_live_are_marked_late() {
        let mut records = vec![
            1.0,
            kind(Kind::Granted),
            7.0,
            2.0,
            kind(Kind::Granted),
            8.0,
            3.0,
            kind(Kind::Succeeded),
            0.0,
            4.0,
            kind(Kind::Lost),
            1.0,
        ];
        let mut asked = Vec::new();
        mark_late(&mut records, |id| {
            asked.push(id);
            id != 2
        });
        assert_eq!(asked, [1, 2], "only grants are checked");
        assert_eq!(
            records,
            [
                1.0,
                kind(Kind::Granted),
                7.0,
                2.0,
                kind(Kind::GrantedLate),
                8.0,
                3.0,
                kind(Kind::Succeeded),
                0.0,
                4.0,
                kind(Kind::Lost),
                1.0,
            ]
        );
    }
}
