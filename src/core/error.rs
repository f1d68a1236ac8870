//! Errors of the engine. Expected outcomes (busy, not owned) are values, never errors.

use crate::store::StoreError;
use std::fmt;

/// Why a lock operation failed.
#[derive(Debug, Clone)]
pub enum LockError {
    /// The store failed or could not be reached (`ERR_LOCK_BACKEND`); its kind says how.
    Backend(StoreError),
    /// The caller cancelled the operation (`ERR_LOCK_ABORTED`).
    Aborted,
    /// The client was closed (`ERR_LOCK_CLOSED`).
    Closed,
    /// An argument was invalid (`ERR_INVALID_ARG_VALUE`).
    Invalid(String),
}

impl LockError {
    /// The stable code the JavaScript layer maps to an error class.
    pub fn code(&self) -> &'static str {
        match self {
            LockError::Backend(_) => "ERR_LOCK_BACKEND",
            LockError::Aborted => "ERR_LOCK_ABORTED",
            LockError::Closed => "ERR_LOCK_CLOSED",
            LockError::Invalid(_) => "ERR_INVALID_ARG_VALUE",
        }
    }
}

impl LockError {
    /// The code of the underlying store failure's kind, for the JavaScript error's `cause`
    /// (empty when the error is not a store failure).
    pub fn cause_code(&self) -> &'static str {
        match self {
            LockError::Backend(e) => e.kind.code(),
            _ => "",
        }
    }
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Backend(e) => write!(f, "{e}"),
            LockError::Aborted => f.write_str("The operation was aborted"),
            LockError::Closed => f.write_str("The lock client has been closed"),
            LockError::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for LockError {}

impl From<StoreError> for LockError {
    fn from(e: StoreError) -> Self {
        LockError::Backend(e)
    }
}

/// Why a held lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// The store says the lock is gone or held by another owner.
    NotOwned,
    /// The lease's local deadline passed without a successful extension.
    Expired,
    /// The store could not be reached before the lease's local deadline.
    Unreachable,
    /// `maxHold` passed, so auto-extension stopped and the lock was given up.
    MaxHold,
    /// The store's file was deleted or replaced while the lock was held in it (SQLite).
    StoreReplaced,
}
