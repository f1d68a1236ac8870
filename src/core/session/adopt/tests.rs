//! Adoption, stopped heartbeats and eviction on the memory store.

use super::*;
use crate::core::error::LostReason;
use crate::core::session::EventSink;
use crate::store::open::ConnectOptions;
use crate::store::{PermitRequest, ValueFormat};
use std::time::Duration;

struct NoEvents;
impl EventSink for NoEvents {
    fn lost(&self, _: u64, _: LostReason) {}
}

fn session() -> Arc<Session> {
    let url = format!("memory://adopt-test-{}", uuid::Uuid::new_v4());
    Session::open(&url, &ConnectOptions::default(), Arc::new(NoEvents)).unwrap()
}

fn spec(key: &str, owner: &str, kind: Kind, token: u64) -> AdoptSpec {
    AdoptSpec {
        key: key.into(),
        owner: owner.into(),
        kind,
        token,
        ttl_ms: 60_000,
        has_data: false,
        auto_extend: Some(AutoExtend {
            every: Duration::from_secs(20),
            max_hold: None,
        }),
    }
}

#[tokio::test]
async fn a_lease_is_adopted_by_its_owner_and_released_by_the_adopter() {
    let s = session();
    let store = s.engine().unwrap().store().clone();
    let token = store
        .try_acquire("k", "o", 60_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(s.adopt(7, spec("k", "o", Kind::Lock, token)).await.unwrap());
    assert!(s.is_held(7));
    assert!(s.release(7).await.unwrap());
    assert_eq!(store.inspect("k").await.unwrap(), None);
}

#[tokio::test]
async fn nothing_is_adopted_from_an_owner_that_does_not_hold_it() {
    let s = session();
    let store = s.engine().unwrap().store().clone();
    store
        .try_acquire("k", "someone", 60_000, None, ValueFormat::Fenced)
        .await
        .unwrap();
    assert!(!s.adopt(7, spec("k", "o", Kind::Lock, 1)).await.unwrap());
    assert!(!s.adopt(8, spec("free", "o", Kind::Lock, 1)).await.unwrap());
    assert_eq!(s.held_count(), 0);
}

#[tokio::test]
async fn closing_leaves_a_lock_whose_heartbeat_was_stopped() {
    let s = session();
    let store = s.engine().unwrap().store().clone();
    let token = store
        .try_acquire("k", "o", 60_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(s.adopt(7, spec("k", "o", Kind::Lock, token)).await.unwrap());
    assert!(s.stop_extending(7));
    assert!(s.is_held(7), "still held until its lease ends");
    assert_eq!(s.close().await, 0);
    assert_eq!(store.inspect("k").await.unwrap().unwrap().owner, "o");
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
    assert!(s
        .adopt(7, spec("sem", "a", Kind::Permits, token))
        .await
        .unwrap());
    assert!(s.evict_permits("sem", "b").await.unwrap());
    assert!(!s.evict_permits("sem", "b").await.unwrap(), "already gone");
    let holders = store.permits("sem").await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].owner, "a");
}
