//! The completion queue between tokio tasks and the JS thread.

use crate::backend::LockInfo;
use crate::core::error::{LockError, LostReason};
use crate::core::session::EventSink;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use std::sync::Mutex;

/// Status of one completion record, as JavaScript reads it.
#[repr(u8)]
#[derive(Clone, Copy)]
pub enum Kind {
    /// Acquired: value is the fencing token.
    Granted = 0,
    /// Boolean true / plain success.
    True = 1,
    /// Busy, not owned, not found: value is unused.
    False = 2,
    /// Failed: value indexes the batch's errors.
    Error = 3,
    /// Lock `req` was lost: value is the reason code.
    Lost = 4,
    /// Inspect found a holder: value indexes the batch's infos.
    Info = 5,
}

/// What one drain hands to JavaScript.
#[derive(Default)]
pub struct Batch {
    /// Triplets `[request id, kind, value]`.
    pub records: Vec<f64>,
    /// `(code, message)` of failed requests.
    pub errors: Vec<(&'static str, String)>,
    /// Lock infos returned by inspect.
    pub infos: Vec<LockInfo>,
}

pub type DrainFn = ThreadsafeFunction<(), (), (), Status, false, true>;

/// Results waiting for the JS thread, and the function that wakes it.
pub struct Completions {
    batch: Mutex<Batch>,
    /// Behind a lock because ref/unref need `&mut`; it is only touched on the first
    /// completion of a batch and on keep-alive changes.
    drain: Mutex<DrainFn>,
}

/// Reason codes of `Kind::Lost`, in the order JavaScript's table lists them.
pub fn lost_code(reason: LostReason) -> f64 {
    match reason {
        LostReason::NotOwned => 0.0,
        LostReason::Expired => 1.0,
        LostReason::Unreachable => 2.0,
        LostReason::MaxHold => 3.0,
    }
}

impl Completions {
    pub fn new(drain: DrainFn) -> Self {
        Completions {
            batch: Mutex::new(Batch::default()),
            drain: Mutex::new(drain),
        }
    }

    /// Appends one record; `fill` stores any payload and returns the record's value slot.
    fn push(&self, req: f64, kind: Kind, fill: impl FnOnce(&mut Batch) -> f64) {
        let first = {
            let mut batch = self.batch.lock().unwrap();
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
            self.drain
                .lock()
                .unwrap()
                .call((), ThreadsafeFunctionCallMode::NonBlocking);
        }
    }

    /// Records a plain outcome.
    pub fn done(&self, req: f64, kind: Kind, value: f64) {
        self.push(req, kind, |_| value);
    }

    /// Records a failure.
    pub fn error(&self, req: f64, err: LockError) {
        let entry = (err.code(), err.to_string());
        self.push(req, Kind::Error, |b| {
            b.errors.push(entry);
            (b.errors.len() - 1) as f64
        });
    }

    /// Records an inspect result.
    pub fn info(&self, req: f64, info: Option<LockInfo>) {
        match info {
            None => self.done(req, Kind::False, 0.0),
            Some(info) => self.push(req, Kind::Info, |b| {
                b.infos.push(info);
                (b.infos.len() - 1) as f64
            }),
        }
    }

    /// Takes everything queued so far.
    pub fn take(&self) -> Batch {
        std::mem::take(&mut *self.batch.lock().unwrap())
    }

    /// Makes the pending-work wake-up hold the event loop open (or not).
    #[allow(deprecated)]
    pub fn keep_alive(&self, env: &napi::Env, on: bool) -> napi::Result<()> {
        let mut drain = self.drain.lock().unwrap();
        if on {
            drain.refer(env)
        } else {
            drain.unref(env)
        }
    }
}

impl EventSink for Completions {
    fn lost(&self, id: u64, reason: LostReason) {
        self.done(id as f64, Kind::Lost, lost_code(reason));
    }
}
