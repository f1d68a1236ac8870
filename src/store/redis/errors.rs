//! redis-rs's errors as the store's kinds, mapped once from redis-rs's own classification.

use super::socket;
use crate::store::{ErrorKind, StoreError};
use redis::RedisError;

/// The kind of a redis-rs error, from redis-rs's own predicates.
pub(super) fn kind_of(e: &RedisError) -> ErrorKind {
    if e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
    {
        ErrorKind::Auth
    } else if e.code() == Some("WRONGTYPE") {
        ErrorKind::WrongType
    } else if socket::is_no_such_database(e) {
        ErrorKind::NoDatabase
    } else if socket::is_not_redis(e) || undecodable(e) {
        ErrorKind::Protocol
    } else if e.is_timeout() {
        ErrorKind::Timeout
    } else if e.is_connection_refusal() || e.is_connection_dropped() || e.is_io_error() {
        ErrorKind::Unreachable
    } else if matches!(e.kind(), redis::ErrorKind::Server(_)) {
        ErrorKind::Server
    } else if matches!(e.kind(), redis::ErrorKind::Parse) {
        ErrorKind::Internal
    } else {
        // A refused TLS handshake, a client-side protocol error: the store cannot be used,
        // as if it could not be reached.
        ErrorKind::Unreachable
    }
}

/// A redis-rs error as the store reports it, in words: redis-rs's own text of an error it
/// made adds the name of its kind (`the server refused the login - AuthenticationFailed`),
/// which is left out.
pub(super) fn store_err(e: RedisError) -> StoreError {
    StoreError::new(kind_of(&e), words(&e))
}

/// Whether `e` is redis-rs's own failure to decode the server's bytes as replies (on the
/// connections it makes: `rediss://`, Cluster), which its parser describes as
/// `Parse error at <offset>` and the bytes it met; a reply of an unexpected type is not one.
fn undecodable(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Parse
        && e.detail().is_some_and(|d| d.starts_with("Parse error at"))
}

/// `e`'s text without redis-rs's name of its kind (or, for bytes that are no reply, the
/// parser's account of them).
fn words(e: &RedisError) -> String {
    if undecodable(e) {
        return "the server does not speak the Redis protocol; is the URL's port that of a Redis \
                server?"
            .to_string();
    }
    let text = e.to_string();
    let name = format!(" - {:?}", e.kind());
    match text.split_once(&name) {
        Some((before, after)) => format!("{before}{after}"),
        None => text,
    }
}

/// The error of a call on a closed store.
pub(super) fn closed() -> StoreError {
    StoreError::closed("the connection has been closed")
}
