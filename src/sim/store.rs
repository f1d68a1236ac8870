//! The simulated store: one lock table shared by every simulated process, reached through a
//! connection per process ([`SimConn`], which implements the store contract). Every call is a
//! request that travels, is served in arrival order (a pause makes requests queue, as a
//! stopped server's socket buffer does) and a reply that travels back, each with a seeded
//! latency; requests and replies may be lost, a connection may break, the server may refuse.
//! The client side of a call gives up at the plan's bound with a time-out, as a real client
//! does, while the request it sent may still be served. The store's clock is the simulated
//! clock: a lease ends `ttl` after its request was served.

use super::history::{History, What};
use super::plan::{Mutant, Plan};
use crate::store::{
    Acquisition, Batch, Call, ErrorKind, ExtendItem, Handoff, LockInfo, LockStore, Release,
    ReleaseNotifications, ReleaseOutcome, Renewal, StoreError, StoreResult,
};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;

struct Entry {
    owner: String,
    token: u64,
    expires: Instant,
}

/// The store's table.
#[derive(Default)]
pub(super) struct Table {
    locks: HashMap<String, Entry>,
    /// The last token drawn per key.
    fence: HashMap<String, u64>,
}

impl Table {
    fn live(&self, key: &str, now: Instant) -> Option<&Entry> {
        self.locks.get(key).filter(|e| e.expires > now)
    }

    fn next_token(&mut self, key: &str) -> u64 {
        let t = self.fence.entry(key.to_string()).or_insert(0);
        *t += 1;
        *t
    }
}

/// The store and its faults.
pub(super) struct World {
    pub(super) plan: Plan,
    pub(super) history: Arc<History>,
    table: Mutex<Table>,
    /// Taken to serve a request; a pause holds it, so requests queue in arrival order.
    pub(super) turn: tokio::sync::Mutex<()>,
    rng: Mutex<fastrand::Rng>,
    /// Set when the run ends: no new faults from then on.
    calm: AtomicBool,
    /// Release announcements, one channel per process.
    announce: Vec<broadcast::Sender<String>>,
}

/// How one call goes, decided when it is sent.
enum Fate {
    /// The request never arrives.
    Lost,
    /// The connection breaks after `after`; the request reached the store if `acts`.
    Reset { after: Duration, acts: bool },
    /// The store refuses it after `after` and does nothing.
    Refused { after: Duration },
    /// Served after `request`; its reply arrives `reply` later, or never (`None`).
    Served {
        request: Duration,
        reply: Option<Duration>,
    },
}

impl World {
    pub(super) fn new(plan: Plan, history: Arc<History>) -> Arc<World> {
        let announce = (0..plan.processes)
            .map(|_| broadcast::channel(1024).0)
            .collect();
        Arc::new(World {
            rng: Mutex::new(fastrand::Rng::with_seed(plan.seed)),
            plan,
            history,
            table: Mutex::new(Table::default()),
            turn: tokio::sync::Mutex::new(()),
            calm: AtomicBool::new(false),
            announce,
        })
    }

    /// No new faults from now on.
    pub(super) fn calm_down(&self) {
        self.calm.store(true, Ordering::Release);
    }

    fn calm(&self) -> bool {
        self.calm.load(Ordering::Acquire)
    }

    fn cut(&self, process: usize) -> bool {
        !self.calm() && self.plan.cut(process, self.history.now_ms())
    }

    fn latency(
        &self,
        rng: &mut fastrand::Rng,
        may_be_slow: bool,
        slow_up_to: Duration,
    ) -> Duration {
        let p = &self.plan;
        if may_be_slow && rng.f64() < p.p_slow {
            let max = slow_up_to.as_millis() as u64;
            return Duration::from_millis(rng.u64(max / 2..max.max(max / 2 + 1)));
        }
        Duration::from_millis(rng.u64(p.latency.0..=p.latency.1))
    }

    fn fate(&self, process: usize) -> Fate {
        let faulty = !self.calm();
        if self.cut(process) {
            return Fate::Lost;
        }
        let p = &self.plan;
        let mut rng = self.rng.lock().unwrap();
        // A request arrives within the bound or not at all (a pause, not the network,
        // keeps one waiting longer).
        let request = self.latency(&mut rng, faulty, p.bound);
        let roll = if faulty { rng.f64() } else { 1.0 };
        let mut edge = p.p_lost_request;
        if roll < edge {
            return Fate::Lost;
        }
        edge += p.p_reset;
        if roll < edge {
            return Fate::Reset {
                after: request,
                acts: rng.bool(),
            };
        }
        edge += p.p_server_error;
        if roll < edge {
            return Fate::Refused { after: request };
        }
        let lost_reply = faulty && rng.f64() < p.p_lost_reply;
        let reply = self.latency(&mut rng, faulty, p.bound * 2);
        Fate::Served {
            request,
            reply: (!lost_reply).then_some(reply),
        }
    }

    /// Frees `key` if `owner` holds it; announces a live lock's release.
    fn release(&self, t: &mut Table, key: &str, owner: &str, now: Instant) -> bool {
        let live = match t.locks.get(key) {
            Some(e) if e.owner == owner => e.expires > now,
            Some(e) if e.expires <= now => false,
            _ => return false,
        };
        t.locks.remove(key);
        if live {
            for (process, tx) in self.announce.iter().enumerate() {
                if !self.cut(process) {
                    let _ = tx.send(key.to_string());
                }
            }
        }
        live
    }

    fn extend(&self, t: &mut Table, key: &str, owner: &str, ttl_ms: u64, now: Instant) -> bool {
        let ignores_owner = self.plan.mutant == Mutant::ExtendIgnoresOwner;
        match t.locks.get_mut(key) {
            Some(e) if e.expires > now && (ignores_owner || e.owner == owner) => {
                e.expires = now + Duration::from_millis(ttl_ms);
                true
            }
            _ => false,
        }
    }

    fn grant(&self, t: &mut Table, key: &str, owner: &str, ttl_ms: u64, token: u64, now: Instant) {
        t.locks.insert(
            key.to_string(),
            Entry {
                owner: owner.to_string(),
                token,
                expires: now + Duration::from_millis(ttl_ms),
            },
        );
        self.history.record(key, owner, What::StoreGrant(token));
    }

    /// The live locks at the end of a run: (key, owner), sorted.
    pub(super) fn live_locks(&self) -> Vec<(String, String)> {
        let now = Instant::now();
        let t = self.table.lock().unwrap();
        let mut out: Vec<_> = t
            .locks
            .iter()
            .filter(|(_, e)| e.expires > now)
            .map(|(k, e)| (k.clone(), e.owner.clone()))
            .collect();
        out.sort();
        out
    }
}

/// What a served request does to the table.
type Act<T> = Box<dyn FnOnce(&World, &mut Table, Instant) -> T + Send>;

/// Runs `act` on the table now.
fn apply<T>(world: &World, act: Act<T>) -> T {
    let mut table = world.table.lock().unwrap();
    act(world, &mut table, Instant::now())
}

/// Serves one request as its fate says; returns the reply that reaches the client, if any.
async fn serve<T: Send + std::fmt::Debug + 'static>(
    world: Arc<World>,
    process: usize,
    what: Arc<(&'static str, String, String)>,
    fate: Fate,
    act: Act<T>,
) -> Option<StoreResult<T>> {
    let trace = |line: &dyn Fn() -> String| {
        let (_, key, owner) = &*what;
        world.history.trace(key, owner, line);
    };
    match fate {
        Fate::Lost => None,
        Fate::Reset { after, acts } => {
            tokio::time::sleep(after).await;
            if acts {
                let _turn = world.turn.lock().await;
                let out = apply(&world, act);
                trace(&|| format!("{} served: {out:?}, then the connection broke", what.0));
            }
            Some(Err(StoreError::new(
                ErrorKind::Unreachable,
                "sim: connection reset",
            )))
        }
        Fate::Refused { after } => {
            tokio::time::sleep(after).await;
            drop(world.turn.lock().await);
            if what.0 == "release" {
                world.history.record(&what.1, &what.2, What::ReleaseRefused);
            }
            Some(Err(StoreError::new(ErrorKind::Server, "sim: refused")))
        }
        Fate::Served {
            request,
            reply: back,
        } => {
            tokio::time::sleep(request).await;
            let out = {
                let _turn = world.turn.lock().await;
                apply(&world, act)
            };
            trace(&|| format!("{} served: {out:?}", what.0));
            tokio::time::sleep(back?).await;
            (!world.cut(process)).then_some(Ok(out))
        }
    }
}

/// `call`, a release by `owner` (or a handoff from it), recording `ReleaseErred` when it
/// returns an error.
fn erred_as_release<'a, T: Send + 'a>(
    history: Arc<History>,
    key: &'a str,
    owner: &'a str,
    call: Call<'a, T>,
) -> Call<'a, T> {
    async move {
        let result = call.await;
        if result.is_err() {
            history.record(key, owner, What::ReleaseErred);
        }
        result
    }
    .boxed()
}

/// One simulated process's connection to the store.
pub(super) struct SimConn {
    world: Arc<World>,
    process: usize,
    /// Keys watched for release announcements, with their watch counts.
    watched: Mutex<HashMap<String, usize>>,
}

impl SimConn {
    pub(super) fn new(world: Arc<World>, process: usize) -> SimConn {
        SimConn {
            world,
            process,
            watched: Mutex::new(HashMap::new()),
        }
    }

    /// Sends a request and waits for its reply, at most the bound.
    /// `op` names the call in a trace, with its key and owner.
    fn call<'a, T: Send + std::fmt::Debug + 'static>(
        &'a self,
        op: &'static str,
        key: &str,
        owner: &str,
        act: Act<T>,
    ) -> Call<'a, T> {
        let world = self.world.clone();
        let process = self.process;
        let what = Arc::new((op, key.to_string(), owner.to_string()));
        async move {
            let deadline = Instant::now() + world.plan.bound;
            let fate = world.fate(process);
            let history = world.history.clone();
            history.trace(&what.1, &what.2, || format!("p{process} sends {op}"));
            // The request is served on this task while the client waits for it, and on a
            // task of its own once the client has given up on it.
            let mut served = Box::pin(serve(world, process, what.clone(), fate, act));
            let reply = tokio::select! {
                biased;
                reply = &mut served => reply,
                _ = tokio::time::sleep_until(deadline) => {
                    tokio::spawn(served);
                    None
                }
            };
            let result = match reply {
                Some(reply) => reply,
                None => {
                    tokio::time::sleep_until(deadline).await;
                    Err(StoreError::timeout("sim: no answer within the bound"))
                }
            };
            history.trace(&what.1, &what.2, || {
                format!("p{process} {op} returns {result:?}")
            });
            result
        }
        .boxed()
    }
}

impl LockStore for SimConn {
    fn try_acquire<'a>(&'a self, key: &'a str, acq: Acquisition<'a>) -> Call<'a, Option<u64>> {
        let call = ("acquire", key, acq.owner);
        let ttl_ms = acq.ttl_ms;
        self.world
            .history
            .record(key, acq.owner, What::Asked { ttl_ms });
        let (key, owner, ttl_ms) = (key.to_string(), acq.owner.to_string(), acq.ttl_ms);
        self.call(
            call.0,
            call.1,
            call.2,
            Box::new(move |w: &World, t: &mut Table, now| {
                if let Some(e) = t.locks.get_mut(&key).filter(|e| e.expires > now) {
                    // As Redis and PostgreSQL: an owner asking again for the lock it holds gets
                    // its own token, with the lease set anew from this request (the engine
                    // reckons it from this request's send).
                    if e.owner != owner {
                        return None;
                    }
                    e.expires = now + Duration::from_millis(ttl_ms);
                    return Some(e.token);
                }
                let token = t.next_token(&key);
                w.grant(t, &key, &owner, ttl_ms, token, now);
                Some(token)
            }),
        )
    }

    fn extend<'a>(&'a self, key: &'a str, renewal: Renewal<'a>) -> Call<'a, bool> {
        let call = ("extend", key, renewal.owner);
        let (key, owner, ttl_ms) = (key.to_string(), renewal.owner.to_string(), renewal.ttl_ms);
        self.call(
            call.0,
            call.1,
            call.2,
            Box::new(move |w: &World, t: &mut Table, now| w.extend(t, &key, &owner, ttl_ms, now)),
        )
    }

    fn extend_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a> {
        let owned: Vec<ExtendItem> = items.to_vec();
        let n = items.len();
        let always_ok = self.world.plan.mutant == Mutant::RenewalAlwaysOk;
        let (key, owner) = items
            .first()
            .map_or(("", ""), |i| (&i.key[..], &i.owner[..]));
        let call = self.call(
            "extend_many",
            key,
            owner,
            Box::new(move |w: &World, t: &mut Table, now| {
                owned
                    .iter()
                    .map(|i| w.extend(t, &i.key, &i.owner, i.ttl_ms, now))
                    .collect::<Vec<bool>>()
            }),
        );
        async move {
            match call.await {
                Ok(results) => results.into_iter().map(|r| Ok(r || always_ok)).collect(),
                Err(_) if always_ok => (0..n).map(|_| Ok(true)).collect(),
                Err(e) => (0..n).map(|_| Err(e.clone())).collect(),
            }
        }
        .boxed()
    }

    fn release<'a>(&'a self, key: &'a str, r: Release<'a>) -> Call<'a, ReleaseOutcome> {
        let owner = r.owner;
        let call = self.call(
            "release",
            key,
            owner,
            Box::new({
                let (key, owner) = (key.to_string(), owner.to_string());
                move |w: &World, t: &mut Table, now| ReleaseOutcome {
                    released: w.release(t, &key, &owner, now),
                    others_waiting: false,
                }
            }),
        );
        erred_as_release(self.world.history.clone(), key, owner, call)
    }

    fn handoff<'a>(&'a self, key: &'a str, h: Handoff<'a>) -> Call<'a, Option<u64>> {
        let call = ("handoff", key, h.next.owner);
        let ttl_ms = h.next.ttl_ms;
        self.world
            .history
            .record(key, h.next.owner, What::Asked { ttl_ms });
        let (giver, history) = (h.from, self.world.history.clone());
        let (key, from) = (key.to_string(), h.from.to_string());
        let (next, ttl_ms) = (h.next.owner.to_string(), h.next.ttl_ms);
        let handoff = self.call(
            call.0,
            call.1,
            call.2,
            Box::new(move |w: &World, t: &mut Table, now| {
                let old = match t.live(&key, now) {
                    Some(e) if e.owner == from => e.token,
                    _ => return None,
                };
                let token = if w.plan.mutant == Mutant::HandoffReusesToken {
                    old
                } else {
                    t.next_token(&key)
                };
                w.grant(t, &key, &next, ttl_ms, token, now);
                Some(token)
            }),
        );
        // A handoff is the giver's release too (a clean-up hands a grant to a local waiter).
        erred_as_release(history, call.1, giver, handoff)
    }

    fn inspect<'a>(&'a self, key: &'a str) -> Call<'a, Option<LockInfo>> {
        let call = self.call(
            "inspect",
            key,
            "",
            Box::new({
                let key = key.to_string();
                move |_: &World, t: &mut Table, now| {
                    t.live(&key, now).map(|e| LockInfo {
                        owner: e.owner.clone(),
                        fencing_token: e.token,
                        remaining_ms: (e.expires - now).as_millis() as i64,
                        data: None,
                    })
                }
            }),
        );
        call
    }

    fn ping(&self) -> Call<'_, ()> {
        self.call("ping", "", "", Box::new(|_: &World, _: &mut Table, _| ()))
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        futures_util::future::ready(()).boxed()
    }

    fn release_notifications(&self) -> Option<&dyn ReleaseNotifications> {
        self.world.plan.notifications.then_some(self as _)
    }
}

impl ReleaseNotifications for SimConn {
    fn releases(&self) -> broadcast::Receiver<String> {
        self.world.announce[self.process].subscribe()
    }

    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        *self
            .watched
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_insert(0) += 1;
        futures_util::future::ready(()).boxed()
    }

    fn unwatch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        let mut watched = self.watched.lock().unwrap();
        if let Some(n) = watched.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                watched.remove(key);
            }
        }
        futures_util::future::ready(()).boxed()
    }

    fn watched(&self) -> usize {
        self.watched.lock().unwrap().len()
    }
}
