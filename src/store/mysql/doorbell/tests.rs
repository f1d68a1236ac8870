//! Doorbell tests: the ring rules and statement texts alone, then against the MariaDB at
//! `TEST_URL` (failing, not skipping, when it is down), a second store standing in for another
//! process.

use super::*;
use crate::store::conformance::{name, owner, AcquireFenced};
use crate::store::mysql::tests::{options, TEST_URL};
use crate::store::permit_conformance::req;
use crate::store::{LockStore, Release};
use tokio::sync::broadcast::error::TryRecvError;

fn seen(items: &[(&str, Seen)]) -> Vec<(String, Seen)> {
    items
        .iter()
        .map(|(n, s)| (n.to_string(), s.clone()))
        .collect()
}

#[test]
fn a_lock_rings_when_found_free_after_it_was_live_and_only_then() {
    let mut looks = Looks::default();
    assert!(looks.record(seen(&[("k", Seen::Lock(true))])).is_empty());
    assert!(looks.record(seen(&[("k", Seen::Lock(true))])).is_empty());
    assert_eq!(looks.record(seen(&[("k", Seen::Lock(false))])), ["k"]);
    assert!(looks.record(seen(&[("k", Seen::Lock(false))])).is_empty());
}

#[test]
fn a_lock_found_free_at_its_first_look_rings() {
    let mut looks = Looks::default();
    assert_eq!(looks.record(seen(&[("k", Seen::Lock(false))])), ["k"]);
}

#[test]
fn a_name_no_longer_watched_is_forgotten_and_rings_again_when_watched_again() {
    let mut looks = Looks::default();
    looks.record(seen(&[("k", Seen::Lock(false))]));
    looks.record(seen(&[]));
    assert_eq!(looks.record(seen(&[("k", Seen::Lock(false))])), ["k"]);
}

#[test]
fn after_the_connection_failed_every_free_lock_rings_again() {
    let mut looks = Looks::default();
    looks.record(seen(&[("k", Seen::Lock(false))]));
    looks.forget();
    assert_eq!(looks.record(seen(&[("k", Seen::Lock(false))])), ["k"]);
}

#[test]
fn a_semaphore_rings_whenever_its_live_rows_change() {
    let mut looks = Looks::default();
    let print = |p: &str| Seen::Permits(p.to_owned());
    assert_eq!(looks.record(seen(&[("s", print("1:1:5:1"))])), ["s"]);
    assert!(looks.record(seen(&[("s", print("1:1:5:1"))])).is_empty());
    assert_eq!(looks.record(seen(&[("s", print("1:1:6:1"))])), ["s"]);
    assert_eq!(looks.record(seen(&[("s", print(""))])), ["s"]);
}

#[test]
fn watched_names_of_semaphores_are_told_from_locks() {
    assert_eq!(semaphore_of(&watch_key("s")), Some("s"));
    assert_eq!(semaphore_of("s"), None);
}

#[test]
fn each_look_statement_has_one_placeholder_per_name_of_its_size() {
    let looking = Looking::new("t");
    for texts in [&looking.locks, &looking.permits] {
        assert_eq!(texts.len(), bucket(MAX_NAMES) + 1);
        for (i, text) in texts.iter().enumerate() {
            assert_eq!(text.matches('?').count(), 1 << i, "{text}");
        }
    }
    assert!(looking.locks[0].contains("`t`"));
    assert!(looking.permits[0].contains("`t_permits`"));
    assert_eq!((bucket(1), bucket(2), bucket(3), bucket(256)), (0, 1, 2, 8));
}

fn store() -> MysqlStore {
    MysqlStore::connect(TEST_URL, options(2)).unwrap()
}

/// Waits until `s`'s doorbell has completed a look that started after this call.
async fn a_look_after_now(s: &MysqlStore) {
    let start = s.doorbell.looks();
    tokio::time::timeout(Duration::from_secs(10), async {
        while s.doorbell.looks() < start + 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the doorbell never looked");
}

/// Whether `key` is rung (within 10 s: a bound against hanging, not a measurement).
async fn rung(rx: &mut broadcast::Receiver<String>, key: &str) -> bool {
    crate::store::conformance::heard(rx, key, 10_000).await
}

#[tokio::test]
async fn a_release_rings_the_doorbell_of_a_store_elsewhere_watching_the_held_lock() {
    let (holder, waiter) = (store(), store());
    let (k, a) = (name(), owner());
    holder.acquire_fenced(&k, &a, 30_000).await.unwrap();
    let mut rx = waiter.releases();
    waiter.watch(&k).await;
    a_look_after_now(&waiter).await;
    a_look_after_now(&waiter).await;
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty), "rung while held");
    assert!(holder.released(&k, &a).await);
    assert!(rung(&mut rx, &k).await, "no ring for {k:?}");
    waiter.unwatch(&k).await;
    assert_eq!(waiter.watched(), 0);
}

#[tokio::test]
async fn one_doorbell_looks_at_more_names_than_one_statement_takes() {
    let (holder, waiter) = (store(), store());
    let a = owner();
    let keys: Vec<String> = (0..MAX_NAMES + 3).map(|_| name()).collect();
    for k in &keys {
        holder.acquire_fenced(k, &a, 30_000).await.unwrap();
    }
    let mut rx = waiter.releases();
    for k in &keys {
        waiter.watch(k).await;
    }
    a_look_after_now(&waiter).await;
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty), "rung while held");
    let last = keys.last().unwrap();
    assert!(holder.released(last, &a).await);
    assert!(rung(&mut rx, last).await, "no ring for the last name");
    for k in &keys {
        waiter.unwatch(k).await;
        holder.release(k, Release::new(&a)).await.unwrap();
    }
}

#[tokio::test]
async fn a_permit_release_rings_the_doorbell_of_a_store_elsewhere_watching_the_semaphore() {
    let (holder, waiter) = (store(), store());
    let (n, a) = (name(), owner());
    assert!(holder
        .acquire_permits(&req(&n, &a, 1, 1))
        .await
        .unwrap()
        .is_some());
    let key = watch_key(&n);
    let mut rx = waiter.releases();
    waiter.watch(&key).await;
    a_look_after_now(&waiter).await;
    // The first look rings (nothing to compare with); later ones only on a change.
    while rx.try_recv().is_ok() {}
    a_look_after_now(&waiter).await;
    assert_eq!(
        rx.try_recv(),
        Err(TryRecvError::Empty),
        "rung while unchanged"
    );
    assert!(holder.permits_released(&n, &a).await);
    assert!(rung(&mut rx, &key).await, "no ring for {key:?}");
    waiter.unwatch(&key).await;
}

#[tokio::test]
async fn a_doorbell_whose_connection_was_killed_reconnects_and_rings_again() {
    use sqlx::Connection as _;
    // A table of its own, so that the process list tells this doorbell's statement apart.
    let table = format!("deadbolt_bell_rs_{}", &owner()[..8]);
    let (holder, waiter) = (
        crate::store::mysql::tests::on_table(&table),
        crate::store::mysql::tests::on_table(&table),
    );
    let (k, a) = (name(), owner());
    holder.acquire_fenced(&k, &a, 30_000).await.unwrap();
    let mut rx = waiter.releases();
    waiter.watch(&k).await;
    a_look_after_now(&waiter).await;
    let mut admin = sqlx::MySqlConnection::connect(TEST_URL).await.unwrap();
    let pattern = format!("SELECT name FROM `{table}`%");
    let id: i64 = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let found: Option<i64> = sqlx::query_scalar(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE ?",
            )
            .bind(&pattern)
            .fetch_optional(&mut admin)
            .await
            .unwrap();
            if let Some(id) = found {
                return id;
            }
        }
    })
    .await
    .expect("the doorbell's look never seen in the process list");
    sqlx::query(AssertSqlSafe(format!("KILL CONNECTION {id}")))
        .execute(&mut admin)
        .await
        .unwrap();
    // Looks count only when they succeed: two more mean a new connection looks.
    a_look_after_now(&waiter).await;
    while rx.try_recv().is_ok() {}
    assert!(holder.released(&k, &a).await);
    assert!(
        rung(&mut rx, &k).await,
        "no ring for {k:?} after the reconnection"
    );
    waiter.unwatch(&k).await;
    holder.close().await;
    waiter.close().await;
    sqlx::query(AssertSqlSafe(format!("DROP TABLE IF EXISTS `{table}`")))
        .execute(&mut admin)
        .await
        .unwrap();
}
