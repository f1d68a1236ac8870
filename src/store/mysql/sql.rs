//! The MySQL store's statement texts, one set per lease table.

use super::extend::EXTEND_BATCH_MAX;
use std::sync::Arc;

// Placeholder substituted with the validated, backtick-quoted table name when the store is built.
pub(super) const TABLE: &str = "{table}";

// Creates the lease table on first use. `name` and `owner` are binary so comparisons are
// byte-exact whatever the server's default collation. A free row keeps `fence` until it is
// purged (see `SQL_PURGE`), and has `expires_at` at the moment it was freed (see
// `SQL_RELEASE`), which lets the statements below decide "free or expired" from
// `expires_at` alone.
pub(super) const SQL_CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS {table} (
    name VARBINARY(1024) NOT NULL,
    owner VARBINARY(255) NULL,
    fence BIGINT UNSIGNED NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    data LONGBLOB NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB";

// Tells whether the lease table exists and is readable, when creating it was refused.
pub(super) const SQL_TABLE_PROBE: &str = "SELECT 1 FROM {table} WHERE 1 = 0";

// Takes a lock that is absent, free or expired, and reports the new fencing token through the
// OK packet's last-insert-id, all in one autocommit statement:
// - absent row: the VALUES row is inserted with the server's clock in microseconds since the
//   epoch as its token (the server reports the argument of the last `LAST_INSERT_ID(expr)`
//   call of a statement). A name's row is only purged long after its last token was issued,
//   and a row's token grows by one per acquisition, far slower than a microsecond clock, so
//   a name that comes back after its row was purged still gets a higher token (see
//   `SQL_PURGE` for the one assumption: the server clock never steps back by more than the
//   purge delay).
// - existing row: the VALUES row is still evaluated (so `LAST_INSERT_ID(clock)` ran), then the
//   UPDATE list runs under the row lock. Its first assignment always calls `LAST_INSERT_ID`
//   again, overriding that value: with `fence + 1` when the lease is free or expired, with 0
//   when it is held. The caller reads 0 as "busy"; 0 is never a token.
// The UPDATE assignments run left to right and see the values already assigned, so every one
// of them tests only `expires_at`, which is assigned last: each one sees the old expiry and
// they all take the same branch. `owner` is deliberately not tested: a release sets the epoch
// expiry (`SQL_RELEASE`), so "free" already reads as "expired". The holder itself calling
// again gets "busy" too, like Redis `SET NX`.
// `VALUES(col)` is the only way to name the inserted row that both MariaDB and MySQL 8 accept
// (MySQL deprecates it for a row alias that MariaDB lacks); binding the payload twice instead
// would halve the largest `data` that fits in `max_allowed_packet`.
pub(super) const SQL_ACQUIRE: &str = "INSERT INTO {table} (name, owner, fence, expires_at, data)
VALUES (?, ?, LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))),
        UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?)
ON DUPLICATE KEY UPDATE
    fence = IF(expires_at <= UTC_TIMESTAMP(6), LAST_INSERT_ID(fence + 1), fence + LAST_INSERT_ID(0)),
    owner = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(owner), owner),
    data = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(data), data),
    expires_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(expires_at), expires_at)";

// Extends a lease its owner still holds. The driver sets CLIENT_FOUND_ROWS, so the affected
// count is the matched count: 1 even if the new expiry equals the old one.
pub(super) const SQL_EXTEND: &str = "UPDATE {table}
SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)";

// Extends many leases in one statement, hence one commit (one log flush) for a whole batch of
// heartbeats. It is followed by `SQL_EXTEND_MANY_ARM` once per item, `SQL_EXTEND_MANY_MIDDLE`,
// one `SQL_EXTEND_MANY_PAIR` per item joined by commas, and `SQL_EXTEND_MANY_TAIL`.
pub(super) const SQL_EXTEND_MANY_HEAD: &str =
    "UPDATE {table} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL (CASE name";
// One item's new lease in microseconds, chosen by name.
pub(super) const SQL_EXTEND_MANY_ARM: &str = " WHEN ? THEN ?";
// Closes the lease expression and opens the list of (name, owner) pairs to match.
pub(super) const SQL_EXTEND_MANY_MIDDLE: &str = " END) MICROSECOND WHERE (name, owner) IN (";
// One item's name and owner.
pub(super) const SQL_EXTEND_MANY_PAIR: &str = "(?, ?)";
// Only leases that have not expired may be extended.
pub(super) const SQL_EXTEND_MANY_TAIL: &str = ") AND expires_at > UTC_TIMESTAMP(6)";

// Frees a lease its owner still holds. The counter stays until the row is purged; an expiry of
// "now" marks the row free for `SQL_ACQUIRE` and dates it for `SQL_PURGE`, and the payload
// goes so that free rows stay small.
pub(super) const SQL_RELEASE: &str = "UPDATE {table}
SET owner = NULL, data = NULL, expires_at = UTC_TIMESTAMP(6)
WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)";

// Deletes the rows of names that have been free or expired for longer than the purge delay,
// so a name leaves nothing behind once it is no longer used: the table holds the names used
// within the last purge delay, however many names were ever locked. Safe for fencing because
// a purged name's last token is at most the server clock (in microseconds) when it was
// issued, and `SQL_ACQUIRE` gives a returning name the clock at least one purge delay later:
// tokens keep increasing unless the server clock steps back by more than the delay. A row
// that an acquisition takes over meanwhile is locked and re-read by this DELETE, and no longer
// matches. At most 1 000 rows per statement, so it never holds many locks for long.
pub(super) const SQL_PURGE: &str = "DELETE FROM {table}
WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
LIMIT 1000";

// Hands a lease its owner still holds straight to the next owner (a waiter in the same
// process) with a new expiry and payload. The new token travels back in the OK packet's
// last-insert-id through LAST_INSERT_ID(expr), as in `SQL_ACQUIRE`; one row matched means
// handed over.
pub(super) const SQL_HANDOFF: &str = "UPDATE {table}
SET fence = LAST_INSERT_ID(fence + 1), owner = ?, data = ?,
    expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)";

// Reads a live lease; the remaining time is computed by the server in microseconds.
pub(super) const SQL_INSPECT: &str =
    "SELECT owner, fence, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), data
FROM {table}
WHERE name = ? AND owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)";

// An operator frees a live lease whoever holds it (as a release does).
pub(super) const SQL_FORCE_RELEASE: &str = "UPDATE {table}
SET owner = NULL, data = NULL, expires_at = UTC_TIMESTAMP(6)
WHERE name = ? AND owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)";

// Live leases whose names start with a prefix, at most `?`: the names from the prefix up to
// the end of its range (`rows::prefix_end`, bound twice; NULL: no end), a range of the
// primary key.
pub(super) const SQL_LIST: &str =
    "SELECT name, owner, fence, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), data
FROM {table}
WHERE name >= ? AND (? IS NULL OR name < ?)
    AND owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)
LIMIT ?";

// Liveness check.
pub(super) const SQL_PING: &str = "SELECT 1";

/// Statement texts for one table, shared with spawned tasks without copying.
pub(super) struct Statements {
    pub(super) create_table: Arc<str>,
    pub(super) table_probe: Arc<str>,
    pub(super) acquire: Arc<str>,
    pub(super) extend: Arc<str>,
    pub(super) release: Arc<str>,
    pub(super) handoff: Arc<str>,
    pub(super) inspect: Arc<str>,
    pub(super) purge: Arc<str>,
    pub(super) force_release: Arc<str>,
    pub(super) list: Arc<str>,
    /// `extend_many[i]` handles `2 << i` items. Batches are padded to these sizes so a few
    /// texts, each prepared once per connection, serve every batch size.
    pub(super) extend_many: Vec<Arc<str>>,
}

impl Statements {
    pub(super) fn new(quoted_table: &str) -> Self {
        let sql = |template: &str| -> Arc<str> { template.replace(TABLE, quoted_table).into() };
        let mut extend_many = Vec::new();
        let mut size = 2;
        while size <= EXTEND_BATCH_MAX {
            let mut text = SQL_EXTEND_MANY_HEAD.replace(TABLE, quoted_table);
            text.push_str(&SQL_EXTEND_MANY_ARM.repeat(size));
            text.push_str(SQL_EXTEND_MANY_MIDDLE);
            text.push_str(&vec![SQL_EXTEND_MANY_PAIR; size].join(", "));
            text.push_str(SQL_EXTEND_MANY_TAIL);
            extend_many.push(text.into());
            size *= 2;
        }
        Self {
            create_table: sql(SQL_CREATE_TABLE),
            table_probe: sql(SQL_TABLE_PROBE),
            acquire: sql(SQL_ACQUIRE),
            extend: sql(SQL_EXTEND),
            release: sql(SQL_RELEASE),
            handoff: sql(SQL_HANDOFF),
            inspect: sql(SQL_INSPECT),
            purge: sql(SQL_PURGE),
            force_release: sql(SQL_FORCE_RELEASE),
            list: sql(SQL_LIST),
            extend_many,
        }
    }
}
