//! The pieces of etcd transactions (`/v3/kv/txn`) as the gateway's JSON: compares and
//! operations.

use super::client::b64;
use super::keys::owner_bounds;
use serde_json::{json, Value};

/// "`key` is held by `owner`": its value lies strictly between the owner's bounds.
pub fn held_by(key: &[u8], owner: &str) -> [Value; 2] {
    let (low, high) = owner_bounds(owner);
    [
        json!({"key": b64(key), "target": "VALUE", "result": "GREATER", "value": b64(&low)}),
        json!({"key": b64(key), "target": "VALUE", "result": "LESS", "value": b64(&high)}),
    ]
}

/// "`key` does not exist".
pub fn absent(key: &[u8]) -> Value {
    json!({"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"})
}

/// "`key` was created at `revision`" (and not deleted since).
pub fn created_at(key: &[u8], revision: i64) -> Value {
    json!({"key": b64(key), "target": "CREATE", "result": "EQUAL",
        "create_revision": revision.to_string()})
}

/// "`key` was last written at `revision`".
pub fn modified_at(key: &[u8], revision: i64) -> Value {
    json!({"key": b64(key), "target": "MOD", "result": "EQUAL",
        "mod_revision": revision.to_string()})
}

/// "`key` is attached to `lease`".
pub fn on_lease(key: &[u8], lease: i64) -> Value {
    json!({"key": b64(key), "target": "LEASE", "result": "EQUAL", "lease": lease.to_string()})
}

/// "No key from `key` to `end` was written after `revision`".
pub fn unchanged_since(key: &[u8], end: &[u8], revision: i64) -> Value {
    json!({"key": b64(key), "range_end": b64(end), "target": "MOD", "result": "LESS",
        "mod_revision": (revision + 1).to_string()})
}

/// Puts `value` at `key`, attached to `lease`.
pub fn put(key: &[u8], value: &[u8], lease: i64) -> Value {
    json!({"request_put": {"key": b64(key), "value": b64(value), "lease": lease.to_string()}})
}

/// Puts `value` at `key`, attached to `lease`, returning what it was.
pub fn put_prev(key: &[u8], value: &[u8], lease: i64) -> Value {
    json!({"request_put": {"key": b64(key), "value": b64(value), "lease": lease.to_string(),
        "prev_kv": true}})
}

/// Deletes `key`, returning what it was.
pub fn delete(key: &[u8]) -> Value {
    json!({"request_delete_range": {"key": b64(key), "prev_kv": true}})
}

/// Reads `key`.
pub fn range(key: &[u8]) -> Value {
    json!({"request_range": {"key": b64(key)}})
}

/// A transaction.
pub fn txn(compare: Vec<Value>, success: Vec<Value>, failure: Vec<Value>) -> Value {
    json!({"compare": compare, "success": success, "failure": failure})
}

/// Deletes every key from `key` to `end`, returning what they were.
pub fn delete_range(key: &[u8], end: &[u8]) -> Value {
    json!({"request_delete_range": {"key": b64(key), "range_end": b64(end), "prev_kv": true}})
}

/// A transaction inside a transaction's branch.
pub fn nested(compare: Vec<Value>, success: Vec<Value>) -> Value {
    json!({"request_txn": {"compare": compare, "success": success, "failure": []}})
}
