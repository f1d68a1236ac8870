//! Every limit and default of deadbolt, defined once. The JavaScript layer reads them from
//! the addon (`limits()` in `src/binding`), and the README's tables state the same values.

/// Longest lock name, in UTF-8 bytes (the width of the MySQL `name` column).
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest data payload stored with a lock, in bytes.
pub const MAX_DATA_BYTES: usize = 1024 * 1024;
/// Longest duration an option may give, in ms (`setTimeout`'s ceiling, about 24.8 days);
/// `wait` and `maxHold` may also be infinite.
pub const MAX_MS: u64 = (1 << 31) - 1;
/// Most keys one multi-key acquisition (`acquireAll`) takes.
pub const MAX_KEYS_PER_CALL: usize = 1_000;
/// Most permits a semaphore has; a read-write lock is a semaphore of this many (a reader
/// takes one, a writer all).
pub const MAX_PERMITS: u32 = 1_000_000_000;
/// Default lease, in ms.
pub const DEFAULT_TTL_MS: u64 = 10_000;
/// Default time `acquire` waits, in ms.
pub const DEFAULT_WAIT_MS: u64 = 10_000;
/// Default base delay between polls, in ms.
pub const DEFAULT_RETRY_DELAY_MS: u64 = 50;
/// Default relative jitter of the poll delay.
pub const DEFAULT_JITTER: f64 = 0.5;
/// Default lease of an election, in ms.
pub const DEFAULT_ELECTION_TTL_MS: u64 = 5_000;
/// Default bound on opening a connection, in ms.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Default bound on one reply, in ms.
pub const DEFAULT_RESPONSE_TIMEOUT_MS: u64 = 5_000;
/// Default connection pool size (the stores whose registry entry lists `poolSize`).
pub const DEFAULT_POOL_SIZE: u32 = 10;
/// Largest connection pool (likewise).
pub const MAX_POOL_SIZE: u32 = 1_000;
/// Default lease table (the stores whose registry entry lists `table`).
pub const DEFAULT_TABLE: &str = "deadbolt_locks";
/// Longest lease table name: 1 to this many ASCII letters, digits or underscores.
pub const MAX_TABLE_NAME_BYTES: usize = 64;

/// Whether `name` is a table name deadbolt accepts (1 to 64 ASCII letters, digits or
/// underscores), so it can be quoted into SQL safely.
pub fn valid_table_name(name: &str) -> bool {
    (1..=MAX_TABLE_NAME_BYTES).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Margin taken off every lease by the holder's local reckoning, as a fraction of the ttl,
/// plus [`LEASE_MARGIN_MS`]: it covers clock drift between holder and store and the time a
/// loss takes to reach the caller, so the holder stops believing before the store's expiry
/// (Redlock's drift factor, 1 % + 2 ms). Never more than half the lease.
pub const LEASE_MARGIN_FRACTION: f64 = 0.01;
/// The fixed part of the lease margin, in ms.
pub const LEASE_MARGIN_MS: u64 = 2;

/// Clean-up of a grant whose reply was lost (an acquisition that failed with its outcome
/// unknown): the pause after its first release, in ms, doubled after each release up to a
/// quarter of the response timeout (at most 250 ms).
pub const ORPHAN_FIRST_PAUSE_MS: u64 = 20;
/// Clean-ups of grants whose reply was lost that one engine runs at once; beyond that a grant
/// is left to its lease.
pub const ORPHAN_MAX_CLEANUPS: usize = 4_096;

/// Redlock: the share of the ttl each server is given to answer an acquisition (its reply is
/// awaited at most `ttl ×` this, at least [`REDLOCK_MIN_SERVER_TIMEOUT_MS`], never longer
/// than `responseTimeout`), so a server that is down or paused never eats the lease.
pub const REDLOCK_SERVER_TIMEOUT_FRACTION: f64 = 0.1;
/// Redlock: the least time a server is given to answer an acquisition, in ms.
pub const REDLOCK_MIN_SERVER_TIMEOUT_MS: u64 = 50;
/// Redis Sentinel: how long a grant or extension waits for replica acknowledgement
/// (`waitTimeout`, when `waitReplicas` asks for it), in ms.
pub const DEFAULT_WAIT_TIMEOUT_MS: u64 = 1_000;
/// Most Redis URLs one client may name: Redlock servers, cluster seeds or sentinels.
pub const MAX_REDIS_SERVERS: usize = 32;
