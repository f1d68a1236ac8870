//! The call bound and the closed store, written once for every store that bounds whole calls,
//! as opendal's `TimeoutLayer` wraps every service: [`Bounded`] wraps a store where the
//! registry opens it (which stores: the `bounded(…)` calls in `registry.rs`), so the store
//! itself writes only its operations. A store that bounds each reply instead (Redis: its
//! pipelines carry many calls) or a round (Redlock: a quorum) is not wrapped.

use crate::store::{Acquisition, Batch, Call, Handoff, Release, Renewal};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;

use super::{
    ExtendItem, HandoffOutcome, HeldLock, LockInfo, LockStore, OperatorTools, PermitHolder,
    PermitRequest, ReleaseNotifications, ReleaseOutcome, SharedStore, StoreError, StoreResult,
};

/// The bound on one call of a store with these timeouts: connecting (or waiting for a pooled
/// connection) plus the answer.
pub fn call_timeout(connect_timeout_ms: u64, response_timeout_ms: u64) -> Duration {
    Duration::from_millis(connect_timeout_ms.saturating_add(response_timeout_ms))
}

/// Runs `fut` within `bound`; past it, a [`super::ErrorKind::Timeout`] naming `store` and
/// `operation`. The drivers bound connecting and, some, a statement, but not an answer that
/// never comes (a server stopped with SIGSTOP, a frozen network path) nor a reconnect loop
/// that tries several connections: this bounds it all. A request abandoned this way may
/// still take effect on the server.
///
/// # Cancel Safety
/// As cancel safe as `fut`.
pub async fn within<T>(
    store: &str,
    operation: &str,
    bound: Duration,
    fut: impl Future<Output = StoreResult<T>>,
) -> StoreResult<T> {
    match tokio::time::timeout(bound, fut).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::timeout(format!(
            "{store}: {operation}: no answer within {} ms",
            bound.as_millis()
        ))),
    }
}

/// A store whose every call is bounded by one call bound and refused once the store is
/// closed ([`super::ErrorKind::Closed`]). Release announcements pass through unbounded: they
/// are subscriptions, not calls.
pub struct Bounded<S> {
    inner: S,
    /// The store's name in messages (`mysql`, …).
    name: &'static str,
    bound: Duration,
    closed: AtomicBool,
}

/// `inner`, every call bounded by `bound`, as the shared store the engine uses.
pub fn bounded<S: LockStore>(name: &'static str, inner: S, bound: Duration) -> SharedStore {
    Arc::new(Bounded::new(name, inner, bound))
}

impl<S: LockStore> Bounded<S> {
    /// Wraps `inner` (named `name` in messages), every call bounded by `bound`.
    pub fn new(name: &'static str, inner: S, bound: Duration) -> Self {
        Bounded {
            inner,
            name,
            bound,
            closed: AtomicBool::new(false),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// `fut` within the bound, or the closed error without running it.
    ///
    /// # Cancel Safety
    /// As cancel safe as `fut`.
    async fn call<T>(
        &self,
        operation: &str,
        fut: impl Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(StoreError::closed(format!(
                "{}: the store is closed",
                self.name
            )));
        }
        within(self.name, operation, self.bound, fut).await
    }

    /// A batch within the bound: on time-out (or once closed) every item fails alike.
    ///
    /// # Cancel Safety
    /// As cancel safe as `fut`.
    async fn call_many(
        &self,
        operation: &str,
        items: usize,
        fut: impl Future<Output = Vec<StoreResult<bool>>>,
    ) -> Vec<StoreResult<bool>> {
        match self.call(operation, fut.map(Ok)).await {
            Ok(results) => results,
            Err(e) => vec![Err(e); items],
        }
    }
}

impl<S: LockStore> LockStore for Bounded<S> {
    fn try_acquire<'a>(&'a self, key: &'a str, acq: Acquisition<'a>) -> Call<'a, Option<u64>> {
        let fut = self.inner.try_acquire(key, acq);
        self.call("try_acquire", fut).boxed()
    }

    fn extend<'a>(&'a self, key: &'a str, renewal: Renewal<'a>) -> Call<'a, bool> {
        let fut = self.inner.extend(key, renewal);
        self.call("extend", fut).boxed()
    }

    fn extend_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a> {
        let fut = self.inner.extend_many(items);
        self.call_many("extend", items.len(), fut).boxed()
    }

    fn release<'a>(&'a self, key: &'a str, r: Release<'a>) -> Call<'a, ReleaseOutcome> {
        self.call("release", self.inner.release(key, r)).boxed()
    }

    fn handoff<'a>(&'a self, key: &'a str, h: Handoff<'a>) -> Call<'a, Option<u64>> {
        self.call("handoff", self.inner.handoff(key, h)).boxed()
    }

    fn handoff_or_release<'a>(&'a self, key: &'a str, h: Handoff<'a>) -> Call<'a, HandoffOutcome> {
        let fut = self.inner.handoff_or_release(key, h);
        self.call("handoff", fut).boxed()
    }

    fn inspect<'a>(&'a self, key: &'a str) -> Call<'a, Option<LockInfo>> {
        self.call("inspect", self.inner.inspect(key)).boxed()
    }

    fn ping(&self) -> Call<'_, ()> {
        self.call("ping", self.inner.ping()).boxed()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        self.closed.store(true, Ordering::SeqCst);
        self.inner.close()
    }

    fn acquire_permits<'a>(&'a self, req: &'a PermitRequest<'a>) -> Call<'a, Option<u64>> {
        self.call("acquire_permits", self.inner.acquire_permits(req))
            .boxed()
    }

    fn extend_permits<'a>(&'a self, name: &'a str, renewal: Renewal<'a>) -> Call<'a, bool> {
        let fut = self.inner.extend_permits(name, renewal);
        self.call("extend_permits", fut).boxed()
    }

    fn extend_permits_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a> {
        let fut = self.inner.extend_permits_many(items);
        self.call_many("extend_permits", items.len(), fut).boxed()
    }

    fn release_permits<'a>(&'a self, name: &'a str, r: Release<'a>) -> Call<'a, ReleaseOutcome> {
        let fut = self.inner.release_permits(name, r);
        self.call("release_permits", fut).boxed()
    }

    fn permits<'a>(&'a self, name: &'a str) -> Call<'a, Vec<PermitHolder>> {
        self.call("permits", self.inner.permits(name)).boxed()
    }

    // `handoff_permits` keeps the contract's default, over the two bounded calls above: each
    // is bounded alone, and a failed request is reported as not granted (no wrapped store
    // does it in one step; one that did would forward it here).

    fn release_notifications(&self) -> Option<&dyn ReleaseNotifications> {
        self.inner.release_notifications()
    }

    fn operator(&self) -> Option<&dyn OperatorTools> {
        self.inner.operator().map(|_| self as &dyn OperatorTools)
    }
}

/// The operator's tools of the wrapped store, bounded as its other calls; reached only
/// through [`LockStore::operator`], which offers them when the wrapped store has them.
impl<S: LockStore> OperatorTools for Bounded<S> {
    fn force_release<'a>(&'a self, key: &'a str) -> Call<'a, bool> {
        self.call("force_release", async move {
            match self.inner.operator() {
                Some(tools) => tools.force_release(key).await,
                None => Err(StoreError::invalid("this store has no operator tools")),
            }
        })
        .boxed()
    }

    fn list<'a>(&'a self, prefix: &'a str, limit: usize) -> Call<'a, Vec<HeldLock>> {
        self.call("list", async move {
            match self.inner.operator() {
                Some(tools) => tools.list(prefix, limit).await,
                None => Err(StoreError::invalid("this store has no operator tools")),
            }
        })
        .boxed()
    }
}

#[cfg(test)]
mod tests;
