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
//! One arm per contract method: the inherent method takes the contract's arguments as they
//! are (its request struct included).
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
        fn try_acquire<'a>(&'a self, key: &'a str, acq: $crate::store::Acquisition<'a>) -> $crate::store::Call<'a, Option<u64>> {
            Box::pin(Self::try_acquire(self, key, acq))
        }
    };
    (@ extend) => {
        fn extend<'a>(&'a self, key: &'a str, r: $crate::store::Renewal<'a>) -> $crate::store::Call<'a, bool> {
            Box::pin(Self::extend(self, key, r))
        }
    };
    (@ extend_many) => {
        fn extend_many<'a>(&'a self, items: &'a [$crate::store::ExtendItem]) -> $crate::store::Batch<'a> {
            Box::pin(Self::extend_many(self, items))
        }
    };
    (@ release) => {
        fn release<'a>(&'a self, key: &'a str, r: $crate::store::Release<'a>) -> $crate::store::Call<'a, $crate::store::ReleaseOutcome> {
            Box::pin(Self::release(self, key, r))
        }
    };
    (@ handoff) => {
        fn handoff<'a>(&'a self, key: &'a str, h: $crate::store::Handoff<'a>) -> $crate::store::Call<'a, Option<u64>> {
            Box::pin(Self::handoff(self, key, h))
        }
    };
    (@ handoff_or_release) => {
        fn handoff_or_release<'a>(&'a self, key: &'a str, h: $crate::store::Handoff<'a>) -> $crate::store::Call<'a, $crate::store::HandoffOutcome> {
            Box::pin(Self::handoff_or_release(self, key, h))
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
        fn extend_permits<'a>(&'a self, name: &'a str, r: $crate::store::Renewal<'a>) -> $crate::store::Call<'a, bool> {
            Box::pin(Self::extend_permits(self, name, r))
        }
    };
    (@ extend_permits_many) => {
        fn extend_permits_many<'a>(&'a self, items: &'a [$crate::store::ExtendItem]) -> $crate::store::Batch<'a> {
            Box::pin(Self::extend_permits_many(self, items))
        }
    };
    (@ release_permits) => {
        fn release_permits<'a>(&'a self, name: &'a str, r: $crate::store::Release<'a>) -> $crate::store::Call<'a, $crate::store::ReleaseOutcome> {
            Box::pin(Self::release_permits(self, name, r))
        }
    };
    (@ permits) => {
        fn permits<'a>(&'a self, name: &'a str) -> $crate::store::Call<'a, Vec<$crate::store::PermitHolder>> {
            Box::pin(Self::permits(self, name))
        }
    };
}

pub(crate) use delegate;
