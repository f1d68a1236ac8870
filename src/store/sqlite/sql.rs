//! The SQLite store's schema and statements (docs/design.md, "SQLite layout").
//!
//! Every lock and semaphore operation is one statement, so one autocommit write transaction
//! (its triggers included): SQLite takes the database's write lock at the start of a writing
//! statement and holds it for microseconds, and a connection that finds it taken waits
//! (`busy_timeout`) instead of failing. Names and owners are stored as BLOBs so that every comparison, `length` and
//! `substr` is bytewise (TEXT functions stop at a NUL, which a JavaScript string may hold).

use super::connection::Takeover;

/// Placeholder for the validated, double-quoted lease table name.
const TABLE: &str = "{table}";
/// Placeholder for the fencing counter table (the lease table's name + `_fence`).
const FENCE: &str = "{fence}";
/// Placeholder for the waiter registry table (the lease table's name + `_waiters`).
const WAITERS: &str = "{waiters}";
/// Placeholder for the semaphore table (the lease table's name + `_permits`).
const PERMITS: &str = "{permits}";
/// Placeholder for the host's wall clock in milliseconds since the Unix epoch, as SQLite
/// reads it (the VFS's current time, fixed for the whole of one statement).
const NOW: &str = "{now}";

/// The host's wall clock in ms since the epoch. `julianday('now')` works on every SQLite
/// version (`unixepoch('subsec')` needs 3.42); the value is the VFS's millisecond clock, and
/// `round` undoes the floating-point division of the Julian day number.
const NOW_MS: &str = "CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";

/// The schema, created (if missing) in one write transaction on first use. A row exists only
/// while its lock is held, or after its lease ended until it is taken again, deleted by its
/// holder's release or purged: releases delete the row, so a name leaves nothing behind.
/// Fencing tokens therefore cannot live in the row: one counter row for the whole table,
/// raised by triggers in the very transaction that writes a new token, keeps them increasing
/// per name across releases, purges and restarts, in bounded state.
pub const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS {table} (
        name BLOB NOT NULL PRIMARY KEY,
        owner BLOB NOT NULL,
        fence INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        data BLOB
    ) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS {fence} (
        id INTEGER NOT NULL PRIMARY KEY CHECK (id = 0),
        value INTEGER NOT NULL
    )",
    "INSERT OR IGNORE INTO {fence} (id, value) VALUES (0, 0)",
    // Upserts that take a row over run the UPDATE trigger; plain inserts the INSERT one.
    "CREATE TRIGGER IF NOT EXISTS {trigger_insert} AFTER INSERT ON {table}
     BEGIN UPDATE {fence} SET value = NEW.fence WHERE id = 0 AND value < NEW.fence; END",
    "CREATE TRIGGER IF NOT EXISTS {trigger_update} AFTER UPDATE OF fence ON {table}
     BEGIN UPDATE {fence} SET value = NEW.fence WHERE id = 0 AND value < NEW.fence; END",
    // Which process (a datagram socket address) waits for which name: releasers tell them.
    "CREATE TABLE IF NOT EXISTS {waiters} (
        name BLOB NOT NULL,
        addr TEXT NOT NULL,
        PRIMARY KEY (name, addr)
    ) WITHOUT ROWID",
    // Semaphores (docs/design.md, "SQLite layout"): one row per holder or queued request.
    "CREATE TABLE IF NOT EXISTS {permits} (
        name BLOB NOT NULL,
        owner BLOB NOT NULL,
        permits INTEGER NOT NULL,
        fence INTEGER,
        place INTEGER,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (name, owner)
    ) WITHOUT ROWID",
    // A grant raises the shared counter, as a lock's does; every write of a grant or a queued
    // place (an insert, or an upsert's update, which always sets `fence`) also drops the
    // semaphore's lapsed rows, so an idle semaphore's rows go at its next touch.
    "CREATE TRIGGER IF NOT EXISTS {permits_on_insert} AFTER INSERT ON {permits}
     BEGIN
        UPDATE {fence} SET value = NEW.fence WHERE id = 0 AND value < NEW.fence;
        DELETE FROM {permits} WHERE name = NEW.name AND expires_at <= {now};
     END",
    "CREATE TRIGGER IF NOT EXISTS {permits_on_update} AFTER UPDATE OF fence ON {permits}
     BEGIN
        UPDATE {fence} SET value = NEW.fence WHERE id = 0 AND value < NEW.fence;
        DELETE FROM {permits} WHERE name = NEW.name AND expires_at <= {now};
     END",
];

/// The next fencing token: one above the counter, and never below the floor `{floor}` (a
/// parameter, see [`token_floor`]): the host clock in nanoseconds, read by the process, in
/// whole microseconds plus the store's own tag. The counter alone keeps tokens increasing
/// while the file keeps its last commits; the clock floor also covers the commits an OS crash
/// or power loss may take with it (`synchronous = NORMAL` makes commits durable across process
/// crashes, not power loss), since a reboot takes longer than the lost commits' microseconds.
/// Where two files meet (one deleted or replaced, a fresh one at its path), tokens drawn from
/// the floors of two stores coincide only if both read the same microsecond and drew the same
/// tag (1 in [`FLOOR_TAGS`]); SQLite's own clock has whole milliseconds, with which two fresh
/// files gave two processes the same token 0.3 ms apart.
const NEXT_TOKEN: &str = "max(coalesce((SELECT value FROM {fence} WHERE id = 0), 0) + 1, {floor})";

/// The floor of the next token for a store tagged `tag` (below [`FLOOR_TAGS`]): the wall clock
/// in whole microseconds since the epoch, times [`FLOOR_TAGS`], plus the tag. Fits an
/// `INTEGER` until the year 2262.
pub fn token_floor(tag: u64) -> i64 {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    i64::try_from(micros * u128::from(FLOOR_TAGS) + u128::from(tag % FLOOR_TAGS))
        .unwrap_or(i64::MAX)
}

/// How many distinct tags a token floor has: a store draws one at random.
pub const FLOOR_TAGS: u64 = 1000;

/// Takes a name that is absent, or whose lease has ended, in one statement; returns the new
/// token, or no row when the lease is live (held by anyone, the caller included).
pub const ACQUIRE: &str = "INSERT INTO {table} (name, owner, fence, expires_at, data)
VALUES (?1, ?2, {next_token?5}, {now} + ?3, ?4)
ON CONFLICT (name) DO UPDATE SET
    owner = excluded.owner, fence = excluded.fence,
    expires_at = excluded.expires_at, data = excluded.data
WHERE {table}.expires_at <= {now}
RETURNING fence";

/// Sets the remaining lease of a live lease its owner holds.
pub const EXTEND: &str = "UPDATE {table} SET expires_at = {now} + ?3
WHERE name = ?1 AND owner = ?2 AND expires_at > {now}";

/// Head of a batched extension: followed by one [`EXTEND_MANY_ROW`] per item joined by
/// commas, then [`EXTEND_MANY_TAIL`]. Each extended lease comes back as (name, owner), so
/// every item's outcome is exact.
pub const EXTEND_MANY_HEAD: &str = "WITH items(name, owner, ttl) AS (VALUES ";
/// One item of a batched extension: name, owner, ttl in ms.
pub const EXTEND_MANY_ROW: &str = "(?, ?, ?)";
/// Tail of a batched extension.
pub const EXTEND_MANY_TAIL: &str = ")
UPDATE {table} SET expires_at = {now} + items.ttl FROM items
WHERE {table}.name = items.name AND {table}.owner = items.owner AND {table}.expires_at > {now}
RETURNING {table}.name, {table}.owner";

/// The releasing owner's row goes (live or already expired: either way nobody else holds
/// it). Returns whether it was live, and the addresses of the processes waiting for the name.
pub const RELEASE: &str = "DELETE FROM {table} WHERE name = ?1 AND owner = ?2
RETURNING expires_at > {now},
    (SELECT group_concat(addr, char(10)) FROM {waiters} WHERE {waiters}.name = ?1)";

/// An operator frees a name whoever holds it; as [`RELEASE`].
pub const FORCE_RELEASE: &str = "DELETE FROM {table} WHERE name = ?1
RETURNING expires_at > {now},
    (SELECT group_concat(addr, char(10)) FROM {waiters} WHERE {waiters}.name = ?1)";

/// Hands a live lease its owner holds straight to the next owner, with a new token.
pub const HANDOFF: &str = "UPDATE {table}
SET owner = ?3, data = ?4, fence = {next_token?6}, expires_at = {now} + ?5
WHERE name = ?1 AND owner = ?2 AND expires_at > {now}
RETURNING fence";

/// A live lease: owner, token, remaining ms, data.
pub const INSPECT: &str = "SELECT owner, fence, expires_at - {now}, data FROM {table}
WHERE name = ?1 AND expires_at > {now}";

/// Live leases whose names lie in [?1, ?2) (the byte range of a prefix; ?2 NULL: no upper
/// bound), read along the primary key, at most ?3.
pub const LIST: &str = "SELECT name, owner, fence, expires_at - {now}, data FROM {table}
WHERE name >= ?1 AND (?2 IS NULL OR name < ?2) AND expires_at > {now}
ORDER BY name LIMIT ?3";

/// Deletes up to 1 000 rows whose lease has ended (their holders crashed or let them lapse).
/// Safe for fencing: tokens come from the counter row, not from the rows.
pub const PURGE: &str = "DELETE FROM {table} WHERE name IN
    (SELECT name FROM {table} WHERE expires_at <= {now} LIMIT 1000)";

/// Takes permits of semaphore ?1 for owner ?2 by the rules of `store::permits`, in one
/// statement: ?3 permits of ?4, a lease of ?5 ms, a queued place kept ?6 ms (0: a try).
///
/// `live` is the semaphore's rows whose lease or place has not lapsed (lapsed ones count as
/// gone, and the triggers delete them). An owner holding permits gets its row back with its
/// token and a renewed lease. Otherwise the request is granted iff the permits held, plus
/// those of the live queued requests placed before the caller's (all of them if it has no
/// place), plus its own fit in the limit: its row becomes a holder's with a new token. A
/// refused request with ?6 > 0 keeps its place, or takes one after the last, for ?6 ms; with
/// ?6 = 0 nothing is written. Returns the token (NULL: queued), or no row (refused try).
pub const ACQUIRE_PERMITS: &str = "WITH live AS (
    SELECT owner, permits, fence, place FROM {permits}
    WHERE name = ?1 AND expires_at > {now}
), state AS (
    SELECT
        (SELECT fence FROM live WHERE owner = ?2 AND place IS NULL) AS held,
        (SELECT permits FROM live WHERE owner = ?2 AND place IS NULL) AS held_permits,
        (SELECT place FROM live WHERE owner = ?2 AND place IS NOT NULL) AS queued_at,
        (SELECT coalesce(sum(permits), 0) FROM live WHERE place IS NULL) AS taken,
        (SELECT coalesce(max(place), 0) FROM live) AS last_place
), decided AS (
    SELECT held, held_permits, queued_at, last_place,
        held IS NOT NULL OR taken + ?3 + (
            SELECT coalesce(sum(permits), 0) FROM live
            WHERE place < coalesce(state.queued_at, state.last_place + 1)
        ) <= ?4 AS granted
    FROM state
)
INSERT INTO {permits} (name, owner, permits, fence, place, expires_at)
SELECT ?1, ?2, coalesce(held_permits, ?3),
    CASE WHEN held IS NOT NULL THEN held WHEN granted THEN {next_token?7} END,
    CASE WHEN granted THEN NULL ELSE coalesce(queued_at, last_place + 1) END,
    {now} + CASE WHEN granted THEN ?5 ELSE ?6 END
FROM decided WHERE granted OR ?6 > 0
ON CONFLICT (name, owner) DO UPDATE SET
    permits = excluded.permits, fence = excluded.fence,
    place = excluded.place, expires_at = excluded.expires_at
RETURNING fence";

/// Sets the remaining lease of a holder's live permits (not a queued place).
pub const EXTEND_PERMITS: &str = "UPDATE {permits} SET expires_at = {now} + ?3
WHERE name = ?1 AND owner = ?2 AND place IS NULL AND expires_at > {now}";

/// Tail of a batched extension of permits, after [`EXTEND_MANY_HEAD`] and the items.
pub const EXTEND_PERMITS_MANY_TAIL: &str = ")
UPDATE {permits} SET expires_at = {now} + items.ttl FROM items
WHERE {permits}.name = items.name AND {permits}.owner = items.owner
    AND {permits}.place IS NULL AND {permits}.expires_at > {now}
RETURNING {permits}.name, {permits}.owner";

/// Deletes the owner's row of semaphore ?1 (its permits or its queued place, live or not) and
/// the semaphore's lapsed rows. Returns one row per deleted row: whether it was the owner's,
/// whether it was the owner's live permits, and, for the owner's, the addresses of the
/// processes watching ?3 (the semaphore's watch key).
pub const RELEASE_PERMITS: &str = "DELETE FROM {permits}
WHERE name = ?1 AND (owner = ?2 OR expires_at <= {now})
RETURNING owner = ?2, owner = ?2 AND place IS NULL AND expires_at > {now},
    CASE WHEN owner = ?2 THEN
        (SELECT group_concat(addr, char(10)) FROM {waiters} WHERE {waiters}.name = ?3)
    END";

/// The live holders of a semaphore: owner, permits, token, remaining ms.
pub const PERMIT_HOLDERS: &str = "SELECT owner, permits, fence, expires_at - {now} FROM {permits}
WHERE name = ?1 AND place IS NULL AND expires_at > {now}";

/// Deletes up to 1 000 lapsed rows of semaphores nobody touched since (holders that crashed,
/// waiters that left without giving up their place).
pub const PURGE_PERMITS: &str = "DELETE FROM {permits} WHERE (name, owner) IN
    (SELECT name, owner FROM {permits} WHERE expires_at <= {now} LIMIT 1000)";

/// Registers this process as waiting for a name.
pub const WATCH: &str = "INSERT OR IGNORE INTO {waiters} (name, addr) VALUES (?1, ?2)";
/// Unregisters this process for a name.
pub const UNWATCH: &str = "DELETE FROM {waiters} WHERE name = ?1 AND addr = ?2";
/// Forgets every registration of an address (a process that is gone, or this one closing).
pub const FORGET: &str = "DELETE FROM {waiters} WHERE addr = ?1";
/// Every registered address (to find those of processes that are gone).
pub const ADDRESSES: &str = "SELECT DISTINCT addr FROM {waiters}";

/// The live locks of a file (read from one found replaced): name, owner, remaining ms.
pub const LIVE_LOCKS: &str = "SELECT name, owner, expires_at - {now} FROM {table}
WHERE expires_at > {now}";

/// The live permits of semaphore holders (not queued places): name, owner, remaining ms.
pub const LIVE_PERMITS: &str = "SELECT name, owner, expires_at - {now} FROM {permits}
WHERE place IS NULL AND expires_at > {now}";

/// The fencing counter.
pub const COUNTER: &str = "SELECT value FROM {fence} WHERE id = 0";

/// Raises the fencing counter to ?1 (a replaced file's), so tokens continue above it.
pub const CARRY: &str = "UPDATE {fence} SET value = ?1 WHERE id = 0 AND value < ?1";

/// Statement texts for one table.
#[derive(Debug)]
pub struct Statements {
    /// [`SCHEMA`].
    pub schema: Vec<String>,
    /// [`ACQUIRE`].
    pub acquire: String,
    /// [`EXTEND`].
    pub extend: String,
    /// `extend_many[i]`: a batch of `2 << i` items (batches are padded to these sizes, so a
    /// few texts, each prepared once per connection, serve every batch size).
    pub extend_many: Vec<String>,
    /// [`RELEASE`].
    pub release: String,
    /// [`FORCE_RELEASE`].
    pub force_release: String,
    /// [`HANDOFF`].
    pub handoff: String,
    /// [`INSPECT`].
    pub inspect: String,
    /// [`LIST`].
    pub list: String,
    /// [`PURGE`].
    pub purge: String,
    /// [`ACQUIRE_PERMITS`].
    pub acquire_permits: String,
    /// [`EXTEND_PERMITS`].
    pub extend_permits: String,
    /// As `extend_many`, with [`EXTEND_PERMITS_MANY_TAIL`].
    pub extend_permits_many: Vec<String>,
    /// [`RELEASE_PERMITS`].
    pub release_permits: String,
    /// [`PERMIT_HOLDERS`].
    pub permit_holders: String,
    /// [`PURGE_PERMITS`].
    pub purge_permits: String,
    /// [`WATCH`].
    pub watch: String,
    /// [`UNWATCH`].
    pub unwatch: String,
    /// [`FORGET`].
    pub forget: String,
    /// [`ADDRESSES`].
    pub addresses: String,
    /// [`LIVE_LOCKS`], [`LIVE_PERMITS`], [`COUNTER`] and [`CARRY`].
    pub takeover: Takeover,
}

/// Most items in one batched extension: 3 parameters each, far below SQLite's 32 766.
pub const EXTEND_BATCH_MAX: usize = 256;

impl Statements {
    /// The statements for lease table `table` (already validated: letters, digits, `_`).
    pub fn new(table: &str) -> Self {
        let sql = |template: &str| -> String {
            template
                .replace("{next_token?5}", &NEXT_TOKEN.replace("{floor}", "?5"))
                .replace("{next_token?6}", &NEXT_TOKEN.replace("{floor}", "?6"))
                .replace("{next_token?7}", &NEXT_TOKEN.replace("{floor}", "?7"))
                .replace(NOW, NOW_MS)
                .replace(FENCE, &format!("\"{table}_fence\""))
                .replace(WAITERS, &format!("\"{table}_waiters\""))
                .replace(PERMITS, &format!("\"{table}_permits\""))
                .replace(
                    "{permits_on_insert}",
                    &format!("\"{table}_permits_on_insert\""),
                )
                .replace(
                    "{permits_on_update}",
                    &format!("\"{table}_permits_on_update\""),
                )
                .replace("{trigger_insert}", &format!("\"{table}_fence_on_insert\""))
                .replace("{trigger_update}", &format!("\"{table}_fence_on_update\""))
                .replace(TABLE, &format!("\"{table}\""))
        };
        let batches = |tail: &str| -> Vec<String> {
            let mut texts = Vec::new();
            let mut size = 2;
            while size <= EXTEND_BATCH_MAX {
                let rows = vec![EXTEND_MANY_ROW; size].join(", ");
                texts.push(sql(&format!("{EXTEND_MANY_HEAD}{rows}{tail}")));
                size *= 2;
            }
            texts
        };
        Self {
            schema: SCHEMA.iter().map(|s| sql(s)).collect(),
            acquire: sql(ACQUIRE),
            extend: sql(EXTEND),
            extend_many: batches(EXTEND_MANY_TAIL),
            release: sql(RELEASE),
            force_release: sql(FORCE_RELEASE),
            handoff: sql(HANDOFF),
            inspect: sql(INSPECT),
            list: sql(LIST),
            purge: sql(PURGE),
            acquire_permits: sql(ACQUIRE_PERMITS),
            extend_permits: sql(EXTEND_PERMITS),
            extend_permits_many: batches(EXTEND_PERMITS_MANY_TAIL),
            release_permits: sql(RELEASE_PERMITS),
            permit_holders: sql(PERMIT_HOLDERS),
            purge_permits: sql(PURGE_PERMITS),
            watch: sql(WATCH),
            unwatch: sql(UNWATCH),
            forget: sql(FORGET),
            addresses: sql(ADDRESSES),
            takeover: Takeover {
                locks: sql(LIVE_LOCKS),
                permits: sql(LIVE_PERMITS),
                counter: sql(COUNTER),
                carry: sql(CARRY),
            },
        }
    }
}
