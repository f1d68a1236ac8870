//! Adoption, stopped heartbeats and eviction on the memory store.

use super::*;
use crate::core::engine::Engine;
use crate::core::error::LostReason;
use crate::core::options::AcquireSpec;
use crate::core::session::EventSink;
use crate::store::{Acquisition, PermitRequest, SharedStore, ValueFormat};
use std::time::Duration;

struct NoEvents;
impl EventSink for NoEvents {
    fn lost(&self, _: u64, _: LostReason) {}
}

fn session() -> Arc<Session> {
    let store = Arc::new(crate::store::memory::MemoryStore::default());
    Session::open(Engine::new(store), Arc::new(NoEvents))
}

/// A session on a fresh memory store where `owner` holds "k", and that store (the lock taken
/// directly, as another process would), with the lock's token.
async fn session_with_lock(owner: &str) -> (Arc<Session>, SharedStore, u64) {
    let s = session();
    let store = s.engine().unwrap().store().clone();
    let token = store
        .try_acquire("k", Acquisition::fenced(owner, 60_000))
        .await
        .unwrap()
        .unwrap();
    (s, store, token)
}

fn spec(key: &str, owner: &str, kind: Kind, token: u64) -> AdoptSpec {
    AdoptSpec {
        key: key.into(),
        owner: owner.into(),
        new_owner: format!("{owner}-adopted"),
        kind,
        token,
        fencing: true,
        ttl_ms: 60_000,
        auto_extend: Some(AutoExtend {
            every: Duration::from_secs(20),
            max_hold: None,
        }),
    }
}

#[tokio::test]
async fn a_lock_is_adopted_under_a_new_owner_and_token_and_released_by_the_adopter() {
    let s = session();
    let store = s.engine().unwrap().store().clone();
    let token = store
        .try_acquire(
            "k",
            Acquisition {
                data: Some(b"payload"),
                ..Acquisition::fenced("o", 60_000)
            },
        )
        .await
        .unwrap()
        .unwrap();
    let adopted = s.adopt(7, spec("k", "o", Kind::Lock, 0)).await.unwrap();
    assert!(adopted.unwrap() > token);
    assert!(s.is_held(7));
    let info = store.inspect("k").await.unwrap().unwrap();
    assert_eq!(info.owner, "o-adopted");
    assert_eq!(info.data.as_deref(), Some(&b"payload"[..]));
    assert!(
        !store
            .extend(
                "k",
                Renewal {
                    has_data: true,
                    ..Renewal::new("o", 60_000)
                }
            )
            .await
            .unwrap(),
        "the former owner lost it"
    );
    assert!(s.release(7).await.unwrap());
    assert_eq!(store.inspect("k").await.unwrap(), None);
}

#[tokio::test]
async fn nothing_is_adopted_from_an_owner_that_does_not_hold_it() {
    let s = session();
    let store = s.engine().unwrap().store().clone();
    store
        .try_acquire("k", Acquisition::fenced("someone", 60_000))
        .await
        .unwrap();
    assert_eq!(
        s.adopt(7, spec("k", "o", Kind::Lock, 1)).await.unwrap(),
        None
    );
    assert_eq!(
        s.adopt(8, spec("free", "o", Kind::Lock, 1)).await.unwrap(),
        None
    );
    assert_eq!(s.held_count(), 0);
}

#[tokio::test]
async fn closing_leaves_a_lock_whose_heartbeat_was_stopped() {
    let (s, store, token) = session_with_lock("o").await;
    assert!(s
        .adopt(7, spec("k", "o", Kind::Lock, token))
        .await
        .unwrap()
        .is_some());
    assert!(s.stop_extending(7));
    assert!(s.is_held(7), "still held until its lease ends");
    assert_eq!(s.close().await, 0);
    assert_eq!(
        store.inspect("k").await.unwrap().unwrap().owner,
        "o-adopted"
    );
}

#[tokio::test]
async fn permits_are_adopted_and_another_owner_s_are_evicted() {
    let s = session();
    let store = s.engine().unwrap().store().clone();
    let ask = |owner: &'static str| PermitRequest {
        name: "sem",
        owner,
        permits: 1,
        limit: 2,
        ttl_ms: 60_000,
        queue_ttl_ms: 0,
    };
    let token = store.acquire_permits(&ask("a")).await.unwrap().unwrap();
    store.acquire_permits(&ask("b")).await.unwrap().unwrap();
    assert_eq!(
        s.adopt(7, spec("sem", "a", Kind::Permits, token))
            .await
            .unwrap(),
        Some(token)
    );
    assert!(s.evict_permits("sem", "b").await.unwrap());
    assert!(!s.evict_permits("sem", "b").await.unwrap(), "already gone");
    let holders = store.permits("sem").await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].owner, "a");
}

#[tokio::test]
async fn of_two_adopters_of_one_lock_only_one_takes_it() {
    let (s, _store, _token) = session_with_lock("o").await;
    let mut second = spec("k", "o", Kind::Lock, 0);
    second.new_owner = "other-adopter".into();
    let (a, b) = tokio::join!(
        s.adopt(7, spec("k", "o", Kind::Lock, 0)),
        s.adopt(8, second)
    );
    let won = [a.unwrap().is_some(), b.unwrap().is_some()];
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
    assert_eq!(s.held_count(), 1);
}

#[tokio::test]
async fn adopting_a_lock_this_session_holds_ends_the_former_hold_at_once() {
    let s = session();
    let acquire = AcquireSpec {
        key: "k".into(),
        owner: "o".into(),
        ttl_ms: 60_000,
        wait: None,
        max_attempts: None,
        retry_delay: Duration::from_millis(10),
        jitter: 0.0,
        data: None,
        auto_extend: spec("k", "o", Kind::Lock, 0).auto_extend,
        watch_expiry: false,
        report_extensions: false,
        format: ValueFormat::Fenced,
        permits: None,
    };
    assert!(s.acquire(1, acquire, None).await.unwrap().is_some());
    assert!(s.is_held(1));
    assert!(s
        .adopt(7, spec("k", "o", Kind::Lock, 0))
        .await
        .unwrap()
        .is_some());
    assert!(!s.is_held(1), "the former hold is lost");
    assert!(s.is_held(7));
    assert!(!s.release(1).await.unwrap());
    assert!(s.release(7).await.unwrap());
}

#[tokio::test]
async fn an_unfenced_lock_is_adopted_without_a_token() {
    let (s, _store, _token) = session_with_lock("o").await;
    let mut unfenced = spec("k", "o", Kind::Lock, 0);
    unfenced.fencing = false;
    assert_eq!(s.adopt(7, unfenced).await.unwrap(), Some(0));
}
