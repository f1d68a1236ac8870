//! The local queues of an [`Engine`](super::Engine): one FIFO queue of waiters per key and
//! kind, the mailbox a releaser leaves a handed-over grant in, and a waiter's place ([`Slot`]),
//! which hands the head position on when it leaves.

use super::Engine;
use crate::core::error::LockError;
use crate::core::held::FastHash;
use crate::core::kind::Kind;
use crate::core::options::{AcquireSpec, PermitSpec};
use crate::store::permits::watch_key;
use crate::store::ValueFormat;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) notify: Notify,
    /// Set when the wake-up means "the lock was released, try now" rather than "you are the
    /// head now, but your predecessor holds the lock".
    pub(super) released: AtomicBool,
    /// What a releaser needs to hand the lock straight to this waiter.
    pub(super) owner: String,
    pub(super) ttl_ms: u64,
    pub(super) data: Option<Vec<u8>>,
    pub(super) format: ValueFormat,
    /// The permits it asks for, if it waits for a semaphore.
    pub(super) permits: Option<PermitSpec>,
    /// A release is handing permits to it (so concurrent releases pick other waiters).
    pub(super) claimed: AtomicBool,
    /// Permits a request without a place in the store's queue would have found free right
    /// after a handoff granted this waiter's ([`u32::MAX`]: not known). Its successor as head
    /// looks at once only if its own request would fit: a look that must be refused costs the
    /// store a call and tells the waiter nothing (a later release hands over or wakes it).
    pub(super) room: AtomicU32,
    pub(super) mailbox: Mutex<Mailbox>,
}

/// A lock the store granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Fencing token.
    pub token: u64,
    /// When the request that produced the grant was sent: the lease is reckoned from here,
    /// never from when the caller started waiting.
    pub sent: Instant,
}

/// The grant to report when a waiter's own request and a handoff both gave it the same lock
/// (its request found the lock already handed to it): the lease is reckoned from the earlier
/// of the two sends, so the local deadline never falls after the store's.
pub(super) fn earliest(own: Grant, handed: Option<Grant>) -> Grant {
    match handed {
        Some(h) if h.sent < own.sent => Grant {
            token: own.token,
            sent: h.sent,
        },
        _ => own,
    }
}

/// Where a releaser leaves a handed-over lock for its waiter.
#[derive(Default)]
pub(super) struct Mailbox {
    /// A lock handed to this waiter and not yet taken.
    pub(super) grant: Option<Grant>,
    /// The waiter left: a grant arriving now must be given back, unless `kept`.
    pub(super) gone: bool,
    /// The waiter left holding the lock under its own owner token: its own request found the
    /// lock already handed to it (a store whose acquire returns the token of the caller's own
    /// lock, as Redis does for a retried call). A handoff to it is that same lock, and giving
    /// it back would free a lock its holder believes it holds.
    pub(super) kept: bool,
    /// A handoff to this waiter, sent then, failed without telling whether the store made
    /// it: if the waiter leaves without the lock, what it may have been granted is given back.
    pub(super) maybe: Option<Instant>,
}

impl Waiter {
    pub(super) fn take_grant(&self) -> Option<Grant> {
        self.mailbox.lock().unwrap().grant.take()
    }

    /// `granted`, the outcome of this waiter's own request, unless `cancel` fired: then the
    /// grant joins the mailbox (the earlier send kept, for a clean-up's reckoning), to be given
    /// back as the waiter leaves ([`Slot::leave_cancelled`]), once it is out of the queue and
    /// the release cannot hand the lock to it again, and the call is `Aborted`.
    pub(super) fn unless_cancelled(
        &self,
        granted: Option<Grant>,
        cancel: &CancellationToken,
    ) -> Result<Option<Grant>, LockError> {
        match granted {
            Some(own) if cancel.is_cancelled() => {
                let mut mailbox = self.mailbox.lock().unwrap();
                mailbox.grant = Some(match mailbox.grant {
                    Some(handed) if handed.sent < own.sent => handed,
                    _ => own,
                });
                Err(LockError::Aborted)
            }
            granted => Ok(granted),
        }
    }

    /// After the store granted this waiter's own request for permits: makes sure no release
    /// hands it permits any more (it claims itself, so releases pick other waiters), and if
    /// one is doing so already, waits until that handoff is in its mailbox or given up.
    /// Returning before would let the caller release its permits while a handoff to the same
    /// owner is on its way, and the handoff would then grant them again to an owner that no
    /// longer holds anything: held by nobody until their lease ends.
    ///
    /// # Cancel Safety
    /// Cancel safe: it only waits (a waiter that leaves hands nothing on that it holds).
    pub(super) async fn settle_claim(&self) {
        loop {
            let notified = self.notify.notified();
            if !self.claimed.swap(true, Ordering::AcqRel)
                || self.mailbox.lock().unwrap().grant.is_some()
            {
                return;
            }
            notified.await;
        }
    }

    /// Notes that a handoff to this waiter sent at `sent` may have granted it the lock. True
    /// when the waiter left without the lock already: the caller gives that grant back.
    pub(super) fn maybe_handed(&self, sent: Instant) -> bool {
        let mut mailbox = self.mailbox.lock().unwrap();
        if mailbox.gone {
            return !mailbox.kept;
        }
        mailbox.maybe.get_or_insert(sent);
        false
    }

    /// Leaves a lock (or permits) handed to this waiter in its mailbox and wakes it. True when
    /// the grant is taken care of: the waiter will take it, or it already holds this very lock
    /// through its own grant (nothing to give back). False when the waiter left meanwhile:
    /// the caller must release (or hand on) what was handed to it.
    pub(super) fn deliver(&self, grant: Grant) -> bool {
        {
            let mut mailbox = self.mailbox.lock().unwrap();
            if mailbox.gone {
                return mailbox.kept;
            }
            mailbox.grant = Some(grant);
        }
        self.notify.notify_one();
        true
    }
}

/// Consecutive handoffs inside one process before a key is really released (and announced),
/// so waiters in other processes get their chance.
pub(super) const MAX_LOCAL_HANDOFFS: u32 = 16;

/// After such a real release, how long waiters here hold back when other processes are known
/// to wait: long enough for them to hear the announcement and ask.
pub(super) const FAIRNESS_PAUSE: Duration = Duration::from_millis(5);

/// The local queues: one map per [`Kind`], so a lock and a semaphore of one name never share
/// a queue. A queue's name is shared with its waiters' [`Slot`]s, which find the queue by it
/// when they leave (one copy of the name per acquisition, not two).
#[derive(Default)]
pub(super) struct Queues(pub(super) [HashMap<Arc<str>, KeyQueue, FastHash>; 2]);

impl Queues {
    pub(super) fn of(&self, kind: Kind) -> &HashMap<Arc<str>, KeyQueue, FastHash> {
        &self.0[kind as usize]
    }

    pub(super) fn of_mut(&mut self, kind: Kind) -> &mut HashMap<Arc<str>, KeyQueue, FastHash> {
        &mut self.0[kind as usize]
    }
}

/// The name under which releases of `key` are watched: the lock's own, or the semaphore's
/// [`watch_key`].
pub(super) fn watched_name(key: &str, kind: Kind) -> String {
    match kind {
        Kind::Lock => key.to_string(),
        Kind::Permits => watch_key(key),
    }
}

/// How long the store keeps a refused head waiter's place in a semaphore's queue: a few of
/// its polls, so that only a waiter that stopped asking (its process died) loses it.
pub(super) fn queue_ttl_ms(spec: &AcquireSpec) -> u64 {
    let poll = spec.retry_delay.as_millis() as u64;
    poll.saturating_mul(3).saturating_add(2_000)
}

#[derive(Default)]
pub(super) struct KeyQueue {
    pub(super) waiters: VecDeque<Arc<Waiter>>,
    /// Whether this queue subscribed to the store's release announcements for the key.
    pub(super) watching: bool,
    /// Handoffs in a row since the key was last really released.
    pub(super) handoffs: u32,
    /// A semaphore's release freed permits without handing them to anyone, because a waiter
    /// ahead was still waiting for a handoff ([`KeyQueue::next_for_permits`]): the head that
    /// leaves next with its grant lets its successor look at once, whatever room its own
    /// handoff reported.
    pub(super) recheck: bool,
}

impl KeyQueue {
    /// The waiter a release of a semaphore's permits hands them to, claimed for it: the first
    /// one no other release is handing permits to, provided every waiter ahead of it already
    /// has its grant in its mailbox. A waiter ahead whose handoff is still on its way may yet
    /// be refused (what it asks for may not fit), and permits handed past it would let a
    /// later waiter overtake it (a reader the writer ahead of it): then nobody, and the
    /// release frees the permits and notes it ([`KeyQueue::recheck`]).
    pub(super) fn next_for_permits(&mut self) -> Option<Arc<Waiter>> {
        for w in &self.waiters {
            if !w.claimed.swap(true, Ordering::AcqRel) {
                return Some(w.clone());
            }
            if w.mailbox.lock().unwrap().grant.is_none() {
                break;
            }
        }
        self.recheck = true;
        None
    }
}

/// A waiter's place in its key's queue. Leaving (by return, error or drop) hands the head
/// position on: after a grant the next waiter only learns it is head (the lock is ours now);
/// otherwise it is told to look at once.
pub(super) struct Slot {
    pub(super) engine: Arc<Engine>,
    /// The name of the queue it holds a place in (shared with the queue's key).
    pub(super) key: Arc<str>,
    pub(super) kind: Kind,
    pub(super) waiter: Arc<Waiter>,
    pub(super) acquired: bool,
    /// A semaphore's waiter asked with a place in the store's queue: leaving without a
    /// grant gives the place up, so it holds nobody back.
    pub(super) queued_in_store: bool,
    /// It left the local queue already ([`Slot::leave_queue`]).
    pub(super) left: bool,
}

impl Slot {
    /// Takes the waiter out of its key's queue, once, handing the head position on: after a
    /// grant the next waiter only learns it is head (the lock is ours now); otherwise it is
    /// told to look at once. The last waiter out stops watching the key's releases.
    fn leave_queue(&mut self) {
        if std::mem::replace(&mut self.left, true) {
            return;
        }
        let mut unwatch = false;
        {
            let mut queues = self.engine.queues.lock().unwrap();
            let map = queues.of_mut(self.kind);
            if let Some(queue) = map.get_mut(&*self.key) {
                let was_head = queue
                    .waiters
                    .front()
                    .is_some_and(|h| h.id == self.waiter.id);
                queue.waiters.retain(|w| w.id != self.waiter.id);
                let recheck = was_head && std::mem::take(&mut queue.recheck);
                if let Some(next) = queue.waiters.front() {
                    if was_head {
                        // After a lock was granted the next waiter only learns it is head
                        // (the lock is taken); after permits were, there may be more left,
                        // unless the handoff that granted them said the next would not fit
                        // and no permits were freed since without being handed on.
                        let fits = || {
                            next.permits.is_some_and(|p| {
                                p.count <= self.waiter.room.load(Ordering::Acquire)
                            })
                        };
                        if !self.acquired || (self.kind == Kind::Permits && (recheck || fits())) {
                            next.released.store(true, Ordering::Release);
                        }
                        next.notify.notify_one();
                    }
                } else {
                    unwatch = queue.watching;
                    map.remove(&*self.key);
                }
            }
        }
        if unwatch {
            let store = self.engine.store.clone();
            let key = watched_name(&self.key, self.kind);
            tokio::spawn(async move {
                if let Some(notifications) = store.release_notifications() {
                    notifications.unwatch(&key).await;
                }
            });
        }
    }

    /// Leaves after a cancellation: what a release handed this waiter meanwhile (and its own
    /// grant that raced the cancellation, [`Waiter::unless_cancelled`]) is released before the
    /// cancelled call returns, so that whoever looks right after it finds the key free; a
    /// semaphore waiter's place in the store's queue is given up too. The waiter leaves the
    /// local queue first, so no handoff reaches it from then on (a releaser that still finds
    /// it releases or hands on what it holds itself). A release that fails leaves the grant
    /// to `drop`, which gives it back in the background as a grant whose reply was lost; so
    /// does a handoff whose outcome is unknown, which may reach the store after any release
    /// sent now.
    ///
    /// # Cancel Safety
    /// Cancel safe: a grant stays in the mailbox until its release succeeded, and `drop`
    /// gives back whatever is left there.
    pub(super) async fn leave_cancelled(&mut self) {
        let handed = {
            let mut mailbox = self.waiter.mailbox.lock().unwrap();
            mailbox.gone = true;
            mailbox.kept = false;
            mailbox.grant.is_some()
        };
        // Out of the queue first: a release meanwhile hands the lock to the next waiter, not
        // to this one, which would refuse it.
        self.leave_queue();
        if handed && !self.acquired && self.release_own().await.is_ok() {
            self.waiter.mailbox.lock().unwrap().grant = None;
            // A release of permits by their owner gives up its place in the store's queue
            // too.
            self.queued_in_store = false;
        }
        self.leave_store_queue().await;
    }

    /// Releases what this waiter's owner holds of the key (a lock, or permits and a place in
    /// the store's queue).
    ///
    /// # Cancel Safety
    /// As [`Engine::release_as`].
    async fn release_own(&self) -> crate::store::StoreResult<bool> {
        let data = self.waiter.data.is_some();
        let (engine, owner) = (&self.engine, &self.waiter.owner);
        engine.release_as(self.kind, &self.key, owner, data).await
    }

    /// Gives up a semaphore waiter's place in the store's queue, and waits for that, before
    /// the acquisition reports that it gave up: whoever asks next (the same caller, right
    /// after the rejection) must not find a place nobody holds any more ahead of it. Paths
    /// that cannot wait (a cancellation, a dropped future) leave it to `drop`, which gives the
    /// place up in the background.
    pub(super) async fn leave_store_queue(&mut self) {
        if self.queued_in_store && !self.acquired {
            let _ = self.release_own().await;
            // Only now: if this future is dropped during the release, `drop` sends it again.
            self.queued_in_store = false;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // A lock handed to us that we will not use (we timed out or were cancelled while
        // it was on its way) goes back: released, or handed to the next waiter. If we did
        // acquire, a grant still in the mailbox is the lock we hold (our own request found it
        // already handed to us): it stays.
        let (late_grant, maybe) = {
            let mut mailbox = self.waiter.mailbox.lock().unwrap();
            mailbox.gone = true;
            mailbox.kept = self.acquired;
            (mailbox.grant.take(), mailbox.maybe.take())
        };
        let had_data = self.waiter.data.is_some();
        let owner = &self.waiter.owner;
        // (Earliest first: the clean-up reckons the grant's lease from it.)
        let handed = [late_grant.map(|g| g.sent), maybe]
            .into_iter()
            .flatten()
            .min();
        if let (Some(sent), false) = (handed, self.acquired) {
            // Given back as a grant whose reply was lost: retried until the store settles
            // it, and a new request of the same owner waits for it.
            let ttl_ms = self.waiter.ttl_ms;
            let (engine, kind) = (&self.engine, self.kind);
            engine.clean_up(kind, &self.key, owner, had_data, sent, ttl_ms);
        } else if self.queued_in_store && !self.acquired {
            let engine = self.engine.clone();
            let key = self.key.clone();
            let owner = owner.clone();
            let kind = self.kind;
            tokio::spawn(async move {
                let _ = engine.release_as(kind, &key, &owner, had_data).await;
            });
        }
        self.leave_queue();
    }
}

/// A release's claim on the waiter it is handing permits to ([`Waiter::claimed`]): dropped
/// without [`Claim::delivered`] (the handoff failed, granted nothing, or the release was
/// cancelled), it gives the waiter up, so other releases can pick it, and wakes it, so a
/// waiter granted meanwhile by its own request stops waiting for this handoff
/// ([`Waiter::settle_claim`]).
pub(super) struct Claim {
    waiter: Arc<Waiter>,
    delivered: bool,
}

impl Claim {
    /// The claim on `waiter`, whose `claimed` flag the caller has just set.
    pub(super) fn new(waiter: Arc<Waiter>) -> Claim {
        Claim {
            waiter,
            delivered: false,
        }
    }

    /// The handoff reached the waiter's mailbox (or the waiter left): the claim stays.
    pub(super) fn delivered(mut self) {
        self.delivered = true;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.delivered {
            self.waiter.claimed.store(false, Ordering::Release);
            self.waiter.notify.notify_one();
        }
    }
}
