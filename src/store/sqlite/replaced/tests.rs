//! A database file deleted or replaced under stores that hold leases in it. Several stores on
//! one path stand for several processes.

use super::super::tests::{open, TempDir};
use super::super::SqliteStore;
use crate::store::conformance::AcquireFenced;
use crate::store::conformance::{name, owner, sleep_ms};
use crate::store::permit_conformance::req;
use crate::store::Renewal;
use crate::store::{ErrorKind, ExtendItem, LockStore};
use std::path::{Path, PathBuf};

fn db(dir: &TempDir) -> PathBuf {
    dir.0.join("locks.db")
}

/// A file of the test's own (in `dir`, removed when dropped), its path and a store on it.
fn a_store_on_its_own_file() -> (TempDir, PathBuf, SqliteStore) {
    let dir = TempDir::new();
    let path = db(&dir);
    let s = open(&dir.url());
    (dir, path, s)
}

/// The files of the database at `path` (`-wal` and `-shm` included) that exist.
fn files(path: &Path) -> Vec<String> {
    ["", "-wal", "-shm"]
        .iter()
        .map(|suffix| format!("{}{suffix}", path.display()))
        .filter(|f| Path::new(f).exists())
        .collect()
}

/// Deletes the database at `path` with its `-wal` and `-shm` files, as `rm locks.db*` does.
fn delete(path: &Path) {
    for f in files(path) {
        std::fs::remove_file(f).unwrap();
    }
}

/// Renames a new database (made, used and closed by a store of its own) over `path`.
async fn replace(dir: &TempDir, path: &Path) {
    let new = dir.0.join("new.db");
    let s =
        SqliteStore::connect(&format!("sqlite://{}", new.display()), Default::default()).unwrap();
    s.ping().await.unwrap();
    s.close().await;
    assert_eq!(files(&new).len(), 1, "a closed file has no -wal or -shm");
    std::fs::rename(&new, path).unwrap();
}

fn item(key: &str, owner: &str) -> ExtendItem {
    ExtendItem {
        key: key.to_owned(),
        owner: owner.to_owned(),
        ttl_ms: 10_000,
        has_data: false,
    }
}

#[tokio::test]
async fn a_lease_in_a_deleted_file_fails_to_extend_as_replaced_and_its_name_is_free_in_the_new_file(
) {
    let (dir, path, holder) = a_store_on_its_own_file();
    let (k, a, b) = (name(), owner(), owner());
    let old_token = holder.acquire_fenced(&k, &a, 10_000).await.unwrap();
    assert!(holder.extend(&k, Renewal::new(&a, 10_000)).await.unwrap());
    delete(&path);
    // Another process makes a new file at the path and takes the name there.
    let other = open(&dir.url());
    let token = other.acquire_fenced(&k, &b, 10_000).await.unwrap();
    assert!(token > old_token, "{token} after {old_token}");
    // Without the check, the holder's extension succeeds in the unlinked file.
    let err = holder
        .extend(&k, Renewal::new(&a, 10_000))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Replaced, "{err:?}");
    assert_eq!(err.kind.code(), "ERR_LOCK_STORE_REPLACED");
    assert_eq!(holder.conn.replacements(), 1);
    // New calls use the new file: the holder sees the other's lease there.
    let info = holder.inspect(&k).await.unwrap().unwrap();
    assert_eq!(
        (info.owner.as_str(), info.fencing_token),
        (b.as_str(), token)
    );
    holder.close().await;
    other.close().await;
}

#[tokio::test]
async fn a_lease_in_a_file_renamed_over_keeps_failing_to_extend_until_it_would_have_ended() {
    let (dir, path, holder) = a_store_on_its_own_file();
    let (k, a, b) = (name(), owner(), owner());
    let old_token = holder.acquire_fenced(&k, &a, 300).await.unwrap();
    replace(&dir, &path).await;
    // The old file's -wal file is still at the path, and SQLite reads it as the new file's:
    // the lease shows there until it lapses, and every extension of it still fails.
    for _ in 0..2 {
        let err = holder
            .extend(&k, Renewal::new(&a, 10_000))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Replaced, "{err:?}");
    }
    let other = open(&dir.url());
    let token = loop {
        if let Some(token) = other.acquire_fenced(&k, &b, 10_000).await {
            break token;
        }
        sleep_ms(20).await;
    };
    assert!(token > old_token, "{token} after {old_token}");
    assert_eq!(holder.inspect(&k).await.unwrap().unwrap().owner, b);
    // Once the old lease has ended here too (by the monotonic clock: a few ms either way), an
    // extension is an ordinary refusal.
    loop {
        match holder.extend(&k, Renewal::new(&a, 10_000)).await {
            Err(e) if e.kind == ErrorKind::Replaced => sleep_ms(5).await,
            other => break assert_eq!(other, Ok(false)),
        }
    }
    // The holder takes other names in the file now at the path.
    let k2 = name();
    holder.acquire_fenced(&k2, &a, 10_000).await.unwrap();
    assert_eq!(other.inspect(&k2).await.unwrap().unwrap().owner, a);
    holder.close().await;
    other.close().await;
}

#[tokio::test]
async fn a_lease_in_a_file_deleted_without_its_wal_fails_to_extend_and_the_name_is_free() {
    let (dir, path, holder) = a_store_on_its_own_file();
    let (k, a, b) = (name(), owner(), owner());
    holder.acquire_fenced(&k, &a, 10_000).await.unwrap();
    std::fs::remove_file(&path).unwrap();
    let err = holder
        .extend(&k, Renewal::new(&a, 10_000))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Replaced, "{err:?}");
    let other = open(&dir.url());
    other.acquire_fenced(&k, &b, 10_000).await.unwrap();
    holder.close().await;
    other.close().await;
}

#[tokio::test]
async fn a_batched_extension_fails_only_the_leases_of_the_replaced_file() {
    let (_dir, path, holder) = a_store_on_its_own_file();
    let (k1, k2, k3, a) = (name(), name(), name(), owner());
    holder.acquire_fenced(&k1, &a, 10_000).await.unwrap();
    holder.acquire_fenced(&k2, &a, 10_000).await.unwrap();
    delete(&path);
    // Taken again by the same owner in the new file: a lease of its own there, not a ghost.
    holder.acquire_fenced(&k2, &a, 10_000).await.unwrap();
    holder.acquire_fenced(&k3, &a, 10_000).await.unwrap();
    let results = holder
        .extend_many(&[item(&k1, &a), item(&k2, &a), item(&k3, &a)])
        .await;
    assert_eq!(results[0].as_ref().unwrap_err().kind, ErrorKind::Replaced);
    assert_eq!(results[1], Ok(true));
    assert_eq!(results[2], Ok(true));
    holder.close().await;
}

#[tokio::test]
async fn permits_held_in_a_replaced_file_fail_to_extend_as_replaced() {
    let (dir, path, holder) = a_store_on_its_own_file();
    let (n, a) = (name(), owner());
    holder
        .acquire_permits(&req(&n, &a, 1, 2))
        .await
        .unwrap()
        .unwrap();
    replace(&dir, &path).await;
    let err = holder
        .extend_permits(&n, Renewal::new(&a, 10_000))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Replaced, "{err:?}");
    holder.close().await;
}

#[tokio::test]
async fn tokens_in_the_new_file_continue_above_the_replaced_files_counter() {
    let (dir, path, holder) = a_store_on_its_own_file();
    let (k, a) = (name(), owner());
    // A counter far above the clock (as a burst of grants would leave it, or a clock that
    // stepped back since).
    let high = i64::MAX / 4;
    holder.ping().await.unwrap();
    let pool = super::super::tests::raw(&dir.url()).await;
    sqlx::query("UPDATE deadbolt_locks_fence SET value = ?1 WHERE id = 0")
        .bind(high)
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let old = holder.acquire_fenced(&k, &a, 10_000).await.unwrap();
    delete(&path);
    let k2 = name();
    let token = holder.acquire_fenced(&k2, &a, 10_000).await.unwrap();
    assert_eq!(holder.conn.replacements(), 1, "granted in the new file");
    assert!(token > old, "{token} after {old}");
    holder.close().await;
}

#[tokio::test]
async fn a_call_on_an_unchanged_file_keeps_its_connection_and_ghosts_go_when_their_lease_ends() {
    let (_dir, path, holder) = a_store_on_its_own_file();
    let (k, a) = (name(), owner());
    holder.acquire_fenced(&k, &a, 100).await.unwrap();
    holder.ping().await.unwrap();
    assert_eq!(holder.conn.replacements(), 0);
    delete(&path);
    holder.ping().await.unwrap();
    assert_eq!(holder.conn.replacements(), 1);
    assert_eq!(holder.conn.ghosts(), 1);
    holder.ping().await.unwrap();
    assert_eq!(holder.conn.replacements(), 1);
    sleep_ms(150).await;
    // Past the lease's end in the old file: an ordinary refusal, and the ghost is gone.
    assert!(!holder.extend(&k, Renewal::new(&a, 10_000)).await.unwrap());
    assert_eq!(holder.conn.ghosts(), 0);
    holder.close().await;
}

#[tokio::test]
async fn closing_the_last_store_on_a_file_removes_its_wal_and_shm_files() {
    let dir = TempDir::new();
    let path = db(&dir);
    let (s1, s2) = (open(&dir.url()), open(&dir.url()));
    let (k, a) = (name(), owner());
    s1.acquire_fenced(&k, &a, 10_000).await.unwrap();
    s2.ping().await.unwrap();
    assert_eq!(files(&path).len(), 3);
    s1.close().await;
    // Still open in another "process".
    assert_eq!(files(&path).len(), 3);
    s2.close().await;
    assert_eq!(files(&path), vec![path.display().to_string()]);
}

#[cfg(unix)]
#[tokio::test]
async fn a_process_waiting_for_a_name_is_registered_again_in_the_new_file() {
    use crate::store::ReleaseNotifications;
    let (dir, path, waiter) = a_store_on_its_own_file();
    let k = name();
    waiter.watch(&k).await;
    assert_eq!(
        super::super::tests::rows(&dir.url(), "deadbolt_locks_waiters").await,
        1
    );
    delete(&path);
    waiter.ping().await.unwrap();
    // A release in the new file finds the waiter's address there.
    assert_eq!(
        super::super::tests::rows(&dir.url(), "deadbolt_locks_waiters").await,
        1
    );
    waiter.unwatch(&k).await;
    waiter.close().await;
}

#[tokio::test]
async fn a_process_that_saw_the_old_file_keeps_its_live_leases_busy_in_the_new_one() {
    let dir = TempDir::new();
    let path = db(&dir);
    let (holder, waiter) = (open(&dir.url()), open(&dir.url()));
    let (k, a, b) = (name(), owner(), owner());
    holder.acquire_fenced(&k, &a, 300).await.unwrap();
    waiter.ping().await.unwrap();
    delete(&path);
    // The waiter read the holder's lease from the old file: busy until it would have ended,
    // although the new file is empty, since the holder believes it holds until its next call.
    assert_eq!(waiter.acquire_fenced(&k, &b, 10_000).await, None);
    assert_eq!(waiter.inspect(&k).await.unwrap(), None);
    let token = loop {
        if let Some(token) = waiter.acquire_fenced(&k, &b, 10_000).await {
            break token;
        }
        sleep_ms(20).await;
    };
    assert!(token > 0);
    holder.close().await;
    waiter.close().await;
}

/// The schedule of a file swapped right after a busy period: a process waits for another's
/// write lock with the old file open, the file is deleted (with `-wal` and `-shm`) and another
/// renamed over it, a process takes the name in the new file, and only then does the write
/// lock come free. The waiting statement then runs in the old file, which nobody reads any
/// more: its grant must not be reported, or two processes hold the name.
#[tokio::test]
async fn a_grant_in_a_file_replaced_while_its_statement_waited_for_the_write_lock_is_not_reported()
{
    let dir = TempDir::new();
    let path = db(&dir);
    let waiting = std::sync::Arc::new(open(&dir.url()));
    let other = open(&dir.url());
    let (k, a, b) = (name(), owner(), owner());
    waiting.ping().await.unwrap();
    other.ping().await.unwrap();
    let mut busy = super::super::tests::writing(&dir.url()).await;
    let acquire = {
        let (waiting, k, a) = (waiting.clone(), k.clone(), a.clone());
        tokio::spawn(async move { waiting.acquire_fenced(&k, &a, 10_000).await })
    };
    // Its statement holds the store's connection while SQLite's busy handler waits. The check
    // of the file before the statement takes microseconds; give it a few ms to be past it.
    while !waiting.conn.in_use() {
        tokio::task::yield_now().await;
    }
    sleep_ms(50).await;
    delete(&path);
    replace(&dir, &path).await;
    // Another process that had the old file open takes the name in the new one.
    let token_b = other.acquire_fenced(&k, &b, 10_000).await;
    assert!(token_b.is_some(), "the new file is free");
    sqlx::query("ROLLBACK").execute(&mut busy).await.unwrap();
    let token_a = acquire.await.unwrap();
    assert_eq!(
        token_a, None,
        "granted in the old file while {b} holds it in the new one"
    );
    // The waiting process now sees the other's lease.
    assert_eq!(waiting.inspect(&k).await.unwrap().unwrap().owner, b);
    waiting.close().await;
    other.close().await;
}

/// Two processes on two fresh files (one replaced, one at its path) used to draw their tokens
/// from the clock in whole milliseconds: the same token for two grants 0.3 ms apart.
#[tokio::test]
async fn tokens_drawn_in_two_fresh_files_within_a_millisecond_differ() {
    let mut pairs = Vec::new();
    for _ in 0..20 {
        let (d1, d2) = (TempDir::new(), TempDir::new());
        let (s1, s2) = (open(&d1.url()), open(&d2.url()));
        s1.ping().await.unwrap();
        s2.ping().await.unwrap();
        let k = name();
        let t1 = s1.acquire_fenced(&k, &owner(), 10_000).await.unwrap();
        let t2 = s2.acquire_fenced(&k, &owner(), 10_000).await.unwrap();
        pairs.push((t1, t2));
        s1.close().await;
        s2.close().await;
    }
    let same: Vec<_> = pairs.iter().filter(|(t1, t2)| t1 == t2).collect();
    assert!(same.is_empty(), "the same token in two files: {same:?}");
}
