//! The operation protocol between `lib/native.js` and the addon, defined once here and read
//! by JavaScript at load time (`protocol()`), with the limits and defaults (`limits()`).
//!
//! Operations are submitted as records of numbers in one `Float64Array` per tick (the batch's
//! strings travel beside it as one text, each record giving its strings' lengths; payloads as
//! buffers); completions come back as `[request, kind, value]` triplets.

use crate::limits as defaults;
use napi_derive::napi;

/// Op code: acquire. Record: the fields of [`acquire`] in their order, the key (and an owner
/// given as a string) from the batch's text.
pub const OP_ACQUIRE: u32 = 1;
/// Op code: release held lock `id`. Record: `[op, req, id]` ([`held`]).
pub const OP_RELEASE: u32 = 2;
/// Op code: extend held lock `id`. Record: `[op, req, id, ttl]` ([`held`]).
pub const OP_EXTEND: u32 = 3;

/// Where each field of an acquire record sits. Every record starts with its op code (at 0)
/// and its request id ([`REQ`]). JavaScript writes records through these offsets, read from
/// [`protocol`] at load time: the layout is written down here only.
pub mod acquire {
    /// The lease, in ms.
    pub const TTL: usize = 2;
    /// How long to wait, in ms; < 0: forever.
    pub const WAIT: usize = 3;
    /// Most attempts; < 0: unlimited.
    pub const MAX_ATTEMPTS: usize = 4;
    /// Poll delay, in ms.
    pub const RETRY_DELAY: usize = 5;
    /// Jitter of the poll delay, 0 to 1.
    pub const JITTER: usize = 6;
    /// Heartbeat period, in ms; <= 0: no auto-extension.
    pub const EXTEND_EVERY: usize = 7;
    /// Longest hold with auto-extension, in ms; < 0: none.
    pub const MAX_HOLD: usize = 8;
    /// The `FLAG_*` constants.
    pub const FLAGS: usize = 9;
    /// Index of the payload in the submission's buffers; < 0: none.
    pub const DATA_INDEX: usize = 10;
    /// Permits of the semaphore `key` (of `LIMIT`) instead of a lock when > 0.
    pub const PERMITS: usize = 11;
    /// The semaphore's limit.
    pub const LIMIT: usize = 12;
    /// ≥ 0: the owner is the client's owner prefix followed by this number in base 36 (made
    /// natively, so the common acquisition sends one string, not two); < 0: the owner is the
    /// next string.
    pub const OWNER_SEQ: usize = 13;
    /// The key's length in UTF-16 code units (JavaScript's `key.length`): the next so many
    /// of the batch's text.
    pub const KEY_LEN: usize = 14;
    /// With `OWNER_SEQ` < 0, the owner's length in UTF-16 code units: the next so many of the
    /// batch's text after the key.
    pub const OWNER_LEN: usize = 15;
    /// Length of an acquire record.
    pub const LEN: usize = OWNER_LEN + 1;
}

/// Where the fields of release and extend records sit (after the op code and [`REQ`]).
pub mod held {
    /// The held lock's handle (the `req` of the acquisition that granted it).
    pub const ID: usize = 2;
    /// Extend only: the new lease, in ms.
    pub const TTL: usize = 3;
    /// Length of a release record.
    pub const RELEASE_LEN: usize = ID + 1;
    /// Length of an extend record.
    pub const EXTEND_LEN: usize = TTL + 1;
}

/// Where every record keeps its request id (after the op code at 0).
pub const REQ: usize = 1;

/// Acquire flag: report the end of a lease nobody extends as a loss.
pub const FLAG_WATCH_EXPIRY: u32 = 1;
/// Acquire flag: the acquisition may be cancelled by `cancel(req)`.
pub const FLAG_CANCELLABLE: u32 = 2;
/// Acquire flag: store the bare owner as the value (the redislock wire format); with
/// [`FLAG_UNFENCED`] no token is drawn either, exactly what redislock writes.
pub const FLAG_PLAIN: u32 = 4;
/// Acquire flag: no fencing token is wanted (`fencing: false`).
pub const FLAG_UNFENCED: u32 = 8;
/// Acquire flag: report each successful heartbeat extension (an `extended` completion).
pub const FLAG_REPORT_EXTENSIONS: u32 = 16;

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
    /// Length of a release record.
    pub release_len: u32,
    /// Length of an extend record.
    pub extend_len: u32,
    /// Where the fields of a record sit.
    pub fields: NativeRecordFields,
    /// Flag: report the lease's end as a loss.
    pub flag_watch_expiry: u32,
    /// Flag: cancellable through `cancel(req)`.
    pub flag_cancellable: u32,
    /// Flag: bare owner as the value.
    pub flag_plain: u32,
    /// Flag: no fencing token wanted.
    pub flag_unfenced: u32,
    /// Flag: report heartbeat extensions.
    pub flag_report_extensions: u32,
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
    /// Completion kind: a heartbeat extended held lock `req` (value unused).
    pub kind_extended: u32,
    /// Completion kind: granted, but the lock was no longer live when the record was taken
    /// (value as for `kindGranted`).
    pub kind_granted_late: u32,
    /// Why a lock was lost, by the value of a `lost` completion.
    pub lost_reasons: Vec<String>,
}

/// Offsets of the fields of the submitted records (see [`acquire`] and [`held`]).
#[napi(object)]
pub struct NativeRecordFields {
    /// Every record: the request id.
    pub req: u32,
    /// Acquire: the lease.
    pub ttl: u32,
    /// Acquire: the wait.
    pub wait: u32,
    /// Acquire: most attempts.
    pub max_attempts: u32,
    /// Acquire: poll delay.
    pub retry_delay: u32,
    /// Acquire: jitter.
    pub jitter: u32,
    /// Acquire: heartbeat period.
    pub extend_every: u32,
    /// Acquire: longest hold.
    pub max_hold: u32,
    /// Acquire: flags.
    pub flags: u32,
    /// Acquire: payload index.
    pub data_index: u32,
    /// Acquire: permits.
    pub permits: u32,
    /// Acquire: the semaphore's limit.
    pub limit: u32,
    /// Acquire: owner sequence number.
    pub owner_seq: u32,
    /// Acquire: the key's length in UTF-16 code units.
    pub key_len: u32,
    /// Acquire: the owner's length in UTF-16 code units (an owner given as a string).
    pub owner_len: u32,
    /// Release and extend: the held lock's handle.
    pub id: u32,
    /// Extend: the new lease.
    pub held_ttl: u32,
}

/// The protocol's numbers.
#[napi(catch_unwind)]
pub fn protocol() -> NativeProtocol {
    use super::completions::{Kind, LOST_REASONS};
    NativeProtocol {
        op_acquire: OP_ACQUIRE,
        op_release: OP_RELEASE,
        op_extend: OP_EXTEND,
        acquire_len: acquire::LEN as u32,
        release_len: held::RELEASE_LEN as u32,
        extend_len: held::EXTEND_LEN as u32,
        fields: NativeRecordFields {
            req: REQ as u32,
            ttl: acquire::TTL as u32,
            wait: acquire::WAIT as u32,
            max_attempts: acquire::MAX_ATTEMPTS as u32,
            retry_delay: acquire::RETRY_DELAY as u32,
            jitter: acquire::JITTER as u32,
            extend_every: acquire::EXTEND_EVERY as u32,
            max_hold: acquire::MAX_HOLD as u32,
            flags: acquire::FLAGS as u32,
            data_index: acquire::DATA_INDEX as u32,
            permits: acquire::PERMITS as u32,
            limit: acquire::LIMIT as u32,
            owner_seq: acquire::OWNER_SEQ as u32,
            key_len: acquire::KEY_LEN as u32,
            owner_len: acquire::OWNER_LEN as u32,
            id: held::ID as u32,
            held_ttl: held::TTL as u32,
        },
        flag_watch_expiry: FLAG_WATCH_EXPIRY,
        flag_cancellable: FLAG_CANCELLABLE,
        flag_plain: FLAG_PLAIN,
        flag_unfenced: FLAG_UNFENCED,
        flag_report_extensions: FLAG_REPORT_EXTENSIONS,
        kind_granted: Kind::Granted as u32,
        kind_succeeded: Kind::Succeeded as u32,
        kind_refused: Kind::Refused as u32,
        kind_failed: Kind::Failed as u32,
        kind_lost: Kind::Lost as u32,
        kind_info: Kind::Info as u32,
        kind_list: Kind::List as u32,
        kind_permit_list: Kind::PermitList as u32,
        kind_extended: Kind::Extended as u32,
        kind_granted_late: Kind::GrantedLate as u32,
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

/// A store as the registry knows it (see `src/store/registry.rs`).
#[napi(object)]
pub struct NativeStoreEntry {
    /// Its name (`redis`, `mysql`, …).
    pub name: String,
    /// The URL schemes that name it, the usual one first.
    pub schemes: Vec<String>,
    /// What its URL looks like.
    pub example: String,
    /// The schemes that take `options.tls`.
    pub tls: Vec<String>,
    /// The connect options it reads beyond the timeouts.
    pub options: Vec<String>,
}

/// The registry of stores, for the client's URL check, its messages and the CLI's help.
#[napi(catch_unwind)]
pub fn stores() -> Vec<NativeStoreEntry> {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
    crate::store::registry::STORES
        .iter()
        .map(|e| NativeStoreEntry {
            name: e.name.to_string(),
            schemes: strings(e.schemes),
            example: e.example.to_string(),
            tls: strings(e.tls),
            options: strings(e.options),
        })
        .collect()
}
