//! A thread's outermost scope that collects what registers with it while it runs and hands
//! the list over when it ends (even by a panic). The write-behind scope (`runtime::flush`) and
//! the direct drain of completions (`binding::direct_drain`) are two such scopes.

use std::cell::RefCell;
use std::sync::Arc;
use std::thread::LocalKey;

/// One kind of scope's registrations on one thread: `None` outside the scope. Declare it in a
/// `thread_local!` with `const { Registry::new() }`.
pub struct Registry<T: ?Sized>(RefCell<Option<Vec<Arc<T>>>>);

impl<T: ?Sized> Registry<T> {
    /// Outside any scope.
    pub const fn new() -> Self {
        Registry(RefCell::new(None))
    }
}

impl<T: ?Sized> Default for Registry<T> {
    fn default() -> Self {
        Registry::new()
    }
}

/// Runs `f` as `key`'s scope on this thread, then calls `end` with everything registered
/// meanwhile (each once) and whether `f` returned (false: it panicked). Scopes do not nest: an
/// inner call runs `f` inside the outer scope, which alone ends.
pub fn scope<T: ?Sized + 'static, R>(
    key: &'static LocalKey<Registry<T>>,
    f: impl FnOnce() -> R,
    end: impl FnOnce(Vec<Arc<T>>, bool),
) -> R {
    let outer = key.with(|r| {
        let mut r = r.0.borrow_mut();
        if r.is_some() {
            false
        } else {
            *r = Some(Vec::new());
            true
        }
    });
    if !outer {
        return f();
    }
    /// Ends the scope even if `f` panics.
    struct End<T: ?Sized + 'static, F: FnOnce(Vec<Arc<T>>, bool)> {
        key: &'static LocalKey<Registry<T>>,
        end: Option<F>,
        returned: bool,
    }
    impl<T: ?Sized + 'static, F: FnOnce(Vec<Arc<T>>, bool)> Drop for End<T, F> {
        fn drop(&mut self) {
            let list = self
                .key
                .with(|r| r.0.borrow_mut().take())
                .unwrap_or_default();
            if let Some(end) = self.end.take() {
                end(list, self.returned);
            }
        }
    }
    let mut guard = End {
        key,
        end: Some(end),
        returned: false,
    };
    let result = f();
    guard.returned = true;
    result
}

/// Inside `key`'s scope on this thread: registers `item` (once, however often it is given)
/// and returns true. Outside one: returns false.
pub fn register<T: ?Sized + 'static>(key: &'static LocalKey<Registry<T>>, item: Arc<T>) -> bool {
    key.with(|r| match r.0.borrow_mut().as_mut() {
        Some(list) => {
            if !list.iter().any(|t| Arc::ptr_eq(t, &item)) {
                list.push(item);
            }
            true
        }
        None => false,
    })
}

/// Whether this thread is inside `key`'s scope.
pub fn active<T: ?Sized + 'static>(key: &'static LocalKey<Registry<T>>) -> bool {
    key.with(|r| r.0.borrow().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static SEEN: Registry<u32> = const { Registry::new() };
    }

    #[test]
    fn a_scope_ends_with_what_registered_in_it_each_once() {
        let (a, b) = (Arc::new(1), Arc::new(2));
        let mut got = None;
        scope(
            &SEEN,
            || {
                assert!(register(&SEEN, a.clone()));
                assert!(register(&SEEN, b.clone()));
                assert!(register(&SEEN, a.clone()));
            },
            |list, returned| got = Some((list, returned)),
        );
        let (list, returned) = got.expect("the scope ended");
        assert_eq!(list.iter().map(|v| **v).collect::<Vec<_>>(), vec![1, 2]);
        assert!(returned);
        assert!(!active(&SEEN));
    }

    #[test]
    fn a_panicking_scope_still_ends_and_says_so() {
        let mut got = None;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scope(
                &SEEN,
                || {
                    register(&SEEN, Arc::new(7));
                    panic!("in the scope");
                },
                |list, returned| got = Some((list.len(), returned)),
            )
        }));
        assert!(outcome.is_err());
        assert_eq!(got, Some((1, false)));
        assert!(!active(&SEEN));
    }

    #[test]
    fn an_inner_scope_leaves_the_end_to_the_outer_one() {
        let mut ends = 0;
        scope(
            &SEEN,
            || {
                scope(
                    &SEEN,
                    || register(&SEEN, Arc::new(3)),
                    |_, _| unreachable!(),
                );
                assert!(active(&SEEN));
            },
            |list, _| {
                ends += 1;
                assert_eq!(list.len(), 1);
            },
        );
        assert_eq!(ends, 1);
        assert!(!register(&SEEN, Arc::new(4)));
    }
}
