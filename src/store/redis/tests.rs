//! The Redis store against the real server on 127.0.0.1:6379 (skipped with a message when it
//! is down, failed under `CI`): the contract, and what only Redis has (a script cache the
//! server can forget, pub/sub connections that can drop).

use super::{RedisOptions, RedisStore};
use crate::store::conformance::AcquireFenced;
use crate::store::conformance::{name, next_owner, released_until_heard, server_or_skip};
use crate::store::{Acquisition, Handoff, NextOwner, Release, Renewal};
use crate::store::{LockStore, ReleaseNotifications, ValueFormat};
use std::sync::Arc;

const URL: &str = "redis://127.0.0.1:6379";

fn open() -> Option<Arc<RedisStore>> {
    server_or_skip("Redis", 6379)
        .then(|| RedisStore::connect(URL, &RedisOptions::default()).unwrap())
}

async fn raw() -> redis::aio::MultiplexedConnection {
    crate::store::test_servers::redis_connection(URL).await
}

/// A redis-server of the test's own (so that what it does to the server or counts there
/// concerns it alone), a store on it and a plain connection to it; `None` (skipped, failed
/// under `CI`) without redis-server.
async fn own_server() -> Option<(
    crate::store::test_servers::TestServer,
    Arc<RedisStore>,
    redis::aio::MultiplexedConnection,
)> {
    use crate::store::test_servers::{redis_server_or_skip, TestServer};
    if !redis_server_or_skip() {
        return None;
    }
    let server = TestServer::start(&[]);
    let store = RedisStore::connect(&server.url(), &RedisOptions::default()).unwrap();
    let conn = crate::store::test_servers::redis_connection(&server.url()).await;
    Some((server, store, conn))
}

/// Runs a command on a connection of its own (not the store's).
async fn raw_command(args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let _: redis::Value = cmd.query_async(&mut raw().await).await.unwrap();
}

mod conformance {
    crate::conformance_suite!(super::open().map(|s| s as _));
}

mod permits {
    crate::permits_suite!(super::open().map(|s| s as _));
}

/// A release by `owner` that knows it stored no payload (the data key is not sent).
fn without_data(owner: &str) -> Release<'_> {
    Release {
        owner,
        had_data: false,
    }
}

#[tokio::test]
async fn scripts_are_loaded_again_after_the_server_forgot_them() {
    let Some(s) = open() else { return };
    let k = name();
    s.acquire_fenced(&k, "a", 10_000).await.unwrap();
    raw_command(&["SCRIPT", "FLUSH"]).await;
    // Every script, run by hash, meets NOSCRIPT once.
    assert!(LockStore::extend(&*s, &k, Renewal::new("a", 10_000))
        .await
        .unwrap());
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().owner, "a");
    let items = [crate::store::ExtendItem {
        key: k.clone(),
        owner: "a".into(),
        ttl_ms: 10_000,
        has_data: false,
    }];
    raw_command(&["SCRIPT", "FLUSH"]).await;
    assert!(s.extend_many(&items).await[0].as_ref().unwrap());
    assert!(s.released(&k, "a").await);
}

#[tokio::test]
async fn a_release_by_a_holder_without_a_payload_frees_the_lock_and_one_with_a_payload_deletes_it()
{
    let Some(s) = open() else { return };
    let mut conn = raw().await;
    let k = name();
    let data_key = super::keys::data_key(&k);
    s.acquire_granted(&k, "a", 10_000, Some(b"payload"), ValueFormat::Fenced)
        .await;
    let outcome = LockStore::release(&*s, &k, Release::new("a"))
        .await
        .unwrap();
    assert!(outcome.released);
    let left: Option<Vec<u8>> = redis::cmd("GET")
        .arg(&data_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, None, "the payload went with the lock");
    s.acquire_fenced(&k, "b", 10_000).await.unwrap();
    assert!(
        LockStore::release(&*s, &k, without_data("b"))
            .await
            .unwrap()
            .released
    );
    assert!(s.inspect(&k).await.unwrap().is_none(), "the lock is free");
    assert!(
        !LockStore::release(&*s, &k, without_data("b"))
            .await
            .unwrap()
            .released
    );
}

#[tokio::test]
async fn a_release_frees_every_shape_of_the_holders_value_and_no_near_miss_of_its_owner() {
    // The release script compares owners written out (not through `owns`): every value a lock
    // key can hold must be released by its owner alone, never by an owner that is a prefix of
    // it or that it is a prefix of.
    let Some(s) = open() else { return };
    let conn = raw().await;
    let shapes: [&[u8]; 6] = [
        b"",
        b"\xff",
        b"\xff\xfe",
        b"\xff17",
        b"\xff17\xfe",
        b"\xff9007199254740993",
    ];
    for shape in shapes {
        let k = name();
        let mut value = b"holder".to_vec();
        value.extend_from_slice(shape);
        let _: () = redis::cmd("SET")
            .arg(&k)
            .arg(&value)
            .arg("PX")
            .arg(10_000)
            .query_async(&mut conn.clone())
            .await
            .unwrap();
        for stranger in ["holde", "holderr", "holder\u{fffd}", "Holder"] {
            let outcome = LockStore::release(&*s, &k, without_data(stranger)).await;
            assert!(
                !outcome.unwrap().released,
                "{stranger:?} released {value:?}"
            );
            assert_eq!(value_of(&conn, &k).await, value);
        }
        assert!(
            LockStore::release(&*s, &k, without_data("holder"))
                .await
                .unwrap()
                .released,
            "{value:?}"
        );
        assert!(value_of(&conn, &k).await.is_empty(), "{value:?}");
    }
}

#[tokio::test]
async fn a_killed_connection_is_replaced_within_the_same_call() {
    // A server of its own: killing every client of the shared one would break the
    // connections of tests running beside this one.
    let Some((_server, s, mut conn)) = own_server().await else {
        return;
    };
    let k = name();
    s.acquire_fenced(&k, "a", 10_000).await.unwrap();
    let mut kill = redis::cmd("CLIENT");
    kill.arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes");
    let _: redis::Value = kill.query_async(&mut conn).await.unwrap();
    assert!(s.released(&k, "a").await);
}

/// Calls of `command` on the server so far (`INFO commandstats`).
async fn calls_of(conn: &redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn.clone())
        .await
        .unwrap();
    stats
        .split(&format!("cmdstat_{command}:calls="))
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// The raw value of `k` (empty when absent).
async fn value_of(conn: &redis::aio::MultiplexedConnection, k: &str) -> Vec<u8> {
    redis::cmd("GET")
        .arg(k)
        .query_async(&mut conn.clone())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_release_is_announced_only_when_someone_was_refused_the_lock_or_it_is_a_bare_owner() {
    // A server of its own: its PUBLISH count is this test's alone.
    let Some((_server, s, raw)) = own_server().await else {
        return;
    };
    let value_of = async |k: &str| value_of(&raw, k).await;
    let refused = async |k: &str, owner: &str| {
        let got = s.acquire_fenced(k, owner, 10_000).await;
        assert_eq!(got, None, "{owner} was refused");
    };
    let publishes = async || calls_of(&raw, "publish").await;
    let k = name();

    s.acquire_fenced(&k, "a", 10_000).await.unwrap();
    let outcome = LockStore::release(&*s, &k, Release::new("a"))
        .await
        .unwrap();
    assert!(outcome.released && !outcome.others_waiting);
    assert_eq!(
        publishes().await,
        0,
        "nobody asked for it: nothing published"
    );

    let token = s.acquire_fenced(&k, "a", 10_000).await.unwrap();
    refused(&k, "b").await;
    refused(&k, "c").await;
    let value = value_of(&k).await;
    let mut expected = b"a\xff".to_vec();
    expected.extend_from_slice(token.to_string().as_bytes());
    expected.push(0xFE);
    assert_eq!(value, expected, "marked once, however many were refused");
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!((info.owner.as_str(), info.fencing_token), ("a", token));
    assert!(s.extend(&k, Renewal::new("a", 10_000)).await.unwrap());
    // The retried acquisition of its own owner still finds its token.
    assert_eq!(s.acquire_fenced(&k, "a", 10_000).await, Some(token));
    assert!(s.released(&k, "a").await);
    assert_eq!(publishes().await, 1, "refused twice, announced once");

    s.acquire_granted(&k, "p", 10_000, None, ValueFormat::Plain)
        .await;
    refused(&k, "q").await;
    assert_eq!(
        value_of(&k).await,
        b"p",
        "a bare owner is redislock's format: never marked"
    );
    assert!(s.released(&k, "p").await);
    assert_eq!(
        publishes().await,
        2,
        "a bare owner's release is always announced"
    );
}

/// An unfenced grant in `format` to "a", a refusal to "b", and "a"'s request sent again after
/// its reply was lost: one SET, no script and no token drawn for the grant; the value is
/// `values[0]` once granted and `values[1]` once refused; the retry finds its own lock with a
/// fresh lease.
async fn unfenced_grant_refusal_and_retry(
    s: &RedisStore,
    raw: &redis::aio::MultiplexedConnection,
    k: &str,
    format: ValueFormat,
    values: [&[u8]; 2],
) {
    let acquire = |owner: &'static str, ttl_ms| Acquisition {
        format,
        ..Acquisition::fenced(owner, ttl_ms)
    };
    let scripts_before = calls_of(raw, "evalsha").await;
    let got = s.try_acquire(k, acquire("a", 10_000)).await.unwrap();
    assert_eq!(got, Some(0), "granted, without a token");
    assert_eq!(value_of(raw, k).await, values[0], "the value once granted");
    assert_eq!(calls_of(raw, "set").await, 1, "one SET NX PX");
    assert_eq!(calls_of(raw, "incr").await, 0, "no token drawn");
    let scripts = calls_of(raw, "evalsha").await;
    assert_eq!(scripts, scripts_before, "no script ran");
    let refused = s.try_acquire(k, acquire("b", 10_000)).await.unwrap();
    assert_eq!(refused, None);
    assert_eq!(value_of(raw, k).await, values[1], "the value once refused");
    assert_eq!(calls_of(raw, "incr").await, 0, "still no token drawn");
    let again = s.try_acquire(k, acquire("a", 60_000)).await.unwrap();
    assert_eq!(again, Some(0));
    let info = s.inspect(k).await.unwrap().unwrap();
    assert_eq!((info.owner.as_str(), info.fencing_token), ("a", 0));
    assert!(info.remaining_ms > 50_000, "lease not renewed: {info:?}");
}

/// "a" hands `k` on to `next` ("c"): granted with no token drawn, the value is then `value`.
async fn handed_on_without_a_token(
    s: &RedisStore,
    raw: &redis::aio::MultiplexedConnection,
    k: &str,
    next: &NextOwner<'_>,
    value: &[u8],
) {
    let handed = s.handoff(k, Handoff::new("a", next)).await.unwrap();
    assert_eq!(handed, Some(0));
    assert_eq!(value_of(raw, k).await, value, "the value once handed on");
    assert_eq!(calls_of(raw, "incr").await, 0, "still no token drawn");
}

/// "c" releases `k`: the key is freed and the release announced, once in the whole test.
async fn released_and_announced(s: &RedisStore, raw: &redis::aio::MultiplexedConnection, k: &str) {
    assert!(
        LockStore::release(s, k, Release::new("c"))
            .await
            .unwrap()
            .released
    );
    let published = calls_of(raw, "publish").await;
    assert_eq!(published, 1, "the release is announced");
    assert_eq!(value_of(raw, k).await, b"", "freed");
}

#[tokio::test]
async fn an_unfenced_grant_or_handoff_draws_no_token_and_a_refusal_still_gets_the_release_announced(
) {
    let Some((_server, s, raw)) = own_server().await else {
        return;
    };
    let k = name();
    let values: [&[u8]; 2] = [b"a\xff", b"a\xff\xfe"];
    // A refusal runs the script, which marks the value (\xfe) for the release's announcement.
    unfenced_grant_refusal_and_retry(&s, &raw, &k, ValueFormat::Unfenced, values).await;
    assert_eq!(calls_of(&raw, "publish").await, 0);
    // Handed on to a local waiter that needs no token: none is drawn, and the mark stays.
    let next = next_owner("c", 10_000, ValueFormat::Unfenced);
    handed_on_without_a_token(&s, &raw, &k, &next, b"c\xff\xfe").await;
    released_and_announced(&s, &raw, &k).await;
}

/// The redislock face's default: redislock's value (the bare owner) and redislock's command,
/// with no token drawn anywhere, however the lock is granted, refused, retried or handed on.
#[tokio::test]
async fn a_plain_unfenced_grant_or_handoff_writes_the_bare_owner_and_draws_no_token() {
    let Some((_server, s, raw)) = own_server().await else {
        return;
    };
    let k = name();
    // redislock's value, the bare owner, even when refused (a redislock process compares it
    // whole).
    let values: [&[u8]; 2] = [b"a", b"a"];
    unfenced_grant_refusal_and_retry(&s, &raw, &k, ValueFormat::PlainUnfenced, values).await;
    assert!(s.extend(&k, Renewal::new("a", 10_000)).await.unwrap());
    assert_eq!(value_of(&raw, &k).await, b"a", "extended, unchanged");
    // Handed on to a local waiter of the same format: the bare next owner, no token drawn,
    // and a retried handoff finds it.
    let next = next_owner("c", 10_000, ValueFormat::PlainUnfenced);
    handed_on_without_a_token(&s, &raw, &k, &next, b"c").await;
    handed_on_without_a_token(&s, &raw, &k, &next, b"c").await;
    // A bare owner's release is always announced.
    released_and_announced(&s, &raw, &k).await;
}

#[tokio::test]
async fn release_announcements_resume_after_the_subscriber_connection_dropped() {
    let Some(s) = open() else { return };
    let k = name();
    let mut releases = s.releases();
    s.watch(&k).await;
    raw_command(&["CLIENT", "KILL", "TYPE", "pubsub"]).await;
    // Another process releases the key, again and again until it is heard: the watch must
    // come back by itself.
    let other = RedisStore::connect(URL, &RedisOptions::default()).unwrap();
    // The watcher is refused, as a waiter is before it sleeps: that flags the key.
    let what = "no announcement reached the watcher after its connection dropped";
    let heard = released_until_heard(&*other, &*s, &k, &mut releases, what).await;
    assert_eq!(heard, k);
    s.unwatch(&k).await;
    assert_eq!(s.watched(), 0);
}

#[tokio::test]
async fn an_acquire_that_finds_its_own_lock_returns_its_token_with_a_fresh_lease() {
    let Some(s) = open() else { return };
    let k = name();
    let token = s
        .acquire_granted(&k, "a", 200, Some(b"x"), ValueFormat::Fenced)
        .await;
    // The request that finds the caller's lock (a retry, or a race with a local handoff to
    // it) reports the lease as running from now: the store must agree.
    let again = s
        .try_acquire(
            &k,
            Acquisition {
                data: Some(b"x"),
                ..Acquisition::fenced("a", 60_000)
            },
        )
        .await;
    assert_eq!(again.unwrap(), Some(token));
    let info = s.inspect(&k).await.unwrap().expect("held");
    assert!(info.remaining_ms > 50_000, "lease not renewed: {info:?}");
    let pttl: i64 = redis::cmd("PTTL")
        .arg(super::keys::data_key(&k))
        .query_async(&mut raw().await)
        .await
        .unwrap();
    assert!(pttl > 50_000, "payload lease not renewed: {pttl}");
    assert!(s.released(&k, "a").await);
}

/// A raw reply to `args` on a connection of its own.
async fn raw_query<T: redis::FromRedisValue>(args: &[&[u8]]) -> T {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(&mut raw().await).await.unwrap()
}

#[tokio::test]
async fn a_0_1_counter_is_carried_over_by_each_stores_first_grant_of_the_name() {
    let Some(s) = open() else { return };
    let k = name();
    let legacy = super::keys::legacy_fence_key(&k);
    let counter: i64 = raw_query(&[b"INCR", &super::keys::fence_key(&k)]).await;
    let old = (counter + 1_000).to_string();
    // A refusal is not a grant: the store still looks at the next acquisition.
    let other = open().unwrap();
    other.acquire_fenced(&k, "x", 10_000).await.unwrap();
    raw_command(&["SET", &legacy, &old]).await;
    assert_eq!(s.acquire_fenced(&k, "a", 10_000).await, None);
    let _: () = raw_query(&[b"DEL", k.as_bytes()]).await;
    let first = s.acquire_fenced(&k, "a", 10_000).await.unwrap();
    assert_eq!(
        first.to_string(),
        (counter + 1_001).to_string(),
        "carried over"
    );
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().fencing_token, first);
    let exists: i64 = raw_query(&[b"EXISTS", legacy.as_bytes()]).await;
    assert_eq!(exists, 0, "the old counter is deleted");
    assert!(s.released(&k, "a").await);
    // This store no longer looks for it (only 0.1 writes one: here the test does).
    let later = (first + 1_000).to_string();
    raw_command(&["SET", &legacy, &later]).await;
    let second = s.acquire_fenced(&k, "a", 10_000).await.unwrap();
    assert!(second > first);
    let kept: String = raw_query(&[b"GET", legacy.as_bytes()]).await;
    assert_eq!(
        kept, later,
        "looked at again by a store that was granted the name"
    );
    assert!(s.released(&k, "a").await);
    // A store that never was granted it (another process) looks, and carries it over.
    let fresh = open().unwrap();
    let third = fresh
        .acquire_granted(&k, "b", 10_000, None, ValueFormat::Plain)
        .await;
    assert_eq!(third, first + 1_001);
    let exists: i64 = raw_query(&[b"EXISTS", legacy.as_bytes()]).await;
    assert_eq!(exists, 0);
    // (a plain value has no token in it, and is the bare owner)
    let value: String = raw_query(&[b"GET", k.as_bytes()]).await;
    assert_eq!(value, "b");
    assert!(
        LockStore::release(&*fresh, &k, Release::new("b"))
            .await
            .unwrap()
            .released
    );
}

/// A Redis Cluster of three throwaway primaries (see [`crate::store::test_servers`]).
mod cluster {
    use super::super::keys::{hash_slot, SLOTS};
    use super::super::{RedisOptions, RedisStore};
    use crate::store::conformance::{name, next_owner, AcquireFenced};
    use crate::store::test_servers::{redis_server_or_skip, TestCluster};
    use crate::store::{ExtendItem, Handoff, ValueFormat};
    use std::collections::HashSet;
    use std::sync::{Arc, OnceLock};

    fn shared() -> Option<&'static TestCluster> {
        static CLUSTER: OnceLock<Option<TestCluster>> = OnceLock::new();
        CLUSTER
            .get_or_init(|| redis_server_or_skip().then(|| TestCluster::start(3)))
            .as_ref()
    }

    fn open() -> Option<Arc<RedisStore>> {
        shared().map(|c| RedisStore::connect_cluster(&c.urls(), &RedisOptions::default()).unwrap())
    }

    mod conformance {
        crate::conformance_suite!(super::open().map(|s| s as _));
    }

    mod permits {
        crate::permits_suite!(super::open().map(|s| s as _));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keys_in_every_part_of_the_slot_space_are_served_without_crossslot() {
        let Some(s) = open() else { return };
        let base = name();
        // Names until 64 distinct slots spread over the whole space are covered.
        let mut slots = HashSet::new();
        let mut keys = Vec::new();
        for i in 0.. {
            let k = format!("{base}:{i}");
            if slots.insert(hash_slot(k.as_bytes()) * 64 / SLOTS) {
                keys.push(k);
            }
            if slots.len() == 64 {
                break;
            }
        }
        for k in &keys {
            let token = s
                .acquire_granted(k, "a", 10_000, Some(b"d"), ValueFormat::Fenced)
                .await;
            assert_eq!(s.inspect(k).await.unwrap().unwrap().fencing_token, token);
        }
        let items: Vec<ExtendItem> = keys
            .iter()
            .map(|k| ExtendItem {
                key: k.clone(),
                owner: "a".into(),
                ttl_ms: 20_000,
                has_data: true,
            })
            .collect();
        assert!(s.extend_many(&items).await.into_iter().all(|r| r.unwrap()));
        for k in &keys {
            let next = crate::store::NextOwner {
                previous_had_data: true,
                ..next_owner("b", 10_000, ValueFormat::Fenced)
            };
            assert!(s
                .handoff(k, Handoff::new("a", &next))
                .await
                .unwrap()
                .is_some());
            assert!(s.released(k, "b").await);
        }
    }
}

/// A slot moved to another node (as `redis-cli --cluster reshard` moves each slot): the
/// store follows the redirections, heartbeats included.
mod cluster_migration {
    use super::super::keys::{data_key, fence_key, hash_slot};
    use super::super::{RedisOptions, RedisStore};
    use crate::store::conformance::{name, AcquireFenced};
    use crate::store::test_servers::{redis_server_or_skip, TestCluster, TestServer};
    use crate::store::{ExtendItem, LockStore, Release, ValueFormat};

    async fn conn(server: &TestServer) -> redis::aio::MultiplexedConnection {
        crate::store::test_servers::redis_connection(&server.url()).await
    }

    async fn query<T: redis::FromRedisValue>(server: &TestServer, args: &[&[u8]]) -> T {
        let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query_async(&mut conn(server).await).await.unwrap()
    }

    /// Which node serves `slot`, as each node sees itself (`CLUSTER NODES`, line "myself").
    async fn owner_of(cluster: &TestCluster, slot: usize) -> usize {
        for (i, node) in cluster.nodes.iter().enumerate() {
            let nodes: String = query(node, &[b"CLUSTER", b"NODES"]).await;
            let mine = nodes.lines().find(|l| l.contains("myself")).unwrap_or("");
            for range in mine.split(' ').skip(8) {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    if (a..=b).contains(&slot) {
                        return i;
                    }
                }
            }
        }
        panic!("no node serves slot {slot}");
    }

    /// Moves `slot` and the keys in it from node `from` to node `to`.
    async fn move_slot(cluster: &TestCluster, slot: usize, from: usize, to: usize) {
        let (src, dst) = (&cluster.nodes[from], &cluster.nodes[to]);
        let src_id: String = query(src, &[b"CLUSTER", b"MYID"]).await;
        let dst_id: String = query(dst, &[b"CLUSTER", b"MYID"]).await;
        let s = slot.to_string();
        let _: () = query(
            dst,
            &[
                b"CLUSTER",
                b"SETSLOT",
                s.as_bytes(),
                b"IMPORTING",
                src_id.as_bytes(),
            ],
        )
        .await;
        let _: () = query(
            src,
            &[
                b"CLUSTER",
                b"SETSLOT",
                s.as_bytes(),
                b"MIGRATING",
                dst_id.as_bytes(),
            ],
        )
        .await;
        let keys: Vec<Vec<u8>> =
            query(src, &[b"CLUSTER", b"GETKEYSINSLOT", s.as_bytes(), b"1000"]).await;
        if !keys.is_empty() {
            let port = dst.port.to_string();
            let mut args: Vec<&[u8]> = vec![
                b"MIGRATE",
                b"127.0.0.1",
                port.as_bytes(),
                b"",
                b"0",
                b"5000",
                b"KEYS",
            ];
            args.extend(keys.iter().map(Vec::as_slice));
            let _: String = query(src, &args).await;
        }
        for node in &cluster.nodes {
            let _: () = query(
                node,
                &[
                    b"CLUSTER",
                    b"SETSLOT",
                    s.as_bytes(),
                    b"NODE",
                    dst_id.as_bytes(),
                ],
            )
            .await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lock_whose_slot_moved_is_extended_released_and_taken_again_on_its_new_node() {
        if !redis_server_or_skip() {
            return;
        }
        let cluster = TestCluster::start(3);
        let store = RedisStore::connect_cluster(&cluster.urls(), &RedisOptions::default()).unwrap();
        let k = name();
        let slot = hash_slot(k.as_bytes());
        assert_eq!(slot, hash_slot(&fence_key(&k)));
        assert_eq!(slot, hash_slot(&data_key(&k)));
        let first = store
            .acquire_granted(&k, "a", 30_000, Some(b"d"), ValueFormat::Fenced)
            .await;
        let item = [ExtendItem {
            key: k.clone(),
            owner: "a".into(),
            ttl_ms: 30_000,
            has_data: true,
        }];
        // The store reads the slot map with its first batch of heartbeats.
        assert!(store.extend_many(&item).await[0].as_ref().unwrap());
        let from = owner_of(&cluster, slot).await;
        let to = (from + 1) % 3;
        move_slot(&cluster, slot, from, to).await;
        assert_eq!(owner_of(&cluster, slot).await, to);
        // Its node answers MOVED to the pipeline sent by the old map: sent again, routed.
        assert!(store.extend_many(&item).await[0].as_ref().unwrap());
        assert!(store.extend_many(&item).await[0].as_ref().unwrap());
        let info = store.inspect(&k).await.unwrap().unwrap();
        assert_eq!((info.owner.as_str(), info.fencing_token), ("a", first));
        assert!(
            LockStore::release(&*store, &k, Release::new("a"))
                .await
                .unwrap()
                .released
        );
        let second = store.acquire_fenced(&k, "b", 30_000).await.unwrap();
        assert!(second > first, "the slot's counter moved with it");
    }
}

#[tokio::test]
async fn a_rediss_url_to_a_plaintext_server_fails_as_a_tls_handshake_within_the_connect_timeout() {
    if !server_or_skip("Redis", 6379) {
        return;
    }
    // A generous connect time-out, so a loaded machine cannot turn the answer into a
    // time-out: the handshake's own failure is what must come back (not redis-rs waiting for
    // a TLS reply that never comes until the time-out).
    let opts = RedisOptions {
        connect_timeout_ms: 10_000,
        response_timeout_ms: 30_000,
        tls: None,
    };
    // The plaintext server on 6379, reached as if it spoke TLS.
    let s = RedisStore::connect("rediss://127.0.0.1:6379/#insecure", &opts).unwrap();
    let err = s.ping().await.unwrap_err();
    assert_eq!(err.kind, crate::store::ErrorKind::Unreachable, "{err}");
    assert!(
        err.message
            .contains("TLS handshake with 127.0.0.1:6379 failed"),
        "{err}"
    );
}

/// Every call boxes its store future, which lives while the call is in flight: the Cluster and
/// Sentinel arms of `exec_with` are boxed so that a single server's call does not carry (and
/// copy into its box) their ~3 KB of state.
#[tokio::test]
async fn a_single_servers_call_future_does_not_carry_the_cluster_and_sentinel_paths() {
    let Some(s) = open() else { return };
    let acquire = RedisStore::try_acquire(&s, "k", Acquisition::fenced("o", 1000));
    let release = RedisStore::release(&s, "k", Release::new("o"));
    let (acquire, release) = (size_of_val(&acquire), size_of_val(&release));
    assert!(acquire <= 2048, "try_acquire's future is {acquire} bytes");
    assert!(release <= 2048, "release's future is {release} bytes");
}

#[test]
fn a_refused_login_and_a_refused_database_have_kinds_of_their_own() {
    use crate::store::ErrorKind;
    use redis::RedisError;
    let auth = RedisError::from((redis::ErrorKind::AuthenticationFailed, "refused"));
    assert_eq!(super::errors::kind_of(&auth), ErrorKind::Auth);
    // The pipe's refused SELECT, typed inside an I/O error: found through redis-rs's source.
    let db = RedisError::from(std::io::Error::other(super::socket::NoSuchDatabase(99)));
    assert_eq!(super::errors::kind_of(&db), ErrorKind::NoDatabase);
    // Any other I/O error is a server that cannot be reached.
    let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    assert_eq!(super::errors::kind_of(&refused), ErrorKind::Unreachable);
}

#[test]
fn bytes_that_are_no_reply_are_another_protocol_in_words() {
    use crate::store::ErrorKind;
    use redis::{ParsingError, RedisError};
    // The pipe's, typed inside an I/O error, and redis-rs's own parser's (rediss://, Cluster).
    let pipe = super::socket::decode_error(
        RedisError::from(ParsingError::from("Parse error at 0\nUnexpected `H`")),
        b"HTTP/1.1 400 Bad Request\r\n",
    );
    let theirs = RedisError::from(ParsingError::from("Parse error at 768\nUnexpected `J`"));
    for e in [pipe, theirs] {
        let err = super::errors::store_err(e);
        assert_eq!(err.kind, ErrorKind::Protocol);
        assert!(
            err.message.contains("does not speak the Redis protocol"),
            "{}",
            err.message
        );
        assert!(!err.message.contains("Parse error"), "{}", err.message);
    }
    // A reply of another type than expected stays a bug of ours.
    let conversion = RedisError::from(ParsingError::from("Response type not string compatible."));
    assert_eq!(super::errors::kind_of(&conversion), ErrorKind::Internal);
    // No kind name of redis-rs in a message.
    let login = RedisError::from((redis::ErrorKind::AuthenticationFailed, "refused"));
    assert_eq!(super::errors::store_err(login).message, "refused");
}

/// Every path of every script, run behind the key guard that tests put in front of each
/// (`scripts::declared`): a script touching a key it did not declare in `KEYS` fails the
/// call, as Redis Cluster and Dragonfly require.
#[tokio::test]
async fn every_path_of_every_script_touches_only_the_keys_it_declares() {
    use super::permits::KeepPlace;
    use crate::store::permit_conformance::req;
    use crate::store::{ExtendItem, OperatorTools};
    let Some(s) = open() else { return };
    let (k, data) = (name(), Some(&b"payload"[..]));
    let formats = [
        ValueFormat::Fenced,
        ValueFormat::Plain,
        ValueFormat::Unfenced,
        ValueFormat::PlainUnfenced,
    ];
    // Acquire: the first grant of a name (with the 0.1 counter looked for and carried over),
    // then, for each format with and without a payload, a grant, a retry finding its own
    // lock, a refusal marking the value as waited for, an extension and a release.
    raw_command(&["SET", &super::keys::legacy_fence_key(&k), "7"]).await;
    assert!(s
        .try_acquire(
            &k,
            Acquisition {
                data,
                ..Acquisition::fenced("a", 10_000)
            }
        )
        .await
        .unwrap()
        .is_some());
    assert!(s.released(&k, "a").await);
    for format in formats {
        for data in [None, data] {
            let k = name();
            let ask = |owner: &'static str| Acquisition {
                data,
                format,
                ..Acquisition::fenced(owner, 10_000)
            };
            let renew = |owner: &'static str| Renewal {
                has_data: data.is_some(),
                ..Renewal::new(owner, 10_000)
            };
            assert!(s.try_acquire(&k, ask("a")).await.unwrap().is_some());
            // (a bare owner, redislock's value, cannot tell its retry from another owner)
            s.try_acquire(&k, ask("a")).await.unwrap();
            assert_eq!(s.try_acquire(&k, ask("b")).await.unwrap(), None);
            assert!(s.extend(&k, renew("a")).await.unwrap());
            assert!(!s.extend(&k, renew("b")).await.unwrap());
            let item = |owner: &str| ExtendItem {
                key: k.clone(),
                owner: owner.into(),
                ttl_ms: 10_000,
                has_data: data.is_some(),
            };
            s.extend_many(&[item("a"), item("b")]).await;
            assert!(s.inspect(&k).await.unwrap().is_some());
            assert!(!s.raise_token(&k, "b", 1 << 40).await.unwrap());
            assert!(s.raise_token(&k, "a", 1 << 40).await.unwrap());
            // A refused release, then the announced one (someone was refused meanwhile).
            assert!(
                !s.release(
                    &k,
                    Release {
                        owner: "b",
                        had_data: data.is_some()
                    }
                )
                .await
                .unwrap()
                .released
            );
            assert!(
                s.release(
                    &k,
                    Release {
                        owner: "a",
                        had_data: data.is_some()
                    }
                )
                .await
                .unwrap()
                .released
            );
        }
    }
    // Handoff: to each format, with and without payloads on either side, then its retry,
    // and one refused to a stranger; force release of a held and a free name.
    for format in formats {
        for (data, previous_had_data) in [(None, false), (data, false), (data, true)] {
            let k = name();
            s.acquire_granted(
                &k,
                "a",
                10_000,
                previous_had_data.then_some(&b"x"[..]),
                ValueFormat::Fenced,
            )
            .await;
            let _ = s.try_acquire(&k, Acquisition::fenced("w", 10_000)).await;
            let next = NextOwner {
                data,
                previous_had_data,
                ..next_owner("b", 10_000, format)
            };
            assert!(s
                .handoff(&k, Handoff::new("a", &next))
                .await
                .unwrap()
                .is_some());
            // Its retry (a bare owner cannot tell it from a stranger's: refused then).
            s.handoff(&k, Handoff::new("a", &next)).await.unwrap();
            assert_eq!(
                s.handoff(&k, Handoff::new("x", &next_owner("c", 10_000, format)))
                    .await
                    .unwrap(),
                None
            );
            assert!(s.force_release(&k).await.unwrap());
            assert!(!s.force_release(&k).await.unwrap());
        }
    }
    // Semaphores: a grant, a queued refusal, extensions, a read, a raise, handoffs that grant
    // and that only release, and releases keeping a place or not.
    let n = name();
    let mut a = req(&n, "a", 2, 3);
    a.queue_ttl_ms = 5_000;
    let mut b = req(&n, "b", 2, 3);
    b.queue_ttl_ms = 5_000;
    assert!(s
        .acquire_permits_ticketed(&a, 0, None)
        .await
        .unwrap()
        .is_some());
    assert!(s
        .acquire_permits_ticketed(&b, 0, None)
        .await
        .unwrap()
        .is_none());
    assert!(s
        .acquire_permits_ticketed(&req(&n, "c", 1, 3), 9, None)
        .await
        .unwrap()
        .is_none());
    assert!(s.extend_permits_limit(&n, "a", 10_000).await.unwrap() > 0);
    let item = ExtendItem {
        key: n.clone(),
        owner: "a".into(),
        ttl_ms: 10_000,
        has_data: false,
    };
    s.extend_permits_many_limits(&[item]).await;
    assert_eq!(s.permits_limit(&n).await.unwrap().1.len(), 1);
    assert!(s.raise_permit_token(&n, "a", 1 << 40, None).await.unwrap());
    assert!(s
        .handoff_permits_once("a", &b)
        .await
        .unwrap()
        .granted
        .is_some());
    assert!(s
        .handoff_permits_once("b", &req(&n, "d", 3, 3))
        .await
        .unwrap()
        .granted
        .is_some());
    let keep = KeepPlace {
        permits: 1,
        queue_ttl_ms: 5_000,
        ticket: 3,
    };
    assert!(
        s.release_permits_keeping(&n, "d", Some(keep), None)
            .await
            .unwrap()
            .0
            .released
    );
    s.release_permits_keeping(&n, "d", None, None)
        .await
        .unwrap();
}

/// What a Sentinel client does before using a primary (`sentinel::enter`): once per
/// replication history, every slot's counter is lifted by 2^32, so that a promoted replica,
/// which may lack the old primary's last counter steps, never hands out a token again.
#[tokio::test]
async fn a_primary_of_a_new_replication_history_has_every_counter_lifted_once() {
    let Some((server, s, mut raw)) = own_server().await else {
        return;
    };
    let k = name();
    let first = s.acquire_fenced(&k, "a", 10_000).await.unwrap();
    assert!(s.released(&k, "a").await);
    let node = super::Node::open(
        redis::Client::open(server.url()).unwrap(),
        &RedisOptions::default(),
        false,
    )
    .unwrap();
    super::sentinel::enter(&node, None).await.unwrap();
    super::sentinel::enter(&node, None).await.unwrap();
    let token = |owner: &'static str, k: String| {
        let s = s.clone();
        async move {
            let t = s.acquire_fenced(&k, owner, 10_000).await.unwrap();
            assert!(s.released(&k, owner).await);
            t
        }
    };
    assert_eq!(
        token("b", k.clone()).await,
        first + (1 << 32) + 1,
        "lifted once"
    );
    let fresh = token("c", name()).await;
    assert!(
        fresh > 1 << 32,
        "a counter never used starts above the step: {fresh}"
    );
    // Another history (a promoted replica has a new replication id): lifted again.
    let _: () = redis::cmd("SET")
        .arg(b"\xFFdeadbolt:primary")
        .arg("an older history")
        .query_async(&mut raw)
        .await
        .unwrap();
    super::sentinel::enter(&node, None).await.unwrap();
    assert_eq!(token("d", k.clone()).await, first + (2 << 32) + 2);
}

/// A primary met in a later configuration epoch has every counter lifted to the epoch's band
/// (`epoch` × 2^40) whatever its counters were: a replica promoted with counters from several
/// failovers back never repeats a token drawn in an earlier epoch; a stale view of the epoch
/// lifts nothing more than a new history does.
#[tokio::test]
async fn a_primary_in_a_later_configuration_epoch_has_every_counter_in_that_epochs_band() {
    let Some((server, s, mut raw)) = own_server().await else {
        return;
    };
    let node = super::Node::open(
        redis::Client::open(server.url()).unwrap(),
        &RedisOptions::default(),
        false,
    )
    .unwrap();
    let token = |owner: &'static str, k: String| {
        let s = s.clone();
        async move {
            let t = s.acquire_fenced(&k, owner, 10_000).await.unwrap();
            assert!(s.released(&k, owner).await);
            t
        }
    };
    let k = name();
    super::sentinel::enter(&node, Some(1)).await.unwrap();
    let first = token("a", k.clone()).await;
    assert_eq!(
        first,
        (1 << 40) + (1 << 32) + 1,
        "epoch 1's band, one step up"
    );
    super::sentinel::enter(&node, Some(1)).await.unwrap();
    assert_eq!(
        token("b", k.clone()).await,
        first + 1,
        "lifted once per epoch"
    );
    // Epoch 3, counters from far back (a replica that missed epoch 2's primary): the band.
    let _: () = redis::cmd("SET")
        .arg(super::keys::fence_key(&k))
        .arg(5)
        .query_async(&mut raw)
        .await
        .unwrap();
    super::sentinel::enter(&node, Some(3)).await.unwrap();
    assert_eq!(token("c", k.clone()).await, (3 << 40) + 1);
    // A client whose sentinel still names an older epoch lifts nothing on the same history.
    super::sentinel::enter(&node, Some(2)).await.unwrap();
    assert_eq!(token("d", k.clone()).await, (3 << 40) + 2);
    let mark: String = redis::cmd("GET")
        .arg(b"\xFFdeadbolt:primary")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(mark.starts_with("3 "), "marker {mark:?}");
}

#[test]
fn an_attempt_tag_follows_the_mode_even_at_its_longest() {
    let mut buf = [0u8; 23];
    assert_eq!(super::tagged_mode(b"", 0, &mut buf), b"a0");
    assert_eq!(super::tagged_mode(b"l", 42, &mut buf), b"la42");
    assert_eq!(
        super::tagged_mode(b"pl", u64::MAX, &mut buf),
        b"pla18446744073709551615"
    );
}

#[test]
fn a_token_reply_is_read_from_its_digits_up_to_the_largest_token() {
    use redis::Value;
    let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    assert_eq!(super::token_reply(Value::Nil).unwrap(), None);
    assert_eq!(super::token_reply(bulk("7")).unwrap(), Some(7));
    assert_eq!(
        super::token_reply(bulk("18446744073709551615")).unwrap(),
        Some(u64::MAX)
    );
    assert!(super::token_reply(bulk("18446744073709551616")).is_err());
    assert!(super::token_reply(bulk("seven")).is_err());
}
