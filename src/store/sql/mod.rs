//! The lease-table core shared by the SQL stores (each implements [`Dialect`]): what every
//! dialect would otherwise write again around its own SQL text. A dialect implements
//! [`Dialect`] (its name and how its server's error codes read) and gets from it the error
//! model (sqlx's classification, [`errors`]), the retry of conflicts and broken connections,
//! the checks of names, owners and leases before any I/O ([`checks`]) and the purge schedule
//! ([`purge`]). Each dialect keeps its statements (`sql.rs`) and its code mapping
//! (`errors.rs`); see docs/design.md ("The SQL core").

pub mod checks;
#[cfg(test)]
pub(crate) mod conformance;
pub mod errors;
pub mod extend;
pub mod options;
pub mod pool;
pub mod purge;
pub mod releases;
pub mod rows;
pub mod tls;

use crate::store::ErrorKind;
use sqlx::error::DatabaseError;

/// What a SQL dialect tells the core: its name and how its server's errors read. The core's
/// functions ([`errors`], [`checks`]) are generic over it, so a dialect's code writes
/// `db_error::<Mysql>(…)` and never repeats the plumbing.
pub trait Dialect {
    /// The store's name, first word of its messages (`mysql`, …).
    const NAME: &'static str;

    /// The kind of an error the server (or the database library) answered with, from the
    /// dialect's own codes (an SQLSTATE, an error number, a result code).
    fn server_kind(e: &dyn DatabaseError) -> ErrorKind;

    /// Whether the statement was rolled back whole as a deadlock victim or a serialization
    /// failure, so that sending it again is safe (in autocommit it was the transaction).
    fn is_conflict(e: &sqlx::Error) -> bool;

    /// Whether the statement read a table nobody created yet (see [`errors::read`]). No by
    /// default: a dialect whose tables exist before any read.
    fn is_missing_table(e: &sqlx::Error) -> bool {
        let _ = e;
        false
    }

    /// Whether the connection broke under the statement, so that another pooled connection
    /// may carry it (a server restart leaves every pooled connection like this).
    fn is_broken_connection(e: &sqlx::Error) -> bool {
        matches!(e, sqlx::Error::Io(_) | sqlx::Error::Protocol(_))
    }
}
