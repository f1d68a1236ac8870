//! The operation protocol between `lib/native.js` and the addon, defined once here and read
//! by JavaScript at load time (`protocol()`), with the limits and defaults (`limits()`).
//!
//! Operations are submitted as records of numbers in one `Float64Array` per tick (strings and
//! payloads travel in order beside it); completions come back as `[request, kind, value]`
//! triplets.

use crate::limits as defaults;
use napi_derive::napi;

/// Op code: acquire. Record: `[op, req, ttl, wait, maxAttempts, retryDelay, jitter,
/// extendEvery, maxHold, flags, dataIndex, permits, limit, ownerSeq]`, the key from the
/// strings; `permits` > 0: that many permits of the semaphore `key` (of `limit`) instead of a
/// lock. `ownerSeq` ≥ 0: the owner is the client's owner prefix followed by `ownerSeq` in base
/// 36 (made here, so the common acquisition sends one string, not two); < 0: the owner is the
/// next string.
pub const OP_ACQUIRE: u32 = 1;
/// Op code: release held lock `id`. Record: `[op, req, id]`.
pub const OP_RELEASE: u32 = 2;
/// Op code: extend held lock `id`. Record: `[op, req, id, ttl]`.
pub const OP_EXTEND: u32 = 3;
/// Length of an acquire record.
pub const ACQUIRE_LEN: usize = 14;
/// Length of a release record.
pub const RELEASE_LEN: usize = 3;
/// Length of an extend record.
pub const EXTEND_LEN: usize = 4;

/// Acquire flag: report the end of a lease nobody extends as a loss.
pub const FLAG_WATCH_EXPIRY: u32 = 1;
/// Acquire flag: the acquisition may be cancelled by `cancel(req)`.
pub const FLAG_CANCELLABLE: u32 = 2;
/// Acquire flag: store the bare owner as the value (the redislock wire format).
pub const FLAG_PLAIN: u32 = 4;
/// Acquire flag: no fencing token is wanted (`fencing: false`).
pub const FLAG_UNFENCED: u32 = 8;

/// The protocol's numbers, for `lib/native.js`.
#[napi(object)]
pub struct NativeProtocol {
    /// Op code of an acquisition.
    pub op_acquire: u32,
    /// Op code of a release.
    pub op_release: u32,
    /// Op code of an extension.
    pub op_extend: u32,
    /// Length of an acquire record.
    pub acquire_len: u32,
    /// Flag: report the lease's end as a loss.
    pub flag_watch_expiry: u32,
    /// Flag: cancellable through `cancel(req)`.
    pub flag_cancellable: u32,
    /// Flag: bare owner as the value.
    pub flag_plain: u32,
    /// Flag: no fencing token wanted.
    pub flag_unfenced: u32,
    /// Completion kind: granted (value: token, or `-(i + 1)` for `bigTokens[i]`).
    pub kind_granted: u32,
    /// Completion kind: succeeded (released, extended, pinged, closed).
    pub kind_succeeded: u32,
    /// Completion kind: refused (busy, not owned, not found).
    pub kind_refused: u32,
    /// Completion kind: failed (value: index in `errors`).
    pub kind_failed: u32,
    /// Completion kind: lock `req` was lost (value: index in `lostReasons`).
    pub kind_lost: u32,
    /// Completion kind: inspect found a holder (value: index in `infos`).
    pub kind_info: u32,
    /// Completion kind: a listing (value: index in `lists`).
    pub kind_list: u32,
    /// Completion kind: a semaphore's holders (value: index in `permitLists`).
    pub kind_permit_list: u32,
    /// Why a lock was lost, by the value of a `lost` completion.
    pub lost_reasons: Vec<String>,
}

/// The protocol's numbers.
#[napi(catch_unwind)]
pub fn protocol() -> NativeProtocol {
    use super::completions::{Kind, LOST_REASONS};
    NativeProtocol {
        op_acquire: OP_ACQUIRE,
        op_release: OP_RELEASE,
        op_extend: OP_EXTEND,
        acquire_len: ACQUIRE_LEN as u32,
        flag_watch_expiry: FLAG_WATCH_EXPIRY,
        flag_cancellable: FLAG_CANCELLABLE,
        flag_plain: FLAG_PLAIN,
        flag_unfenced: FLAG_UNFENCED,
        kind_granted: Kind::Granted as u32,
        kind_succeeded: Kind::Succeeded as u32,
        kind_refused: Kind::Refused as u32,
        kind_failed: Kind::Failed as u32,
        kind_lost: Kind::Lost as u32,
        kind_info: Kind::Info as u32,
        kind_list: Kind::List as u32,
        kind_permit_list: Kind::PermitList as u32,
        lost_reasons: LOST_REASONS.iter().map(|s| s.to_string()).collect(),
    }
}

/// Limits and defaults (see `src/limits.rs`), for the JavaScript layer's checks.
#[napi(object)]
pub struct NativeLimits {
    /// Longest lock name, in UTF-8 bytes.
    pub max_key_bytes: u32,
    /// Largest payload, in bytes.
    pub max_data_bytes: u32,
    /// Longest finite duration, in ms.
    pub max_ms: f64,
    /// Default lease, in ms.
    pub default_ttl: f64,
    /// Default wait of `acquire`, in ms.
    pub default_wait: f64,
    /// Default poll delay, in ms.
    pub default_retry_delay: f64,
    /// Default jitter.
    pub default_jitter: f64,
    /// Default election lease, in ms.
    pub default_election_ttl: f64,
    /// Default connect timeout, in ms.
    pub default_connect_timeout: f64,
    /// Default response timeout, in ms.
    pub default_response_timeout: f64,
    /// Default pool size.
    pub default_pool_size: u32,
    /// Largest pool size.
    pub max_pool_size: u32,
    /// Default lease table.
    pub default_table: String,
    /// Longest table name.
    pub max_table_name_bytes: u32,
    /// Most Redis URLs a client may name (Redlock servers, cluster seeds, sentinels).
    pub max_redis_servers: u32,
    /// Most keys one `acquireAll` takes.
    pub max_keys_per_call: u32,
    /// Most permits a semaphore has (a read-write lock has this many).
    pub max_permits: u32,
}

/// The limits and defaults.
#[napi(catch_unwind)]
pub fn limits() -> NativeLimits {
    NativeLimits {
        max_key_bytes: defaults::MAX_KEY_BYTES as u32,
        max_data_bytes: defaults::MAX_DATA_BYTES as u32,
        max_ms: defaults::MAX_MS as f64,
        default_ttl: defaults::DEFAULT_TTL_MS as f64,
        default_wait: defaults::DEFAULT_WAIT_MS as f64,
        default_retry_delay: defaults::DEFAULT_RETRY_DELAY_MS as f64,
        default_jitter: defaults::DEFAULT_JITTER,
        default_election_ttl: defaults::DEFAULT_ELECTION_TTL_MS as f64,
        default_connect_timeout: defaults::DEFAULT_CONNECT_TIMEOUT_MS as f64,
        default_response_timeout: defaults::DEFAULT_RESPONSE_TIMEOUT_MS as f64,
        default_pool_size: defaults::DEFAULT_POOL_SIZE,
        max_pool_size: defaults::MAX_POOL_SIZE,
        default_table: defaults::DEFAULT_TABLE.to_string(),
        max_table_name_bytes: defaults::MAX_TABLE_NAME_BYTES as u32,
        max_redis_servers: defaults::MAX_REDIS_SERVERS as u32,
        max_keys_per_call: defaults::MAX_KEYS_PER_CALL as u32,
        max_permits: defaults::MAX_PERMITS,
    }
}
