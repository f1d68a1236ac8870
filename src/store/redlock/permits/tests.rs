//! Semaphores over throwaway servers: what only N servers have (quorums that must keep the
//! limit, partial grants, counters that disagree, tickets).

use super::super::tests::{options, servers, set, store};
use super::super::RedlockStore;
use crate::store::conformance::{name, owner, AcquireFenced};
use crate::store::permit_conformance::{queued, req, Ask};
use crate::store::permits::watch_key;
use crate::store::redis::keys::fence_key;
use crate::store::redis::RedisStore;
use crate::store::test_servers::TestServer;
use crate::store::LockStore;
use std::sync::Arc;

/// Three throwaway servers, a Redlock store over them, and a store of its own on each server
/// (as another process reaching only that one would have).
struct Three {
    servers: Vec<TestServer>,
    redlock: Arc<RedlockStore>,
    each: Vec<Arc<RedisStore>>,
}

/// Starts three servers and connects the stores of [`Three`] (`None`: skipped).
fn three() -> Option<Three> {
    let servers = servers(3)?;
    let redlock = store(&servers, 5_000);
    let each = servers
        .iter()
        .map(|s| RedisStore::connect(&s.url(), &options(5_000)).unwrap())
        .collect();
    Some(Three {
        servers,
        redlock,
        each,
    })
}

#[tokio::test]
async fn the_quorum_is_a_majority_for_one_permit_and_grows_with_the_limit() {
    let urls = |n| -> Vec<String> {
        (0..n)
            .map(|i| format!("redis://127.0.0.1:{}", 1 + i))
            .collect()
    };
    let three = RedlockStore::connect(&urls(3), &options(5_000)).unwrap();
    let five = RedlockStore::connect(&urls(5), &options(5_000)).unwrap();
    let q3: Vec<usize> = [1, 2, 3, 100].map(|l| three.permit_quorum(l)).to_vec();
    let q5: Vec<usize> = [1, 2, 4, 100].map(|l| five.permit_quorum(l)).to_vec();
    assert_eq!(q3, vec![2, 3, 3, 3]);
    assert_eq!(q5, vec![3, 4, 5, 5]);
}

/// Three servers each granted two of three owners (in three different orders): every owner
/// has a majority, and three permits of two would be out. None is reported granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_granted_by_different_majorities_never_exceed_the_limit() {
    let Some(t) = three() else { return };
    let (n, a, b, c) = (name(), owner(), owner(), owner());
    for (server, pair) in t.each.iter().zip([[&a, &b], [&b, &c], [&c, &a]]) {
        for o in pair {
            server.grant(&req(&n, o, 1, 2)).await;
        }
    }
    t.redlock.refuse(&req(&n, &a, 1, 2)).await;
    assert!(t.redlock.permits(&n).await.unwrap().is_empty());
}

/// With one permit, two grants would share a server: a majority is enough, as for a lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_of_one_permit_is_granted_by_a_majority() {
    let Some(t) = three() else { return };
    let (n, a) = (name(), owner());
    t.each[2].grant(&req(&n, &owner(), 1, 1)).await;
    t.redlock.grant(&req(&n, &a, 1, 1)).await;
    assert_eq!(t.redlock.permits(&n).await.unwrap()[0].owner, a);
    assert!(t.redlock.permits_released(&n, &a).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_more_than_one_permit_a_server_down_of_three_fails_the_request() {
    let Some(mut s) = servers(3) else { return };
    let redlock = store(&s, 5_000);
    s[2].kill();
    let (n, a) = (name(), owner());
    assert!(redlock.acquire_permits(&req(&n, &a, 1, 2)).await.is_err());
    redlock.grant(&req(&n, &a, 1, 1)).await;
}

/// A request that queues and was granted by too few servers gives those permits back but
/// keeps its place there, so the servers keep agreeing on who is next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_grant_is_given_back_and_the_queued_place_kept() {
    let Some(t) = three() else { return };
    let (n, w) = (name(), owner());
    for server in &t.each[..2] {
        server.grant(&req(&n, "other", 1, 1)).await;
    }
    t.redlock.refuse(&queued(&n, &w, 1, 1)).await;
    assert!(
        t.each[2].permits(&n).await.unwrap().is_empty(),
        "given back"
    );
    // A try on the third server is held back by the waiter's place.
    t.each[2].refuse(&req(&n, &owner(), 1, 1)).await;
    assert_eq!(t.redlock.tickets.len(), 1);
    assert!(!t.redlock.permits_released(&n, &w).await);
    assert_eq!(t.redlock.tickets.len(), 0);
    // The release may be settled by the other two; anything sent after it to the third
    // server runs after it there.
    t.redlock.servers()[2].ping().await.unwrap();
    t.each[2].grant(&req(&n, &owner(), 1, 1)).await;
}

/// The reported token is the largest a quorum drew, and the servers that drew less are raised
/// to it before the grant is reported, so the next grant counts past it even without the
/// server it came from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_reports_the_largest_token_drawn_and_raises_the_others_to_it() {
    let Some(t) = three() else { return };
    let (n, a, b) = (name(), owner(), owner());
    set(&t.servers[0], &fence_key(&watch_key(&n)), b"100").await;
    // Two permits: every server must grant, so all three answer and two are raised.
    let token = t.redlock.acquire_permits(&req(&n, &a, 1, 2)).await.unwrap();
    assert_eq!(token, Some(101));
    for server in &t.each {
        assert_eq!(server.permits(&n).await.unwrap()[0].fencing_token, 101);
    }
    assert_eq!(t.redlock.permits(&n).await.unwrap()[0].fencing_token, 101);
    assert!(t.redlock.permits_released(&n, &a).await);
    // One permit: servers 1 and 2 are a quorum without server 0, which drew 101.
    t.servers[0].pause();
    let next = t.redlock.acquire_permits(&req(&n, &b, 1, 1)).await.unwrap();
    t.servers[0].resume();
    assert!(next.unwrap() > 101, "{next:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_keeps_one_ticket_until_it_is_granted() {
    let Some(s) = servers(3) else { return };
    let redlock = store(&s, 5_000);
    let (n, a, w) = (name(), owner(), owner());
    redlock.grant(&req(&n, &a, 1, 1)).await;
    redlock.refuse(&queued(&n, &w, 1, 1)).await;
    redlock.refuse(&queued(&n, &w, 1, 1)).await;
    assert_eq!(redlock.tickets.len(), 1);
    assert!(redlock.permits_released(&n, &a).await);
    redlock.grant(&queued(&n, &w, 1, 1)).await;
    assert_eq!(redlock.tickets.len(), 0);
}
