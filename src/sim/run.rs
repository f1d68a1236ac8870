//! Running seeds: one seed is one current-thread tokio runtime with a paused clock, the
//! simulated store, one engine per simulated process and the clients; many seeds run on as
//! many threads as the machine has.

use super::check;
use super::client::Client;
use super::history::{Event, History};
use super::plan::{Mutant, Plan};
use super::store::{SimConn, World};
use crate::core::engine::Engine;
use crate::core::heartbeat::grid_origin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What one seed gave.
pub(super) struct Outcome {
    pub(super) seed: u64,
    pub(super) violations: Vec<String>,
    pub(super) events: Vec<Event>,
}

/// Moves the paused clock to a whole ms (from the runtime's start, which its timers count
/// from) that lies within a ms after a whole second from the heartbeat grid's origin: the
/// grid then falls on the same simulated instants however far the origin, a process-wide
/// instant taken by whichever test came first, is from this runtime's start.
async fn line_up_with_the_heartbeat_grid() {
    let start = Instant::now();
    let origin = grid_origin();
    let second = Duration::from_secs(1);
    let boundary = if origin >= start {
        origin
    } else {
        let since = start.duration_since(origin).as_nanos();
        let whole = since.div_ceil(second.as_nanos());
        origin + Duration::from_nanos((whole * second.as_nanos()) as u64)
    };
    let ms = boundary
        .duration_since(start)
        .as_nanos()
        .div_ceil(1_000_000) as u64;
    tokio::time::advance(Duration::from_millis(ms)).await;
}

/// Runs `seed` (with `mutant` in the store) and checks it.
pub(super) fn run_seed(seed: u64, mutant: Mutant, trace: bool) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    // The engine's poll jitter draws from this thread's generator.
    fastrand::seed(seed);
    rt.block_on(async move {
        line_up_with_the_heartbeat_grid().await;
        simulate(Plan::of(seed, mutant), trace).await
    })
}

async fn simulate(plan: Plan, trace: bool) -> Outcome {
    let seed = plan.seed;
    let history = Arc::new(History::new(Instant::now(), trace));
    let world = World::new(plan.clone(), history.clone());
    let engines: Vec<(Arc<Engine>, Arc<SimConn>)> = (0..plan.processes)
        .map(|p| {
            let conn = Arc::new(SimConn::new(world.clone(), p));
            (Engine::new(conn.clone()), conn)
        })
        .collect();
    for w in plan.pauses.clone() {
        let world = world.clone();
        let start = history.start();
        tokio::spawn(async move {
            tokio::time::sleep_until(start + Duration::from_millis(w.from)).await;
            let paused = world.turn.lock().await;
            tokio::time::sleep_until(start + Duration::from_millis(w.to)).await;
            drop(paused);
        });
    }
    let stop = CancellationToken::new();
    let clients: Vec<_> = (0..plan.clients)
        .map(|id| {
            let process = id % plan.processes;
            let client = Client {
                id,
                process,
                engine: engines[process].0.clone(),
                plan: plan.clone(),
                history: history.clone(),
                stop: stop.clone(),
            };
            tokio::spawn(client.run())
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(plan.run_ms)).await;
    world.calm_down();
    stop.cancel();
    for c in clients {
        c.await.expect("a client ran to its end");
    }
    // Every call in flight has ended within one bound; a clean-up that started then frees its
    // grant within one more bound and its pauses (at most 250 ms each).
    let settle = plan.bound * 3 + Duration::from_millis(2 * plan.latency.1 + 1_000);
    tokio::time::sleep(settle).await;
    let events = history.events();
    let mut violations = check::violations(&events);
    for (key, owner) in world.live_locks() {
        if !check::may_outlive(&events, &owner) {
            violations.push(format!(
                "after the run {key} is still held by {owner}, whose grant nobody believes in"
            ));
        }
    }
    for (p, (engine, _)) in engines.iter().enumerate() {
        let left = [
            ("waiters", engine.waiting()),
            ("timers", engine.scheduler().len()),
            ("clean-ups", engine.cleanups()),
            ("subscriptions", engine.subscriptions()),
        ];
        for (what, n) in left {
            if n > 0 {
                violations.push(format!("after the run process {p} still has {n} {what}"));
            }
        }
    }
    Outcome {
        seed,
        violations,
        events,
    }
}

/// Runs seeds `from..from + count` on every core; returns the failing outcomes (at most
/// `keep`; it stops early once it has them).
pub(super) fn run_many(from: u64, count: u64, mutant: Mutant, keep: usize) -> Vec<Outcome> {
    let next = AtomicU64::new(from);
    let failed = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= from + count || failed.lock().unwrap().len() >= keep {
                    return;
                }
                let outcome = run_seed(seed, mutant, false);
                if !outcome.violations.is_empty() {
                    failed.lock().unwrap().push(outcome);
                }
            });
        }
    });
    let mut failed = failed.into_inner().unwrap();
    failed.sort_by_key(|o| o.seed);
    failed
}
