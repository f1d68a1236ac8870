//! The decorator on tokio's paused clock: a stub store that answers at once or never.

use super::*;
use crate::store::ErrorKind;
use crate::store::{Acquisition, Batch, Call};
use std::sync::atomic::AtomicUsize;

/// A store whose calls answer at once (`stalled: false`) or never, counting the calls that
/// reached it.
#[derive(Default)]
struct Stub {
    stalled: bool,
    calls: AtomicUsize,
    closed: AtomicBool,
    tools: bool,
}

impl Stub {
    /// A call that reaches the store when polled, as a store's own `async` body does.
    fn answer<'a, T: Send + 'a>(&'a self, value: T) -> Call<'a, T> {
        async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.stalled {
                futures_util::future::pending::<()>().await;
            }
            Ok(value)
        }
        .boxed()
    }
}

impl LockStore for Stub {
    fn try_acquire<'a>(&'a self, _: &'a str, _: Acquisition<'a>) -> Call<'a, Option<u64>> {
        self.answer(Some(7))
    }

    fn extend<'a>(&'a self, _: &'a str, _: crate::store::Renewal<'a>) -> Call<'a, bool> {
        self.answer(true)
    }

    fn extend_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a> {
        self.answer(())
            .map(move |r| items.iter().map(|_| r.clone().map(|()| true)).collect())
            .boxed()
    }

    fn release<'a>(&'a self, _: &'a str, _: Release<'a>) -> Call<'a, ReleaseOutcome> {
        self.answer(ReleaseOutcome {
            released: true,
            others_waiting: false,
        })
    }

    fn handoff<'a>(&'a self, _: &'a str, _: crate::store::Handoff<'a>) -> Call<'a, Option<u64>> {
        self.answer(Some(8))
    }

    fn inspect<'a>(&'a self, _: &'a str) -> Call<'a, Option<LockInfo>> {
        self.answer(None)
    }

    fn ping(&self) -> Call<'_, ()> {
        self.answer(())
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        self.closed.store(true, Ordering::SeqCst);
        futures_util::future::ready(()).boxed()
    }

    fn operator(&self) -> Option<&dyn OperatorTools> {
        self.tools.then_some(self as &dyn OperatorTools)
    }
}

impl OperatorTools for Stub {
    fn force_release<'a>(&'a self, _: &'a str) -> Call<'a, bool> {
        self.answer(true)
    }

    fn list<'a>(&'a self, _: &'a str, _: usize) -> Call<'a, Vec<HeldLock>> {
        self.answer(Vec::new())
    }
}

const BOUND: Duration = Duration::from_millis(10_000);

/// `fut`'s outcome, or a failed test (not a hung one) if the decorator let it run past
/// twice the bound.
async fn unbounded_would_hang<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(BOUND * 2, fut)
        .await
        .expect("the call outlived its bound")
}

fn wrap(stub: Stub) -> Bounded<Stub> {
    Bounded::new("stub", stub, BOUND)
}

fn item() -> ExtendItem {
    ExtendItem {
        key: "k".into(),
        owner: "o".into(),
        ttl_ms: 1_000,
        has_data: false,
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_answered_within_the_bound_passes_its_answer_through() {
    let s = wrap(Stub::default());
    let token = s.try_acquire("k", Acquisition::fenced("o", 1_000)).await;
    assert_eq!(token, Ok(Some(7)));
}

#[tokio::test(start_paused = true)]
async fn a_call_never_answered_fails_as_a_timeout_once_the_bound_has_passed() {
    let s = wrap(Stub {
        stalled: true,
        ..Stub::default()
    });
    let started = tokio::time::Instant::now();
    let err = unbounded_would_hang(s.extend("k", Renewal::new("o", 1_000)))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    assert_eq!(started.elapsed(), BOUND);
    assert!(err.message.starts_with("stub: extend:"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_batch_never_answered_fails_every_item_alike() {
    let s = wrap(Stub {
        stalled: true,
        ..Stub::default()
    });
    let items = vec![item(), item(), item()];
    let out = unbounded_would_hang(s.extend_many(&items)).await;
    assert_eq!(out.len(), 3);
    assert!(out
        .iter()
        .all(|r| r.as_ref().is_err_and(|e| e.kind == ErrorKind::Timeout)));
}

#[tokio::test(start_paused = true)]
async fn a_closed_store_refuses_calls_without_reaching_the_wrapped_store() {
    let s = wrap(Stub::default());
    s.close().await;
    assert!(s.inner().closed.load(Ordering::SeqCst));
    let err = s.ping().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Closed);
    let out = s.extend_permits_many(&[item()]).await;
    assert!(out[0].as_ref().is_err_and(|e| e.kind == ErrorKind::Closed));
    assert_eq!(s.inner().calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn operator_tools_are_offered_only_when_the_wrapped_store_has_them() {
    assert!(wrap(Stub::default()).operator().is_none());
    let s = wrap(Stub {
        tools: true,
        stalled: true,
        ..Stub::default()
    });
    let tools = s.operator().unwrap();
    let err = unbounded_would_hang(tools.force_release("k"))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
}
