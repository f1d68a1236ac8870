//! The statements of the PostgreSQL store, one per operation, each a single autocommit
//! statement decided by the server's clock (docs/design.md, "PostgreSQL layout").
//!
//! `{table}` and `{seq}` are replaced by the quoted table and sequence names when the store is
//! built (both validated: ASCII letters, digits and underscores only). Every other value is a
//! bound parameter.

use std::sync::Arc;

// Creates the lease table and the fencing sequence on first use, under a transaction-scoped
// advisory lock so that processes starting together do not race in the catalog (two
// concurrent `CREATE TABLE IF NOT EXISTS` can fail with a unique violation on `pg_type`).
// Sent as one simple query: one implicit transaction.
//
// `name`, `owner` and `data` are `bytea`, so comparisons are byte-exact whatever the
// database's encoding and collation, and a name may hold any byte (`text` refuses NUL).
// `waiter` says who was refused since the row was last granted: NULL nobody, a store's id
// (16 random bytes, one per store) when only that store, the empty string when several.
// The sequence keeps the default `CACHE 1`: with a per-session cache, values would no longer
// be drawn in order across sessions, and tokens would not increase.
pub const CREATE: &str = "SELECT pg_advisory_xact_lock(5127, hashtext('{table}'));
CREATE TABLE IF NOT EXISTS {table} (
    name bytea PRIMARY KEY,
    owner bytea,
    fence bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    data bytea,
    waiter bytea
);
CREATE SEQUENCE IF NOT EXISTS {seq} AS bigint";

// Tells whether the table exists and is readable, when creating it was refused (an account
// without CREATE on the schema, whose DBA created the table and the sequence).
pub const PROBE: &str = "SELECT 1 FROM {table} WHERE false";

// Takes a lock that is absent, free or expired; re-grants it to its own owner (a retry whose
// reply was lost: same token, lease set anew, as on Redis); otherwise records the refused
// store in `waiter` (only when that changes it, so a waiter polling a held lock writes
// nothing after its first refusal). All in one statement:
// - `c` reads the clock once (a volatile CTE is evaluated once, never inlined), so every
//   branch below sees the same "now" (read before any wait for the row lock, so a release
//   that commits meanwhile can date the row after it: a free row is one without an owner, or
//   whose lease ended);
// - an absent name inserts the VALUES row, whose token is `nextval` of the table's sequence;
// - an existing row is locked and updated according to its state: free or expired → new
//   owner, next token, new lease, `waiter` cleared; held by this owner → same token, new
//   lease; held by another → only `waiter`.
// A grant may clear `waiter` because whoever was refused before it either heard the release
// that freed the row (and asks again, setting `waiter` again if refused) or, after an expiry
// (never announced), asks again at its next poll.
// Returns no row (busy, nothing to write), or the row's token and whether the caller holds
// the lock now.
//
// Tokens: every grant draws `nextval`, and a sequence hands out increasing values whatever
// happens to rows, so tokens increase per name across releases, expiries, purges and
// server restarts (the sequence is WAL-logged) without depending on the server's clock.
// The VALUES row's `nextval` is drawn before the statement looks for a conflict, and may
// wait for a concurrent insertion of the same name to commit: if that row were deleted in the
// meantime, the old value would be inserted after a higher one was issued. Rows are only
// deleted long after they were last granted (see `PURGE`), far longer than a statement may
// run (`statement_timeout`), so that cannot happen.
pub const ACQUIRE: &str = "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now)
INSERT INTO {table} AS l (name, owner, fence, expires_at, data, waiter)
SELECT $1, $2, nextval('{seq}'), c.now + $3 * interval '1 millisecond', $4, NULL FROM c
ON CONFLICT (name) DO UPDATE SET
    fence = CASE WHEN l.owner IS NULL OR l.expires_at <= (SELECT now FROM c)
        THEN nextval('{seq}') ELSE l.fence END,
    owner = CASE WHEN l.owner IS NULL OR l.expires_at <= (SELECT now FROM c) OR l.owner = EXCLUDED.owner
        THEN EXCLUDED.owner ELSE l.owner END,
    expires_at = CASE WHEN l.owner IS NULL OR l.expires_at <= (SELECT now FROM c) OR l.owner = EXCLUDED.owner
        THEN EXCLUDED.expires_at ELSE l.expires_at END,
    data = CASE WHEN l.owner IS NULL OR l.expires_at <= (SELECT now FROM c) OR l.owner = EXCLUDED.owner
        THEN EXCLUDED.data ELSE l.data END,
    waiter = CASE
        WHEN l.owner IS NULL OR l.expires_at <= (SELECT now FROM c) THEN NULL
        WHEN l.owner = EXCLUDED.owner OR l.waiter = $5 THEN l.waiter
        WHEN l.waiter IS NULL THEN $5
        ELSE '\\x'::bytea END
WHERE l.owner IS NULL OR l.expires_at <= (SELECT now FROM c) OR l.owner = EXCLUDED.owner
    OR l.waiter IS NULL OR (l.waiter <> $5 AND l.waiter <> '\\x'::bytea)
RETURNING fence, owner = $2";

// Extends a lease its owner still holds; one row updated means owned.
pub const EXTEND: &str = "UPDATE {table}
SET expires_at = clock_timestamp() + $3 * interval '1 millisecond'
WHERE name = $1 AND owner = $2 AND expires_at > clock_timestamp()";

// Extends many leases in one statement (one round trip, one commit): the items travel as
// three arrays. Returns the (name, owner) of every row extended, so each item's outcome is
// exact, duplicates included.
pub const EXTEND_MANY: &str = "UPDATE {table} AS l
SET expires_at = clock_timestamp() + v.ttl * interval '1 millisecond'
FROM unnest($1::bytea[], $2::bytea[], $3::bigint[]) AS v(name, owner, ttl)
WHERE l.name = v.name AND l.owner = v.owner AND l.expires_at > clock_timestamp()
RETURNING l.name, l.owner";

// Frees a lease its owner still holds and, in the same statement (so in the same
// transaction: sent if and only if the release commits), announces it with `pg_notify` when
// another store was refused since the last announcement. The payload is the name in hex:
// exactly the name, whatever bytes it holds. The row stays, free, with its `waiter`, so that
// the next grant clears it; `expires_at` = now marks it free and dates it for `PURGE`.
// One row: released, and whether others wait; no row: not owned.
//
// The commit does not wait for the disk (`synchronous_commit` off for this transaction, set
// by `a`): a release lost in a server crash only leaves the lock looking held until its lease
// ends, and whoever takes the lock after the release commits synchronously, which flushes
// the write-ahead log up to and past the release. It halves the disk flushes of an
// acquire-release pair.
pub const RELEASE: &str = "WITH a AS (SELECT set_config('synchronous_commit', 'off', true)),
r AS (
    UPDATE {table} SET owner = NULL, data = NULL, expires_at = clock_timestamp()
    WHERE name = $1 AND owner = $2 AND expires_at > clock_timestamp()
    RETURNING waiter IS NOT NULL AND waiter <> $3 AS others
)
SELECT others, (CASE WHEN others THEN pg_notify($4, encode($1, 'hex')) END)::text FROM r, a";

// Hands a lease its owner still holds straight to the next owner (a waiter in the same
// process) with the next token and a new lease. A retry whose reply was lost finds the lock
// with the next owner already and returns its token, with the lease set anew.
pub const HANDOFF: &str = "UPDATE {table}
SET fence = CASE WHEN owner = $3 THEN fence ELSE nextval('{seq}') END,
    owner = $3, data = $5, expires_at = clock_timestamp() + $4 * interval '1 millisecond'
WHERE name = $1 AND (owner = $2 OR owner = $3) AND expires_at > clock_timestamp()
RETURNING fence";

// Reads a live lease; the remaining time is computed by the server, in microseconds, from
// the same clock reading as the liveness test.
pub const INSPECT: &str = "SELECT l.owner, l.fence,
    (extract(epoch FROM l.expires_at - c.now) * 1000000)::bigint, l.data
FROM {table} AS l, (SELECT clock_timestamp() AS now) AS c
WHERE l.name = $1 AND l.owner IS NOT NULL AND l.expires_at > c.now";

// An operator frees a live lease whoever holds it, announcing it if anyone was refused
// (committed without waiting for the disk, as `RELEASE`).
pub const FORCE_RELEASE: &str = "WITH a AS (SELECT set_config('synchronous_commit', 'off', true)),
r AS (
    UPDATE {table} SET owner = NULL, data = NULL, expires_at = clock_timestamp()
    WHERE name = $1 AND owner IS NOT NULL AND expires_at > clock_timestamp()
    RETURNING waiter IS NOT NULL AS others
)
SELECT others, (CASE WHEN others THEN pg_notify($2, encode($1, 'hex')) END)::text FROM r, a";

// Live leases whose names start with a prefix: the names from `$1` (the prefix) up to `$2`
// (the first byte string after every name with that prefix; NULL when there is none), a
// range on the primary key, so no character of the prefix is a wildcard. At most `$3`.
pub const LIST: &str = "SELECT l.name, l.owner, l.fence,
    (extract(epoch FROM l.expires_at - c.now) * 1000000)::bigint, l.data
FROM {table} AS l, (SELECT clock_timestamp() AS now) AS c
WHERE l.name >= $1 AND ($2::bytea IS NULL OR l.name < $2)
    AND l.owner IS NOT NULL AND l.expires_at > c.now
LIMIT $3";

// Deletes the rows of names free or expired for longer than the purge delay, at most 1 000 a
// statement, skipping rows another statement has locked (an acquisition taking one over).
// `FOR UPDATE` re-reads a row changed since the statement began, so a row taken over
// meanwhile no longer matches. Tokens come from the sequence, so a purged name that returns
// still gets a higher token; the delay only has to exceed the longest a statement may run
// (see `ACQUIRE`).
pub const PURGE: &str = "DELETE FROM {table} WHERE name IN (
    SELECT name FROM {table}
    WHERE expires_at < clock_timestamp() - $1 * interval '1 millisecond'
    LIMIT 1000 FOR UPDATE SKIP LOCKED)";

// Liveness check.
pub const PING: &str = "SELECT 1";

/// Statement texts for one table, shared with spawned tasks without copying.
pub struct Statements {
    /// [`CREATE`].
    pub create: Arc<str>,
    /// [`PROBE`].
    pub probe: Arc<str>,
    /// [`ACQUIRE`].
    pub acquire: Arc<str>,
    /// [`EXTEND`].
    pub extend: Arc<str>,
    /// [`EXTEND_MANY`].
    pub extend_many: Arc<str>,
    /// [`RELEASE`].
    pub release: Arc<str>,
    /// [`HANDOFF`].
    pub handoff: Arc<str>,
    /// [`INSPECT`].
    pub inspect: Arc<str>,
    /// [`FORCE_RELEASE`].
    pub force_release: Arc<str>,
    /// [`LIST`].
    pub list: Arc<str>,
    /// [`PURGE`].
    pub purge: Arc<str>,
}

impl Statements {
    /// The statements for `table` (already validated), whose sequence is `<table>_fence`.
    pub fn new(table: &str) -> Self {
        let quoted_table = format!("\"{table}\"");
        // `nextval` takes the sequence as a string literal holding a quoted identifier.
        let quoted_seq = format!("\"{table}_fence\"");
        let sql = |template: &str| -> Arc<str> {
            template
                .replace("'{table}'", &format!("'{table}'"))
                .replace("{table}", &quoted_table)
                .replace("{seq}", &quoted_seq)
                .into()
        };
        Self {
            create: sql(CREATE),
            probe: sql(PROBE),
            acquire: sql(ACQUIRE),
            extend: sql(EXTEND),
            extend_many: sql(EXTEND_MANY),
            release: sql(RELEASE),
            handoff: sql(HANDOFF),
            inspect: sql(INSPECT),
            force_release: sql(FORCE_RELEASE),
            list: sql(LIST),
            purge: sql(PURGE),
        }
    }
}
