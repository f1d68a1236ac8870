//! Semaphores on DynamoDB beyond the contract (`permits_suite!` runs that): leases reckoned
//! by watching across processes (a separate store watches on its own, as another process
//! does), the item and its key space, optimistic concurrency, lost replies, and the bounds.

use super::*;
use crate::store::dynamodb::permit_item;
use crate::store::permit_conformance::{
    a_lock_and_a_semaphore_of_one_name, item, queued, req, Ask,
};
use crate::store::PermitRequest;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::io::AsyncWriteExt;

/// The semaphore's item as another client reads it.
async fn permit_item(name: &str) -> Option<Map<String, Value>> {
    let api = raw(&dynalite().unwrap()).await;
    get_item(&api, TABLE, &permit_item::partition_value(name)).await
}

/// The semaphore's stored state and version.
async fn stored(name: &str) -> (permit_item::Stored, String) {
    let item = permit_item(name).await;
    permit_item::parse(item.as_ref()).unwrap().unwrap()
}

/// Asks every 10 ms until granted; returns the token and when it was granted.
async fn poll_until_granted(s: &DynamoStore, r: &PermitRequest<'_>) -> (u64, Instant) {
    loop {
        if let Some(token) = s.acquire_permits(r).await.unwrap() {
            return (token, Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Two stores, as two processes would have: `holder` was granted every permit of semaphore
/// `n` (of `limit`) for `a` with a lease of [`LEASE`], then `contender` was refused one for `b`.
struct HeldElsewhere {
    holder: Arc<DynamoStore>,
    contender: Arc<DynamoStore>,
    n: String,
    a: String,
    b: String,
    token: u64,
}

/// The lease [`HeldElsewhere`]'s holder was granted.
const LEASE: Duration = Duration::from_millis(300);

/// Sets up [`HeldElsewhere`] (`None`: skipped).
async fn held_elsewhere(limit: u32) -> Option<HeldElsewhere> {
    let (holder, contender) = store().zip(store())?;
    let (n, a, b) = (name(), owner(), owner());
    let token = holder
        .grant(&PermitRequest {
            ttl_ms: LEASE.as_millis() as u64,
            ..req(&n, &a, limit, limit)
        })
        .await;
    contender.refuse(&req(&n, &b, 1, limit)).await;
    Some(HeldElsewhere {
        holder,
        contender,
        n,
        a,
        b,
        token,
    })
}

#[tokio::test]
async fn permits_held_elsewhere_are_reclaimed_only_after_their_version_was_watched_for_a_lease() {
    let Some(h) = held_elsewhere(2).await else {
        return;
    };
    let first_seen = Instant::now();
    let (token, granted_at) = poll_until_granted(&h.contender, &req(&h.n, &h.b, 1, 2)).await;
    assert!(token > h.token, "{token} after {}", h.token);
    assert!(
        granted_at - first_seen > LEASE,
        "granted {:?} after first sight",
        granted_at - first_seen
    );
    assert!(!h
        .holder
        .extend_permits(&h.n, Renewal::new(&h.a, 300))
        .await
        .unwrap());
    assert!(!h.holder.permits_released(&h.n, &h.a).await);
}

#[tokio::test]
async fn an_extension_elsewhere_restarts_the_watch() {
    let Some(h) = held_elsewhere(1).await else {
        return;
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(h
        .holder
        .extend_permits(&h.n, Renewal::new(&h.a, 300))
        .await
        .unwrap());
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        h.contender
            .acquire_permits(&req(&h.n, &h.b, 1, 1))
            .await
            .unwrap(),
        None,
        "the first version was watched for a lease, but it is no longer the holder's"
    );
    let new_version_seen = Instant::now();
    let (_, granted_at) = poll_until_granted(&h.contender, &req(&h.n, &h.b, 1, 1)).await;
    assert!(granted_at - new_version_seen > LEASE);
}

#[tokio::test]
async fn a_semaphore_has_an_item_of_its_own_that_no_lock_name_reaches() {
    let Some(s) = store() else { return };
    let n = name();
    let (a, _) = a_lock_and_a_semaphore_of_one_name(&*s, &n).await;
    let item = permit_item(&n).await.unwrap();
    assert!(
        !item.contains_key("ownerName"),
        "nothing reads it as a lock"
    );
    let api = raw(&dynalite().unwrap()).await;
    let lock = get_item(&api, TABLE, &n).await.unwrap();
    assert_eq!(lock["ownerName"], json!({"S": a}));
    assert!(!lock.contains_key(permit_item::STATE));
    let reserved = permit_item::partition_value(&n);
    let refused = s
        .try_acquire(&reserved, Acquisition::fenced(&a, 10_000))
        .await;
    assert_eq!(refused.unwrap_err().kind, ErrorKind::Invalid);
    assert_eq!(
        s.inspect(&reserved).await.unwrap_err().kind,
        ErrorKind::Invalid
    );
    let listed = s
        .operator()
        .unwrap()
        .list(permit_item::PREFIX, 100)
        .await
        .unwrap();
    assert_eq!(listed, []);
}

/// A proxy to dynalite that, once armed, lets the next `UpdateItem` reach the server and then
/// closes the connection instead of passing the reply on (a reply lost after the write).
async fn lossy_proxy(upstream: String) -> (String, Arc<AtomicBool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let upstream = upstream.trim_start_matches("http://").to_owned();
    let armed = Arc::new(AtomicBool::new(false));
    let arm = armed.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let (upstream, armed) = (upstream.clone(), armed.clone());
            tokio::spawn(async move {
                while let Some(request) = read_http_message(&mut client).await {
                    let update = String::from_utf8_lossy(&request).contains(".UpdateItem");
                    let mut server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
                    server.write_all(&request).await.unwrap();
                    let Some(reply) = read_http_message(&mut server).await else {
                        return;
                    };
                    if update && armed.swap(false, Ordering::SeqCst) {
                        return;
                    }
                    if client.write_all(&reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (endpoint, arm)
}

#[tokio::test]
async fn an_acquisition_whose_reply_was_lost_is_sent_again_and_gets_its_own_token() {
    let Some(endpoint) = dynalite() else { return };
    store().unwrap().ping().await.unwrap();
    let (proxy, armed) = lossy_proxy(endpoint).await;
    let s = DynamoStore::connect(&url(&proxy, TABLE), options(DynamoOptions::default())).unwrap();
    let (n, a) = (name(), owner());
    armed.store(true, Ordering::SeqCst);
    let token = s.grant(&req(&n, &a, 2, 3)).await;
    assert!(!armed.load(Ordering::SeqCst), "a reply was lost");
    let (state, _) = stored(&n).await;
    assert_eq!(state.holders.len(), 1, "{state:?}");
    assert_eq!(
        (state.holders[0].owner.as_str(), state.holders[0].permits),
        (a.as_str(), 2)
    );
    assert_eq!((state.holders[0].token, state.fence), (token, token));
}

#[tokio::test]
async fn delete_on_release_removes_an_idle_semaphores_item_and_the_next_token_comes_from_the_clock()
{
    let Some(s) = store_with(DynamoOptions {
        delete_on_release: true,
        ..DynamoOptions::default()
    }) else {
        return;
    };
    let (n, a, b) = (name(), owner(), owner());
    let first = s.grant(&req(&n, &a, 1, 1)).await;
    assert!(s.permits_released(&n, &a).await);
    assert_eq!(permit_item(&n).await, None);
    tokio::time::sleep(Duration::from_millis(2)).await;
    let second = s.grant(&req(&n, &b, 1, 1)).await;
    assert!(second > first + 1000, "{second} after {first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_stores_never_grant_beyond_the_limit() {
    let stores: Vec<Arc<DynamoStore>> = (0..3).filter_map(|_| store()).collect();
    if stores.len() < 3 {
        return;
    }
    let n = name();
    let tries = stores.iter().flat_map(|s| {
        (0..4).map(|_| {
            let (s, n) = (s.clone(), n.clone());
            tokio::spawn(async move { s.acquire_permits(&req(&n, &owner(), 1, 4)).await })
        })
    });
    let granted = futures_util::future::join_all(tries.collect::<Vec<_>>())
        .await
        .into_iter()
        .filter(|r| r.as_ref().unwrap().as_ref().unwrap().is_some())
        .count();
    assert_eq!(granted, 4);
    let (state, _) = stored(&n).await;
    assert_eq!(state.holders.len(), 4);
}

#[tokio::test]
async fn what_is_watched_of_a_semaphore_goes_once_it_is_seen_idle() {
    let Some((a, b)) = store().zip(store()) else {
        return;
    };
    for _ in 0..5 {
        let (n, x, y) = (name(), owner(), owner());
        a.grant(&req(&n, &x, 1, 1)).await;
        b.refuse(&queued(&n, &y, 1, 1)).await;
        assert!(a.permits_released(&n, &x).await);
        b.grant(&queued(&n, &y, 1, 1)).await;
        assert!(b.permits_released(&n, &y).await);
        // a last saw y queued; its next look finds the semaphore idle.
        assert_eq!(a.permits(&n).await.unwrap(), []);
    }
    assert_eq!((a.watched(), b.watched()), (0, 0));
}

#[tokio::test]
async fn a_refused_try_and_a_look_write_nothing() {
    let Some(s) = store() else { return };
    let (n, a) = (name(), owner());
    s.grant(&req(&n, &a, 2, 2)).await;
    let (_, version) = stored(&n).await;
    s.refuse(&req(&n, &owner(), 1, 2)).await;
    assert!(!s
        .extend_permits(&n, Renewal::new(&owner(), 1_000))
        .await
        .unwrap());
    assert!(
        !s.release_permits(&n, Release::new(&owner()))
            .await
            .unwrap()
            .released
    );
    assert_eq!(s.permits(&n).await.unwrap().len(), 1);
    assert_eq!(stored(&n).await.1, version);
}

#[tokio::test]
async fn a_batch_extends_every_holder_of_one_semaphore_in_one_write() {
    let Some(s) = store() else { return };
    let (n, m, a, b, c) = (name(), name(), owner(), owner(), owner());
    for (name, owner) in [(&n, &a), (&n, &b), (&m, &c)] {
        s.grant(&req(name, owner, 1, 2)).await;
    }
    let items = [(&n, &a), (&m, &c), (&n, &b)].map(|(k, o)| item(k, o, 20_000));
    assert_eq!(s.extend_all(&items).await, [true, true, true]);
    let (state, version) = stored(&n).await;
    assert!(
        state
            .holders
            .iter()
            .all(|h| h.lease == 20_000 && h.version == version),
        "both holders were set by the write that left the item at {version}: {state:?}"
    );
}

#[tokio::test]
async fn a_state_too_large_for_one_item_is_refused_with_a_clear_error() {
    let Some(s) = store() else { return };
    let n = name();
    let (a, b) = ("a".repeat(200 * 1024), "b".repeat(200 * 1024));
    s.grant(&req(&n, &a, 1, 2)).await;
    let err = s.acquire_permits(&req(&n, &b, 1, 2)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Invalid);
    assert!(
        err.message.contains("more than one DynamoDB item holds"),
        "{err}"
    );
    assert_eq!(s.permits(&n).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_malformed_semaphore_item_is_a_server_error_that_names_it() {
    let Some(s) = store() else { return };
    s.ping().await.unwrap();
    let n = name();
    let api = raw(&dynalite().unwrap()).await;
    put_item(
        &api,
        TABLE,
        json!({
            "key": {"S": permit_item::partition_value(&n)},
            "permitVersion": {"S": "v"}, "permitState": {"S": "{\"fence\": \"x\"}"},
        }),
    )
    .await;
    let err = s.permits(&n).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Server);
    assert!(err.message.contains(&n), "{err}");
}

/// Releases and extensions have no next poll to fall back on: however many holders of one
/// semaphore change it at once, each keeps writing until its deadline, not for a count.
#[tokio::test]
async fn many_holders_releasing_one_semaphore_at_once_all_release() {
    let Some(s) = store() else { return };
    const HOLDERS: u32 = 48;
    let n = name();
    let owners: Vec<String> = (0..HOLDERS).map(|_| owner()).collect();
    for o in &owners {
        s.grant(&req(&n, o, 1, HOLDERS)).await;
    }
    let extended = futures_util::future::join_all(
        owners
            .iter()
            .map(|o| s.extend_permits(&n, Renewal::new(o, 10_000))),
    )
    .await;
    for e in extended {
        assert!(e.unwrap(), "an extension of a live holder");
    }
    let released = futures_util::future::join_all(
        owners
            .iter()
            .map(|o| s.release_permits(&n, Release::new(o))),
    )
    .await;
    for r in released {
        assert!(r.unwrap().released, "a release of a live holder");
    }
    assert!(s.permits(&n).await.unwrap().is_empty());
}
