//! Deterministic simulation of the engine: its acquire loop and local queues (handoffs),
//! heartbeat, local deadlines and clean-up of grants whose reply was lost, run against a
//! simulated store with seeded latencies, lost requests and replies, broken connections,
//! refusals, a process cut off and a paused store, on tokio's paused clock. A seed decides
//! everything, and the history of each run is checked for the invariants of the fault harness
//! (see `check.rs`). Compiled for tests only; `tests.rs` says how to run and replay a seed.
//!
//! Why a driver of its own: no new dependency (turmoil and madsim replace the network or the
//! runtime; the engine only needs a store, which the contract already abstracts), and the
//! engine runs unchanged on a current-thread runtime with a paused clock. Determinism: all
//! draws come from the seed (the engine's jitter too, `fastrand::seed`), the heartbeat grid
//! is lined up with the clock (`run.rs`), tasks run on one thread. What is left: tokio's
//! `select!` picks among branches ready at once with a generator seeded per runtime from the
//! OS (`Builder::rng_seed` needs `--cfg tokio_unstable`), so a seed whose run has such a tie
//! may take another path on replay; most seeds replay the same history.

mod check;
mod client;
mod history;
mod plan;
mod run;
mod store;

mod tests;
