//! DynamoDB store, on the lock table of the Java `amazon-dynamodb-lock-client` (its item
//! layout, `item.rs`, and its algorithm), so a deadbolt process and a Java service exclude
//! each other on the same table. See docs/design.md ("DynamoDB layout").
//!
//! DynamoDB has no clock a condition can read, so a lock's lease is not decided by the
//! server: a contender takes a held lock only after it watched the lock's version stay the
//! same for a whole lease (`watch.rs`), with a write conditioned on that version. Every
//! other operation is one conditional write on the owner. Each call is one or two HTTP
//! requests (`client.rs`), bounded by `connect_timeout_ms + response_timeout_ms`.
//!
//! Counting semaphores (`permits.rs`) keep one item each in a key space of their own
//! (`permit_item.rs`), changed by a read and a write conditioned on its version, with leases
//! reckoned by watching as a lock's are.

mod checks;
mod client;
mod config;
mod credentials;
mod ini;
mod item;
mod permit_item;
mod permit_watch;
mod permits;
mod requests;
mod watch;

pub use config::{DynamoOptions, SortKey};
pub use credentials::AwsCredentials;

use crate::store::delegate::delegate;
use crate::store::{Acquisition, Batch, Call, Handoff, Release, Renewal};
use crate::store::{
    ErrorKind, ExtendItem, HeldLock, LockInfo, LockStore, OperatorTools, ReleaseOutcome,
    StoreError, StoreResult,
};
use checks::{check_data, check_key};
use client::{Api, ApiError, Failure};
use config::Location;
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};
use item::Lock;
use permit_watch::PermitWatches;
use requests::{Grant, Requests, Take};
use serde_json::{Map, Value};
use std::time::{Duration, SystemTime};
use tokio::sync::OnceCell;
use tokio::time::Instant;
use watch::Watches;

/// Largest payload stored with a lock, in bytes: a DynamoDB item holds at most 400 KB, and
/// the rest of the item (names, owner, key) needs some of it.
pub const MAX_DATA_BYTES: usize = 384 * 1024;

/// Most conditional writes one `try_acquire` makes before it reports the lock busy: each
/// failed condition means another client acted in between, and the next poll looks again.
const MAX_STEPS: usize = 4;

/// Heartbeats of one `extend_many` in flight at once.
const EXTEND_CONCURRENCY: usize = 64;

/// How often a table being created is asked whether it is ready.
const TABLE_POLL: Duration = Duration::from_millis(250);

/// The key of the item `ping` reads: reading it needs no more than what locks need, and it
/// is never written.
const PING_KEY: &str = "deadbolt:ping";

/// Options for the DynamoDB store.
#[derive(Debug, Clone, Default)]
pub struct DynamoStoreOptions {
    /// Key schema, credentials, table creation and release mode.
    pub dynamo: DynamoOptions,
    /// Bound on opening a connection, in ms. Default 5000.
    pub connect_timeout_ms: u64,
    /// Bound on an answer, in ms; a call is bounded by the sum of the two. Default 5000.
    pub response_timeout_ms: u64,
}

/// Where and how to talk, worked out on first use (it reads the environment and the AWS
/// shared files).
struct Ready {
    api: Api,
    region: String,
}

/// A lock store on a DynamoDB table in the Java lock client's layout.
pub struct DynamoStore {
    location: Location,
    options: DynamoOptions,
    requests: Requests,
    connect_timeout: Duration,
    call_timeout: Duration,
    ready: OnceCell<Ready>,
    /// Left empty when making sure of the table failed, so the next call tries again.
    table_ready: OnceCell<()>,
    watches: Watches,
    /// Watched versions of semaphore holders and queued places.
    permit_watches: PermitWatches,
    /// Where the semaphores' watch clock starts (`permits.rs`).
    origin: Instant,
}

crate::store::redact::debug_fields!(DynamoStore: location, options);

impl DynamoStore {
    /// Checks the URL (`dynamodb://<table>?region=…&endpoint=…`) and the options. No I/O: the
    /// region and credentials are looked up, and the table created if asked, on first use.
    pub fn connect(url: &str, opts: DynamoStoreOptions) -> StoreResult<DynamoStore> {
        let invalid = |e: String| StoreError::invalid(format!("dynamodb: {e}"));
        let location = Location::parse(url).map_err(invalid)?;
        opts.dynamo.check().map_err(invalid)?;
        let requests = Requests::new(
            &location.table,
            &opts.dynamo.partition_key,
            opts.dynamo.sort_key.clone(),
        );
        Ok(DynamoStore {
            location,
            options: opts.dynamo,
            requests,
            connect_timeout: Duration::from_millis(opts.connect_timeout_ms),
            call_timeout: Duration::from_millis(
                opts.connect_timeout_ms
                    .saturating_add(opts.response_timeout_ms),
            ),
            ready: OnceCell::new(),
            table_ready: OnceCell::new(),
            watches: Watches::default(),
            permit_watches: PermitWatches::default(),
            origin: Instant::now(),
        })
    }

    /// Lock names and semaphore entries whose versions this store is watching (for leak
    /// checks).
    pub fn watched(&self) -> usize {
        self.watches.len() + self.permit_watches.len()
    }

    /// The deadline of a call starting now (retries stop before it).
    fn deadline(&self) -> Instant {
        crate::runtime::clock::after(Instant::now(), self.call_timeout)
    }

    /// The client, once the region and credentials are known and the table exists.
    async fn api(&self, deadline: Instant) -> StoreResult<&Api> {
        let ready = self
            .ready
            .get_or_try_init(|| async { self.resolve() })
            .await?;
        if self.options.create_table {
            self.table_ready
                .get_or_try_init(|| self.create_table(&ready.api, deadline))
                .await?;
        }
        Ok(&ready.api)
    }

    fn resolve(&self) -> StoreResult<Ready> {
        let env = credentials::process_env;
        let invalid = |e: String| StoreError::invalid(format!("dynamodb: {e}"));
        let region =
            credentials::resolve_region(self.location.region.as_deref(), &env).map_err(invalid)?;
        let region = match (region, &self.location.endpoint) {
            (Some(region), _) => region,
            // A local server takes any region.
            (None, Some(_)) => "us-east-1".to_owned(),
            (None, None) => {
                return Err(invalid(
                    "no region: add ?region=<region> to the URL, or set AWS_REGION".into(),
                ))
            }
        };
        config::check_region(&region).map_err(invalid)?;
        let credentials = credentials::resolve_credentials(self.options.credentials.as_ref(), &env)
            .map_err(invalid)?;
        let endpoint = self
            .location
            .endpoint
            .clone()
            .unwrap_or_else(|| config::default_endpoint(&region));
        let api = Api::new(&endpoint, &region, &credentials, self.connect_timeout)
            .map_err(|e| StoreError::internal(format!("dynamodb: {e}")))?;
        Ok(Ready { api, region })
    }

    /// Creates the table if it does not exist, and waits until it is active.
    async fn create_table(&self, api: &Api, deadline: Instant) -> StoreResult<()> {
        match api
            .call("CreateTable", &self.requests.create_table(), deadline)
            .await
        {
            Ok(_) => {}
            // It exists (perhaps still being created by someone else).
            Err(Failure::Error(ApiError {
                code: Some(code), ..
            })) if code == "ResourceInUseException" => {}
            Err(f) => return Err(self.failure("CreateTable", f)),
        }
        loop {
            let reply = api
                .call("DescribeTable", &self.requests.describe_table(), deadline)
                .await
                .map_err(|f| self.failure("DescribeTable", f))?;
            let status = reply
                .get("Table")
                .and_then(|t| t.get("TableStatus"))
                .and_then(Value::as_str);
            // As the Java client, an updating table is usable.
            if matches!(status, Some("ACTIVE" | "UPDATING")) {
                return Ok(());
            }
            tokio::time::sleep(TABLE_POLL).await;
        }
    }

    /// The error to report for a failed call (a failed condition where the caller expects
    /// none is a bug).
    fn failure(&self, operation: &str, failure: Failure) -> StoreError {
        match failure {
            Failure::Error(ApiError {
                code: Some(code), ..
            }) if code == "ResourceNotFoundException" => {
                let region = self.ready.get().map_or("", |r| r.region.as_str());
                // The URL's table is the store's database: as an unknown database elsewhere.
                StoreError::new(
                    ErrorKind::NoDatabase,
                    format!(
                        "dynamodb: {operation}: table {:?} was not found in region {region} \
                         (create it, or connect with createTable: true)",
                        self.requests.table()
                    ),
                )
            }
            Failure::Error(e) => e.error,
            Failure::Condition(_) => StoreError::internal(format!(
                "dynamodb: {operation}: unexpected failed condition"
            )),
        }
    }

    /// Calls `operation`; `Ok(None)` when its condition did not hold, with the item as it
    /// was when the server sent it (`Some(Err(item))` carries it).
    async fn write(
        &self,
        api: &Api,
        operation: &str,
        body: &Value,
        deadline: Instant,
    ) -> StoreResult<Result<Map<String, Value>, Option<Map<String, Value>>>> {
        match api.call(operation, body, deadline).await {
            Ok(reply) => Ok(Ok(reply)),
            Err(Failure::Condition(item)) => Ok(Err(item)),
            Err(f) => Err(self.failure(operation, f)),
        }
    }

    /// Frees the lock `key` by the write `request` builds (given whether to delete the item,
    /// as `deleteOnRelease` says); whether its condition held.
    async fn free(
        &self,
        key: &str,
        request: impl FnOnce(&Requests, bool) -> (&'static str, Value),
    ) -> StoreResult<bool> {
        check_key(key)?;
        let deadline = self.deadline();
        let api = self.api(deadline).await?;
        let (operation, body) = request(&self.requests, self.options.delete_on_release);
        Ok(self.write(api, operation, &body, deadline).await?.is_ok())
    }

    /// A consistent read of the lock `key`.
    async fn read(&self, api: &Api, key: &str, deadline: Instant) -> StoreResult<Lock> {
        let reply = api
            .call("GetItem", &self.requests.get(key), deadline)
            .await
            .map_err(|f| self.failure("GetItem", f))?;
        parse(reply.get("Item").and_then(Value::as_object))
    }

    /// `owner` found itself holding `key`: it sets a new version first, so that the lease
    /// runs from this request, as the caller reckons it, for every contender.
    async fn renew_own(
        &self,
        api: &Api,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        fence: u64,
        deadline: Instant,
    ) -> StoreResult<Option<u64>> {
        Ok(self
            .renew(api, key, owner, ttl_ms, deadline)
            .await?
            .then_some(fence))
    }

    /// A heartbeat: a new version and lease if `owner` still holds `key`.
    async fn renew(
        &self,
        api: &Api,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        deadline: Instant,
    ) -> StoreResult<bool> {
        let version = new_version();
        let sent = Instant::now();
        let body = self.requests.renew(key, owner, ttl_ms, &version);
        let renewed = self
            .write(api, "UpdateItem", &body, deadline)
            .await?
            .is_ok();
        if renewed {
            self.watches
                .wrote(key, &version, Duration::from_millis(ttl_ms), sent);
        }
        Ok(renewed)
    }
}

/// What `try_acquire` does next.
enum Step {
    /// A conditional write: if free (`None`), or if still at the watched version.
    Take(Option<String>),
    /// Look at the item (or at the one a failed condition sent back).
    Read(Option<Option<Map<String, Value>>>),
}

fn parse(item: Option<&Map<String, Value>>) -> StoreResult<Lock> {
    item::parse(item).map_err(|e| StoreError::new(ErrorKind::Server, format!("dynamodb: {e}")))
}

fn info(h: item::Holder, remaining: Duration) -> LockInfo {
    LockInfo {
        owner: h.owner,
        fencing_token: h.fence,
        remaining_ms: i64::try_from(remaining.as_micros().div_ceil(1000)).unwrap_or(i64::MAX),
        data: h.data,
    }
}

/// The token a successful take wrote (`ReturnValues: UPDATED_NEW`).
fn fence_of(reply: &Map<String, Value>) -> StoreResult<u64> {
    reply
        .get("Attributes")
        .and_then(Value::as_object)
        .map(|a| item::get_u64(a, item::FENCE))
        .transpose()
        .map_err(|e| StoreError::new(ErrorKind::Server, format!("dynamodb: {e}")))?
        .flatten()
        .ok_or_else(|| StoreError::internal("dynamodb: the write did not return the fencing token"))
}

/// A new `recordVersionNumber`: a random UUID, as the Java client writes.
fn new_version() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The token of an item that has none: this process's wall clock in microseconds since the
/// epoch, far above any count of acquisitions, so a name whose item was deleted (or rewritten
/// by a Java client) gets a higher token than before as long as the clocks of the processes
/// sharing the table agree to within the time between the two grants.
fn first_token() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
}

/// The contract; every call is bounded by the decorator the registry wraps the store in
/// ([`crate::store::bounded`]).
impl LockStore for DynamoStore {
    fn try_acquire<'a>(&'a self, key: &'a str, acq: Acquisition<'a>) -> Call<'a, Option<u64>> {
        let (owner, ttl_ms, data) = (acq.owner, acq.ttl_ms, acq.data);
        async move {
            check_key(key)?;
            check_data(data)?;
            let deadline = self.deadline();
            let api = self.api(deadline).await?;
            let lease = Duration::from_millis(ttl_ms);
            let mut step = match self.watches.get(key) {
                // Nothing known: most locks are free, so try the write first (one request).
                None => Step::Take(None),
                Some(w) if w.expired(Instant::now()) => Step::Take(Some(w.version)),
                Some(_) => Step::Read(None),
            };
            for _ in 0..MAX_STEPS {
                step = match step {
                    Step::Take(watched) => {
                        let version = new_version();
                        let how = match &watched {
                            None => Take::Free,
                            Some(v) => Take::AtVersion(v),
                        };
                        let grant = Grant {
                            owner,
                            lease_ms: ttl_ms,
                            version: &version,
                            data,
                            first_token: first_token(),
                        };
                        let sent = Instant::now();
                        let body = self.requests.take(key, &grant, how);
                        match self.write(api, "UpdateItem", &body, deadline).await? {
                            Ok(reply) => {
                                self.watches.wrote(key, &version, lease, sent);
                                return fence_of(&reply).map(Some);
                            }
                            Err(item) => Step::Read(item.map(Some)),
                        }
                    }
                    Step::Read(known) => {
                        let lock = match known {
                            Some(item) => parse(item.as_ref())?,
                            None => self.read(api, key, deadline).await?,
                        };
                        let now = Instant::now();
                        match lock {
                            Lock::Free => Step::Take(None),
                            // Our own earlier request took it (its reply was lost and the request
                            // went again), or a local handoff gave it to us.
                            Lock::Held(h) if h.owner == owner => {
                                return self
                                    .renew_own(api, key, owner, ttl_ms, h.fence, deadline)
                                    .await
                            }
                            Lock::Held(h) => {
                                let watched = self.watches.observe(key, &h.version, h.lease, now);
                                if !watched.expired(now) {
                                    return Ok(None);
                                }
                                Step::Take(Some(h.version))
                            }
                        }
                    }
                };
            }
            Ok(None)
        }
        .boxed()
    }

    fn extend<'a>(&'a self, key: &'a str, renewal: Renewal<'a>) -> Call<'a, bool> {
        let (owner, ttl_ms) = (renewal.owner, renewal.ttl_ms);
        async move {
            check_key(key)?;
            let deadline = self.deadline();
            let api = self.api(deadline).await?;
            self.renew(api, key, owner, ttl_ms, deadline).await
        }
        .boxed()
    }

    fn extend_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a> {
        async move {
            // Futures do nothing until polled: `buffered` runs this many at a time, in order.
            let each: Vec<_> = items
                .iter()
                .map(|i| {
                    LockStore::extend(
                        self,
                        &i.key,
                        Renewal {
                            owner: &i.owner,
                            ttl_ms: i.ttl_ms,
                            has_data: i.has_data,
                        },
                    )
                })
                .collect();
            futures_util::stream::iter(each)
                .buffered(EXTEND_CONCURRENCY)
                .collect()
                .await
        }
        .boxed()
    }

    fn release<'a>(&'a self, key: &'a str, r: Release<'a>) -> Call<'a, ReleaseOutcome> {
        let owner = r.owner;
        async move {
            let released = self
                .free(key, |r, delete| r.release(key, owner, delete))
                .await?;
            if released {
                self.watches.forget(key);
            }
            // No announcements: waiters elsewhere poll.
            Ok(ReleaseOutcome::unannounced(released))
        }
        .boxed()
    }

    fn handoff<'a>(&'a self, key: &'a str, h: Handoff<'a>) -> Call<'a, Option<u64>> {
        let (owner, next) = (h.from, h.next);
        async move {
            check_key(key)?;
            check_data(next.data)?;
            let deadline = self.deadline();
            let api = self.api(deadline).await?;
            let version = new_version();
            let grant = Grant {
                owner: next.owner,
                lease_ms: next.ttl_ms,
                version: &version,
                data: next.data,
                first_token: first_token(),
            };
            let sent = Instant::now();
            let body = self.requests.take(key, &grant, Take::From(owner));
            match self.write(api, "UpdateItem", &body, deadline).await? {
                Ok(reply) => {
                    self.watches
                        .wrote(key, &version, Duration::from_millis(next.ttl_ms), sent);
                    fence_of(&reply).map(Some)
                }
                Err(_) => Ok(None),
            }
        }
        .boxed()
    }

    fn inspect<'a>(&'a self, key: &'a str) -> Call<'a, Option<LockInfo>> {
        async move {
            check_key(key)?;
            let deadline = self.deadline();
            let api = self.api(deadline).await?;
            let Lock::Held(h) = self.read(api, key, deadline).await? else {
                return Ok(None);
            };
            let now = Instant::now();
            let watched = self.watches.observe(key, &h.version, h.lease, now);
            if watched.expired(now) {
                return Ok(None);
            }
            Ok(Some(info(h, watched.remaining(now))))
        }
        .boxed()
    }

    fn ping(&self) -> Call<'_, ()> {
        async move {
            let deadline = self.deadline();
            let api = self.api(deadline).await?;
            self.read(api, PING_KEY, deadline).await.map(|_| ())
        }
        .boxed()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        // Pooled connections close with the store; the decorator refuses calls from now on.
        futures_util::future::ready(()).boxed()
    }

    fn operator(&self) -> Option<&dyn OperatorTools> {
        Some(self)
    }

    delegate!(
        acquire_permits,
        extend_permits,
        extend_permits_many,
        release_permits,
        permits,
    );
}

impl OperatorTools for DynamoStore {
    fn force_release<'a>(&'a self, key: &'a str) -> Call<'a, bool> {
        async move {
            let freed = self
                .free(key, |r, delete| {
                    r.force_release(key, &new_version(), delete)
                })
                .await?;
            self.watches.forget(key);
            Ok(freed)
        }
        .boxed()
    }

    fn list<'a>(&'a self, prefix: &'a str, limit: usize) -> Call<'a, Vec<HeldLock>> {
        async move {
            let deadline = self.deadline();
            let api = self.api(deadline).await?;
            let mut out = Vec::new();
            let mut start: Option<Value> = None;
            while out.len() < limit {
                let body = self.requests.scan(prefix, start.as_ref());
                let reply = api
                    .call("Scan", &body, deadline)
                    .await
                    .map_err(|f| self.failure("Scan", f))?;
                let now = Instant::now();
                let items = reply.get("Items").and_then(Value::as_array);
                for item in items.into_iter().flatten().filter_map(Value::as_object) {
                    let Some(key) = item::get_s(item, self.requests.partition_key()) else {
                        continue;
                    };
                    let Lock::Held(h) = parse(Some(item))? else {
                        continue;
                    };
                    // Only what this process already knows; a listing starts no watch.
                    let remaining = match self.watches.get(key) {
                        Some(w) if w.version == h.version => {
                            if w.expired(now) {
                                continue;
                            }
                            w.remaining(now)
                        }
                        _ => h.lease,
                    };
                    out.push(HeldLock {
                        key: key.to_owned(),
                        info: info(h, remaining),
                    });
                    if out.len() == limit {
                        break;
                    }
                }
                start = reply.get("LastEvaluatedKey").cloned();
                if start.is_none() {
                    break;
                }
            }
            Ok(out)
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests;
