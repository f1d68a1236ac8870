use super::*;
use crate::core::options::AutoExtend;
use crate::store::memory::MemoryStore;
use crate::store::redis::{RedisOptions, RedisStore};
use crate::store::{Acquisition, SharedStore};
use std::sync::atomic::AtomicUsize;

fn held(id: u64, ttl_ms: u64, auto: Option<AutoExtend>, lost: Arc<AtomicUsize>) -> Arc<Held> {
    Arc::new(Held::new(
        id,
        format!("k{id}"),
        "o".into(),
        1,
        ttl_ms,
        Instant::now(),
        auto,
        true,
        false,
        Box::new(move |_, _| {
            lost.fetch_add(1, Ordering::SeqCst);
        }),
    ))
}

fn no_release() -> ReleaseFn {
    Arc::new(|_: &Held| {})
}

fn memory_scheduler() -> Scheduler {
    Scheduler::start(Arc::new(MemoryStore::default()), no_release())
}

#[test]
fn heartbeat_times_fall_on_a_shared_grid_never_later_than_asked() {
    let every = Duration::from_millis(800);
    let base = Instant::now();
    let a = align(base + every, every);
    let b = align(base + every + Duration::from_millis(30), every);
    assert!(a <= base + every && base + every - a < every / 8 + Duration::from_millis(1));
    // Two asks 30 ms apart land on the same 100 ms grid point, or neighbouring ones.
    let diff = if b >= a { b - a } else { a - b };
    assert!(diff == Duration::ZERO || diff == every / 8, "{diff:?}");
}

#[tokio::test(start_paused = true)]
async fn a_released_lock_leaves_the_scheduler_at_once() {
    let sched = memory_scheduler();
    let lost = Arc::new(AtomicUsize::new(0));
    let locks: Vec<_> = (0..1000)
        .map(|i| held(i, 60_000, None, lost.clone()))
        .collect();
    for h in &locks {
        sched.add(h.clone());
    }
    assert_eq!(sched.len(), 1000);
    for h in &locks {
        h.finish();
        sched.remove(h);
    }
    assert!(sched.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_unextended_lease_is_reported_lost_once_at_its_deadline() {
    let sched = memory_scheduler();
    let lost = Arc::new(AtomicUsize::new(0));
    let h = held(1, 30, None, lost.clone());
    sched.add(h.clone());
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(lost.load(Ordering::SeqCst), 1);
    assert_eq!(h.lost_reason(), Some(LostReason::Expired));
    assert!(sched.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_earlier_deadline_wakes_a_scheduler_sleeping_towards_a_later_one() {
    let sched = memory_scheduler();
    let lost = Arc::new(AtomicUsize::new(0));
    sched.add(held(1, 60_000, None, lost.clone()));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let short = held(2, 20, None, lost.clone());
    sched.add(short.clone());
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(short.lost_reason(), Some(LostReason::Expired));
}

#[tokio::test(start_paused = true)]
async fn acquisitions_one_after_another_with_one_ttl_wake_the_scheduler_once() {
    let sched = memory_scheduler();
    let lost = Arc::new(AtomicUsize::new(0));
    // Let the task go to sleep on the empty map first.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let before = sched.timers.wakeups.load(Ordering::Relaxed);
    for i in 0..100 {
        let h = held(i, 60_000, None, lost.clone());
        sched.add(h.clone());
        tokio::time::sleep(Duration::from_micros(100)).await;
        h.finish();
        sched.remove(&h);
    }
    // The first acquisition woke it from its empty-map sleep; the other 99 deadlines were
    // later than the one it then slept towards.
    assert_eq!(sched.timers.wakeups.load(Ordering::Relaxed) - before, 1);
    assert_eq!(lost.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_behind_a_released_locks_is_still_reported_on_time() {
    let sched = memory_scheduler();
    let lost = Arc::new(AtomicUsize::new(0));
    let first = held(1, 50, None, lost.clone());
    sched.add(first.clone());
    tokio::time::sleep(Duration::from_millis(5)).await;
    first.finish();
    sched.remove(&first);
    // Later than the deadline the task sleeps towards (the released lock's): no wake-up now,
    // yet it must fire at its own deadline.
    let second = held(2, 100, None, lost.clone());
    sched.add(second.clone());
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(second.lost_reason(), None);
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(second.lost_reason(), Some(LostReason::Expired));
    assert_eq!(lost.load(Ordering::SeqCst), 1);
    assert!(sched.is_empty());
}

#[tokio::test]
async fn the_local_deadline_fires_while_an_extension_hangs() {
    // A "server" that accepts connections and never answers: every extension hangs for the
    // whole response timeout, far longer than the lease.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            sockets.push(s);
        }
    });
    let store = RedisStore::connect(
        &format!("redis://127.0.0.1:{port}"),
        &RedisOptions {
            connect_timeout_ms: 10_000,
            response_timeout_ms: 10_000,
            tls: None,
        },
    )
    .unwrap();
    let released = Arc::new(AtomicUsize::new(0));
    let counted = released.clone();
    let sched = Scheduler::start(
        store,
        Arc::new(move |_: &Held| {
            counted.fetch_add(1, Ordering::SeqCst);
        }),
    );
    let lost = Arc::new(AtomicUsize::new(0));
    let auto = AutoExtend {
        every: Duration::from_millis(50),
        max_hold: None,
    };
    let ttl = 300;
    let h = held(1, ttl, Some(auto), lost.clone());
    let start = Instant::now();
    sched.add(h.clone());
    while lost.load(Ordering::SeqCst) == 0 && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let after = start.elapsed();
    assert_eq!(h.lost_reason(), Some(LostReason::Unreachable));
    assert!(!h.is_live(Instant::now()));
    // Reported at the local deadline (the grant's send time + ttl), not when the hung call
    // gives up 10 s later.
    assert!(after < Duration::from_millis(ttl + 1000), "{after:?}");
    // Not released early: the store's own lease ends a margin later by itself.
    assert_eq!(released.load(Ordering::SeqCst), 0);
    assert!(sched.is_empty());
}

/// A memory store in which `k1` is held by `o` for a minute, as `held(1, ...)` describes it.
fn store_holding_k1() -> SharedStore {
    let store = Arc::new(MemoryStore::default());
    store.try_acquire("k1", "o", 60_000, None);
    store
}

#[tokio::test(start_paused = true)]
async fn a_lock_with_an_absurd_max_hold_does_not_stop_the_scheduler() {
    let sched = Scheduler::start(store_holding_k1(), no_release());
    let lost = Arc::new(AtomicUsize::new(0));
    let huge = AutoExtend {
        every: Duration::from_millis(10),
        max_hold: Some(Duration::MAX),
    };
    let forever = held(1, 1000, Some(huge), lost.clone());
    sched.add(forever.clone());
    let short = held(2, 30, None, lost.clone());
    sched.add(short.clone());
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(short.lost_reason(), Some(LostReason::Expired));
    assert_eq!(forever.lost_reason(), None, "still extended");
    assert!(forever.is_live(Instant::now()));
}

#[tokio::test(start_paused = true)]
async fn max_hold_gives_the_lock_up_through_the_release_function() {
    let released = Arc::new(AtomicUsize::new(0));
    let counted = released.clone();
    let sched = Scheduler::start(
        store_holding_k1(),
        Arc::new(move |_: &Held| {
            counted.fetch_add(1, Ordering::SeqCst);
        }),
    );
    let lost = Arc::new(AtomicUsize::new(0));
    let auto = AutoExtend {
        every: Duration::from_millis(10),
        max_hold: Some(Duration::from_millis(40)),
    };
    let h = held(1, 1000, Some(auto), lost.clone());
    sched.add(h.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.lost_reason(), Some(LostReason::MaxHold));
    assert_eq!(released.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_lock_reporting_extensions_is_told_of_each_heartbeat() {
    let sched = Scheduler::start(store_holding_k1(), no_release());
    let lost = Arc::new(AtomicUsize::new(0));
    let beats = Arc::new(AtomicUsize::new(0));
    let counted = beats.clone();
    let auto = AutoExtend {
        every: Duration::from_millis(100),
        max_hold: None,
    };
    let h = Arc::new(
        Arc::into_inner(held(1, 1000, Some(auto), lost.clone()))
            .expect("only reference")
            .reporting_extensions(Box::new(move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
            })),
    );
    sched.add(h.clone());
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert!(beats.load(Ordering::SeqCst) >= 3, "{beats:?}");
    assert_eq!(lost.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_lease_whose_holder_stopped_extending_it_lapses_at_its_deadline_as_expired() {
    let store: SharedStore = Arc::new(MemoryStore::default());
    let sched = Scheduler::start(store.clone(), no_release());
    let fenced = crate::store::ValueFormat::Fenced;
    assert!(store
        .try_acquire(
            "k1",
            Acquisition {
                format: fenced,
                ..Acquisition::fenced("o", 100)
            }
        )
        .await
        .unwrap()
        .is_some());
    let lost = Arc::new(AtomicUsize::new(0));
    let auto = AutoExtend {
        every: Duration::from_millis(20),
        max_hold: None,
    };
    let h = held(1, 100, Some(auto), lost.clone());
    sched.add(h.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        lost.load(Ordering::SeqCst),
        0,
        "extended while its heartbeat ran"
    );
    assert!(h.stop_extending());
    sched.reschedule(h.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(lost.load(Ordering::SeqCst), 1);
    assert_eq!(h.lost_reason(), Some(LostReason::Expired));
    assert!(sched.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_loss_announced_for_a_key_and_owner_ends_only_that_owners_locks() {
    let sched = memory_scheduler();
    let lost = Arc::new(AtomicUsize::new(0));
    let mine = held(1, 60_000, None, lost.clone());
    let other_key = held(2, 60_000, None, lost.clone());
    sched.add(mine.clone());
    sched.add(other_key.clone());
    sched.lost("k1", "someone else");
    assert_eq!(
        lost.load(Ordering::SeqCst),
        0,
        "another owner's loss ends nothing here"
    );
    sched.lost("k1", "o");
    assert_eq!(lost.load(Ordering::SeqCst), 1);
    assert!(mine.lost_reason().is_some());
    assert!(other_key.lost_reason().is_none());
}

#[tokio::test(start_paused = true)]
async fn pairs_whose_hashes_meet_are_still_told_apart() {
    let sched = memory_scheduler();
    let lost = Arc::new(AtomicUsize::new(0));
    let a = held(1, 60_000, None, lost.clone());
    let b = held(2, 60_000, None, lost.clone());
    sched.add(a.clone());
    sched.add(b.clone());
    // Both pairs listed under one id, as when their hashes are equal.
    let shared = 7;
    {
        let mut holders = guard(&sched.timers.holders);
        holders.clear();
        holders.insert(
            shared,
            smallvec::smallvec![Arc::downgrade(&a), Arc::downgrade(&b)],
        );
    }
    let found = sched.timers.take_listed(shared, "k2", "o");
    assert_eq!(found.len(), 1);
    assert!(Arc::ptr_eq(&found[0], &b), "b, found in the shared list");
    assert_eq!(
        guard(&sched.timers.holders)[&shared].len(),
        1,
        "a, another pair, stays listed"
    );
    let found = sched.timers.take_listed(shared, "k1", "o");
    assert!(found.len() == 1 && Arc::ptr_eq(&found[0], &a));
    assert!(
        guard(&sched.timers.holders).is_empty(),
        "an emptied list leaves the index"
    );
}
