//! `NativeClient`: one JavaScript client object's session.

use super::completions::{Completions, DrainFn, Kind};
use crate::core::error::LockError;
use crate::core::options::{AcquireSpec, AutoExtend};
use crate::core::session::Session;
use crate::core::url::ConnectOptions;
use napi::bindgen_prelude::*;
use napi_derive::napi;
use std::sync::Arc;
use std::time::Duration;

/// Connection settings of a native client. Validated by `index.js`.
#[napi(object, js_name = "NativeConnectOptions")]
pub struct JsConnectOptions {
    /// Bound on opening a connection, in ms. Default 5 000.
    pub connect_timeout: Option<u32>,
    /// Bound on one command's reply, in ms (Redis). Default 5 000.
    pub response_timeout: Option<u32>,
    /// Lease table (MySQL). Default `deadbolt_locks`.
    pub table: Option<String>,
    /// Connection pool size (MySQL). Default 10.
    pub pool_size: Option<u32>,
}

impl From<JsConnectOptions> for ConnectOptions {
    fn from(o: JsConnectOptions) -> Self {
        let d = ConnectOptions::default();
        ConnectOptions {
            connect_timeout_ms: o.connect_timeout.map_or(d.connect_timeout_ms, u64::from),
            response_timeout_ms: o.response_timeout.map_or(d.response_timeout_ms, u64::from),
            table: o.table.unwrap_or(d.table),
            pool_size: o.pool_size.unwrap_or(d.pool_size),
        }
    }
}

/// A batch of completions: `records` holds `[requestId, kind, value]` triplets.
#[napi(object, js_name = "NativeBatch")]
pub struct JsBatch {
    /// Triplets `[requestId, kind, value]`. Kinds: 0 granted (value = fencing token),
    /// 1 true, 2 false/busy, 3 error (value = index in `errors`), 4 lost (value = reason:
    /// 0 not-owned, 1 expired, 2 unreachable, 3 max-hold), 5 info (value = index in `infos`).
    pub records: Float64Array,
    /// `[code, message]` pairs of failed requests.
    pub errors: Vec<Vec<String>>,
    /// Lock infos returned by `inspect`.
    pub infos: Vec<JsLockInfo>,
}

/// Who holds a lock, as `inspect` reads it.
#[napi(object, js_name = "NativeLockInfo")]
pub struct JsLockInfo {
    /// Owner token of the holder.
    pub owner: String,
    /// Latest fencing token issued for the key.
    pub fencing_token: BigInt,
    /// Remaining lease in ms by the store's clock (-1: no expiry).
    pub remaining_ms: i64,
    /// Stored payload, if any.
    pub data: Option<Buffer>,
}

/// One client's connection to a store; used through `index.js`, never directly.
#[napi]
pub struct NativeClient {
    session: Arc<Session>,
    completions: Arc<Completions>,
}

fn ms(v: f64) -> Duration {
    Duration::from_secs_f64(v.max(0.0) / 1000.0)
}

#[napi]
impl NativeClient {
    /// Opens a client for `url`; `drain` is called (with no arguments) whenever completions
    /// are waiting to be taken. No I/O happens here.
    #[napi(constructor)]
    pub fn new(
        url: String,
        options: Option<JsConnectOptions>,
        drain: Function<(), ()>,
    ) -> Result<Self> {
        let drain: DrainFn = drain
            .build_threadsafe_function::<()>()
            .weak::<true>()
            .callee_handled::<false>()
            .build_callback(|_| Ok(()))?;
        let completions = Arc::new(Completions::new(drain));
        let opts: ConnectOptions = options.map(Into::into).unwrap_or_default();
        let sink = completions.clone();
        let session =
            napi::bindgen_prelude::within_runtime_if_available(|| Session::open(&url, &opts, sink))
                .map_err(|e| Error::new(Status::InvalidArg, format!("{}: {e}", e.code())))?;
        Ok(NativeClient {
            session,
            completions,
        })
    }

    /// Starts acquiring `key` for `owner` as request `req` (which becomes the lock's handle).
    /// `wait` < 0: forever; `maxAttempts` < 0: unlimited; `extendEvery` <= 0: no
    /// auto-extension; `maxHold` < 0: none; `cancellable`: whether `cancel(req)` may stop it.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &self,
        req: f64,
        key: String,
        owner: String,
        ttl: f64,
        wait: f64,
        max_attempts: f64,
        retry_delay: f64,
        jitter: f64,
        data: Option<Buffer>,
        extend_every: f64,
        max_hold: f64,
        watch_expiry: bool,
        cancellable: bool,
    ) {
        let spec = AcquireSpec {
            key,
            owner,
            ttl_ms: ttl as u64,
            wait: (wait >= 0.0).then(|| ms(wait)),
            max_attempts: (max_attempts >= 0.0).then_some(max_attempts as u64),
            retry_delay: ms(retry_delay),
            jitter: jitter.clamp(0.0, 1.0),
            data: data.map(|b| b.to_vec()),
            auto_extend: (extend_every > 0.0).then(|| AutoExtend {
                every: ms(extend_every),
                max_hold: (max_hold >= 0.0).then(|| ms(max_hold)),
            }),
            watch_expiry,
        };
        let session = self.session.clone();
        let done = self.completions.clone();
        napi::bindgen_prelude::spawn(async move {
            match session.acquire(req as u64, spec, cancellable).await {
                Ok(Some(grant)) => done.done(req, Kind::Granted, grant.token as f64),
                Ok(None) => done.done(req, Kind::False, 0.0),
                Err(e) => done.error(req, e),
            }
        });
    }

    /// Cancels pending acquisition `req` (its completion reports `ERR_LOCK_ABORTED`).
    #[napi]
    pub fn cancel(&self, req: f64) {
        self.session.cancel(req as u64);
    }

    /// Sets the remaining lease of held lock `id` to `ttl` ms; completes with true/false.
    #[napi]
    pub fn extend(&self, req: f64, id: f64, ttl: f64) {
        let session = self.session.clone();
        self.run(
            req,
            async move { session.extend(id as u64, ttl as u64).await },
        );
    }

    /// Releases held lock `id`; completes with true (released now) or false.
    #[napi]
    pub fn release(&self, req: f64, id: f64) {
        let session = self.session.clone();
        self.run(req, async move { session.release(id as u64).await });
    }

    /// Releases `key` if `owner` holds it; completes with true or false.
    #[napi]
    pub fn release_owned(&self, req: f64, key: String, owner: String) {
        let session = self.session.clone();
        self.run(
            req,
            async move { session.release_owned(&key, &owner).await },
        );
    }

    /// Reads who holds `key`; completes with an info or false.
    #[napi]
    pub fn inspect(&self, req: f64, key: String) {
        let session = self.session.clone();
        let done = self.completions.clone();
        napi::bindgen_prelude::spawn(async move {
            match session.inspect(&key).await {
                Ok(info) => done.info(req, info),
                Err(e) => done.error(req, e),
            }
        });
    }

    /// Checks that the store answers; completes with true.
    #[napi]
    pub fn ping(&self, req: f64) {
        let session = self.session.clone();
        self.run(req, async move { session.ping().await.map(|_| true) });
    }

    /// Cancels pending work, stops heartbeats and releases every held lock; completes with
    /// true.
    #[napi]
    pub fn close(&self, req: f64) {
        let session = self.session.clone();
        self.run(req, async move {
            session.close().await;
            Ok(true)
        });
    }

    /// Number of locks this client holds.
    #[napi]
    pub fn held_count(&self) -> u32 {
        self.session.held_count() as u32
    }

    /// Takes every completion queued so far.
    #[napi]
    pub fn take(&self) -> JsBatch {
        let batch = self.completions.take();
        JsBatch {
            records: Float64Array::new(batch.records),
            errors: batch
                .errors
                .into_iter()
                .map(|(code, message)| vec![code.to_string(), message])
                .collect(),
            infos: batch
                .infos
                .into_iter()
                .map(|i| JsLockInfo {
                    owner: i.owner,
                    fencing_token: BigInt::from(i.fencing_token),
                    remaining_ms: i.remaining_ms,
                    data: i.data.map(Buffer::from),
                })
                .collect(),
        }
    }

    /// Whether pending work holds the Node event loop open. `index.js` turns it on while any
    /// request is pending and off when none is, so idle clients and heartbeats never keep a
    /// process alive.
    #[napi]
    pub fn keep_alive(&self, env: Env, on: bool) -> Result<()> {
        self.completions.keep_alive(&env, on)
    }
}

impl NativeClient {
    fn run(
        &self,
        req: f64,
        fut: impl std::future::Future<Output = std::result::Result<bool, LockError>> + Send + 'static,
    ) {
        let done = self.completions.clone();
        napi::bindgen_prelude::spawn(async move {
            match fut.await {
                Ok(true) => done.done(req, Kind::True, 0.0),
                Ok(false) => done.done(req, Kind::False, 0.0),
                Err(e) => done.error(req, e),
            }
        });
    }
}
