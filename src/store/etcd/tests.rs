//! The etcd store against a throwaway etcd member (`__test__/fixtures/etcd.js`, started once
//! per test process on free ports, stopped with it): the contract, and what this store adds.
//! Skipped with a message when etcd is not installed, failed under `CI`.

use super::*;
use crate::store::conformance::AcquireFenced;
use crate::store::conformance::{name, owner};
use crate::store::test_servers::{installed_or_skip, node_fixture, runs};
use std::process::Child;
use std::sync::{Mutex, OnceLock};

/// The URL of the etcd this test process started, or `None` (skip) when etcd is not
/// installed outside CI.
fn etcd() -> Option<String> {
    // The fixture ends its member when its stdin (held here) closes: when this process ends.
    static SERVER: OnceLock<Option<(String, Mutex<Child>)>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let hint = "etcd is not installed (apt-get install etcd-server)";
            installed_or_skip(runs("etcd"), hint).then(|| {
                let (port, child) = node_fixture("etcd.js");
                (format!("etcd://127.0.0.1:{port}"), Mutex::new(child))
            })
        })
        .as_ref()
        .map(|(url, _)| url.clone())
}

fn options() -> EtcdOptions {
    EtcdOptions {
        connect_timeout_ms: 2000,
        response_timeout_ms: 5000,
        tls: None,
    }
}

/// A store of its own (another process, as far as etcd can tell), as the registry opens it:
/// within the call bound.
fn store() -> Option<crate::store::SharedStore> {
    let url = etcd()?;
    let store = EtcdStore::connect(&url, options()).unwrap();
    Some(crate::store::bounded::bounded(
        "etcd",
        store,
        crate::store::bounded::call_timeout(5000, 5000),
    ))
}

mod contract {
    crate::conformance_suite!(super::store());
    crate::permits_suite!(super::store());
}

/// Two stores on the one etcd (two processes), or `None` when it is not there.
fn two_stores() -> Option<(crate::store::SharedStore, crate::store::SharedStore)> {
    Some((store()?, store()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_exclusive_across_stores_and_tokens_are_revisions_that_grow() {
    let Some((a, b)) = two_stores() else { return };
    let (k, x, y) = (name(), owner(), owner());
    let first = a.acquire_fenced(&k, &x, 10_000).await.unwrap();
    assert_eq!(b.acquire_fenced(&k, &y, 10_000).await, None);
    assert!(a.released(&k, &x).await);
    let second = b.acquire_fenced(&k, &y, 10_000).await.unwrap();
    assert!(second > first);
    // Another store sees the holder and its token.
    let info = a.inspect(&k).await.unwrap().unwrap();
    assert_eq!(
        (info.owner.as_str(), info.fencing_token),
        (y.as_str(), second)
    );
    assert!(info.remaining_ms > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_ends_is_deleted_by_its_holders_store_and_announced_to_others() {
    let Some((a, b)) = two_stores() else { return };
    let (k, x) = (name(), owner());
    let notes = b.release_notifications().unwrap();
    let mut releases = notes.releases();
    notes.watch(&k).await;
    // The watch stream is open before the grant's key goes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.acquire_fenced(&k, &x, 200).await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if releases.recv().await.unwrap() == k {
                return;
            }
        }
    })
    .await;
    assert!(heard.is_ok(), "the expiry was announced");
    assert_eq!(b.inspect(&k).await.unwrap(), None);
    notes.unwatch(&k).await;
    assert_eq!(notes.watched(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_store_frees_what_was_given_back_and_leaves_a_grant_it_still_holds() {
    // What a store still holds at close was left on purpose (a lock its holder stopped
    // extending, for another process to adopt): it stays until its lease ends. Everything else
    // on the store's leases (here: its waiter's mark) is freed at once.
    let Some((a, b)) = two_stores() else { return };
    let (k, x, y) = (name(), owner(), owner());
    a.acquire_fenced(&k, &x, 60_000).await.unwrap();
    let (k2, x2) = (name(), owner());
    b.acquire_fenced(&k2, &x2, 60_000).await.unwrap();
    // (Refused with another lease length: its mark is on another etcd lease than the lock
    // left held, which close keeps.)
    assert!(a.acquire_fenced(&k2, &x, 30_000).await.is_none());
    a.close().await;
    assert!(b.acquire_fenced(&k, &y, 10_000).await.is_none());
    assert_eq!(
        b.inspect(&k).await.unwrap().unwrap().owner,
        x,
        "left to its lease"
    );
    let released = b.release(&k2, Release::new(&x2)).await.unwrap();
    assert!(released.released);
    assert!(!released.others_waiting, "the closed store's mark is gone");
    assert!(b.operator().unwrap().force_release(&k).await.unwrap());
    let err = a.inspect(&k).await.unwrap_err();
    assert_eq!(err.kind, crate::store::ErrorKind::Closed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_member_is_skipped_for_the_next_one() {
    let Some(url) = etcd() else {
        return;
    };
    let port = crate::store::test_servers::free_port();
    let live = url.trim_start_matches("etcd://");
    let s = EtcdStore::connect(&format!("etcd://127.0.0.1:{port},{live}"), options()).unwrap();
    s.ping().await.unwrap();
    let (k, x) = (name(), owner());
    assert!(s.acquire_fenced(&k, &x, 10_000).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_answering_is_an_unreachable_error_within_the_bound() {
    let port = crate::store::test_servers::free_port();
    let s = EtcdStore::connect(
        &format!("etcd://u:hunter2@127.0.0.1:{port}"),
        EtcdOptions {
            connect_timeout_ms: 500,
            response_timeout_ms: 500,
            tls: None,
        },
    )
    .unwrap();
    let started = Instant::now();
    let err = s.ping().await.unwrap_err();
    assert_eq!(err.kind, crate::store::ErrorKind::Unreachable, "{err}");
    assert!(!err.message.contains("hunter2"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_says_whether_another_store_was_refused_the_lock_meanwhile() {
    let Some((a, b)) = two_stores() else { return };
    let (k, x, y) = (name(), owner(), owner());
    a.acquire_fenced(&k, &x, 10_000).await.unwrap();
    // Refused by its own store only: nobody else waits.
    assert_eq!(a.acquire_fenced(&k, &y, 10_000).await, None);
    let alone = a.release(&k, Release::new(&x)).await.unwrap();
    assert!(alone.released && !alone.others_waiting);
    a.acquire_fenced(&k, &x, 10_000).await.unwrap();
    assert_eq!(b.acquire_fenced(&k, &y, 10_000).await, None);
    let waited = a.release(&k, Release::new(&x)).await.unwrap();
    assert!(waited.released && waited.others_waiting);
    // The marks went with the release.
    a.acquire_fenced(&k, &x, 10_000).await.unwrap();
    assert!(
        !a.release(&k, Release::new(&x))
            .await
            .unwrap()
            .others_waiting
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_nobody_times_ends_with_its_etcd_lease_while_the_stores_other_locks_are_extended() {
    // A key this store no longer times (its timer's deletes failed, or the grant was applied
    // after its request timed out) must end with its etcd lease, which the store's other
    // locks of the same length must not keep alive.
    let Some(url) = etcd() else { return };
    let s = EtcdStore::connect(&url, options()).unwrap();
    let (kept, forgotten, x, y) = (name(), name(), owner(), owner());
    let acq = |owner| Acquisition {
        format: crate::store::ValueFormat::Fenced,
        ..Acquisition::fenced(owner, 1000)
    };
    assert!(s.try_acquire(&kept, acq(&x)).await.unwrap().is_some());
    assert!(s.try_acquire(&forgotten, acq(&y)).await.unwrap().is_some());
    let k = lock_key(&forgotten);
    s.held.forget(&k);
    let started = Instant::now();
    // Its etcd lease: 1.5 × ttl in whole seconds, and etcd's half-second check of its leases.
    let bound = Duration::from_millis(2000 + 500 + 1500);
    loop {
        assert!(s.extend(&kept, Renewal::new(&x, 1000)).await.unwrap());
        let left = kvs(&s
            .request("/v3/kv/range", &json!({"key": b64(&k)}))
            .await
            .unwrap());
        if left.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < bound,
            "the key nobody times is still there after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(s.released(&kept, &x).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_hears_of_its_loss_when_its_deleted_key_is_granted_to_another_before_the_watch_tells(
) {
    // A waiter of this store may read the deletion (an operator's, a revoked lease's) and be
    // granted the key before the watch stream reads it; the stream's event then no longer
    // matches what this store holds. Without a stream here, the grant alone must tell.
    let Some(url) = etcd() else { return };
    let s = EtcdStore::connect(&url, options()).unwrap();
    s.watches.close();
    let mut losses = s.watches.losses().unwrap();
    let (k, x, y) = (name(), owner(), owner());
    assert!(s
        .try_acquire(&k, Acquisition::fenced(&x, 10_000))
        .await
        .unwrap()
        .is_some());
    let deleted = txn::txn(vec![], vec![txn::delete(&lock_key(&k))], vec![]);
    s.txn(&deleted, Retry::Safe).await.unwrap();
    assert!(s
        .try_acquire(&k, Acquisition::fenced(&y, 10_000))
        .await
        .unwrap()
        .is_some());
    let loss = tokio::time::timeout(Duration::from_secs(2), losses.recv())
        .await
        .expect("the holder it replaced was never reported lost")
        .unwrap();
    assert_eq!(
        (loss.key.as_str(), loss.owner.as_str()),
        (k.as_str(), x.as_str())
    );
    // The new holder is not: its own release ends it.
    assert!(s.released(&k, &y).await);
    assert!(losses.try_recv().is_err());
}
