//! Redlock over throwaway servers (see [`crate::store::test_servers`]): the contract, and what
//! only N independent servers have: quorums, servers that are down or paused, tokens drawn
//! from counters that disagree, and announcements from any server.

use super::RedlockStore;
use crate::store::conformance::AcquireFenced;
use crate::store::conformance::{name, next_owner, released_until_heard};
use crate::store::redis::keys::fence_key;
use crate::store::redis::{RedisOptions, RedisStore};
use crate::store::test_servers::{redis_server_or_skip, TestServer};
use crate::store::ValueFormat;
use crate::store::{Acquisition, Handoff, Release, Renewal};
use crate::store::{ErrorKind, HandoffOutcome, ReleaseNotifications};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

mod gate;

pub(super) fn servers(n: usize) -> Option<Vec<TestServer>> {
    redis_server_or_skip().then(|| (0..n).map(|_| TestServer::start(&[])).collect())
}

pub(super) fn options(response_timeout_ms: u64) -> RedisOptions {
    RedisOptions {
        connect_timeout_ms: 1_000,
        response_timeout_ms,
        tls: None,
    }
}

pub(super) fn store(servers: &[TestServer], response_timeout_ms: u64) -> Arc<RedlockStore> {
    let urls: Vec<String> = servers.iter().map(TestServer::url).collect();
    RedlockStore::connect(&urls, &options(response_timeout_ms)).unwrap()
}

/// Opens every server's connection (they open lazily), so that commands sent while a server
/// is paused wait on its socket and run when it goes on.
async fn connected(redlock: &RedlockStore) {
    for server in redlock.servers() {
        server.ping().await.unwrap();
    }
}

/// Three servers of the test's own and a store on them with a response bound of a minute,
/// its connections open (see [`connected`]).
async fn three_connected() -> Option<(Vec<TestServer>, Arc<RedlockStore>)> {
    let s = servers(3)?;
    let redlock = store(&s, 60_000);
    connected(&redlock).await;
    Some((s, redlock))
}

/// Three servers shared by the contract tests (killed when the test process ends).
fn shared() -> Option<crate::store::SharedStore> {
    static SERVERS: OnceLock<Option<Vec<TestServer>>> = OnceLock::new();
    SERVERS
        .get_or_init(|| servers(3))
        .as_ref()
        .map(|s| store(s, 5_000) as _)
}

mod conformance {
    crate::conformance_suite!(super::shared());
}

mod permits {
    crate::permits_suite!(super::shared());
}

async fn raw(server: &TestServer) -> redis::aio::MultiplexedConnection {
    crate::store::test_servers::redis_connection(&server.url()).await
}

async fn get(server: &TestServer, key: &[u8]) -> Option<Vec<u8>> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut raw(server).await)
        .await
        .unwrap()
}

pub(super) async fn set(server: &TestServer, key: &[u8], value: &[u8]) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut raw(server).await)
        .await
        .unwrap();
}

/// Polls `check` every 10 ms for up to 20 s: a guard against a hang, not a bound on how
/// soon (alone, what these tests wait for takes well under a second; under the whole
/// `cargo test`, beside the simulation's seeds on 2 cores, one wait once took over 5 s).
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, check: impl Fn() -> F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_cannot_grant_and_its_partial_grant_is_undone_at_once() {
    let Some(s) = servers(3) else { return };
    let redlock = store(&s, 5_000);
    let k = name();
    set(&s[0], k.as_bytes(), b"other").await;
    set(&s[1], k.as_bytes(), b"other").await;
    assert_eq!(redlock.acquire_fenced(&k, "me", 10_000).await, None);
    // Server 2 granted, and was given back before the call returned.
    assert_eq!(get(&s[2], k.as_bytes()).await, None);
    // One other holder is a minority: the lock is ours.
    let k2 = name();
    set(&s[0], k2.as_bytes(), b"other").await;
    assert!(redlock.acquire_fenced(&k2, "me", 10_000).await.is_some());
    assert_eq!(redlock.inspect(&k2).await.unwrap().unwrap().owner, "me");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_majority_down_acquire_fails_with_their_error_and_leaves_no_grant_behind() {
    let Some(mut s) = servers(3) else { return };
    let redlock = store(&s, 5_000);
    let k = name();
    s[0].kill();
    s[1].kill();
    let err = redlock
        .try_acquire(&k, Acquisition::fenced("me", 10_000))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unreachable, "{err}");
    assert_eq!(get(&s[2], k.as_bytes()).await, None);
    assert!(redlock.ping().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_delays_nothing_while_a_quorum_answers() {
    // Only the per-server bound can end a wait for a paused server.
    let Some((s, redlock)) = three_connected().await else {
        return;
    };
    s[2].pause();
    let k = name();
    let bound = redlock.server_timeout(10_000);
    let started = Instant::now();
    let token = redlock.acquire_fenced(&k, "me", 10_000).await;
    assert!(token.is_some());
    assert!(redlock
        .extend(&k, Renewal::new("me", 10_000))
        .await
        .unwrap());
    assert!(redlock.released(&k, "me").await);
    assert!(started.elapsed() < bound, "{:?}", started.elapsed());
    s[2].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_majority_paused_acquire_fails_as_a_timeout_within_twice_the_server_timeout() {
    let Some((s, redlock)) = three_connected().await else {
        return;
    };
    s[1].pause();
    s[2].pause();
    let k = name();
    let bound = redlock.server_timeout(5_000);
    let started = Instant::now();
    let err = redlock
        .try_acquire(&k, Acquisition::fenced("me", 5_000))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    assert!(
        took < bound * 2,
        "{took:?} with a server timeout of {bound:?}"
    );
    assert_eq!(
        get(&s[0], k.as_bytes()).await,
        None,
        "the partial grant is undone"
    );
    s[1].resume();
    s[2].resume();
    // The paused servers granted once they went on, and were then given it back.
    for server in &s[1..] {
        eventually("the late grants to be undone", || async {
            get(server, k.as_bytes()).await.is_none()
        })
        .await;
    }
}

/// The reported token is the largest a quorum drew; the next holder's quorum may miss the
/// server it came from. The second round lifts the other servers' counters, so the next
/// token is still greater.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_even_when_the_largest_came_from_a_server_outside_the_next_quorum() {
    let Some(s) = servers(3) else { return };
    let redlock = store(&s, 5_000);
    let k = name();
    let fence = fence_key(&k);
    set(&s[0], &fence, b"100").await;
    connected(&redlock).await;
    s[2].pause();
    let first = redlock.acquire_fenced(&k, "a", 10_000).await.unwrap();
    assert_eq!(first, 101);
    assert!(redlock.released(&k, "a").await);
    s[2].resume();
    // Server 2 runs the acquisition and the release it missed.
    eventually("server 2 to catch up", || async {
        get(&s[2], &fence).await.is_some() && get(&s[2], k.as_bytes()).await.is_none()
    })
    .await;
    // Now server 0 (the one at 101) is away: servers 1 and 2 make the quorum.
    s[0].pause();
    let second = redlock.acquire_fenced(&k, "b", 10_000).await.unwrap();
    assert!(second > first, "{second} after {first}");
    let info = redlock.inspect(&k).await.unwrap().unwrap();
    assert_eq!((info.owner.as_str(), info.fencing_token), ("b", second));
    s[0].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_without_a_quorum_gives_back_what_the_next_owner_got() {
    let Some(s) = servers(3) else { return };
    let redlock = store(&s, 5_000);
    let k = name();
    redlock.acquire_fenced(&k, "a", 10_000).await.unwrap();
    // "a" is left with server 0 only: it lost the lock.
    set(&s[1], k.as_bytes(), b"other").await;
    set(&s[2], k.as_bytes(), b"other").await;
    let next = next_owner("b", 10_000, ValueFormat::Fenced);
    let outcome = redlock
        .handoff_or_release(&k, Handoff::new("a", &next))
        .await
        .unwrap();
    assert!(
        matches!(outcome, HandoffOutcome::Released(r) if !r.released),
        "{outcome:?}"
    );
    assert_eq!(get(&s[0], k.as_bytes()).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_announced_by_any_one_server_reaches_the_watchers() {
    let Some(s) = servers(3) else { return };
    let redlock = store(&s, 5_000);
    let k = name();
    let mut releases = redlock.releases();
    redlock.watch(&k).await;
    // Another process that only reaches server 2 takes and frees the key there.
    let lone = RedisStore::connect(&s[2].url(), &options(5_000)).unwrap();
    // A waiter there is refused, which flags the key: only then is its release announced.
    let what = "no announcement reached the watcher";
    let heard = released_until_heard(&*lone, &*lone, &k, &mut releases, what).await;
    assert_eq!(heard, k);
    redlock.unwatch(&k).await;
    assert_eq!(redlock.watched(), 0);
}

/// The lock is on exactly a quorum (3 of 5) and one of those servers dies: the release lets go
/// on the other two, and what remains on the dead one is less than a quorum, so the lock is
/// released (it used to be reported as a store failure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_with_one_holding_server_down_releases_when_no_quorum_can_remain() {
    let Some(mut s) = servers(5) else { return };
    let redlock = store(&s, 1_000);
    let k = name();
    set(&s[3], k.as_bytes(), b"someone else").await;
    set(&s[4], k.as_bytes(), b"someone else").await;
    connected(&redlock).await;
    redlock
        .acquire_fenced(&k, "a", 10_000)
        .await
        .expect("granted by servers 0, 1 and 2");
    s[2].kill();
    let outcome = redlock.release(&k, Release::new("a")).await.unwrap();
    assert!(outcome.released);
    assert_eq!(get(&s[0], k.as_bytes()).await, None);
    assert_eq!(get(&s[1], k.as_bytes()).await, None);
}

/// Issue 46's schedule: a majority goes silent (paused) while an acquisition asks it, the
/// attempt fails and gives back its partial grant, the store replaces the silent servers'
/// connections (nothing came back for a response timeout), and the next attempt of the same
/// owner is granted on the new ones. Only then do the servers read the first attempt's
/// connections: its acquisition and its give-back. Released by owner, that give-back deleted
/// the grant the caller counted on: a second process was granted the key milliseconds later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_that_reaches_a_server_late_never_frees_the_next_attempts_grant() {
    late_give_back(false).await;
}

/// The same schedule, with the engine's clean-up of the failed acquisition (its outcome was
/// unknown: a timeout) behind the give-back: a release by owner, which must be the failed
/// attempt's give-back too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_up_release_that_reaches_a_server_late_never_frees_the_next_attempts_grant() {
    late_give_back(true).await;
}

async fn late_give_back(clean_up: bool) {
    // The servers' answers to an acquisition of a 3 s lease are awaited 300 ms, so the
    // give-back goes out on the same connection before the store replaces it (after a
    // response timeout, 800 ms, without a reply).
    let Some((s, gates, redlock)) = gated_majority().await else {
        return;
    };
    let k = name();
    for g in &gates {
        g.hold();
    }
    let err = redlock
        .try_acquire(&k, Acquisition::fenced("me", 3_000))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    if clean_up {
        // As the engine does for an outcome it did not hear (the held servers time out).
        let _ = redlock.release(&k, Release::new("me")).await;
    }
    connections_replaced(&gates).await;
    redlock.acquire_fenced(&k, "me", 10_000).await.unwrap();
    only_the_next_grant_holds(&gates, &s, &redlock, &k).await;
}

/// A grant given back after it was granted: the engine's give-back of a grant that reached its
/// caller past its lease, before the call asks again with the same owner. A majority goes
/// silent while that release asks it, the store replaces their connections, and once the
/// first lease has run out the owner's next attempt is granted on the new ones. Only then do
/// the servers read the release. Sent by owner, it deleted the next attempt's grant there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_attempts_release_that_reaches_a_server_late_never_frees_the_next_grant() {
    let Some((s, gates, redlock)) = gated_majority().await else {
        return;
    };
    let k = name();
    assert!(redlock.acquire_fenced(&k, "me", 1_000).await.is_some());
    for g in &gates {
        g.hold();
    }
    // As the engine does with a grant that arrived past its lease (the held servers time out).
    let _ = redlock.release(&k, Release::new("me")).await;
    connections_replaced(&gates).await;
    // The held servers keep the first grant until its lease ends.
    let deadline = Instant::now() + Duration::from_secs(5);
    while redlock.acquire_fenced(&k, "me", 10_000).await.is_none() {
        assert!(
            Instant::now() < deadline,
            "the owner's next attempt was never granted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    only_the_next_grant_holds(&gates, &s, &redlock, &k).await;
}

/// Three servers of the test's own, the last two (a majority) behind a [`gate::Gate`], and a
/// store on them with a response bound of 800 ms, its connections open (`None`: skipped).
async fn gated_majority() -> Option<(Vec<TestServer>, [gate::Gate; 2], Arc<RedlockStore>)> {
    let s = servers(3)?;
    let gates = [gate::Gate::open(&s[1]).await, gate::Gate::open(&s[2]).await];
    let urls = vec![s[0].url(), gates[0].url(), gates[1].url()];
    let redlock = RedlockStore::connect(&urls, &options(800)).unwrap();
    connected(&redlock).await;
    Some((s, gates, redlock))
}

/// Lets the connections `gates` hold go, and waits until the servers ran what they held.
async fn let_go(gates: &[gate::Gate]) {
    for g in gates {
        g.let_go().await;
    }
    eventually(
        "the servers to run what their old connections held",
        || async { gates.iter().all(gate::Gate::drained) },
    )
    .await;
}

/// [`let_go`], then checks that the lock `k` is still "me"'s on every server: nobody else is
/// granted it.
async fn only_the_next_grant_holds(
    gates: &[gate::Gate],
    s: &[TestServer],
    redlock: &RedlockStore,
    k: &str,
) {
    let_go(gates).await;
    // (Its token as inspect reads it may be another: the first two servers to answer name
    // the owner, and one of them may not have been raised to the token reported.)
    let info = redlock.inspect(k).await.unwrap();
    assert_eq!(
        info.map(|i| i.owner),
        Some("me".to_string()),
        "the grant is still on a quorum"
    );
    for server in s {
        assert!(
            get(server, k.as_bytes()).await.is_some(),
            "the next grant is held on every server"
        );
    }
    assert_eq!(redlock.acquire_fenced(k, "other", 10_000).await, None);
    assert!(redlock.released(k, "me").await);
}

/// Waits until the store replaced its connections through `gates` (nothing came back on them
/// for a response timeout).
async fn connections_replaced(gates: &[gate::Gate]) {
    eventually("the silent servers' connections to be replaced", || async {
        gates.iter().all(gate::Gate::held_ones_closed)
    })
    .await;
}

/// Three servers of the test's own, each behind a [`gate::Gate`], and a store on the gates
/// with a response bound of `response_timeout_ms`, its connections open (`None`: skipped).
async fn gated_three(
    response_timeout_ms: u64,
) -> Option<(Vec<TestServer>, [gate::Gate; 3], Arc<RedlockStore>)> {
    let s = servers(3)?;
    let gates = [
        gate::Gate::open(&s[0]).await,
        gate::Gate::open(&s[1]).await,
        gate::Gate::open(&s[2]).await,
    ];
    let urls: Vec<String> = gates.iter().map(gate::Gate::url).collect();
    let redlock = RedlockStore::connect(&urls, &options(response_timeout_ms)).unwrap();
    connected(&redlock).await;
    Some((s, gates, redlock))
}

/// The engine may ask for one owner's permits twice at once: its waiter's own request, and the
/// handoff a local release makes to it. Here the own request (for both permits of two) is
/// refused by server 0, where another process holds one, while servers 1 and 2 are still
/// silent; the handoff's request (one permit: it fits on server 0) was sent meanwhile and finds
/// the owner holding on servers 1 and 2. The refused request's give-back must not free the
/// grant the handoff reports: its holder would find it gone at its release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_never_gives_back_the_permits_another_request_of_its_owner_reports() {
    use crate::store::permit_conformance::{req, Ask};
    use crate::store::permits::watch_key;
    use crate::store::PermitRequest;
    let Some((s, gates, redlock)) = gated_three(60_000).await else {
        return;
    };
    let (n, w) = (name(), crate::store::conformance::owner());
    // Counters that make the handoff's grant carry one token everywhere (no raise to fail).
    let fence = fence_key(&watch_key(&n));
    set(&s[0], &fence, b"100").await;
    for server in &s[1..] {
        set(server, &fence, b"101").await;
    }
    let other = RedisStore::connect(&s[0].url(), &options(5_000)).unwrap();
    other.grant(&req(&n, "other", 1, 2)).await;
    let request = |permits: u32| {
        let (redlock, n, w) = (redlock.clone(), n.clone(), w.clone());
        tokio::spawn(async move {
            let r = PermitRequest {
                ttl_ms: 60_000,
                ..req(&n, &w, permits, 2)
            };
            redlock.acquire_permits(&r).await
        })
    };
    let held =
        |from: usize| -> Vec<usize> { gates[from..].iter().map(gate::Gate::held_bytes).collect() };
    for g in &gates {
        g.hold();
    }
    let own = request(2);
    eventually("the own request to reach every server's relay", || async {
        held(0).iter().all(|&b| b > 0)
    })
    .await;
    let sent = held(0);
    let handoff = request(1);
    // Unless something holds it back, the handoff's request reaches the relays too.
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && held(0).iter().zip(&sent).any(|(b, s)| b <= s) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = held(1);
    gates[0].let_go().await;
    eventually(
        "the own request's give-back to reach the silent relays",
        || async { held(1).iter().zip(&before).all(|(b, s)| b > s) },
    )
    .await;
    for g in &gates[1..] {
        g.let_go().await;
    }
    assert_eq!(own.await.unwrap().unwrap(), None, "server 0 refused it");
    assert!(
        handoff.await.unwrap().unwrap().is_some(),
        "the handoff's grant"
    );
    let holders = redlock.permits(&n).await.unwrap();
    assert_eq!(
        holders.iter().map(|h| h.owner.as_str()).collect::<Vec<_>>(),
        vec![w.as_str()],
        "the handoff's permits are held on every server"
    );
    assert!(redlock.permits_released(&n, &w).await);
    assert_eq!(redlock.turns.len(), 0);
}

/// Issue 46's schedule for a semaphore of two permits (a grant needs all three servers):
/// every server goes silent while a request asks it, the request fails and gives back its
/// partial grant, the store replaces the connections, and the next request of the same
/// owner is granted on the new ones. Only then do the servers read the first request's
/// connections: its acquisition and its give-back. Released by owner, that give-back freed
/// the permits the caller counted on, on every server: a third holder could be granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_give_back_that_reaches_the_servers_late_never_frees_the_next_requests_permits() {
    late_permit_give_back(false).await;
}

/// The same schedule, with the engine's clean-up of the failed request (its outcome was
/// unknown: a timeout) behind the give-back: a release by owner, which must be the failed
/// attempt's give-back too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_clean_up_that_reaches_the_servers_late_never_frees_the_next_requests_permits() {
    late_permit_give_back(true).await;
}

/// The permits' form of
/// [`a_granted_attempts_release_that_reaches_a_server_late_never_frees_the_next_grant`]: a
/// release of granted permits (the engine's give-back of a grant that came past its lease)
/// that every server reads only after the owner's next request was granted on new
/// connections frees nothing of that grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_requests_release_that_reaches_the_servers_late_never_frees_the_next_grant() {
    use crate::store::permit_conformance::req;
    use crate::store::PermitRequest;
    let Some((s, gates, redlock)) = gated_three(800).await else {
        return;
    };
    let (n, me) = (name(), crate::store::conformance::owner());
    let first = PermitRequest {
        ttl_ms: 1_000,
        ..req(&n, &me, 1, 2)
    };
    assert!(redlock.acquire_permits(&first).await.unwrap().is_some());
    for g in &gates {
        g.hold();
    }
    // As the engine does with a grant that arrived past its lease (every server times out).
    let _ = redlock.release_permits(&n, Release::new(&me)).await;
    connections_replaced(&gates).await;
    // The servers keep the first grant until its lease ends.
    let next = PermitRequest {
        ttl_ms: 10_000,
        ..req(&n, &me, 1, 2)
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while redlock.acquire_permits(&next).await.unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the owner's next request was never granted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    only_the_next_permit_holds(&gates, &s, &redlock, &n, &me).await;
}

async fn late_permit_give_back(clean_up: bool) {
    use crate::store::permit_conformance::req;
    use crate::store::PermitRequest;
    // As in `late_give_back`: answers to a request for a 3 s lease are awaited 300 ms, so the
    // give-back goes out on the same connections before they are replaced (after 800 ms).
    let Some((s, gates, redlock)) = gated_three(800).await else {
        return;
    };
    let (n, me) = (name(), crate::store::conformance::owner());
    for g in &gates {
        g.hold();
    }
    let first = PermitRequest {
        ttl_ms: 3_000,
        ..req(&n, &me, 1, 2)
    };
    let err = redlock.acquire_permits(&first).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    if clean_up {
        // As the engine does for an outcome it did not hear.
        let _ = redlock.release_permits(&n, Release::new(&me)).await;
    }
    connections_replaced(&gates).await;
    let next = PermitRequest {
        ttl_ms: 10_000,
        ..req(&n, &me, 1, 2)
    };
    assert!(redlock.acquire_permits(&next).await.unwrap().is_some());
    only_the_next_permit_holds(&gates, &s, &redlock, &n, &me).await;
}

/// [`let_go`], then checks that `me`'s next permit (of 2) is held on every server: one more
/// owner is granted, not two.
async fn only_the_next_permit_holds(
    gates: &[gate::Gate],
    s: &[TestServer],
    redlock: &RedlockStore,
    n: &str,
    me: &str,
) {
    use crate::store::permit_conformance::req;
    let_go(gates).await;
    for server in s {
        let each = RedisStore::connect(&server.url(), &options(5_000)).unwrap();
        let (_, holders) = each.permits_limit(n).await.unwrap();
        assert_eq!(
            holders.iter().map(|h| h.owner.as_str()).collect::<Vec<_>>(),
            vec![me],
            "the next request's permit is held on every server"
        );
    }
    // Nobody else can take the owner's permit: one is left.
    let other = crate::store::conformance::owner();
    assert!(redlock
        .acquire_permits(&req(n, &other, 1, 2))
        .await
        .unwrap()
        .is_some());
    let third = crate::store::conformance::owner();
    assert_eq!(
        redlock
            .acquire_permits(&req(n, &third, 1, 2))
            .await
            .unwrap(),
        None
    );
    assert!(redlock.permits_released(n, me).await);
}

/// A release by owner names the owner's last attempt, granted or not, for as long as that
/// attempt's grants may last (extensions lengthen it); a refusal or an untagged grant of the
/// same owner makes it an ordinary release again; lapsed attempts are swept.
#[test]
fn a_release_by_owner_goes_by_its_last_attempt_while_that_attempts_grants_may_last() {
    use super::attempt::Latest;
    let (long, none) = (Duration::from_secs(60), Duration::ZERO);
    let l = Latest::default();
    l.started("k", "o", 1, none);
    assert_eq!(l.release_tag("k", "o"), None, "lapsed");
    l.settled("k", "o", 2, long);
    assert_eq!(l.release_tag("k", "o"), Some(2), "granted");
    assert_eq!(l.release_tag("k", "other"), None);
    l.forget("k", "o", Some(3));
    assert_eq!(
        l.release_tag("k", "o"),
        Some(2),
        "another attempt's refusal"
    );
    l.started("k", "o", 3, long);
    assert_eq!(l.release_tag("k", "o"), Some(3), "not granted yet");
    l.forget("k", "o", Some(3));
    assert_eq!(l.release_tag("k", "o"), None, "refused");
    l.settled("k", "o", 4, none);
    l.extended("k", "o", long);
    assert_eq!(l.release_tag("k", "o"), Some(4), "extended");
    l.forget("k", "o", None);
    assert_eq!(l.release_tag("k", "o"), None, "an untagged grant");
    for i in 0..5_000 {
        l.started("k", &i.to_string(), i, none);
    }
    assert!(l.len() <= 2_048, "lapsed attempts are swept: {}", l.len());
}

/// A request of an owner that holds permits through this store is of the attempt that holds
/// them (the handoff to a local waiter whose own request was just granted). Refused (a server
/// down, where 2 permits on 3 servers need all three), its give-back must not free the
/// permits the owner holds on the servers that renewed them: their holder still counts on
/// them, and with them gone a request of another owner could be granted beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_of_a_holding_owner_leaves_its_permits_on_the_servers() {
    use crate::store::permit_conformance::{req, Ask};
    let Some((mut s, redlock)) = three_connected().await else {
        return;
    };
    let (n, w) = (name(), crate::store::conformance::owner());
    redlock.grant(&req(&n, &w, 1, 2)).await;
    s[2].kill();
    let again = redlock.acquire_permits(&req(&n, &w, 1, 2)).await;
    assert!(!matches!(again, Ok(Some(_))), "no quorum: {again:?}");
    for server in &s[..2] {
        let alone = RedisStore::connect(&server.url(), &options(5_000)).unwrap();
        let (_, holders) = alone.permits_limit(&n).await.unwrap();
        assert_eq!(
            holders.iter().map(|h| h.owner.as_str()).collect::<Vec<_>>(),
            vec![w.as_str()],
            "the held permits are still on every live server"
        );
    }
}
