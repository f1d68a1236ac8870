//! What the three SQL stores (MySQL, PostgreSQL, SQLite) share beyond the contract every
//! store keeps (`store::conformance`), as tests each runs against itself: each SQL store's
//! `tests.rs` implements [`SqlHarness`] (how to open its store, look at its rows, reach a
//! server that is not there) and invokes [`sql_conformance_suite!`] with it.
//!
//! [`sql_conformance_suite!`]: crate::sql_conformance_suite

use crate::store::conformance::AcquireFenced;
use crate::store::conformance::{extend_item, name, next_owner, owner, sleep_ms};
use crate::store::sql::checks::{MAX_KEY_BYTES, MAX_OWNER_BYTES, MAX_TTL_MS};
use crate::store::{Acquisition, Handoff, Renewal};
use crate::store::{ErrorKind, ExtendItem, LockStore, StoreResult, ValueFormat};
use std::future::Future;
use std::sync::Arc;
use tokio::task::JoinSet;

/// How a SQL store's tests open it and look behind it.
pub trait SqlHarness: 'static {
    /// The store.
    type Store: LockStore + std::fmt::Debug;

    /// Whether the store talks to a server (MySQL, PostgreSQL), not to a file (SQLite).
    const SERVED: bool;

    /// For a served store, the URL of its database at `127.0.0.1:port` with the password
    /// `S3cretPassw0rd`; for a file store, a file in a directory that does not exist.
    fn url_at(port: u16) -> String;

    /// A store on `url` (`None`: the test database or file) with at most `connections`
    /// connections and a connect timeout of `connect_ms`; with `purge_at_once`, its purge
    /// deletes a name's row as soon as its lease ended. Two stores stand for two processes.
    fn connect(
        url: Option<&str>,
        connections: u32,
        connect_ms: u64,
        purge_at_once: bool,
    ) -> Self::Store;

    /// Runs the store's purge now; how many rows it deleted.
    fn purge(s: &Self::Store) -> impl Future<Output = StoreResult<u64>> + Send + '_;

    /// How many rows of the lock table of the stores opened with `purge_at_once` hold `key`,
    /// read on a connection of the test's own.
    fn rows_named(key: &str) -> impl Future<Output = i64> + Send + '_;

    /// How many connections the store's pool holds now (`None`: it has no pool to count).
    fn connections(s: &Self::Store) -> impl Future<Output = Option<u32>> + Send + '_;
}

/// A store on the test database (or file) with at most `connections` connections and time
/// for thousands of calls to queue for them.
fn open<H: SqlHarness>(connections: u32) -> H::Store {
    H::connect(None, connections, 120_000, false)
}

async fn acquire(s: &impl LockStore, key: &str, owner: &str, ttl_ms: u64) -> Option<u64> {
    s.acquire_fenced(key, owner, ttl_ms).await
}

async fn remaining(s: &impl LockStore, key: &str) -> i64 {
    s.inspect(key).await.unwrap().unwrap().remaining_ms
}

/// A released name and an expired one leave no row after a purge, and a purged name comes
/// back with a higher token than it had.
pub async fn a_purged_name_leaves_no_row_and_comes_back_with_a_higher_token<H: SqlHarness>() {
    let s = H::connect(None, 2, 5_000, true);
    let (k, expired, a) = (name(), name(), owner());
    let first = acquire(&s, &k, &a, 10_000).await.unwrap();
    assert!(s.released(&k, &a).await);
    acquire(&s, &expired, &a, 1).await.unwrap();
    sleep_ms(20).await;
    H::purge(&s).await.unwrap();
    assert_eq!(H::rows_named(&k).await + H::rows_named(&expired).await, 0);
    let again = acquire(&s, &k, &a, 10_000).await.unwrap();
    assert!(again > first, "{again} > {first}");
}

/// A purge never deletes the row of a live lease.
pub async fn a_purge_never_deletes_a_held_lock<H: SqlHarness>() {
    let s = H::connect(None, 2, 5_000, true);
    let (k, a) = (name(), owner());
    let token = acquire(&s, &k, &a, 60_000).await.unwrap();
    H::purge(&s).await.unwrap();
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!((info.owner, info.fencing_token), (a, token));
}

/// Tokens keep increasing for a name across releases, handoffs, expiries and new stores (a
/// restarted client).
pub async fn tokens_keep_increasing_across_releases_expiries_handoffs_and_new_stores<
    H: SqlHarness,
>() {
    let k = name();
    let mut last = 0;
    for round in 0..3 {
        let s = open::<H>(2);
        let (a, b) = (owner(), owner());
        // A long lease for the lock that is handed over: a loaded machine must not expire it
        // before the handoff. The last acquisition of the round is the short one that expires.
        let token = acquire(&s, &k, &a, 10_000).await.unwrap();
        assert!(token > last, "round {round}: {token} after {last}");
        let next = next_owner(&b, 10_000, ValueFormat::Fenced);
        let handed = s
            .handoff(&k, Handoff::new(&a, &next))
            .await
            .unwrap()
            .unwrap();
        assert!(handed > token);
        assert!(s.released(&k, &b).await);
        let released = acquire(&s, &k, &a, 10_000).await.unwrap();
        assert!(released > handed);
        assert!(s.released(&k, &a).await);
        let expiring = acquire(&s, &k, &a, 50).await.unwrap();
        assert!(expiring > released);
        last = expiring;
        sleep_ms(150).await;
        s.close().await;
    }
}

/// The holder may shorten its lease as well as lengthen it.
pub async fn extend_can_shorten_a_lease<H: SqlHarness>() {
    let s = open::<H>(2);
    let (k, a) = (name(), owner());
    acquire(&s, &k, &a, 60_000).await.unwrap();
    assert!(s.extend(&k, Renewal::new(&a, 2_000)).await.unwrap());
    let left = remaining(&s, &k).await;
    assert!((1_000..=2_000).contains(&left), "{left}");
}

/// An expired lease cannot be extended by its former holder, and inspect sees nothing.
pub async fn extend_after_expiry_fails_and_inspect_sees_nothing<H: SqlHarness>() {
    let s = open::<H>(2);
    let (k, a) = (name(), owner());
    acquire(&s, &k, &a, 50).await.unwrap();
    sleep_ms(150).await;
    assert!(!s.extend(&k, Renewal::new(&a, 10_000)).await.unwrap());
    assert_eq!(s.inspect(&k).await.unwrap(), None);
}

/// Releasing an expired lease reports that nothing was released.
pub async fn release_after_expiry_reports_not_released<H: SqlHarness>() {
    let s = open::<H>(2);
    let (k, a) = (name(), owner());
    acquire(&s, &k, &a, 50).await.unwrap();
    sleep_ms(150).await;
    assert!(!s.released(&k, &a).await);
}

/// A lease taken again after it expired holds no data from the lease before.
pub async fn inspect_reports_no_data_when_acquired_without_data<H: SqlHarness>() {
    let s = open::<H>(2);
    let (k, a) = (name(), owner());
    s.acquire_granted(&k, &a, 50, Some(b"first"), ValueFormat::Fenced)
        .await;
    sleep_ms(150).await;
    acquire(&s, &k, &a, 10_000).await.unwrap();
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().data, None);
}

/// A batched extension reports each item's own outcome in its place: held, expired, held by
/// another owner, never locked, extended by its real owner, repeated, and too long a name
/// (refused as invalid without failing the others).
pub async fn extend_many_reports_each_items_outcome_in_order<H: SqlHarness>() {
    let s = open::<H>(2);
    let (held, expired, taken, never, twice) = (name(), name(), name(), name(), name());
    let (a, b) = (owner(), owner());
    // Leases long enough to outlive a slow, busy machine; only `expired` lapses.
    acquire(&s, &held, &a, 10_000).await.unwrap();
    acquire(&s, &expired, &a, 50).await.unwrap();
    acquire(&s, &taken, &b, 10_000).await.unwrap();
    acquire(&s, &twice, &a, 10_000).await.unwrap();
    sleep_ms(150).await;
    let items = vec![
        extend_item(&held, &a, 30_000),
        extend_item(&expired, &a, 30_000),
        extend_item(&taken, &a, 30_000),
        extend_item(&never, &a, 30_000),
        extend_item(&taken, &b, 40_000),
        extend_item(&twice, &a, 20_000),
        extend_item(&twice, &a, 20_000),
        extend_item(&"z".repeat(MAX_KEY_BYTES + 1), &a, 30_000),
    ];
    let results = s.extend_many(&items).await;
    let outcomes: Vec<Option<bool>> = results.iter().map(|r| r.as_ref().ok().copied()).collect();
    assert_eq!(
        outcomes,
        [true, false, false, false, true, true, true]
            .map(Some)
            .into_iter()
            .chain([None])
            .collect::<Vec<_>>()
    );
    assert_eq!(results[7].as_ref().unwrap_err().kind, ErrorKind::Invalid);
    let held_left = remaining(&s, &held).await;
    assert!((29_000..=30_000).contains(&held_left), "{held_left}");
    let taken_left = remaining(&s, &taken).await;
    assert!((39_000..=40_000).contains(&taken_left), "{taken_left}");
}

/// Each item of a batched extension gets its own lease.
pub async fn extend_many_gives_each_item_its_own_ttl<H: SqlHarness>() {
    let s = open::<H>(2);
    let a = owner();
    let keys: Vec<String> = (0..5).map(|_| name()).collect();
    for k in &keys {
        acquire(&s, k, &a, 60_000).await.unwrap();
    }
    let items: Vec<ExtendItem> = (1..)
        .zip(&keys)
        .map(|(i, k)| extend_item(k, &a, 10_000 * i))
        .collect();
    let results = s.extend_many(&items).await;
    assert!(results.iter().all(|r| matches!(r, Ok(true))), "{results:?}");
    for (i, k) in (1..).zip(&keys) {
        let (left, ttl): (i64, i64) = (remaining(&s, k).await, 10_000 * i);
        assert!((ttl - 1_000..=ttl).contains(&left), "{i}: {left}");
    }
}

/// A batched extension of nothing answers nothing.
pub async fn extend_many_of_nothing_returns_nothing<H: SqlHarness>() {
    assert!(open::<H>(1).extend_many(&[]).await.is_empty());
}

/// A batched extension longer than one statement's batch keeps every item's outcome in its
/// place, whether a batch takes the per-item path (some not held) or the single statement.
pub async fn extend_many_over_several_batches_keeps_every_items_place<H: SqlHarness>() {
    let s = open::<H>(2);
    let a = owner();
    // 600 items: three batches (256, 256, 88), every seventh not held, so each batch takes
    // the per-item path.
    let mut items = Vec::new();
    let mut expected = Vec::new();
    for i in 0..600 {
        let k = name();
        let held = i % 7 != 3;
        if held {
            acquire(&s, &k, &a, 5_000).await.unwrap();
        }
        items.push(extend_item(&k, &a, 20_000));
        expected.push(held);
    }
    let got: Vec<bool> = s
        .extend_many(&items)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got, expected);
    // And with every item held, the single-statement path answers.
    let held: Vec<ExtendItem> = items
        .into_iter()
        .zip(&expected)
        .filter(|(_, held)| **held)
        .map(|(item, _)| item)
        .collect();
    let got = s.extend_many(&held).await;
    assert!(got.iter().all(|r| matches!(r, Ok(true))));
}

/// Has `a` take each of `keys` on `s`, asserting that each is granted: a lock of its own.
async fn hold_each(s: &impl LockStore, a: &str, keys: impl IntoIterator<Item = String>) {
    for k in keys {
        assert!(
            acquire(s, &k, a, 10_000).await.is_some(),
            "{k:?} is a lock of its own"
        );
    }
}

/// Names are compared as bytes: names differing only in case, a trailing space or a NUL
/// byte are locks of their own.
pub async fn names_are_bytes_exact_including_nul_case_and_trailing_spaces<H: SqlHarness>() {
    let (s, base, a) = (open::<H>(2), name(), owner());
    let variants = [
        base.clone(),
        base.to_uppercase(),
        format!("{base} "),
        format!("{base}\0"),
        format!("{base}\0x"),
    ];
    hold_each(&s, &a, variants).await;
    let info = s.inspect(&format!("{base}\0")).await.unwrap().unwrap();
    assert_eq!(info.owner, a);
}

/// A prefix holding a NUL byte lists exactly the names that start with it.
pub async fn a_listing_under_a_prefix_with_a_nul_byte_finds_exactly_its_names<H: SqlHarness>() {
    let (s, base, a) = (open::<H>(2), name(), owner());
    let names = [
        base.clone(),
        format!("{base}\0"),
        format!("{base}\0x"),
        format!("{base}x"),
    ];
    hold_each(&s, &a, names).await;
    let tools = s
        .operator()
        .expect("every SQL store has the operator tools");
    let listed = tools.list(&format!("{base}\0"), 10).await.unwrap();
    let mut keys: Vec<String> = listed.into_iter().map(|l| l.key).collect();
    keys.sort();
    assert_eq!(keys, [format!("{base}\0"), format!("{base}\0x")]);
}

/// A payload of a few megabytes round-trips whole.
pub async fn data_of_a_few_megabytes_round_trips<H: SqlHarness>() {
    let s = open::<H>(2);
    let (k, a) = (name(), owner());
    let mut data: Vec<u8> = (0..3 << 20).map(|_| fastrand::u8(..)).collect();
    data.extend_from_slice(b"\0'\\");
    s.acquire_granted(&k, &a, 10_000, Some(&data), ValueFormat::Fenced)
        .await;
    assert!(s.inspect(&k).await.unwrap().unwrap().data == Some(data));
}

/// A name, an owner or a lease longer than the columns hold is refused as invalid before any
/// I/O, never truncated.
pub async fn names_owners_and_ttls_beyond_the_limits_are_refused_before_any_io<H: SqlHarness>() {
    let s = H::connect(Some(&H::url_at(1)), 1, 5_000, false);
    let long_key = "k".repeat(MAX_KEY_BYTES + 1);
    let long_owner = "o".repeat(MAX_OWNER_BYTES + 1);
    for result in [
        s.try_acquire(&long_key, Acquisition::fenced("o", 1_000))
            .await,
        s.try_acquire("k", Acquisition::fenced(&long_owner, 1_000))
            .await,
        s.try_acquire("k", Acquisition::fenced("o", MAX_TTL_MS + 1))
            .await,
    ] {
        assert_eq!(result.unwrap_err().kind, ErrorKind::Invalid);
    }
}

/// The longest name, owner and lease the columns hold are granted.
pub async fn the_longest_name_owner_and_ttl_are_granted<H: SqlHarness>() {
    let s = open::<H>(2);
    let base = name();
    let longest = format!("{base}{}", "y".repeat(MAX_KEY_BYTES - base.len()));
    assert_eq!(longest.len(), MAX_KEY_BYTES);
    assert!(acquire(&s, &longest, &owner(), 10_000).await.is_some());
    let longest_owner = "o".repeat(MAX_OWNER_BYTES);
    assert!(acquire(&s, &name(), &longest_owner, 10_000).await.is_some());
    assert!(acquire(&s, &name(), &owner(), MAX_TTL_MS).await.is_some());
}

/// Of 200 concurrent acquirers of one name, spread over 8 stores (processes), exactly one
/// wins, in rounds on a free name and on one whose lease expired.
pub async fn exactly_one_of_200_acquirers_in_8_stores_wins_a_free_or_expired_name<H: SqlHarness>() {
    let stores: Vec<Arc<H::Store>> = (0..8).map(|_| Arc::new(open::<H>(2))).collect();
    for s in &stores {
        s.ping().await.unwrap();
    }
    for round in 0..4 {
        let (k, expired) = (name(), round == 3);
        if expired {
            acquire(&*stores[0], &k, &owner(), 1).await.unwrap();
            sleep_ms(20).await;
        }
        let mut tasks = JoinSet::new();
        for i in 0..200 {
            let (s, k) = (stores[i % stores.len()].clone(), k.clone());
            tasks.spawn(async move {
                s.try_acquire(&k, Acquisition::fenced(&owner(), 10_000))
                    .await
            });
        }
        let mut winners = 0;
        while let Some(joined) = tasks.join_next().await {
            // Busy never reaches the caller: every call answers.
            if joined.unwrap().unwrap().is_some() {
                winners += 1;
            }
        }
        assert_eq!(winners, 1, "round {round}, expired: {expired}");
    }
}

/// 2 000 locks are held at once, extended in one batch and released on a pool of 3
/// connections, never one connection per lock.
pub async fn holding_2000_locks_at_once_needs_no_connection_per_lock<H: SqlHarness>() {
    let s = Arc::new(open::<H>(3));
    let a = owner();
    let keys: Vec<String> = (0..2_000).map(|_| name()).collect();
    let mut tasks = JoinSet::new();
    for k in keys.clone() {
        let (s, a) = (s.clone(), a.clone());
        tasks.spawn(async move { s.try_acquire(&k, Acquisition::fenced(&a, 120_000)).await });
    }
    while let Some(joined) = tasks.join_next().await {
        assert!(joined.unwrap().unwrap().is_some());
    }
    assert!(H::connections(&s).await.unwrap_or(0) <= 3);
    let items: Vec<ExtendItem> = keys.iter().map(|k| extend_item(k, &a, 120_000)).collect();
    assert!(s
        .extend_many(&items)
        .await
        .iter()
        .all(|r| matches!(r, Ok(true))));
    let mut tasks = JoinSet::new();
    for k in keys {
        let (s, a) = (s.clone(), a.clone());
        tasks.spawn(async move {
            let busy = s.acquire_fenced(&k, &owner(), 1_000).await;
            let released = s.released(&k, &a).await;
            (busy, released)
        });
    }
    while let Some(joined) = tasks.join_next().await {
        assert_eq!(joined.unwrap(), (None, true));
    }
    assert!(H::connections(&s).await.unwrap_or(0) <= 3);
}

/// Every call on a closed store fails as closed, whether the store was used or never was.
pub async fn operations_after_close_fail_as_closed<H: SqlHarness>() {
    let s = open::<H>(1);
    s.ping().await.unwrap();
    s.close().await;
    let err = s
        .try_acquire(&name(), Acquisition::fenced(&owner(), 1_000))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Closed, "{err}");
    let err = s.inspect(&name()).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Closed, "{err}");
    s.close().await;
    let never_used = open::<H>(1);
    never_used.close().await;
    assert_eq!(never_used.ping().await.unwrap_err().kind, ErrorKind::Closed);
}

/// A refused connection is reported as unreachable at once (not after the connect timeout)
/// and without the URL's password.
pub async fn a_refused_connection_is_reported_at_once_without_the_password<H: SqlHarness>() {
    // A port nothing listens on.
    if !H::SERVED {
        return;
    }
    let port = crate::store::test_servers::free_port();
    // Longer than the test runner would wait: only the probe can answer in time.
    let s = H::connect(Some(&H::url_at(port)), 1, 600_000, false);
    assert!(!format!("{s:?}").contains("S3cret"), "{s:?}");
    let started = std::time::Instant::now();
    let err = s.ping().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unreachable, "{err}");
    assert!(err.message.contains("connection refused"), "{err}");
    assert!(!err.message.contains("S3cret"), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// Checks, with no runtime, which table names `refused` (whether `connect` refuses a table
/// name) refuses: empty, holding SQL, the dialect's identifier `quote`, non-ASCII, or longer
/// than `longest` bytes; and that it accepts the longest.
pub fn only_plain_table_names_up_to_the_longest_are_accepted(
    quote: char,
    longest: usize,
    refused: impl Fn(&str) -> bool,
) {
    let quoted = format!("a{quote}b");
    for table in [
        "",
        "locks; DROP TABLE x",
        &quoted,
        "naïve",
        &"t".repeat(longest + 1),
    ] {
        assert!(refused(table), "{table:?}");
    }
    let accepted = &"T_".repeat(longest)[..longest];
    assert!(!refused(accepted), "{accepted:?}");
}

/// Checks, with no runtime, that `refused` (whether `connect` refuses a URL with a pool of
/// that many connections) refuses a URL that does not parse, one of another scheme, a bad
/// port or an unknown `sslmode`, and a pool of no connection, for a store of `scheme`; and
/// accepts `url`.
pub fn bad_urls_and_empty_pools_are_refused(
    scheme: &str,
    url: &str,
    refused: impl Fn(&str, u32) -> bool,
) {
    for bad in [
        "not a url".to_owned(),
        "redis://127.0.0.1:6379".to_owned(),
        format!("{scheme}://127.0.0.1:notaport/test"),
        format!("{scheme}://127.0.0.1/test?sslmode=sometimes"),
    ] {
        assert!(refused(&bad, 10), "{bad}");
    }
    assert!(refused(url, 0), "a pool of no connection");
    assert!(!refused(url, 10), "{url}");
}

/// Prints the latency of an acquisition and release in a row, on a new name each time and
/// on one name again and again.
pub async fn sequential_acquire_and_release_latency<H: SqlHarness>() {
    let s = open::<H>(2);
    let (a, same) = (owner(), name());
    s.ping().await.unwrap();
    for new_names in [true, false] {
        let mut samples = Vec::new();
        for _ in 0..1_000 {
            let k = if new_names { name() } else { same.clone() };
            let started = std::time::Instant::now();
            acquire(&s, &k, &a, 10_000).await.unwrap();
            assert!(s.released(&k, &a).await);
            samples.push(started.elapsed());
        }
        samples.sort();
        let pick = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
        println!(
            "acquire+release (new names: {new_names}): p50 {:?} p90 {:?} p99 {:?}",
            pick(0.5),
            pick(0.9),
            pick(0.99)
        );
    }
}

/// Defines one `#[tokio::test]` per test above for the SQL store whose [`SqlHarness`] is
/// `$harness`.
#[macro_export]
macro_rules! sql_conformance_suite {
    ($harness:ty) => {
        $crate::sql_conformance_suite!(@tests $harness;
            a_purged_name_leaves_no_row_and_comes_back_with_a_higher_token,
            a_purge_never_deletes_a_held_lock,
            tokens_keep_increasing_across_releases_expiries_handoffs_and_new_stores,
            extend_can_shorten_a_lease,
            extend_after_expiry_fails_and_inspect_sees_nothing,
            release_after_expiry_reports_not_released,
            inspect_reports_no_data_when_acquired_without_data,
            extend_many_reports_each_items_outcome_in_order,
            extend_many_gives_each_item_its_own_ttl,
            extend_many_of_nothing_returns_nothing,
            extend_many_over_several_batches_keeps_every_items_place,
            names_are_bytes_exact_including_nul_case_and_trailing_spaces,
            a_listing_under_a_prefix_with_a_nul_byte_finds_exactly_its_names,
            data_of_a_few_megabytes_round_trips,
            names_owners_and_ttls_beyond_the_limits_are_refused_before_any_io,
            the_longest_name_owner_and_ttl_are_granted,
            exactly_one_of_200_acquirers_in_8_stores_wins_a_free_or_expired_name,
            holding_2000_locks_at_once_needs_no_connection_per_lock,
            operations_after_close_fail_as_closed,
            a_refused_connection_is_reported_at_once_without_the_password
        );
        #[tokio::test]
        #[ignore = "benchmark: cargo test -- --ignored --nocapture"]
        async fn sequential_acquire_and_release_latency() {
            $crate::store::sql::conformance::sequential_acquire_and_release_latency::<$harness>()
                .await;
        }
    };
    (@tests $harness:ty; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $crate::store::sql::conformance::$name::<$harness>().await;
            }
        )*
    };
}
