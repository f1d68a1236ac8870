//! `NativeClient`: one JavaScript client object's session.

use super::completions::{Completions, DrainFn, Kind};
use super::direct_drain::DirectDrain;
use super::env_sessions;
use super::first_step;
use super::protocol::{
    ACQUIRE_LEN, EXTEND_LEN, FLAG_CANCELLABLE, FLAG_PLAIN, FLAG_UNFENCED, FLAG_WATCH_EXPIRY,
    OP_ACQUIRE, OP_EXTEND, OP_RELEASE, RELEASE_LEN,
};
use crate::core::clock;
use crate::core::error::LockError;
use crate::core::options::{AcquireSpec, AutoExtend, PermitSpec};
use crate::core::session::Session;
use crate::store::dynamodb::{AwsCredentials, DynamoOptions, SortKey};
use crate::store::open::ConnectOptions;
use crate::store::tls::TlsOptions;
use crate::store::topology::{SentinelTarget, Topology};
use crate::store::ValueFormat;
use napi::bindgen_prelude::*;
use napi_derive::napi;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Connection settings of a native client. Validated by `index.js`.
#[napi(object)]
pub struct NativeConnectOptions {
    /// Bound on opening a connection, in ms. Default 5 000.
    pub connect_timeout: Option<u32>,
    /// Bound on one command's reply, in ms (Redis). Default 5 000.
    pub response_timeout: Option<u32>,
    /// Lease table (MySQL). Default `deadbolt_locks`.
    pub table: Option<String>,
    /// Connection pool size (MySQL). Default 10.
    pub pool_size: Option<u32>,
    /// TLS settings (`rediss://`, `mysql://`), normalized by `lib/tls.js`.
    #[napi(ts_type = "NativeTlsOptions")]
    pub tls: Option<NativeTlsOptions>,
    /// The servers of a multi-server Redis form (`lib/topology.js`); the URL names the store
    /// when absent.
    #[napi(ts_type = "NativeTopology")]
    pub topology: Option<NativeTopology>,
    /// DynamoDB settings (`dynamodb://`), checked by `lib/dynamodb.js`.
    #[napi(ts_type = "NativeDynamoOptions")]
    pub dynamodb: Option<NativeDynamoOptions>,
}

/// A multi-server Redis form, checked by `lib/topology.js`.
#[napi(object)]
pub struct NativeTopology {
    /// `"redlock"`, `"cluster"` or `"sentinel"`.
    pub kind: String,
    /// The servers' URLs (Redlock servers, cluster seeds, sentinels).
    pub servers: Vec<String>,
    /// Sentinel: the name of the monitored primary.
    pub name: Option<String>,
    /// Sentinel: the primary's username.
    pub username: Option<String>,
    /// Sentinel: the primary's password.
    pub password: Option<String>,
    /// Sentinel: replicas that must acknowledge grants and extensions. Default 0.
    pub wait_replicas: Option<u32>,
    /// Sentinel: how long to wait for them, in ms. Default 1 000.
    pub wait_timeout: Option<u32>,
}

impl TryFrom<NativeTopology> for Topology {
    type Error = Error;

    fn try_from(t: NativeTopology) -> Result<Self> {
        match t.kind.as_str() {
            "redlock" => Ok(Topology::Redlock(t.servers)),
            "cluster" => Ok(Topology::Cluster(t.servers)),
            "sentinel" => Ok(Topology::Sentinel(SentinelTarget {
                sentinels: t.servers,
                name: t.name.unwrap_or_default(),
                username: t.username,
                password: t.password,
                wait_replicas: t.wait_replicas.unwrap_or(0),
                wait_timeout_ms: t
                    .wait_timeout
                    .map_or(crate::limits::DEFAULT_WAIT_TIMEOUT_MS, u64::from),
            })),
            other => Err(Error::new(
                Status::InvalidArg,
                format!("ERR_INVALID_ARG_VALUE: unknown topology {other:?}"),
            )),
        }
    }
}

/// DynamoDB settings of a native client.
#[napi(object)]
pub struct NativeDynamoOptions {
    /// Create the table on first use. Default false.
    pub create_table: Option<bool>,
    /// Partition key attribute. Default `key`.
    pub partition_key: Option<String>,
    /// Sort key attribute and value, if the table has one.
    #[napi(ts_type = "NativeSortKey")]
    pub sort_key: Option<NativeSortKey>,
    /// Delete items on release instead of marking them released. Default false.
    pub delete_on_release: Option<bool>,
    /// Credentials to sign with instead of the environment's.
    #[napi(ts_type = "NativeAwsCredentials")]
    pub credentials: Option<NativeAwsCredentials>,
}

/// The sort key of a DynamoDB lock table and the value this client's locks use.
#[napi(object)]
pub struct NativeSortKey {
    /// Attribute name.
    pub name: String,
    /// Value in every lock item.
    pub value: String,
}

/// Static AWS credentials.
#[napi(object)]
pub struct NativeAwsCredentials {
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
    /// Session token of temporary credentials.
    pub session_token: Option<String>,
}

impl From<NativeDynamoOptions> for DynamoOptions {
    fn from(o: NativeDynamoOptions) -> Self {
        let d = DynamoOptions::default();
        DynamoOptions {
            create_table: o.create_table.unwrap_or(d.create_table),
            partition_key: o.partition_key.unwrap_or(d.partition_key),
            sort_key: o.sort_key.map(|k| SortKey {
                name: k.name,
                value: k.value,
            }),
            delete_on_release: o.delete_on_release.unwrap_or(d.delete_on_release),
            credentials: o.credentials.map(|c| AwsCredentials {
                access_key_id: c.access_key_id,
                secret_access_key: c.secret_access_key,
                session_token: c.session_token,
            }),
        }
    }
}

/// TLS settings of a native client: PEM bytes, checked by `lib/tls.js` and again natively.
#[napi(object)]
pub struct NativeTlsOptions {
    /// CA certificates (PEM) to verify the server with instead of the public roots.
    pub ca: Option<Buffer>,
    /// Client certificate chain (PEM) for mutual TLS.
    pub cert: Option<Buffer>,
    /// Unencrypted client private key (PEM) for mutual TLS.
    pub key: Option<Buffer>,
    /// Name the server's certificate must carry (only the URL's host is supported).
    pub servername: Option<String>,
    /// Verify the server's certificate. Default true.
    pub reject_unauthorized: Option<bool>,
}

impl From<NativeTlsOptions> for TlsOptions {
    fn from(o: NativeTlsOptions) -> Self {
        TlsOptions {
            ca: o.ca.map(|b| b.to_vec()),
            cert: o.cert.map(|b| b.to_vec()),
            key: o.key.map(|b| b.to_vec()),
            servername: o.servername,
            reject_unauthorized: o.reject_unauthorized.unwrap_or(true),
        }
    }
}

impl TryFrom<NativeConnectOptions> for ConnectOptions {
    type Error = Error;

    fn try_from(o: NativeConnectOptions) -> Result<Self> {
        let d = ConnectOptions::default();
        Ok(ConnectOptions {
            connect_timeout_ms: o.connect_timeout.map_or(d.connect_timeout_ms, u64::from),
            response_timeout_ms: o.response_timeout.map_or(d.response_timeout_ms, u64::from),
            table: o.table.unwrap_or(d.table),
            pool_size: o.pool_size.unwrap_or(d.pool_size),
            tls: o.tls.map(Into::into),
            topology: o
                .topology
                .map(TryInto::try_into)
                .transpose()?
                .unwrap_or_default(),
            dynamodb: o.dynamodb.map(Into::into),
        })
    }
}

/// A batch of completions: `records` holds `[requestId, kind, value]` triplets.
#[napi(object)]
pub struct NativeBatch {
    /// Triplets `[requestId, kind, value]`. Kinds: 0 granted (value = fencing token),
    /// 1 true, 2 false/busy, 3 error (value = index in `errors`), 4 lost (value = reason:
    /// 0 not-owned, 1 expired, 2 unreachable, 3 max-hold), 5 info (value = index in `infos`).
    pub records: Float64Array,
    /// `[code, causeCode, message]` of failed requests: `causeCode` names the store error's
    /// kind (`ERR_LOCK_STORE_TIMEOUT`, …), empty when the failure is not the store's.
    pub errors: Vec<Vec<String>>,
    /// Lock infos returned by `inspect`.
    pub infos: Vec<NativeLockInfo>,
    /// Fencing tokens above 2^53: a granted record whose value is `-(i + 1)` has token
    /// `bigTokens[i]`.
    pub big_tokens: Vec<BigInt>,
    /// Held locks returned by `list`: a listing record's value indexes this.
    pub lists: Vec<Vec<NativeHeldLock>>,
    /// Holders returned by `permits`: a permit-list record's value indexes this.
    pub permit_lists: Vec<Vec<NativePermitHolder>>,
}

/// A holder of a semaphore's permits, as `permits` reads it.
#[napi(object)]
pub struct NativePermitHolder {
    /// Owner token of the acquisition.
    pub owner: String,
    /// How many permits it holds.
    pub permits: u32,
    /// Its fencing token.
    pub fencing_token: BigInt,
    /// Remaining lease in ms by the store's clock.
    pub remaining_ms: i64,
}

/// A held lock as `list` shows it.
#[napi(object)]
pub struct NativeHeldLock {
    /// Lock name.
    pub key: String,
    /// What the store knows about it.
    pub info: NativeLockInfo,
}

fn native_info(i: crate::store::LockInfo) -> NativeLockInfo {
    NativeLockInfo {
        owner: i.owner,
        fencing_token: BigInt::from(i.fencing_token),
        remaining_ms: i.remaining_ms,
        data: i.data.map(Buffer::from),
    }
}

/// Who holds a lock, as `inspect` reads it.
#[napi(object)]
pub struct NativeLockInfo {
    /// Owner token of the holder.
    pub owner: String,
    /// The holder's fencing token; 0 when the store cannot tell (a lock written in the
    /// redislock wire format).
    pub fencing_token: BigInt,
    /// Remaining lease in ms by the store's clock (-1: no expiry).
    pub remaining_ms: i64,
    /// Stored payload, if any.
    pub data: Option<Buffer>,
}

/// What a client and its store's engine currently keep (see `LockClient#stats`).
#[napi(object)]
pub struct NativeStats {
    /// Locks this client holds.
    pub held: u32,
    /// Waiters queued in this process for this store.
    pub waiting: u32,
    /// Leases the heartbeat scheduler looks after for this store.
    pub scheduled: u32,
    /// Release channels subscribed to (Redis).
    pub subscriptions: u32,
    /// Background clean-ups of grants whose reply was lost, in progress for this store.
    pub cleanups: u32,
}

/// One client's connection to a store; used through `index.js`, never directly.
#[napi]
pub struct NativeClient {
    session: Arc<Session>,
    completions: Arc<Completions>,
    /// What an owner made from an `ownerSeq` starts with (see `set_owner_prefix`).
    owner_prefix: std::sync::OnceLock<String>,
}

/// `n` in base 36 with lowercase digits, as JavaScript's `n.toString(36)` writes an integer.
fn base36(mut n: u64, out: &mut String) {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut buf = [0u8; 13];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = DIGITS[(n % 36) as usize];
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.extend(buf[i..].iter().map(|&b| char::from(b)));
}

/// Largest `ownerSeq` (JavaScript's largest exact integer).
const MAX_OWNER_SEQ: f64 = 9_007_199_254_740_991.0;

/// The owner of sequence number `seq` of a client whose owners start with `prefix`.
fn owner_of(prefix: &str, seq: u64) -> String {
    let mut owner = String::with_capacity(prefix.len() + 13);
    owner.push_str(prefix);
    base36(seq, &mut owner);
    owner
}

fn ms(v: f64) -> Duration {
    clock::from_ms(v)
}

/// A whole number of milliseconds from a JavaScript number (NaN and negatives give 0; `as`
/// saturates the rest).
fn whole_ms(v: f64) -> u64 {
    v as u64
}

#[napi]
impl NativeClient {
    /// Opens a client for `url`; `drain` is called (with no arguments) whenever completions
    /// are waiting to be taken. No I/O happens here.
    #[napi(constructor, catch_unwind)]
    pub fn new(
        env: Env,
        url: String,
        options: Option<NativeConnectOptions>,
        drain: Function<(), ()>,
    ) -> Result<Self> {
        let direct = DirectDrain::new(env.raw(), drain.raw());
        let drain: DrainFn = drain
            .build_threadsafe_function::<()>()
            .weak::<true>()
            .callee_handled::<false>()
            .build_callback(|_| Ok(()))?;
        let completions = Completions::new(drain, direct);
        let opts: ConnectOptions = options
            .map(TryInto::try_into)
            .transpose()?
            .unwrap_or_default();
        let sink = completions.clone();
        let session =
            napi::bindgen_prelude::within_runtime_if_available(|| Session::open(&url, &opts, sink))
                .map_err(|e| Error::new(Status::InvalidArg, format!("{}: {e}", e.code())))?;
        env_sessions::track(&env, &session)?;
        #[cfg(unix)]
        super::uv::install(&env)?;
        Ok(NativeClient {
            session,
            completions,
            owner_prefix: std::sync::OnceLock::new(),
        })
    }

    /// Sets what the owners of acquisitions submitted with an `ownerSeq` start with (once: the
    /// client's random prefix; a second call fails).
    #[napi(catch_unwind)]
    pub fn set_owner_prefix(&self, prefix: String) -> Result<()> {
        self.owner_prefix
            .set(prefix)
            .map_err(|_| Error::new(Status::InvalidArg, "the owner prefix is already set"))
    }

    /// Starts a batch of operations queued by `index.js` during one tick, so the batch costs
    /// one crossing and at most one wake-up of the runtime instead of one each.
    ///
    /// The first `len` numbers of `ops` (a buffer JavaScript reuses from batch to batch) are a
    /// sequence of records (see `protocol.rs`); strings and payloads come in order from
    /// `strings` and `data`:
    /// - acquire: `[OP_ACQUIRE, req, ttl, wait, maxAttempts, retryDelay, jitter, extendEvery,
    ///   maxHold, flags, dataIndex, permits, limit, ownerSeq]` with `key` from `strings`;
    ///   `req` becomes the lock's handle. `wait` < 0: forever; `maxAttempts` < 0: unlimited;
    ///   `extendEvery` <= 0: no auto-extension; `maxHold` < 0: none; `flags`: the `FLAG_*`
    ///   constants; `dataIndex` < 0: no payload; `ownerSeq` >= 0: the owner is the owner
    ///   prefix and `ownerSeq` in base 36, < 0: the next string of `strings`.
    /// - release: `[OP_RELEASE, req, id]`: succeeded (released now) or refused.
    /// - extend: `[OP_EXTEND, req, id, ttl]`: succeeded (extended) or refused.
    #[napi(catch_unwind)]
    pub fn submit(
        &self,
        ops: Float64ArraySlice,
        len: u32,
        strings: Vec<String>,
        data: Vec<Buffer>,
    ) -> Result<()> {
        let ops: &[f64] = &ops;
        let ops = ops.get(..len as usize).ok_or_else(|| {
            Error::new(Status::InvalidArg, "len beyond the ops buffer".to_string())
        })?;
        let mut strings = strings.into_iter();
        let mut batch = Vec::new();
        let mut i = 0;
        while i < ops.len() {
            let op = ops[i] as u32;
            let need = match op {
                OP_ACQUIRE => ACQUIRE_LEN,
                OP_RELEASE => RELEASE_LEN,
                OP_EXTEND => EXTEND_LEN,
                _ => return Err(Error::new(Status::InvalidArg, format!("unknown op {op}"))),
            };
            let r = ops
                .get(i..i + need)
                .ok_or_else(|| Error::new(Status::InvalidArg, "truncated op record".to_string()))?;
            batch.push(match op {
                OP_ACQUIRE => {
                    let Some(key) = strings.next() else {
                        return Err(Error::new(Status::InvalidArg, "missing key"));
                    };
                    let seq = r[13];
                    let owner = if seq >= 0.0 {
                        let Some(prefix) = self.owner_prefix.get() else {
                            return Err(Error::new(Status::InvalidArg, "no owner prefix set"));
                        };
                        if seq.fract() != 0.0 || seq > MAX_OWNER_SEQ {
                            return Err(Error::new(Status::InvalidArg, "bad ownerSeq"));
                        }
                        owner_of(prefix, seq as u64)
                    } else {
                        let Some(owner) = strings.next() else {
                            return Err(Error::new(Status::InvalidArg, "missing owner"));
                        };
                        owner
                    };
                    let payload = (r[10] >= 0.0)
                        .then(|| data.get(r[10] as usize).map(|b| b.to_vec()))
                        .flatten();
                    let flags = r[9] as u32;
                    // Permits within 1..=limit<=MAX_PERMITS, or none (a lock): the store's
                    // rules count on it, whatever JavaScript sent.
                    if r[11] >= 1.0
                        && !(r[11] <= r[12] && r[12] <= f64::from(crate::limits::MAX_PERMITS))
                    {
                        return Err(Error::new(
                            Status::InvalidArg,
                            "permits must be from 1 to the semaphore's limit".to_string(),
                        ));
                    }
                    Op::Acquire {
                        req: r[1],
                        spec: AcquireSpec {
                            key,
                            owner,
                            ttl_ms: whole_ms(r[2]),
                            wait: (r[3] >= 0.0).then(|| ms(r[3])),
                            max_attempts: (r[4] >= 0.0).then_some(r[4] as u64),
                            retry_delay: ms(r[5]),
                            jitter: r[6].clamp(0.0, 1.0),
                            data: payload,
                            auto_extend: (r[7] > 0.0).then(|| AutoExtend {
                                every: ms(r[7]),
                                max_hold: (r[8] >= 0.0).then(|| ms(r[8])),
                            }),
                            watch_expiry: flags & FLAG_WATCH_EXPIRY != 0,
                            format: if flags & FLAG_PLAIN != 0 {
                                ValueFormat::Plain
                            } else if flags & FLAG_UNFENCED != 0 {
                                ValueFormat::Unfenced
                            } else {
                                ValueFormat::Fenced
                            },
                            permits: (r[11] >= 1.0).then(|| PermitSpec {
                                count: r[11] as u32,
                                limit: r[12] as u32,
                            }),
                        },
                        // Registered now, on this thread: a cancel that follows this
                        // submission finds it even if the task has not started yet.
                        cancel: (flags & FLAG_CANCELLABLE != 0)
                            .then(|| self.session.cancellable(r[1] as u64)),
                    }
                }
                OP_RELEASE => Op::Release {
                    req: r[1],
                    id: r[2],
                },
                _ => Op::Extend {
                    req: r[1],
                    id: r[2],
                    ttl: r[3],
                },
            });
            i += need;
        }
        // Each operation takes its first step here, and the commands of the whole batch are
        // written from this thread at the end of the scope (see `first_step`, `store::flush`).
        napi::bindgen_prelude::within_runtime_if_available(|| {
            crate::store::flush::scope(|| {
                for op in batch {
                    let req = op.req();
                    let run = op.run(self.session.clone(), self.completions.clone());
                    first_step::start(Box::pin(guarded(req, self.completions.clone(), run)));
                }
            })
        });
        Ok(())
    }

    /// Cancels pending acquisition `req` (its completion reports `ERR_LOCK_ABORTED`).
    #[napi(catch_unwind)]
    pub fn cancel(&self, req: f64) {
        self.session.cancel(req as u64);
    }

    /// Whether held lock `id` may still be acted on: neither released nor lost, and its
    /// local deadline not passed, even if the loss has not reached JavaScript yet (a stalled
    /// event loop, an extension still in flight).
    #[napi(catch_unwind)]
    pub fn is_held(&self, id: f64) -> bool {
        self.session.is_held(id as u64)
    }

    /// How many ms held lock `id` may still be acted on (its local deadline, or `maxHold`,
    /// less now; fractional); 0 when it may not (the same test as `isHeld`).
    #[napi(catch_unwind)]
    pub fn valid_for(&self, id: f64) -> f64 {
        self.session
            .valid_for(id as u64)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    }

    /// Reads who holds `key`; completes with an info or false.
    #[napi(catch_unwind)]
    pub fn inspect(&self, req: f64, key: String) {
        let session = self.session.clone();
        let completions = self.completions.clone();
        let run = {
            let completions = completions.clone();
            async move {
                match session.inspect(&key).await {
                    Ok(info) => completions.info(req, info),
                    Err(e) => completions.error(req, e),
                }
            }
        };
        napi::bindgen_prelude::spawn(guarded(req, completions, run));
    }

    /// Frees `key` whoever holds it (an operator's tool); completes with true (a live lock was
    /// freed) or false.
    #[napi(catch_unwind)]
    pub fn force_release(&self, req: f64, key: String) {
        let session = self.session.clone();
        self.run(req, async move { session.force_release(&key).await });
    }

    /// Lists up to `limit` held locks whose names start with `prefix`; completes with a
    /// listing.
    #[napi(catch_unwind)]
    pub fn list(&self, req: f64, prefix: String, limit: f64) {
        let session = self.session.clone();
        let completions = self.completions.clone();
        let run = {
            let completions = completions.clone();
            async move {
                match session.list(&prefix, limit.max(0.0) as usize).await {
                    Ok(locks) => completions.list(req, locks),
                    Err(e) => completions.error(req, e),
                }
            }
        };
        napi::bindgen_prelude::spawn(guarded(req, completions, run));
    }

    /// Reads the live holders of semaphore `name`; completes with a permit list.
    #[napi(catch_unwind)]
    pub fn permits(&self, req: f64, name: String) {
        let session = self.session.clone();
        let completions = self.completions.clone();
        let run = {
            let completions = completions.clone();
            async move {
                match session.permits(&name).await {
                    Ok(holders) => completions.permit_list(req, holders),
                    Err(e) => completions.error(req, e),
                }
            }
        };
        napi::bindgen_prelude::spawn(guarded(req, completions, run));
    }

    /// Checks that the store answers; completes with true.
    #[napi(catch_unwind)]
    pub fn ping(&self, req: f64) {
        let session = self.session.clone();
        self.run(req, async move { session.ping().await.map(|_| true) });
    }

    /// Cancels pending work, stops heartbeats and releases every held lock; completes with
    /// true. Call [`NativeClient::dispose`] once that completion has been taken.
    #[napi(catch_unwind)]
    pub fn close(&self, req: f64) {
        let session = self.session.clone();
        self.run(req, async move {
            session.close().await;
            Ok(true)
        });
    }

    /// Lets go of the JavaScript wake-up function, which keeps the JavaScript client alive;
    /// for after `close` completed. Nothing is delivered afterwards.
    #[napi(catch_unwind)]
    pub fn dispose(&self) {
        self.completions.dispose();
    }

    /// Counters for diagnostics and leak checks.
    #[napi(catch_unwind)]
    pub fn stats(&self) -> NativeStats {
        let s = self.session.stats();
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        NativeStats {
            held: n(s.held),
            waiting: n(s.waiting),
            scheduled: n(s.scheduled),
            subscriptions: n(s.subscriptions),
            cleanups: n(s.cleanups),
        }
    }

    /// Number of locks this client holds.
    #[napi(catch_unwind)]
    pub fn held_count(&self) -> u32 {
        self.session.held_count() as u32
    }

    /// Copies the records of every completion queued so far into `records` (a buffer
    /// JavaScript keeps for the purpose, so a drain allocates nothing on either side) and
    /// returns how many numbers it wrote; -1 (nothing taken) when they do not fit or the batch
    /// carries more than records: `take` then takes it whole.
    #[napi(catch_unwind)]
    pub fn take_into(&self, mut records: Float64ArraySlice) -> i32 {
        // SAFETY: the slice is the JavaScript buffer's memory, and no JavaScript runs while
        // this synchronous call writes into it.
        let into = unsafe { records.as_mut() };
        match self.completions.take_into(into) {
            Some(n) => i32::try_from(n).unwrap_or(-1),
            None => -1,
        }
    }

    /// Takes every completion queued so far.
    #[napi(catch_unwind)]
    pub fn take(&self) -> NativeBatch {
        let batch = self.completions.take();
        NativeBatch {
            records: Float64Array::new(batch.records),
            errors: batch
                .errors
                .into_iter()
                .map(|(code, cause, message)| vec![code.to_string(), cause.to_string(), message])
                .collect(),
            infos: batch.infos.into_iter().map(native_info).collect(),
            lists: batch
                .lists
                .into_iter()
                .map(|list| {
                    list.into_iter()
                        .map(|l| NativeHeldLock {
                            key: l.key,
                            info: native_info(l.info),
                        })
                        .collect()
                })
                .collect(),
            permit_lists: batch
                .permit_lists
                .into_iter()
                .map(|list| {
                    list.into_iter()
                        .map(|h| NativePermitHolder {
                            owner: h.owner,
                            permits: h.permits,
                            fencing_token: BigInt::from(h.fencing_token),
                            remaining_ms: h.remaining_ms,
                        })
                        .collect()
                })
                .collect(),
            big_tokens: batch.big_tokens.into_iter().map(BigInt::from).collect(),
        }
    }

    /// Whether pending work holds the Node event loop open. `index.js` turns it on while any
    /// request is pending and off when none is, so idle clients and heartbeats never keep a
    /// process alive.
    #[napi(catch_unwind)]
    pub fn keep_alive(&self, env: Env, on: bool) -> Result<()> {
        self.completions.keep_alive(&env, on)
    }
}

/// One operation of a submitted batch.
enum Op {
    Acquire {
        req: f64,
        spec: AcquireSpec,
        cancel: Option<CancellationToken>,
    },
    Release {
        req: f64,
        id: f64,
    },
    Extend {
        req: f64,
        id: f64,
        ttl: f64,
    },
}

/// Runs an operation; if it panics (a bug), its request still completes, with an error,
/// instead of leaving the caller's promise pending forever.
async fn guarded(
    req: f64,
    completions: Arc<Completions>,
    run: impl std::future::Future<Output = ()>,
) {
    use futures_util::FutureExt;
    if let Err(panic) = std::panic::AssertUnwindSafe(run).catch_unwind().await {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        crate::debug!("an operation panicked: {what}");
        completions.error(
            req,
            LockError::Backend(crate::store::StoreError::internal(
                "internal error: the operation panicked (a bug in deadbolt, please report it)",
            )),
        );
    }
}

impl Op {
    fn req(&self) -> f64 {
        match self {
            Op::Acquire { req, .. } | Op::Release { req, .. } | Op::Extend { req, .. } => *req,
        }
    }

    async fn run(self, session: Arc<Session>, completions: Arc<Completions>) {
        match self {
            Op::Acquire { req, spec, cancel } => {
                match session.acquire(req as u64, spec, cancel).await {
                    Ok(Some(grant)) => completions.granted(req, grant.token),
                    Ok(None) => completions.record(req, Kind::Refused, 0.0),
                    Err(e) => completions.error(req, e),
                }
            }
            Op::Release { req, id } => {
                complete(&completions, req, session.release(id as u64).await)
            }
            Op::Extend { req, id, ttl } => complete(
                &completions,
                req,
                session.extend(id as u64, whole_ms(ttl)).await,
            ),
        }
    }
}

fn complete(completions: &Completions, req: f64, result: std::result::Result<bool, LockError>) {
    match result {
        Ok(true) => completions.record(req, Kind::Succeeded, 0.0),
        Ok(false) => completions.record(req, Kind::Refused, 0.0),
        Err(e) => completions.error(req, e),
    }
}

impl NativeClient {
    fn run(
        &self,
        req: f64,
        fut: impl std::future::Future<Output = std::result::Result<bool, LockError>> + Send + 'static,
    ) {
        let completions = self.completions.clone();
        let run = {
            let completions = completions.clone();
            async move { complete(&completions, req, fut.await) }
        };
        napi::bindgen_prelude::spawn(guarded(req, completions, run));
    }
}

#[cfg(test)]
mod tests {
    use super::owner_of;

    #[test]
    fn an_owner_made_from_a_sequence_number_is_what_javascript_writes() {
        // `n.toString(36)` in JavaScript, which `Lock#owner` shows.
        for (seq, js) in [
            (0, "0"),
            (35, "z"),
            (36, "10"),
            (60_466_176, "100000"),
            (9_007_199_254_740_991, "2gosa7pa2gv"),
        ] {
            assert_eq!(owner_of("p.", seq), format!("p.{js}"));
        }
    }
}
