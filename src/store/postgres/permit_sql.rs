//! The statements of the PostgreSQL store's counting semaphores (docs/design.md, "PostgreSQL
//! layout"), which keep the rules of [`crate::store::permits`] on the server's clock.
//!
//! Two tables beside the lock table, created on the first semaphore operation: `{sem}`, one
//! header row per semaphore, and `{perm}`, one row per holder or queued request. Fencing
//! tokens and queue places come from the lock table's sequence `{seq}`.
//!
//! Serialization: an acquisition is one transaction that first locks the semaphore's header
//! row ([`LOCK`]) and then decides in a second statement ([`ACQUIRE`]), whose snapshot,
//! taken once the lock is held, sees every earlier acquisition and release of the semaphore
//! (a single statement could not: its snapshot would predate the wait for the lock, and miss
//! rows inserted meanwhile). Releases lock the header row too (shared) before deleting, and
//! extensions only ever update an existing row, which [`ACQUIRE`] locks before reading it.
//! Row locks are always taken header first, then holder rows in (name, owner) order, so these
//! statements never deadlock each other.
//!
//! `{sem}`, `{perm}` and `{seq}` are replaced by quoted identifiers when the store is built
//! (the table name is validated: ASCII letters, digits and underscores). Every other value is
//! a bound parameter.

use std::sync::Arc;

/// The header table's name is the lock table's with this suffix.
pub const SEM_SUFFIX: &str = "_sem";

/// The holder table's name is the lock table's with this suffix.
pub const PERM_SUFFIX: &str = "_perm";

// Creates the two tables on the first semaphore operation, under the advisory lock the lock
// table is created under (see `sql::CREATE`). The lock table and its sequence exist already.
//
// `{sem}`: `touched_at` dates the last acquisition (for `PURGE_HEADERS`); `waiter` says who
// was refused since the queue was last found empty by a grant, as `waiter` in the lock table:
// NULL nobody, a store's 16-byte id when only that store, the empty string when several.
// `{perm}`: a holder has a `token` (and no `place`); a queued request has a `place` (its turn:
// lower joined earlier) and no `token`. `expires_at` ends the lease or the queued place.
pub const CREATE: &str = "SELECT pg_advisory_xact_lock(5127, hashtext('{table}'));
CREATE TABLE IF NOT EXISTS {sem} (
    name bytea PRIMARY KEY,
    touched_at timestamptz NOT NULL,
    waiter bytea
);
CREATE TABLE IF NOT EXISTS {perm} (
    name bytea,
    owner bytea,
    permits bigint NOT NULL,
    token bigint,
    place bigint,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
)";

// Tells whether both tables exist and are readable, when creating them was refused.
pub const PROBE: &str = "SELECT 1 FROM {sem}, {perm} WHERE false";

// The first statement of an acquisition: inserts the semaphore's header row if it is absent
// and locks it until the transaction ends. `ON CONFLICT DO UPDATE` locks the existing row even
// though its `WHERE false` updates nothing, and waits for a concurrent insertion or deletion
// of the row (which `SELECT … FOR UPDATE` would miss: the row is not in its snapshot).
pub const LOCK: &str = "INSERT INTO {sem} AS s (name, touched_at) VALUES ($1, clock_timestamp())
ON CONFLICT (name) DO UPDATE SET touched_at = EXCLUDED.touched_at WHERE false";

// The second statement of an acquisition (`$1` name, `$2` owner, `$3` permits, `$4` limit,
// `$5` ttl ms, `$6` queue ttl ms, `$7` this store's id), the rules of `store::permits`:
// - `c` reads the clock once; `m` locks every row of the semaphore in owner order and reads
//   its latest version (an extension committed after the snapshot included);
// - `live` drops lapsed holders and queued places; `mine` is the caller's live row;
// - `d` decides: `own` (already a holder), `grant` (holders' permits + permits queued ahead of
//   the caller, all queued if it is not queued, + asked <= limit), `queue` (refused, keeps or
//   takes a place), `refuse` (refused, a try);
// - `v` is the caller's new row: its own token, or `nextval` for a grant (a sequence value is
//   higher than any drawn before, and grants of one semaphore are serialized by the header
//   lock, so its tokens strictly increase, across purges too), or its place, kept or drawn;
// - `gone` deletes lapsed rows (the caller's only when no row is written for it);
// - `up` writes the caller's row; `h` dates the header and records the refused store in
//   `waiter`, which a grant clears when no live request is left queued (whoever is queued still
//   waits, so it stays recorded; a refused try that did not queue and polls may then miss an
//   announcement and find out at its next poll).
// Returns the token when granted (or already held), NULL when refused.
pub const ACQUIRE: &str = r"WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now),
m AS MATERIALIZED (
    SELECT p.owner, p.permits, p.token, p.place, p.expires_at
    FROM {perm} AS p WHERE p.name = $1 ORDER BY p.owner FOR UPDATE),
live AS MATERIALIZED (SELECT m.* FROM m, c WHERE m.expires_at > c.now),
mine AS MATERIALIZED (SELECT * FROM live WHERE owner = $2),
d AS MATERIALIZED (
    SELECT CASE
        WHEN EXISTS (SELECT FROM mine WHERE token IS NOT NULL) THEN 'own'
        WHEN (SELECT coalesce(sum(permits), 0) FROM live
              WHERE token IS NOT NULL
                 OR place < coalesce((SELECT place FROM mine), 9223372036854775807))
             + $3 <= $4 THEN 'grant'
        WHEN $6 > 0 THEN 'queue'
        ELSE 'refuse' END AS what),
v AS MATERIALIZED (
    SELECT d.what,
        CASE d.what WHEN 'own' THEN (SELECT token FROM mine)
            WHEN 'grant' THEN nextval('{seq}') END AS token,
        CASE WHEN d.what = 'queue'
            THEN coalesce((SELECT place FROM mine), nextval('{seq}')) END AS place,
        CASE WHEN d.what = 'refuse' OR d.what = 'grant' THEN $3
            ELSE (SELECT permits FROM mine) END AS permits,
        c.now + CASE WHEN d.what = 'queue' THEN $6 ELSE $5 END
            * interval '1 millisecond' AS expires_at
    FROM d, c),
gone AS (
    DELETE FROM {perm} AS p USING c, v
    WHERE p.name = $1 AND p.expires_at <= c.now AND (p.owner <> $2 OR v.what = 'refuse')),
up AS (
    INSERT INTO {perm} AS p (name, owner, permits, token, place, expires_at)
    SELECT $1, $2, coalesce(v.permits, $3), v.token, v.place, v.expires_at
    FROM v WHERE v.what <> 'refuse'
    ON CONFLICT (name, owner) DO UPDATE SET permits = EXCLUDED.permits,
        token = EXCLUDED.token, place = EXCLUDED.place, expires_at = EXCLUDED.expires_at),
h AS (
    UPDATE {sem} AS s SET touched_at = c.now, waiter = CASE
        WHEN v.what IN ('own', 'grant') THEN CASE
            WHEN EXISTS (SELECT FROM live WHERE token IS NULL AND owner <> $2) THEN s.waiter END
        WHEN s.waiter IS NULL OR s.waiter = $7 THEN $7
        ELSE '\x'::bytea END
    FROM v, c WHERE s.name = $1)
SELECT v.token FROM v";

// Sets the lease of a holder's permits if it still holds them; one row updated means held.
pub const EXTEND: &str = "UPDATE {perm}
SET expires_at = clock_timestamp() + $3 * interval '1 millisecond'
WHERE name = $1 AND owner = $2 AND token IS NOT NULL AND expires_at > clock_timestamp()";

// Extends many holders in one statement, the items as three arrays, returning the (name,
// owner) of every row extended. `l` first locks the rows in (name, owner) order, the order
// `ACQUIRE` locks them in, so that a batch and an acquisition never wait for each other in a
// cycle; it is evaluated before the update touches any row (a one-time filter).
pub const EXTEND_MANY: &str = "WITH v AS MATERIALIZED (
    SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::bigint[]) AS v(name, owner, ttl)),
l AS MATERIALIZED (
    SELECT p.name FROM {perm} AS p
    WHERE (p.name, p.owner) IN (SELECT name, owner FROM v)
    ORDER BY p.name, p.owner FOR UPDATE)
UPDATE {perm} AS p SET expires_at = clock_timestamp() + v.ttl * interval '1 millisecond'
FROM v
WHERE p.name = v.name AND p.owner = v.owner AND p.token IS NOT NULL
    AND p.expires_at > clock_timestamp() AND (SELECT count(*) FROM l) >= 0
RETURNING p.name, p.owner";

// Deletes the owner's row (its permits or its queued place) and, in the same statement (so in
// the same transaction: sent if and only if the release commits), announces it with
// `pg_notify($4, hex($5))` (`$5`: `permits::watch_key(name)`) when the row was live and
// `waiter` names another store than `$3` (or several), as a lock's release does.
// `h` share-locks the header row first (a one-time filter evaluated before the delete
// touches a row): it waits for an acquisition under way, and then reads the `waiter` that
// acquisition wrote, so a store refused just before the release is announced to. No header
// (purged) is no waiter. One row: whether it held live permits, and whether it announced; no
// row: it had neither permits nor a place. Committed without waiting for the disk, as
// `sql::RELEASE`.
pub const RELEASE: &str = "WITH a AS (SELECT set_config('synchronous_commit', 'off', true)),
h AS MATERIALIZED (SELECT s.waiter FROM {sem} AS s WHERE s.name = $1 FOR SHARE),
r AS (
    DELETE FROM {perm} AS p
    WHERE p.name = $1 AND p.owner = $2 AND (SELECT count(*) FROM h) >= 0
    RETURNING p.token, p.expires_at > clock_timestamp() AS live),
o AS MATERIALIZED (
    SELECT r.token IS NOT NULL AND r.live AS held,
        r.live AND coalesce((SELECT h.waiter IS NOT NULL AND h.waiter <> $3 FROM h), false)
            AS others
    FROM r)
SELECT o.held, o.others, (CASE WHEN o.others THEN pg_notify($4, encode($5, 'hex')) END)::text
FROM o, a";

// The live holders: owner, permits, token and remaining lease in microseconds, from one clock
// reading.
pub const HOLDERS: &str = "SELECT p.owner, p.permits, p.token,
    (extract(epoch FROM p.expires_at - c.now) * 1000000)::bigint
FROM {perm} AS p, (SELECT clock_timestamp() AS now) AS c
WHERE p.name = $1 AND p.token IS NOT NULL AND p.expires_at > c.now";

// Deletes holders and queued places lapsed for longer than the purge delay (of semaphores
// nobody touched since), 1 000 at a time, skipping rows an acquisition has locked. A lapsed row
// counts for nothing, so deleting it changes no decision.
pub const PURGE_ROWS: &str = "DELETE FROM {perm} WHERE (name, owner) IN (
    SELECT name, owner FROM {perm}
    WHERE expires_at < clock_timestamp() - $1 * interval '1 millisecond'
    LIMIT 1000 FOR UPDATE SKIP LOCKED)";

// Deletes the header rows of semaphores with no row left and no acquisition for longer than
// the purge delay, skipping headers locked by an acquisition or a release. Only an acquisition
// inserts rows, and it dates the header in the same transaction: `FOR UPDATE` re-reads a
// header changed since this statement's snapshot, which then no longer matches, so a header
// is never deleted under rows its snapshot missed. Tokens come from the sequence, so a
// purged semaphore that returns still gets higher tokens.
pub const PURGE_HEADERS: &str = "DELETE FROM {sem} WHERE name IN (
    SELECT s.name FROM {sem} AS s
    WHERE s.touched_at < clock_timestamp() - $1 * interval '1 millisecond'
        AND NOT EXISTS (SELECT FROM {perm} AS p WHERE p.name = s.name)
    LIMIT 1000 FOR UPDATE OF s SKIP LOCKED)";

/// Semaphore statement texts for one table, shared with spawned tasks without copying.
pub struct PermitStatements {
    /// [`CREATE`].
    pub create: Arc<str>,
    /// [`PROBE`].
    pub probe: Arc<str>,
    /// [`LOCK`].
    pub lock: Arc<str>,
    /// [`ACQUIRE`].
    pub acquire: Arc<str>,
    /// [`EXTEND`].
    pub extend: Arc<str>,
    /// [`EXTEND_MANY`].
    pub extend_many: Arc<str>,
    /// [`RELEASE`].
    pub release: Arc<str>,
    /// [`HOLDERS`].
    pub holders: Arc<str>,
    /// [`PURGE_ROWS`] then [`PURGE_HEADERS`], in that order.
    pub purge: [Arc<str>; 2],
}

impl PermitStatements {
    /// The statements for lock table `table` (already validated): semaphores in
    /// `<table>_sem` and `<table>_perm`, tokens from `<table>_fence`.
    pub fn new(table: &str) -> Self {
        let sem = format!("\"{table}{SEM_SUFFIX}\"");
        let perm = format!("\"{table}{PERM_SUFFIX}\"");
        // `nextval` takes the sequence as a string literal holding a quoted identifier.
        let seq = format!("\"{table}_fence\"");
        let sql = |template: &str| -> Arc<str> {
            template
                .replace("{table}", table)
                .replace("{sem}", &sem)
                .replace("{perm}", &perm)
                .replace("{seq}", &seq)
                .into()
        };
        Self {
            create: sql(CREATE),
            probe: sql(PROBE),
            lock: sql(LOCK),
            acquire: sql(ACQUIRE),
            extend: sql(EXTEND),
            extend_many: sql(EXTEND_MANY),
            release: sql(RELEASE),
            holders: sql(HOLDERS),
            purge: [sql(PURGE_ROWS), sql(PURGE_HEADERS)],
        }
    }
}
