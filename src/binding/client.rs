//! `NativeClient`: one JavaScript client object's session.

use super::completions::{self, Completions, DrainFn, Kind};
use super::connect_options::NativeConnectOptions;
use super::direct_drain::DirectDrain;
use super::engines::shared_engine;
use super::env_sessions;
use super::submit;
use crate::core::error::LockError;
use crate::core::session::Session;
use crate::runtime::first_step;
use crate::store::open::ConnectOptions;
use napi::bindgen_prelude::*;
use napi_derive::napi;
use std::sync::Arc;

/// A batch of completions: `records` holds `[requestId, kind, value]` triplets.
#[napi(object)]
pub struct NativeBatch {
    /// Triplets `[requestId, kind, value]`. The kinds and what each value means are defined
    /// once, in `completions.rs`, and exported as `protocol()`'s `kind…` fields; a lost
    /// record's value indexes `protocol().lostReasons`.
    pub records: Float64Array,
    /// `[code, causeCode, message]` of failed requests: `causeCode` names the store error's
    /// kind (`ERR_LOCK_STORE_TIMEOUT`, …), empty when the failure is not the store's.
    pub errors: Vec<Vec<String>>,
    /// Lock infos returned by `inspect`.
    pub infos: Vec<NativeLockInfo>,
    /// Fencing tokens above 2^53: a granted record whose value is `-(i + 1)` has token
    /// `bigTokens[i]`.
    pub big_tokens: Vec<BigInt>,
    /// Held locks returned by `list`: a listing record's value indexes this.
    pub lists: Vec<Vec<NativeHeldLock>>,
    /// Holders returned by `permits`: a permit-list record's value indexes this.
    pub permit_lists: Vec<Vec<NativePermitHolder>>,
}

/// A holder of a semaphore's permits, as `permits` reads it.
#[napi(object)]
pub struct NativePermitHolder {
    /// Owner token of the acquisition.
    pub owner: String,
    /// How many permits it holds.
    pub permits: u32,
    /// Its fencing token.
    pub fencing_token: BigInt,
    /// Remaining lease in ms by the store's clock.
    pub remaining_ms: i64,
}

/// A held lock as `list` shows it.
#[napi(object)]
pub struct NativeHeldLock {
    /// Lock name.
    pub key: String,
    /// What the store knows about it.
    pub info: NativeLockInfo,
}

fn native_info(i: crate::store::LockInfo) -> NativeLockInfo {
    NativeLockInfo {
        owner: i.owner,
        fencing_token: BigInt::from(i.fencing_token),
        remaining_ms: i.remaining_ms,
        data: i.data.map(Buffer::from),
    }
}

/// Who holds a lock, as `inspect` reads it.
#[napi(object)]
pub struct NativeLockInfo {
    /// Owner token of the holder.
    pub owner: String,
    /// The holder's fencing token; 0 when the store cannot tell (a lock written in the
    /// redislock wire format).
    pub fencing_token: BigInt,
    /// Remaining lease in ms by the store's clock (-1: no expiry).
    pub remaining_ms: i64,
    /// Stored payload, if any.
    pub data: Option<Buffer>,
}

/// What a client and its store's engine currently keep (see `LockClient#stats`).
#[napi(object)]
pub struct NativeStats {
    /// Locks this client holds.
    pub held: u32,
    /// Waiters queued in this process for this store.
    pub waiting: u32,
    /// Leases the heartbeat scheduler looks after for this store.
    pub scheduled: u32,
    /// Release channels subscribed to (Redis).
    pub subscriptions: u32,
    /// Background clean-ups of grants whose reply was lost, in progress for this store.
    pub cleanups: u32,
}

/// One client's connection to a store; used through `lib/native.js`, never directly.
#[napi]
pub struct NativeClient {
    pub(super) session: Arc<Session>,
    pub(super) completions: Arc<Completions>,
    /// What an owner made from an `ownerSeq` starts with (see `set_owner_prefix`).
    owner_prefix: std::sync::OnceLock<String>,
}

/// A napi call's own error, with its status name as the code.
fn napi_status(e: Error) -> Error<String> {
    Error::new(e.status.as_ref().to_string(), e.reason.clone())
}

#[napi]
impl NativeClient {
    /// Opens a client for `url`; `drain` is called (with no arguments) whenever completions
    /// are waiting to be taken. No I/O happens here. A bad URL or option throws an error
    /// whose `code` is deadbolt's (`ERR_INVALID_ARG_VALUE`, …): napi makes an error's status
    /// its `code`, so the code travels as data and nobody reads it from the message.
    #[napi(constructor, catch_unwind)]
    pub fn new(
        env: Env,
        url: String,
        options: Option<NativeConnectOptions>,
        drain: Function<(), ()>,
    ) -> Result<Self, String> {
        let direct = DirectDrain::new(env.raw(), drain.raw());
        let drain: DrainFn = drain
            .build_threadsafe_function::<()>()
            .weak::<true>()
            .callee_handled::<false>()
            .build_callback(|_| Ok(()))
            .map_err(napi_status)?;
        let completions = Completions::new(drain, direct);
        let opts: ConnectOptions = options
            .map(TryInto::try_into)
            .transpose()?
            .unwrap_or_default();
        let sink = completions.clone();
        let engine =
            napi::bindgen_prelude::within_runtime_if_available(|| shared_engine(&url, &opts))
                .map_err(|e| Error::new(e.code().to_string(), e.to_string()))?;
        let session = Session::open(engine, sink);
        env_sessions::track(&env, &session).map_err(napi_status)?;
        #[cfg(unix)]
        super::uv::install(&env).map_err(napi_status)?;
        Ok(NativeClient {
            session,
            completions,
            owner_prefix: std::sync::OnceLock::new(),
        })
    }

    /// Sets what the owners of acquisitions submitted with an `ownerSeq` start with (once: the
    /// client's random prefix; a second call fails).
    #[napi(catch_unwind)]
    pub fn set_owner_prefix(&self, prefix: String) -> Result<()> {
        self.owner_prefix
            .set(prefix)
            .map_err(|_| Error::new(Status::InvalidArg, "the owner prefix is already set"))
    }

    /// Starts a batch of operations queued by `lib/native.js` during one tick, so the batch costs
    /// one crossing and at most one wake-up of the runtime instead of one each.
    ///
    /// The first `len` numbers of `ops` (a buffer JavaScript reuses from batch to batch) are a
    /// sequence of records laid out as `protocol.rs` defines; the records' strings come in
    /// order in `text`, one after the other, and payloads in `data` (decoded by
    /// `submit::decode`). One text for the whole batch: an array of strings cost three napi
    /// calls per key (to find it in the array, measure it and copy it).
    #[napi(catch_unwind)]
    pub fn submit(
        &self,
        ops: Float64ArraySlice,
        len: u32,
        text: String,
        data: Vec<Buffer>,
    ) -> Result<()> {
        let owner_prefix = self.owner_prefix.get().map(String::as_str);
        let batch = submit::decode(&ops, len, &text, &data, owner_prefix, &self.session)
            .map_err(|e| Error::new(Status::InvalidArg, e))?;
        // Each operation takes its first step here, and the commands of the whole batch are
        // written from this thread at the end of the scope (see `runtime::first_step`, `runtime::flush`).
        super::js_thread::run(super::js_thread::Step::Submit, || {
            for op in batch {
                let req = op.req();
                let run = op.run(self.session.clone(), self.completions.clone());
                first_step::start(Box::pin(submit::guarded(
                    req,
                    self.completions.clone(),
                    run,
                )));
            }
        });
        Ok(())
    }

    /// Cancels pending acquisition `req` (its completion reports `ERR_LOCK_ABORTED`).
    #[napi(catch_unwind)]
    pub fn cancel(&self, req: f64) {
        self.session.cancel(req as u64);
    }

    /// Whether held lock `id` may still be acted on: neither released nor lost, and its
    /// local deadline not passed, even if the loss has not reached JavaScript yet (a stalled
    /// event loop, an extension still in flight).
    #[napi(catch_unwind)]
    pub fn is_held(&self, id: f64) -> bool {
        self.session.is_held(id as u64)
    }

    /// How many ms held lock `id` may still be acted on (its local deadline, or `maxHold`,
    /// less now; fractional); 0 when it may not (the same test as `isHeld`).
    #[napi(catch_unwind)]
    pub fn valid_for(&self, id: f64) -> f64 {
        self.session
            .valid_for(id as u64)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    }

    /// Reads who holds `key`; completes with an info or false.
    #[napi(catch_unwind)]
    pub fn inspect(&self, req: f64, key: String) {
        let session = self.session.clone();
        self.spawn(
            req,
            async move { session.inspect(&key).await },
            Completions::info,
        );
    }

    /// Frees `key` whoever holds it (an operator's tool); completes with true (a live lock was
    /// freed) or false.
    #[napi(catch_unwind)]
    pub fn force_release(&self, req: f64, key: String) {
        let session = self.session.clone();
        self.spawn(
            req,
            async move { session.force_release(&key).await },
            succeeded,
        );
    }

    /// Lists up to `limit` held locks whose names start with `prefix`; completes with a
    /// listing.
    #[napi(catch_unwind)]
    pub fn list(&self, req: f64, prefix: String, limit: f64) {
        let session = self.session.clone();
        let limit = limit.max(0.0) as usize;
        self.spawn(
            req,
            async move { session.list(&prefix, limit).await },
            Completions::list,
        );
    }

    /// Reads the live holders of semaphore `name`; completes with a permit list.
    #[napi(catch_unwind)]
    pub fn permits(&self, req: f64, name: String) {
        let session = self.session.clone();
        self.spawn(
            req,
            async move { session.permits(&name).await },
            Completions::permit_list,
        );
    }

    /// Checks that the store answers; completes with true.
    #[napi(catch_unwind)]
    pub fn ping(&self, req: f64) {
        let session = self.session.clone();
        self.spawn(
            req,
            async move { session.ping().await.map(|_| true) },
            succeeded,
        );
    }

    /// Cancels pending work, stops heartbeats and releases every held lock; completes with
    /// true. Call [`NativeClient::dispose`] once that completion has been taken.
    #[napi(catch_unwind)]
    pub fn close(&self, req: f64) {
        let session = self.session.clone();
        self.spawn(
            req,
            async move {
                session.close().await;
                Ok(true)
            },
            succeeded,
        );
    }

    /// Lets go of the JavaScript wake-up function, which keeps the JavaScript client alive;
    /// for after `close` completed. Nothing is delivered afterwards.
    #[napi(catch_unwind)]
    pub fn dispose(&self) {
        self.completions.dispose();
    }

    /// Counters for diagnostics and leak checks.
    #[napi(catch_unwind)]
    pub fn stats(&self) -> NativeStats {
        let s = self.session.stats();
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        NativeStats {
            held: n(s.held),
            waiting: n(s.waiting),
            scheduled: n(s.scheduled),
            subscriptions: n(s.subscriptions),
            cleanups: n(s.cleanups),
        }
    }

    /// Number of locks this client holds.
    #[napi(catch_unwind)]
    pub fn held_count(&self) -> u32 {
        self.session.held_count() as u32
    }

    /// Copies the records of every completion queued so far into `records` (a buffer
    /// JavaScript keeps for the purpose, so a drain allocates nothing on either side) and
    /// returns how many numbers it wrote; -1 (nothing taken) when they do not fit or the batch
    /// carries more than records: `take` then takes it whole.
    #[napi(catch_unwind)]
    pub fn take_into(&self, mut records: Float64ArraySlice) -> i32 {
        // SAFETY: the slice is the JavaScript buffer's memory, and no JavaScript runs while
        // this synchronous call writes into it.
        let into = unsafe { records.as_mut() };
        match self.completions.take_into(into) {
            Some(n) => {
                self.mark_late(&mut into[..n]);
                i32::try_from(n).unwrap_or(-1)
            }
            None => -1,
        }
    }

    /// Takes every completion queued so far.
    #[napi(catch_unwind)]
    pub fn take(&self) -> NativeBatch {
        let mut batch = self.completions.take();
        self.mark_late(&mut batch.records);
        NativeBatch {
            records: Float64Array::new(batch.records),
            errors: batch
                .errors
                .into_iter()
                .map(|(code, cause, message)| vec![code.to_string(), cause.to_string(), message])
                .collect(),
            infos: batch.infos.into_iter().map(native_info).collect(),
            lists: batch
                .lists
                .into_iter()
                .map(|list| {
                    list.into_iter()
                        .map(|l| NativeHeldLock {
                            key: l.key,
                            info: native_info(l.info),
                        })
                        .collect()
                })
                .collect(),
            permit_lists: batch
                .permit_lists
                .into_iter()
                .map(|list| {
                    list.into_iter()
                        .map(|h| NativePermitHolder {
                            owner: h.owner,
                            permits: h.permits,
                            fencing_token: BigInt::from(h.fencing_token),
                            remaining_ms: h.remaining_ms,
                        })
                        .collect()
                })
                .collect(),
            big_tokens: batch.big_tokens.into_iter().map(BigInt::from).collect(),
        }
    }

    /// Whether pending work holds the Node event loop open. `lib/native.js` turns it on while any
    /// request is pending and off when none is, so idle clients and heartbeats never keep a
    /// process alive.
    #[napi(catch_unwind)]
    pub fn keep_alive(&self, env: Env, on: bool) -> Result<()> {
        self.completions.keep_alive(&env, on)
    }
}

impl NativeClient {
    /// Marks the grants among `records` whose locks may no longer be acted on (see
    /// [`Kind::GrantedLate`]), so JavaScript learns it in the drain's crossing.
    fn mark_late(&self, records: &mut [f64]) {
        let now = tokio::time::Instant::now();
        completions::mark_late(records, |id| self.session.is_held_at(id, now));
    }

    /// Runs `fut` on the runtime for request `req`: its value completes the request through
    /// `done`, its error as a failure, and a panic as an internal error (see
    /// [`submit::guarded`]).
    pub(super) fn spawn<T: Send + 'static>(
        &self,
        req: f64,
        fut: impl std::future::Future<Output = std::result::Result<T, LockError>> + Send + 'static,
        done: fn(&Completions, f64, T),
    ) {
        let completions = self.completions.clone();
        let run = {
            let completions = completions.clone();
            async move {
                match fut.await {
                    Ok(value) => done(&completions, req, value),
                    Err(e) => completions.error(req, e),
                }
            }
        };
        napi::bindgen_prelude::spawn(submit::guarded(req, completions, run));
    }
}

/// Completes a request whose answer is yes or no.
pub(super) fn succeeded(completions: &Completions, req: f64, yes: bool) {
    completions.record(req, if yes { Kind::Succeeded } else { Kind::Refused }, 0.0);
}
