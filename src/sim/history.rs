//! What happened in one run, on the one simulated clock: the store's grants, what each client
//! believed (granted, released, lost) and calls that overran their bound. Events are numbered
//! in the order they happened, so two at the same simulated instant still have an order.

use crate::core::error::LostReason;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// What an event says.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum What {
    /// The store gave `key` to `owner` (an acquisition or a handoff) with this token.
    StoreGrant(u64),
    /// An acquisition returned a grant: from now on `owner` believes it holds `key`.
    Believe(u64),
    /// The holder let go (it called release).
    Release,
    /// The holder was told it lost the lock.
    Lost(LostReason),
    /// A release failed (its outcome unknown): the lease may stay until its ttl.
    ReleaseFailed,
    /// The store refused a release by this owner (a server error). Only its holder's own
    /// release failing lets a lease outlive the run (`ReleaseFailed`): a grant the engine
    /// gives back is retried after a refusal.
    ReleaseRefused,
    /// A request that may grant `owner` the key for `ttl_ms` was sent (an acquisition, or a
    /// handoff to it): the clean-up of a grant whose reply was lost counts its bound from
    /// here (`sent + ttl`).
    Asked { ttl_ms: u64 },
    /// A release by this owner, or a handoff from it (its holder's, or the engine's clean-up
    /// handing the grant to a local waiter), returned an error: no answer within the bound, a
    /// broken connection or a refusal.
    ReleaseErred,
    /// (Traced replays only) a store call was sent, or a request was served, or a reply
    /// arrived: what it was and how it went.
    Trace(String),
    /// A call returned later than its bound allows.
    Overran {
        call: &'static str,
        took: Duration,
        bound: Duration,
    },
}

/// One event.
#[derive(Debug, Clone)]
pub(super) struct Event {
    /// Simulated time since the run began.
    pub(super) at: Duration,
    pub(super) key: String,
    pub(super) owner: String,
    pub(super) what: What,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>8} ms  {:<4} {:<12} {:?}",
            self.at.as_millis(),
            self.key,
            self.owner,
            self.what
        )
    }
}

/// The run's history.
pub(super) struct History {
    start: Instant,
    /// Whether store calls are traced (a replay of one seed).
    pub(super) trace: bool,
    events: Mutex<Vec<Event>>,
}

impl History {
    pub(super) fn new(start: Instant, trace: bool) -> History {
        History {
            start,
            trace,
            events: Mutex::new(Vec::new()),
        }
    }

    /// Simulated ms since the run began.
    pub(super) fn now_ms(&self) -> u64 {
        Instant::now().duration_since(self.start).as_millis() as u64
    }

    pub(super) fn start(&self) -> Instant {
        self.start
    }

    pub(super) fn record(&self, key: &str, owner: &str, what: What) {
        let at = Instant::now().duration_since(self.start);
        self.events.lock().unwrap().push(Event {
            at,
            key: key.to_string(),
            owner: owner.to_string(),
            what,
        });
    }

    /// Records a trace line, if tracing.
    pub(super) fn trace(&self, key: &str, owner: &str, line: impl FnOnce() -> String) {
        if self.trace {
            self.record(key, owner, What::Trace(line()));
        }
    }

    /// Records an overrun if `took` exceeds `bound`.
    pub(super) fn bounded(
        &self,
        key: &str,
        owner: &str,
        call: &'static str,
        took: Duration,
        bound: Duration,
    ) {
        if took > bound {
            self.record(key, owner, What::Overran { call, took, bound });
        }
    }

    pub(super) fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }
}
