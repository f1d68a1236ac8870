//! What every dialect reads back from its lease table the same way: a lease's columns as a
//! [`LockInfo`], a listed row as a [`HeldLock`], and the name range a listing's prefix covers.

use super::errors::db_error;
use super::Dialect;
use crate::store::{HeldLock, LockInfo, StoreResult};
use sqlx::{ColumnIndex, Decode, Row, Type};

/// The unit a dialect's statements report a lease's remaining time in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remaining {
    /// Microseconds, rounded up here to whole milliseconds (MySQL, PostgreSQL).
    Micros,
    /// Milliseconds (SQLite).
    Millis,
}

/// A dialect's row, read as the lease table's columns. A dialect implements it for its row
/// type with its token type and time unit; the reading is written here once.
pub trait LeaseRow: Row
where
    usize: ColumnIndex<Self>,
    Vec<u8>: for<'r> Decode<'r, Self::Database> + Type<Self::Database>,
    i64: for<'r> Decode<'r, Self::Database> + Type<Self::Database>,
{
    /// The dialect whose row it is (its name in errors).
    type Dialect: Dialect;

    /// The dialect's integer type for fencing tokens.
    type Token: TryInto<u64> + for<'r> Decode<'r, Self::Database> + Type<Self::Database>;

    /// The unit its statements report remaining time in.
    const REMAINING: Remaining;

    /// The lease in columns `at..at + 4`: owner, fencing token, remaining time, payload.
    fn lease(&self, at: usize) -> Result<LockInfo, sqlx::Error> {
        let owner: Vec<u8> = self.try_get(at)?;
        let fence: Self::Token = self.try_get(at + 1)?;
        let remaining: i64 = self.try_get(at + 2)?;
        let data: Option<Vec<u8>> = self.try_get(at + 3)?;
        Ok(LockInfo {
            // Owners are only ever written from `&str`, so this never replaces anything.
            owner: String::from_utf8_lossy(&owner).into_owned(),
            fencing_token: fence.try_into().unwrap_or(0),
            remaining_ms: match Self::REMAINING {
                Remaining::Micros => (remaining + 999) / 1000,
                Remaining::Millis => remaining,
            },
            data,
        })
    }

    /// A listed lock: its name in column 0, its lease in the four after it.
    fn held(&self) -> Result<HeldLock, sqlx::Error> {
        let name: Vec<u8> = self.try_get(0)?;
        Ok(HeldLock {
            key: String::from_utf8_lossy(&name).into_owned(),
            info: self.lease(1)?,
        })
    }

    /// What `inspect` read: the lease of its row, if any; a row that does not decode fails
    /// `inspect`.
    fn inspected(row: Option<Self>) -> StoreResult<Option<LockInfo>>
    where
        Self: Sized,
    {
        row.map(|row| row.lease(0))
            .transpose()
            .map_err(|e| db_error::<Self::Dialect>("inspect", e))
    }

    /// What `list` read: a held lock per row; a row that does not decode fails `list`.
    fn listed(rows: &[Self]) -> StoreResult<Vec<HeldLock>>
    where
        Self: Sized,
    {
        rows.iter()
            .map(Self::held)
            .collect::<Result<_, _>>()
            .map_err(|e| db_error::<Self::Dialect>("list", e))
    }
}

/// The first byte string after every string that starts with `prefix`, or `None` when there
/// is none (empty, or all `0xFF`): the prefix with trailing `0xFF` bytes dropped and its last
/// byte raised by one. A listing reads the names in `prefix..prefix_end(prefix)`, a range
/// of the primary key.
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn a_prefix_ends_where_its_last_byte_below_0xff_is_raised() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }
}
