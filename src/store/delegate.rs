//! [`delegate!`](crate::store::delegate::delegate): contract methods written once, as calls of
//! the store's inherent async methods of the same names and arguments, boxed.
//!
//! Some stores do their work in inherent methods because other code calls them unboxed:
//! Redlock calls each Redis server's, and a SQL store's semaphore operations live in its
//! `permits.rs`. Their `impl LockStore` names the methods it delegates instead of writing each
//! signature and forwarding body again:
//!
//! ```ignore
//! impl LockStore for RedisStore {
//!     delegate!(try_acquire, extend, extend_many, release, inspect, ping, close);
//!     // …the methods it writes itself
//! }
//! ```
//!
//! The contract's one-argument forms come two ways: `try_acquire`, `extend` and `handoff`
//! write `try_acquire_with`, `extend_with` and `handoff_with` over an inherent method that
//! takes the fields (Redis's, whose single-server future stays unboxed and small), while
//! `try_acquire_with`, `extend_with`, `handoff_with` and `handoff_or_release_with` pass the
//! struct to an inherent method of that name (Redlock, etcd).
//!
//! `Self::method(self, …)` names the inherent method: a type's inherent associated functions
//! come before its trait's in path resolution. Cancel safety is the inherent method's.

/// Writes the named [`LockStore`](crate::store::LockStore) methods as calls of the inherent
/// methods of the same names, boxed. See the [module](self).
macro_rules! delegate {
    ($($method:ident),+ $(,)?) => {
        $($crate::store::delegate::delegate!(@ $method);)+
    };
    (@ try_acquire) => {
        fn try_acquire_with<'a>(&'a self, key: &'a str, acq: $crate::store::Acquisition<'a>) -> $crate::store::Call<'a, Option<u64>> {
            Box::pin(Self::try_acquire(self, key, acq.owner, acq.ttl_ms, acq.data, acq.format))
        }
    };
    (@ extend) => {
        fn extend_with<'a>(&'a self, key: &'a str, r: $crate::store::Renewal<'a>) -> $crate::store::Call<'a, bool> {
            Box::pin(Self::extend(self, key, r.owner, r.ttl_ms, r.has_data))
        }
    };
    (@ extend_many) => {
        fn extend_many<'a>(&'a self, items: &'a [$crate::store::ExtendItem]) -> $crate::store::Batch<'a> {
            Box::pin(Self::extend_many(self, items))
        }
    };
    (@ release) => {
        fn release<'a>(&'a self, key: &'a str, owner: &'a str) -> $crate::store::Call<'a, $crate::store::ReleaseOutcome> {
            Box::pin(Self::release(self, key, owner))
        }
    };
    (@ release_held) => {
        fn release_held<'a>(&'a self, key: &'a str, owner: &'a str, had_data: bool) -> $crate::store::Call<'a, $crate::store::ReleaseOutcome> {
            Box::pin(Self::release_held(self, key, owner, had_data))
        }
    };
    (@ handoff) => {
        fn handoff_with<'a>(&'a self, key: &'a str, h: $crate::store::Handoff<'a>) -> $crate::store::Call<'a, Option<u64>> {
            Box::pin(Self::handoff(self, key, h.from, h.next))
        }
    };
    (@ try_acquire_with) => {
        fn try_acquire_with<'a>(&'a self, key: &'a str, a: $crate::store::Acquisition<'a>) -> $crate::store::Call<'a, Option<u64>> {
            Box::pin(Self::try_acquire_with(self, key, a))
        }
    };
    (@ extend_with) => {
        fn extend_with<'a>(&'a self, key: &'a str, r: $crate::store::Renewal<'a>) -> $crate::store::Call<'a, bool> {
            Box::pin(Self::extend_with(self, key, r))
        }
    };
    (@ handoff_with) => {
        fn handoff_with<'a>(&'a self, key: &'a str, h: $crate::store::Handoff<'a>) -> $crate::store::Call<'a, Option<u64>> {
            Box::pin(Self::handoff_with(self, key, h))
        }
    };
    (@ handoff_or_release_with) => {
        fn handoff_or_release_with<'a>(&'a self, key: &'a str, h: $crate::store::Handoff<'a>) -> $crate::store::Call<'a, $crate::store::HandoffOutcome> {
            Box::pin(Self::handoff_or_release_with(self, key, h))
        }
    };
    (@ inspect) => {
        fn inspect<'a>(&'a self, key: &'a str) -> $crate::store::Call<'a, Option<$crate::store::LockInfo>> {
            Box::pin(Self::inspect(self, key))
        }
    };
    (@ ping) => {
        fn ping(&self) -> $crate::store::Call<'_, ()> {
            Box::pin(Self::ping(self))
        }
    };
    (@ close) => {
        fn close(&self) -> ::futures_util::future::BoxFuture<'_, ()> {
            Box::pin(Self::close(self))
        }
    };
    (@ acquire_permits) => {
        fn acquire_permits<'a>(&'a self, req: &'a $crate::store::PermitRequest<'a>) -> $crate::store::Call<'a, Option<u64>> {
            Box::pin(Self::acquire_permits(self, req))
        }
    };
    (@ extend_permits) => {
        fn extend_permits<'a>(&'a self, name: &'a str, owner: &'a str, ttl_ms: u64) -> $crate::store::Call<'a, bool> {
            Box::pin(Self::extend_permits(self, name, owner, ttl_ms))
        }
    };
    (@ extend_permits_many) => {
        fn extend_permits_many<'a>(&'a self, items: &'a [$crate::store::ExtendItem]) -> $crate::store::Batch<'a> {
            Box::pin(Self::extend_permits_many(self, items))
        }
    };
    (@ release_permits) => {
        fn release_permits<'a>(&'a self, name: &'a str, owner: &'a str) -> $crate::store::Call<'a, $crate::store::ReleaseOutcome> {
            Box::pin(Self::release_permits(self, name, owner))
        }
    };
    (@ permits) => {
        fn permits<'a>(&'a self, name: &'a str) -> $crate::store::Call<'a, Vec<$crate::store::PermitHolder>> {
            Box::pin(Self::permits(self, name))
        }
    };
}

pub(crate) use delegate;
