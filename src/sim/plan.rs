//! What one seed plays: how many processes, clients and keys, the store's latencies and the
//! faults it injects (lost requests and replies, broken connections, server errors, slow
//! replies, a process cut off, the store paused), all drawn from the seed alone.

use std::time::Duration;

/// A deliberately broken variant, to show that the checker can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mutant {
    /// The store as the contract says.
    None,
    /// The store extends a live lease whoever holds it (it forgets to compare the owner).
    ExtendIgnoresOwner,
    /// A failed renewal reads as a successful one: the heartbeat carries on as if it had been
    /// extended (the store's "not yours any more" and its errors are ignored).
    RenewalAlwaysOk,
    /// A handoff keeps the previous holder's fencing token instead of drawing a new one.
    HandoffReusesToken,
}

/// A window of simulated time, in ms from the start of the run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    pub(super) from: u64,
    pub(super) to: u64,
}

impl Window {
    pub(super) fn contains(&self, ms: u64) -> bool {
        (self.from..self.to).contains(&ms)
    }
}

/// Heartbeat periods a client may pick: multiples of 8 ms whose eighth (the heartbeat's grid)
/// divides a second, so that the grid falls on the same simulated instants in every replay.
pub(super) const EVERY_MS: [u64; 9] = [80, 160, 200, 320, 400, 800, 1_000, 1_600, 2_000];

/// Lease lengths a client may pick (multiples of 100 ms: whole-ms local deadlines).
pub(super) const TTL_MS: [u64; 5] = [300, 600, 1_000, 2_000, 5_000];

/// One seed's world.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    pub(super) seed: u64,
    pub(super) mutant: Mutant,
    pub(super) processes: usize,
    pub(super) clients: usize,
    pub(super) keys: usize,
    /// The response bound of every store call (the client's `responseTimeout`).
    pub(super) bound: Duration,
    /// Latency of a request or a reply, in ms (inclusive range).
    pub(super) latency: (u64, u64),
    /// Chance that a request or a reply is slow: up to the bound (a reply: up to twice it).
    pub(super) p_slow: f64,
    pub(super) p_lost_request: f64,
    pub(super) p_lost_reply: f64,
    /// A connection that breaks: the request may or may not have reached the store.
    pub(super) p_reset: f64,
    /// The store answers with an error and does nothing.
    pub(super) p_server_error: f64,
    /// Windows in which one process is cut off (its requests and replies are lost).
    pub(super) cuts: Vec<(usize, Window)>,
    /// Windows in which the store reads nothing (requests queue and are served in order after).
    pub(super) pauses: Vec<Window>,
    /// Whether the store announces releases (as Redis and PostgreSQL do).
    pub(super) notifications: bool,
    /// How long clients run, in ms; faults stop then.
    pub(super) run_ms: u64,
}

impl Plan {
    /// The plan of `seed`.
    pub(super) fn of(seed: u64, mutant: Mutant) -> Plan {
        let mut rng = fastrand::Rng::with_seed(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5);
        let processes = rng.usize(1..=3);
        let clients = rng.usize(processes.max(2)..=4);
        let keys = rng.usize(1..=2);
        let bound = Duration::from_millis([300, 1_000, 5_000][rng.usize(..3)]);
        let latency = (0, [2, 10, 50][rng.usize(..3)]);
        let run_ms = rng.u64(2_000..=8_000);
        let calm = rng.u8(..5) == 0;
        let mut p = || {
            if calm || rng.bool() {
                0.0
            } else {
                rng.f64() * 0.06
            }
        };
        let (p_slow, p_lost_request, p_lost_reply, p_reset, p_server_error) =
            (p(), p(), p(), p(), p());
        let window = |rng: &mut fastrand::Rng| {
            let from = rng.u64(0..run_ms);
            let to = (from + rng.u64(50..=3_000)).min(run_ms);
            Window { from, to }
        };
        let mut cuts = Vec::new();
        let mut pauses = Vec::new();
        if !calm {
            for _ in 0..rng.usize(0..=2) {
                let process = rng.usize(..processes);
                cuts.push((process, window(&mut rng)));
            }
            for _ in 0..rng.usize(0..=2) {
                pauses.push(window(&mut rng));
            }
        }
        Plan {
            seed,
            mutant,
            processes,
            clients,
            keys,
            bound,
            latency,
            p_slow,
            p_lost_request,
            p_lost_reply,
            p_reset,
            p_server_error,
            cuts,
            pauses,
            notifications: rng.bool(),
            run_ms,
        }
    }

    /// Whether `process` is cut off at `ms`.
    pub(super) fn cut(&self, process: usize, ms: u64) -> bool {
        self.cuts
            .iter()
            .any(|(p, w)| *p == process && w.contains(ms))
    }
}
