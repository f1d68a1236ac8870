//! The contract every store keeps, as tests any store runs against itself: each store's
//! `tests.rs` invokes [`conformance_suite!`] with an expression that opens a fresh store (or
//! `None` when its server is not there: see [`server_or_skip`]).

use super::bounded::{bounded, call_timeout};
use super::{ExtendItem, LockStore, NextOwner, SharedStore, ValueFormat};
use crate::store::{Acquisition, Handoff, Release, Renewal};
use futures_util::future::BoxFuture;
use std::time::Duration;

/// Whether the server on `127.0.0.1:port` answers. When it does not, the test is skipped with
/// a message, except under `CI`, where it fails.
pub fn server_or_skip(name: &str, port: u16) -> bool {
    let up = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(1),
    )
    .is_ok();
    if !up {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is not answering on 127.0.0.1:{port} (start it with scripts/services.sh)"
        );
        eprintln!("skipped: {name} is not answering on 127.0.0.1:{port}");
    }
    up
}

/// The store `connect` opens, as the registry opens it (within the call bound of a 5 s
/// connect and a 5 s response), if its server answers on `127.0.0.1:port` (see
/// [`server_or_skip`]).
pub fn served<S: LockStore>(
    scheme: &'static str,
    server: &str,
    port: u16,
    connect: impl FnOnce() -> S,
) -> Option<SharedStore> {
    server_or_skip(server, port).then(|| bounded(scheme, connect(), call_timeout(5000, 5000)))
}

/// The tests' shorthand for their most common calls, on any store (through an `Arc` too).
pub trait AcquireFenced: LockStore {
    /// A fenced acquisition of `key` without data: the token if granted, `None` if the lock
    /// is held; panics on an error.
    fn acquire_fenced<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Option<u64>> {
        Box::pin(async move {
            let format = ValueFormat::Fenced;
            self.try_acquire(
                key,
                Acquisition {
                    format,
                    ..Acquisition::fenced(owner, ttl_ms)
                },
            )
            .await
            .unwrap()
        })
    }

    /// An acquisition of `key` with `data` in `format` that must be granted: its token;
    /// panics on an error or a refusal.
    fn acquire_granted<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl_ms: u64,
        data: Option<&'a [u8]>,
        format: ValueFormat,
    ) -> BoxFuture<'a, u64> {
        Box::pin(async move {
            let granted = self
                .try_acquire(
                    key,
                    Acquisition {
                        data,
                        format,
                        ..Acquisition::fenced(owner, ttl_ms)
                    },
                )
                .await;
            granted.unwrap().expect("granted")
        })
    }

    /// Whether `owner` held `key` and this release freed it; panics on an error.
    fn released<'a>(&'a self, key: &'a str, owner: &'a str) -> BoxFuture<'a, bool> {
        let release = self.release(key, Release::new(owner));
        Box::pin(async move { release.await.unwrap().released })
    }

    /// Whether `owner` held live permits of semaphore `name` and this release freed them;
    /// panics on an error.
    fn permits_released<'a>(&'a self, name: &'a str, owner: &'a str) -> BoxFuture<'a, bool> {
        let release = self.release_permits(name, Release::new(owner));
        Box::pin(async move { release.await.unwrap().released })
    }
}

impl<S: LockStore + ?Sized> AcquireFenced for S {}

/// An item of a batched extension: `key` held by `owner`, to `ttl_ms`, without data.
pub fn extend_item(key: &str, owner: &str, ttl_ms: u64) -> ExtendItem {
    ExtendItem {
        key: key.to_owned(),
        owner: owner.to_owned(),
        ttl_ms,
        has_data: false,
    }
}

/// A lock name no other test uses.
pub fn name() -> String {
    format!("conformance:{}", uuid::Uuid::new_v4())
}

/// An owner token no other test uses.
pub fn owner() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Sleeps `ms` milliseconds (tokio's clock).
pub async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Whether an announcement of `key` arrives on `rx` within `ms` milliseconds (other keys'
/// announcements are skipped).
pub async fn heard(rx: &mut tokio::sync::broadcast::Receiver<String>, key: &str, ms: u64) -> bool {
    tokio::time::timeout(Duration::from_millis(ms), async {
        loop {
            match rx.recv().await {
                Ok(k) if k == key => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    })
    .await
    .unwrap_or(false)
}

/// Has `holder` take `key` and release it after `waiter` was refused it (as a waiter is
/// before it sleeps, which flags the key), again and again until an announcement arrives on
/// `rx`; returns the key announced. Panics with `what` if none arrives within 10 s.
pub async fn released_until_heard(
    holder: &(impl LockStore + ?Sized),
    waiter: &(impl LockStore + ?Sized),
    key: &str,
    rx: &mut tokio::sync::broadcast::Receiver<String>,
    what: &str,
) -> String {
    let (held_by, refused) = (owner(), owner());
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            holder.acquire_fenced(key, &held_by, 10_000).await;
            assert_eq!(waiter.acquire_fenced(key, &refused, 10_000).await, None);
            holder.release(key, Release::new(&held_by)).await.unwrap();
            if let Ok(Ok(heard)) = tokio::time::timeout(Duration::from_millis(100), rx.recv()).await
            {
                return heard;
            }
        }
    })
    .await
    .expect(what)
}

/// The next owner of a handoff: `owner`, with a lease of `ttl_ms` in `format`, no payload,
/// after a holder that stored none.
pub fn next_owner(owner: &str, ttl_ms: u64, format: ValueFormat) -> NextOwner<'_> {
    NextOwner {
        owner,
        ttl_ms,
        data: None,
        previous_had_data: false,
        format,
    }
}

/// A free name is granted; a held one is refused to everyone else and stays with its holder,
/// its token, lease and data. The holder asking again is refused too, or given its own token
/// back where the store makes a repeated request safe to retry (Redis), never a new grant.
pub async fn a_free_lock_is_granted_and_a_held_one_refused(s: SharedStore) {
    let (k, a, b) = (name(), owner(), owner());
    let token = s
        .try_acquire(
            &k,
            Acquisition {
                data: Some(b"mine"),
                ..Acquisition::fenced(&a, 10_000)
            },
        )
        .await
        .unwrap();
    assert!(token.is_some_and(|t| t > 0));
    assert_eq!(
        s.try_acquire(
            &k,
            Acquisition {
                data: Some(b"theirs"),
                ..Acquisition::fenced(&b, 10_000)
            }
        )
        .await
        .unwrap(),
        None
    );
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!(
        (info.owner.as_str(), Some(info.fencing_token)),
        (a.as_str(), token)
    );
    assert_eq!(info.data.as_deref(), Some(&b"mine"[..]));
    assert!(info.remaining_ms > 9_000, "{info:?}");
    let again = s.acquire_fenced(&k, &a, 10_000).await;
    assert!(
        again.is_none() || again == token,
        "{again:?} after {token:?}"
    );
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().owner, a);
}

/// An expired lease is taken over with a higher token and the new holder's data, and its
/// former holder can neither extend nor release the new one.
pub async fn an_expired_lock_is_taken_over_with_a_higher_token(s: SharedStore) {
    let (k, a, b) = (name(), owner(), owner());
    let first = s
        .acquire_granted(&k, &a, 50, Some(b"old"), ValueFormat::Fenced)
        .await;
    sleep_ms(150).await;
    let second = s
        .acquire_granted(&k, &b, 10_000, Some(b"new"), ValueFormat::Fenced)
        .await;
    assert!(second > first);
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!(
        (info.owner.as_str(), info.fencing_token),
        (b.as_str(), second)
    );
    assert_eq!(info.data.as_deref(), Some(&b"new"[..]));
    assert!(!s.extend(&k, Renewal::new(&a, 10_000)).await.unwrap());
    assert!(!s.released(&k, &a).await);
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().owner, b);
}

/// Tokens strictly increase per name across releases, expiries and handoffs.
pub async fn tokens_strictly_increase_across_releases_expiries_and_handoffs(s: SharedStore) {
    let k = name();
    let mut last = 0;
    for round in 0..4 {
        let a = owner();
        // A long lease for the holder (a loaded machine must not expire it before the release
        // or handoff); the handed-over lease is the short one that expires.
        let token = s.acquire_fenced(&k, &a, 10_000).await.unwrap();
        assert!(token > last, "round {round}: {token} after {last}");
        last = token;
        if round % 2 == 0 {
            assert!(s.released(&k, &a).await);
        } else {
            let b = owner();
            let next = next_owner(&b, 60, ValueFormat::Fenced);
            let handed = s
                .handoff(&k, Handoff::new(&a, &next))
                .await
                .unwrap()
                .unwrap();
            assert!(handed > last);
            last = handed;
            sleep_ms(120).await;
        }
    }
}

/// An acquisition without a fencing token (`fencing: false`) excludes every other owner,
/// fenced or not, as any lock does; it is extended, inspected, handed off and released as
/// any other, and the tokens of fenced grants of the name keep increasing around it. Its own
/// grant's token is 0 where the store skipped drawing one, the store's next token otherwise.
pub async fn an_unfenced_lock_excludes_every_other_owner_and_keeps_tokens_increasing(
    s: SharedStore,
) {
    let (k, a, b, c) = (name(), owner(), owner(), owner());
    let first = s.acquire_fenced(&k, &a, 10_000).await.unwrap();
    assert!(s.released(&k, &a).await);
    let unfenced = s
        .try_acquire(
            &k,
            Acquisition {
                format: ValueFormat::Unfenced,
                ..Acquisition::fenced(&b, 10_000)
            },
        )
        .await
        .unwrap()
        .expect("a free lock is granted without a token too");
    assert!(
        unfenced == 0 || unfenced > first,
        "{unfenced} after {first}"
    );
    for format in [
        ValueFormat::Fenced,
        ValueFormat::Unfenced,
        ValueFormat::Plain,
        ValueFormat::PlainUnfenced,
    ] {
        assert_eq!(
            s.try_acquire(
                &k,
                Acquisition {
                    format,
                    ..Acquisition::fenced(&c, 10_000)
                }
            )
            .await
            .unwrap(),
            None,
            "{format:?} while an unfenced lock is held"
        );
    }
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!(
        (info.owner.as_str(), info.fencing_token),
        (b.as_str(), unfenced)
    );
    assert!(s.extend(&k, Renewal::new(&b, 20_000)).await.unwrap());
    assert!(!s.released(&k, &c).await);
    // Handed on to another owner that needs no token.
    let d = owner();
    let next = next_owner(&d, 10_000, ValueFormat::Unfenced);
    let handed = s
        .handoff(&k, Handoff::new(&b, &next))
        .await
        .unwrap()
        .expect("handed over");
    assert!(handed == 0 || handed > first, "{handed} after {first}");
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!(
        (info.owner.as_str(), info.fencing_token),
        (d.as_str(), handed)
    );
    assert!(!s.released(&k, &b).await);
    assert!(s.released(&k, &d).await);
    let data = s
        .acquire_granted(&k, &c, 10_000, Some(b"payload"), ValueFormat::Unfenced)
        .await;
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!(info.data.as_deref(), Some(&b"payload"[..]));
    assert_eq!(info.fencing_token, data);
    assert!(s.released(&k, &c).await);
    let last = s.acquire_fenced(&k, &a, 10_000).await.unwrap();
    assert!(
        last > first.max(unfenced).max(handed).max(data),
        "{last} after {first}, {unfenced}, {handed}, {data}"
    );
    assert!(s.released(&k, &a).await);
    assert_eq!(s.inspect(&k).await.unwrap(), None);
}

/// Only the owner extends, and only a live lease; a stranger's attempt leaves the lease as
/// it was.
pub async fn extend_is_compare_and_set(s: SharedStore) {
    let (k, a, b) = (name(), owner(), owner());
    s.acquire_fenced(&k, &a, 1_000).await.unwrap();
    assert!(s.extend(&k, Renewal::new(&a, 60_000)).await.unwrap());
    let remaining = s.inspect(&k).await.unwrap().unwrap().remaining_ms;
    assert!((58_000..=60_000).contains(&remaining), "{remaining}");
    assert!(!s.extend(&k, Renewal::new(&b, 120_000)).await.unwrap());
    let remaining = s.inspect(&k).await.unwrap().unwrap().remaining_ms;
    assert!(remaining <= 60_000, "{remaining}");
    assert!(!s.extend(&name(), Renewal::new(&a, 1_000)).await.unwrap());
}

/// Only the owner releases; a second release finds nothing.
pub async fn release_is_compare_and_delete(s: SharedStore) {
    let (k, a, b) = (name(), owner(), owner());
    s.acquire_fenced(&k, &a, 10_000).await.unwrap();
    assert!(!s.released(&k, &b).await);
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().owner, a);
    assert!(s.released(&k, &a).await);
    assert!(!s.released(&k, &a).await);
    assert_eq!(s.inspect(&k).await.unwrap(), None);
}

/// A handoff moves the lock in one step, with a new token, the next owner's data and none of
/// the previous owner's; only the holder can hand off.
pub async fn a_handoff_moves_the_lock_with_a_new_token(s: SharedStore) {
    let (k, a, b, c) = (name(), owner(), owner(), owner());
    let first = s
        .acquire_granted(&k, &a, 10_000, Some(b"mine"), ValueFormat::Fenced)
        .await;
    let next = NextOwner {
        previous_had_data: true,
        ..next_owner(&b, 10_000, ValueFormat::Fenced)
    };
    let stranger = NextOwner { owner: &c, ..next };
    assert_eq!(
        s.handoff(&k, Handoff::new(&c, &stranger)).await.unwrap(),
        None
    );
    let token = s
        .handoff(&k, Handoff::new(&a, &next))
        .await
        .unwrap()
        .unwrap();
    assert!(token > first);
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!((info.owner.as_str(), info.data), (b.as_str(), None));
    let to_c = NextOwner { owner: &c, ..next };
    assert_eq!(
        s.handoff(&k, Handoff::new(&a, &to_c)).await.unwrap(),
        None,
        "a no longer holds it"
    );
}

/// Inspect reports the holder, its token, the remaining lease and the data; nothing for a
/// free, released or expired name.
pub async fn inspect_reports_the_holder(s: SharedStore) {
    let (k, a) = (name(), owner());
    assert_eq!(s.inspect(&k).await.unwrap(), None);
    let token = s
        .acquire_granted(&k, &a, 5_000, Some(b"payload"), ValueFormat::Fenced)
        .await;
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!(info.owner, a);
    assert_eq!(info.fencing_token, token);
    assert!((4_000..=5_000).contains(&info.remaining_ms), "{info:?}");
    assert_eq!(info.data.as_deref(), Some(&b"payload"[..]));
    s.release(&k, Release::new(&a)).await.unwrap();
    assert_eq!(s.inspect(&k).await.unwrap(), None);
    let expiring = name();
    s.acquire_fenced(&expiring, &a, 30).await.unwrap();
    sleep_ms(100).await;
    assert_eq!(s.inspect(&expiring).await.unwrap(), None);
}

/// Payloads are bytes: every byte value round-trips.
pub async fn data_round_trips_every_byte(s: SharedStore) {
    let (k, a) = (name(), owner());
    let mut data: Vec<u8> = (0..=255u8).collect();
    data.extend_from_slice(&[0, 0xff, b'\'', b'\\']);
    s.acquire_granted(&k, &a, 10_000, Some(&data), ValueFormat::Fenced)
        .await;
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().data, Some(data));
}

/// A batched extension reports each item's own outcome, in order.
pub async fn extend_many_reports_each_item_in_order(s: SharedStore) {
    let a = owner();
    let held: Vec<String> = (0..5).map(|_| name()).collect();
    for k in &held {
        s.acquire_fenced(k, &a, 10_000).await.unwrap();
    }
    let mut items: Vec<ExtendItem> = held.iter().map(|k| extend_item(k, &a, 30_000)).collect();
    items.insert(2, extend_item(&name(), &a, 30_000));
    items[4].owner = owner();
    let results: Vec<bool> = s
        .extend_many(&items)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(results, vec![true, true, false, true, false, true]);
}

/// An operator frees a lock whoever holds it; its holder can then neither extend nor release
/// it, and someone else can take it.
pub async fn force_release_frees_a_lock_whoever_holds_it(s: SharedStore) {
    let tools = s.operator().expect("every store has the operator tools");
    let (k, a, b) = (name(), owner(), owner());
    s.acquire_granted(&k, &a, 60_000, Some(b"d"), ValueFormat::Fenced)
        .await;
    assert!(tools.force_release(&k).await.unwrap());
    assert!(
        !tools.force_release(&k).await.unwrap(),
        "nothing left to free"
    );
    assert!(!s
        .extend(
            &k,
            Renewal {
                has_data: true,
                ..Renewal::new(&a, 60_000)
            }
        )
        .await
        .unwrap());
    assert!(!s.released(&k, &a).await);
    s.acquire_fenced(&k, &b, 60_000).await.unwrap();
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().data, None);
}

/// A listing shows the held locks under a prefix (not the released or expired ones), with
/// their holders, and stops at the limit.
pub async fn list_shows_the_held_locks_under_a_prefix(s: SharedStore) {
    let tools = s.operator().expect("every store has the operator tools");
    let prefix = format!("{}:", name());
    let a = owner();
    let mut held = Vec::new();
    for i in 0..5 {
        let k = format!("{prefix}{i}");
        let token = s.acquire_fenced(&k, &a, 60_000).await.unwrap();
        held.push((k, token));
    }
    let gone = format!("{prefix}released");
    s.acquire_fenced(&gone, &a, 60_000).await.unwrap();
    s.release(&gone, Release::new(&a)).await.unwrap();
    // Wildcards in the prefix are literal characters.
    let odd = format!("{}%_*?[x]:", name());
    s.acquire_fenced(&format!("{odd}1"), &a, 60_000)
        .await
        .unwrap();
    let mut listed = tools.list(&prefix, 100).await.unwrap();
    listed.sort_by(|x, y| x.key.cmp(&y.key));
    let seen: Vec<(String, u64)> = listed
        .iter()
        .map(|l| (l.key.clone(), l.info.fencing_token))
        .collect();
    assert_eq!(seen, held);
    assert!(listed.iter().all(|l| l.info.owner == a));
    assert_eq!(tools.list(&prefix, 2).await.unwrap().len(), 2);
    assert_eq!(tools.list(&odd, 100).await.unwrap().len(), 1);
    assert_eq!(tools.list(&format!("{odd}x"), 100).await.unwrap().len(), 0);
}

/// Where the store announces releases, a lock release that a waiter elsewhere (a second store
/// on the same server, as another process would have) was refused is announced there, and the
/// release says that others wait (where the store can tell); a waiter that stops watching
/// leaves nothing watched.
pub async fn a_release_is_announced_to_a_waiter_elsewhere_that_was_refused_the_lock(
    s: SharedStore,
    other: SharedStore,
) {
    let Some(notes) = other.release_notifications() else {
        return;
    };
    let (k, a, w) = (name(), owner(), owner());
    let mut rx = notes.releases();
    notes.watch(&k).await;
    s.acquire_fenced(&k, &a, 10_000).await.unwrap();
    // Refused, as a waiter is before it sleeps.
    assert_eq!(other.acquire_fenced(&k, &w, 10_000).await, None);
    let outcome = s.release(&k, Release::new(&a)).await.unwrap();
    let told = outcome.others_waiting || !notes.tells_others_waiting();
    assert!(outcome.released && told, "{outcome:?}");
    assert!(heard(&mut rx, &k, 5_000).await, "no announcement of {k:?}");
    notes.unwatch(&k).await;
    assert_eq!(notes.watched(), 0);
}

/// Defines one `#[tokio::test]` per contract test above, each with a fresh store from
/// `$open` (an expression of type `Option<SharedStore>`; `None` skips), two for a test that
/// needs a second store. The `@tests` and `@pairs` arms serve [`permits_suite!`] too, with
/// the module its tests live in.
///
/// [`permits_suite!`]: crate::permits_suite
#[macro_export]
macro_rules! conformance_suite {
    ($open:expr) => {
        $crate::conformance_suite!(@tests conformance $open;
            a_free_lock_is_granted_and_a_held_one_refused,
            an_expired_lock_is_taken_over_with_a_higher_token,
            tokens_strictly_increase_across_releases_expiries_and_handoffs,
            an_unfenced_lock_excludes_every_other_owner_and_keeps_tokens_increasing,
            extend_is_compare_and_set,
            release_is_compare_and_delete,
            a_handoff_moves_the_lock_with_a_new_token,
            inspect_reports_the_holder,
            data_round_trips_every_byte,
            extend_many_reports_each_item_in_order,
            force_release_frees_a_lock_whoever_holds_it,
            list_shows_the_held_locks_under_a_prefix
        );
        $crate::conformance_suite!(@pairs conformance $open;
            a_release_is_announced_to_a_waiter_elsewhere_that_was_refused_the_lock
        );
    };
    (@tests $module:ident $open:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let opened: Option<$crate::store::SharedStore> = $open;
                if let Some(store) = opened {
                    $crate::store::$module::$name(store).await;
                }
            }
        )*
    };
    (@pairs $module:ident $open:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let first: Option<$crate::store::SharedStore> = $open;
                let second: Option<$crate::store::SharedStore> = $open;
                if let (Some(store), Some(other)) = (first, second) {
                    $crate::store::$module::$name(store, other).await;
                }
            }
        )*
    };
}
