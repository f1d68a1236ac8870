//! From a `sqlite://` URL to the database file's absolute path.
//!
//! `sqlite:///absolute/path/locks.db` names an absolute path and `sqlite://relative/locks.db`
//! one relative to the process's working directory when the store is opened. The path is
//! taken literally (no percent-decoding): it is a file name, not a network address, and a
//! `%` is a valid character in one. Query parameters are refused rather than ignored, and so
//! is SQLite's `:memory:` (a private in-memory database would lock nothing across processes:
//! use `memory://`).

use crate::store::StoreError;
use std::path::PathBuf;

/// The absolute path of the database file a `sqlite://` URL names.
pub fn database_path(url: &str) -> Result<PathBuf, StoreError> {
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("sqlite") => rest,
        _ => {
            return Err(StoreError::invalid(
                "sqlite: the URL must start with sqlite://",
            ))
        }
    };
    if rest.contains('?') {
        return Err(StoreError::invalid(
            "sqlite: URL parameters are not supported (sqlite:///absolute/path or sqlite://relative/path)",
        ));
    }
    if rest.is_empty() || rest.ends_with('/') {
        return Err(StoreError::invalid(
            "sqlite: the URL must name a file: sqlite:///absolute/path/locks.db or sqlite://relative/locks.db",
        ));
    }
    if rest == ":memory:" || rest.starts_with("file:") {
        return Err(StoreError::invalid(
            "sqlite: in-memory and URI file names are not supported (use memory:// for locks within one process)",
        ));
    }
    // `sqlite:///C:/dir/locks.db` on Windows: the drive follows the third slash.
    #[cfg(windows)]
    let rest = match rest.as_bytes() {
        [b'/', drive, b':', ..] if drive.is_ascii_alphabetic() => &rest[1..],
        _ => rest,
    };
    std::path::absolute(rest).map_err(|e| {
        StoreError::invalid(format!(
            "sqlite: cannot resolve the path {rest:?} against the working directory: {e}"
        ))
    })
}
