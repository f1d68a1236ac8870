//! Write-behind scopes: a thread that issues a batch of operations (the JavaScript thread
//! submitting one tick's calls) runs them inside [`scope`], and a connection that queues a
//! command during the scope registers itself with [`defer`] instead of waking its driver; at
//! the end of the scope every registered connection writes its queued commands from this
//! thread, one write each. The batch then costs no thread wake-up on its way to the server.
//!
//! Outside a scope [`defer`] returns false and the connection's own driver writes, as usual.

use crate::runtime::thread_scope::{self, Registry};
use std::sync::Arc;

/// Something that writes what was queued on it, without blocking.
pub trait Flush: Send + Sync {
    /// Writes the queued commands from the calling thread; whatever would block is left to
    /// the connection's driver.
    fn flush(&self);
}

thread_local! {
    /// The connections to flush at the end of this thread's current scope.
    static PENDING: Registry<dyn Flush> = const { Registry::new() };
}

/// Runs `f` as a write-behind scope (see the module's documentation), then flushes every
/// connection that deferred a write in it, even if `f` panicked (nothing queued is left
/// unwritten). Scopes do not nest: an inner call runs `f` inside the outer scope.
pub fn scope<R>(f: impl FnOnce() -> R) -> R {
    thread_scope::scope(&PENDING, f, |pending, _| {
        for target in pending {
            target.flush();
        }
    })
}

/// Whether this thread is inside a scope.
pub fn in_scope() -> bool {
    thread_scope::active(&PENDING)
}

/// Inside a scope on this thread: registers `target` to be flushed at its end and returns
/// true. Outside one: returns false, and the caller has its driver write.
pub fn defer(target: Arc<dyn Flush>) -> bool {
    thread_scope::register(&PENDING, target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counter(AtomicUsize);

    impl Flush for Counter {
        fn flush(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_connection_deferred_twice_in_a_scope_is_flushed_once_at_its_end() {
        let c = Arc::new(Counter(AtomicUsize::new(0)));
        scope(|| {
            assert!(defer(c.clone()));
            assert!(defer(c.clone()));
            assert_eq!(c.0.load(Ordering::Relaxed), 0);
        });
        assert_eq!(c.0.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn outside_a_scope_nothing_is_deferred() {
        let c = Arc::new(Counter(AtomicUsize::new(0)));
        assert!(!defer(c.clone()));
        scope(|| {});
        assert_eq!(c.0.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_nested_scope_flushes_with_the_outer_one() {
        let c = Arc::new(Counter(AtomicUsize::new(0)));
        scope(|| {
            scope(|| assert!(defer(c.clone())));
            assert_eq!(c.0.load(Ordering::Relaxed), 0);
        });
        assert_eq!(c.0.load(Ordering::Relaxed), 1);
    }
}
