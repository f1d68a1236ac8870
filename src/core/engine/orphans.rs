//! Grants nobody knows of: an acquisition whose store call failed in a way that leaves its
//! outcome unknown (a timeout, a connection that broke after the request may have left,
//! [`ErrorKind::outcome_unknown`]) is rejected, but the store may have granted it, or may
//! still grant it when the request it holds is read. The engine knows the owner it sent, so
//! it gives that owner's grant back in the background: releases by owner (compare-and-delete,
//! which can never touch another owner's lock), repeated with back-off until one of them
//! settles it, within bounds (see [`Engine::clean_up`] and docs/design.md, "Grants whose
//! reply was lost").
//!
//! An owner that asks for the same key again (the redislock face reuses a lock's owner for
//! each acquisition) stops its clean-up first and waits for the release in flight, so a
//! clean-up never frees a grant its owner has since taken back knowingly.

use super::{Engine, Kind};
use crate::limits::{ORPHAN_FIRST_PAUSE_MS, ORPHAN_MAX_CLEANUPS};
use crate::runtime::clock;
use crate::runtime::debug::debug;
use crate::store::ErrorKind;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// What identifies a grant: its queue kind, key and owner.
type GrantId = (Kind, String, String);

/// One clean-up in progress.
struct Cleanup {
    /// Set by a new acquisition of the same key by the same owner: send nothing more.
    stopped: AtomicBool,
    /// Held while a release is in flight, so a new acquisition can wait for it.
    sending: tokio::sync::Mutex<()>,
}

/// The clean-ups of one engine.
#[derive(Default)]
pub(super) struct Orphans {
    /// Clean-ups in progress (read without the map's lock on every acquisition).
    live: AtomicUsize,
    map: Mutex<HashMap<GrantId, Arc<Cleanup>>>,
    /// The longest pause between two releases of one clean-up, in ms (0: the default,
    /// [`pause_cap`] of the default response timeout).
    max_pause_ms: AtomicU64,
}

/// The longest pause between two releases for a store whose replies are due within
/// `response_timeout`: a quarter of it (10 to 250 ms), so that once the store answers again
/// the next release goes out well within one response timeout.
pub(super) fn pause_cap(response_timeout: Duration) -> Duration {
    (response_timeout / 4).clamp(Duration::from_millis(10), Duration::from_millis(250))
}

/// Why a clean-up ended, for its debug line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// A release freed the grant.
    Released,
    /// Two releases answered "not held", the second sent after the first was answered.
    NothingHeld,
    /// The acquisition's lease (from its send) was over before the store settled it.
    LeaseOver,
    /// The owner asked for the key again.
    Superseded,
    /// A failure that says no release can succeed (a closed store, an invalid request).
    Failed(ErrorKind),
}

impl Orphans {
    /// Sets the pause cap from the store's response timeout.
    pub(super) fn set_response_timeout(&self, response_timeout: Duration) {
        let ms = pause_cap(response_timeout).as_millis() as u64;
        self.max_pause_ms.store(ms, Ordering::Relaxed);
    }

    fn max_pause(&self) -> Duration {
        match self.max_pause_ms.load(Ordering::Relaxed) {
            0 => pause_cap(Duration::from_millis(
                crate::limits::DEFAULT_RESPONSE_TIMEOUT_MS,
            )),
            ms => Duration::from_millis(ms),
        }
    }

    /// Clean-ups in progress.
    pub(super) fn len(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// Stops the clean-up of what `owner` was granted of `key`, if one runs; returns it when
    /// it may have a release on its way (none: it runs not, or will send nothing more). The
    /// clean-up reads `stopped` holding `sending`: stopped before that look, it sends nothing
    /// more; holding `sending` now, it may be sending.
    fn stop(&self, kind: Kind, key: &str, owner: &str) -> Option<Arc<Cleanup>> {
        let cleanup = {
            let map = self.map.lock().unwrap();
            map.get(&(kind, key.to_string(), owner.to_string()))
                .cloned()
        }?;
        cleanup.stopped.store(true, Ordering::Release);
        let busy = cleanup.sending.try_lock().is_err();
        busy.then_some(cleanup)
    }

    /// Called before `owner` asks the store for `key` again (when [`Orphans::len`] is not 0):
    /// stops a clean-up of an earlier grant of the same owner and waits for its release in
    /// flight, if any. Returns whether it waited for one.
    ///
    /// # Cancel Safety
    /// Cancel safe: the clean-up is stopped before the first await.
    pub(super) async fn supersede(&self, kind: Kind, key: &str, owner: &str) -> bool {
        let Some(busy) = self.stop(kind, key, owner) else {
            return false;
        };
        drop(busy.sending.lock().await);
        true
    }

    /// Stops a clean-up of what `owner` was granted of `key`, if one runs, without waiting:
    /// false when it has a release on its way (which may land later than a request sent
    /// now), true when it has none and will send none.
    pub(super) fn stop_idle(&self, kind: Kind, key: &str, owner: &str) -> bool {
        self.stop(kind, key, owner).is_none()
    }
}

impl Engine {
    /// Starts the background clean-up of what `owner` may have been granted of `key` by a
    /// request sent at `sent` for a lease of `ttl_ms`, whose outcome is unknown.
    ///
    /// It releases by owner at once, then again after a pause (doubling from
    /// [`ORPHAN_FIRST_PAUSE_MS`] up to a quarter of the response timeout, at most 250 ms),
    /// until:
    /// - a release freed the grant (through the engine: a local waiter is handed it);
    /// - two releases answered "not held", the second sent after the first was answered: a
    ///   single answer on another connection may have overtaken the acquisition, but once the
    ///   store answered, what it held from before has been read;
    /// - `sent + ttl_ms` passed without an answer (at least one release is sent): a store
    ///   silent that long may still grant the request it holds when it comes back, and that
    ///   grant then lasts one lease, as one of a client that died;
    /// - a failure that says no release can succeed (a closed store); a server error is
    ///   retried as silence is.
    ///
    /// At most [`ORPHAN_MAX_CLEANUPS`] run at once per engine; beyond that a grant is left to
    /// its lease (with a debug line). The task keeps the engine (and its connections) until it
    /// ends, also after the client closed: a closed client still gives its grants back.
    pub(super) fn clean_up(
        self: &Arc<Engine>,
        kind: Kind,
        key: &str,
        owner: &str,
        had_data: bool,
        sent: Instant,
        ttl_ms: u64,
    ) {
        let orphans = &self.orphans;
        let id: GrantId = (kind, key.to_string(), owner.to_string());
        let cleanup = Arc::new(Cleanup {
            stopped: AtomicBool::new(false),
            sending: tokio::sync::Mutex::new(()),
        });
        {
            let mut map = orphans.map.lock().unwrap();
            if map.len() >= ORPHAN_MAX_CLEANUPS {
                debug!(
                    "acquire {key:?}: outcome unknown; {ORPHAN_MAX_CLEANUPS} clean-ups already \
                     run, so a grant, if any, is left to its lease ({ttl_ms} ms)"
                );
                return;
            }
            // A clean-up of the same grant already runs (an owner that failed twice): it
            // covers this one too, with the later lease.
            if let Some(old) = map.insert(id.clone(), cleanup.clone()) {
                old.stopped.store(true, Ordering::Release);
            } else {
                orphans.live.fetch_add(1, Ordering::AcqRel);
            }
        }
        debug!(
            "acquire {key:?}: outcome unknown; releasing what the store may have granted to \
             this owner in the background"
        );
        let engine = self.clone();
        let until = clock::after(sent, Duration::from_millis(ttl_ms));
        tokio::spawn(async move {
            let ended = engine
                .run_clean_up(&cleanup, kind, &id.1, &id.2, had_data, until)
                .await;
            {
                let mut map = engine.orphans.map.lock().unwrap();
                if map.get(&id).is_some_and(|c| Arc::ptr_eq(c, &cleanup)) {
                    map.remove(&id);
                    engine.orphans.live.fetch_sub(1, Ordering::AcqRel);
                }
            }
            let key = &id.1;
            match ended {
                Ended::Released => {
                    debug!("acquire {key:?}: released the grant whose reply was lost")
                }
                Ended::NothingHeld => {
                    debug!("acquire {key:?}: the store holds nothing for the failed acquisition")
                }
                Ended::LeaseOver => {
                    debug!("acquire {key:?}: the failed acquisition's lease is over; clean-up ends")
                }
                Ended::Superseded => {
                    debug!("acquire {key:?}: the owner asks for it again; clean-up stops")
                }
                Ended::Failed(kind) => {
                    debug!("acquire {key:?}: clean-up ends on a store error ({kind:?})")
                }
            }
        });
    }

    async fn run_clean_up(
        self: &Arc<Engine>,
        cleanup: &Cleanup,
        kind: Kind,
        key: &str,
        owner: &str,
        had_data: bool,
        until: Instant,
    ) -> Ended {
        let mut pause = Duration::from_millis(ORPHAN_FIRST_PAUSE_MS);
        let mut answered = false;
        loop {
            let outcome = {
                let _sending = cleanup.sending.lock().await;
                if cleanup.stopped.load(Ordering::Acquire) {
                    return Ended::Superseded;
                }
                self.release_as(kind, key, owner, had_data).await
            };
            match outcome {
                Ok(true) => return Ended::Released,
                Ok(false) if answered => return Ended::NothingHeld,
                Ok(false) => answered = true,
                // A server error refused this release, not necessarily the next one (a
                // script or statement that failed, a server loading or busy): retried as
                // long as the lease may last, as silence is.
                Err(e) if e.kind.outcome_unknown() || e.kind == ErrorKind::Server => {}
                Err(e) => return Ended::Failed(e.kind),
            }
            if Instant::now() >= until {
                return Ended::LeaseOver;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(self.orphans.max_pause());
        }
    }
}

#[cfg(test)]
mod tests;
