//! The DynamoDB store against dynalite (an in-memory implementation of the DynamoDB API,
//! started once per test process by `__test__/fixtures/dynalite.js`): the contract, the Java
//! lock client's protocol as another process sees it, and the item layout. Skipped with a
//! message when dynalite is not installed (`npm install`), failed under `CI`.

use super::client::{Api, Failure};
use super::*;
use crate::store::conformance::AcquireFenced;
use crate::store::conformance::{name, owner};
use crate::store::test_servers::{installed_or_skip, node_fixture};
use crate::store::ValueFormat;
use serde_json::json;
use std::process::Child;
use std::sync::{Arc, Mutex, OnceLock};

const TABLE: &str = "deadbolt_rs_test";

fn test_credentials() -> AwsCredentials {
    AwsCredentials {
        access_key_id: "AKIDDEADBOLTTEST".into(),
        secret_access_key: "deadbolt-test-secret".into(),
        session_token: None,
    }
}

/// The endpoint of the dynalite this test process started, or `None` (skip) when it is not
/// installed outside CI.
fn dynalite() -> Option<String> {
    // The child is kept for the life of the process; it exits when its stdin (held here)
    // closes, i.e. when this process ends.
    static SERVER: OnceLock<Option<(String, Mutex<Child>)>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
            let installed = root.join("node_modules/dynalite/package.json").exists();
            installed_or_skip(installed, "dynalite is not installed (npm install)").then(|| {
                let (port, child) = node_fixture("dynalite.js");
                (format!("http://127.0.0.1:{port}"), Mutex::new(child))
            })
        })
        .as_ref()
        .map(|(endpoint, _)| endpoint.clone())
}

fn url(endpoint: &str, table: &str) -> String {
    format!("dynamodb://{table}?region=us-east-1&endpoint={endpoint}")
}

fn options(dynamo: DynamoOptions) -> DynamoStoreOptions {
    DynamoStoreOptions {
        dynamo: DynamoOptions {
            create_table: true,
            credentials: Some(test_credentials()),
            ..dynamo
        },
        connect_timeout_ms: 2000,
        response_timeout_ms: 5000,
    }
}

/// A store of its own: a separate store watches versions on its own, as another process.
fn store_with(dynamo: DynamoOptions) -> Option<Arc<DynamoStore>> {
    let endpoint = dynalite()?;
    Some(Arc::new(
        DynamoStore::connect(&url(&endpoint, TABLE), options(dynamo)).unwrap(),
    ))
}

fn store() -> Option<Arc<DynamoStore>> {
    store_with(DynamoOptions::default())
}

/// Two stores on the test table (two processes), or `None` without dynalite.
fn two_stores() -> Option<(Arc<DynamoStore>, Arc<DynamoStore>)> {
    Some((store()?, store()?))
}

/// The lease the watch tests' holder takes (`acquire_fenced(.., 300)`).
const LEASE: Duration = Duration::from_millis(300);

/// A store on the test table, its table made (pinged), and a plain API client on it (for
/// writing and reading items as another client), or `None` without dynalite.
async fn store_and_client() -> Option<(Arc<DynamoStore>, Api)> {
    let s = store()?;
    s.ping().await.unwrap();
    let api = raw(&dynalite()?).await;
    Some((s, api))
}

/// A plain API client on the test table, for writing and reading items as another client.
async fn raw(endpoint: &str) -> Api {
    Api::new(
        endpoint,
        "us-east-1",
        &test_credentials(),
        Duration::from_secs(2),
    )
    .unwrap()
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

async fn get_item(api: &Api, table: &str, key: &str) -> Option<Map<String, Value>> {
    let reply = api
        .call(
            "GetItem",
            &json!({"TableName": table, "Key": {"key": {"S": key}}, "ConsistentRead": true}),
            soon(),
        )
        .await
        .unwrap();
    reply.get("Item").and_then(Value::as_object).cloned()
}

async fn put_item(api: &Api, table: &str, item: Value) {
    api.call(
        "PutItem",
        &json!({"TableName": table, "Item": item}),
        soon(),
    )
    .await
    .unwrap();
}

/// A Java client's item: no fencing token.
fn java_item(key: &str, owner: &str, lease_ms: u64, version: &str) -> Value {
    json!({
        "key": {"S": key}, "ownerName": {"S": owner}, "leaseDuration": {"S": lease_ms.to_string()},
        "recordVersionNumber": {"S": version}, "extra": {"S": "kept"},
    })
}

/// Polls `try_acquire` every 10 ms until granted; returns the token and when it was granted.
async fn poll_until_granted(
    s: &DynamoStore,
    key: &str,
    owner: &str,
    ttl_ms: u64,
) -> (u64, Instant) {
    loop {
        if let Some(token) = LockStore::try_acquire(s, key, Acquisition::fenced(owner, ttl_ms))
            .await
            .unwrap()
        {
            return (token, Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

mod conformance {
    use crate::store::bounded::{bounded, call_timeout};

    /// The store as the registry opens it: within the call bound.
    fn open() -> Option<crate::store::SharedStore> {
        let store = std::sync::Arc::into_inner(super::store()?)?;
        Some(bounded("dynamodb", store, call_timeout(2000, 5000)))
    }

    crate::conformance_suite!(open());
    crate::permits_suite!(open());
}

mod permits;

#[tokio::test]
async fn a_lock_held_elsewhere_is_taken_only_after_its_version_was_watched_for_a_lease() {
    let Some((holder, contender)) = two_stores() else {
        return;
    };
    let (k, a, b) = (name(), owner(), owner());
    let first = holder.acquire_fenced(&k, &a, 300).await.unwrap();
    // The holder's own store knows when it wrote: for the contender it is a first sight.
    assert_eq!(contender.acquire_fenced(&k, &b, 10_000).await, None);
    let first_seen = Instant::now();
    let (token, granted_at) = poll_until_granted(&contender, &k, &b, 10_000).await;
    assert!(token > first, "{token} after {first}");
    assert!(
        granted_at - first_seen > LEASE,
        "taken {:?} after first sight",
        granted_at - first_seen
    );
    assert!(!LockStore::extend(&*holder, &k, Renewal::new(&a, 300))
        .await
        .unwrap());
    assert_eq!(
        LockStore::inspect(&*holder, &k)
            .await
            .unwrap()
            .unwrap()
            .owner,
        b
    );
}

#[tokio::test]
async fn a_heartbeat_restarts_the_watch() {
    let Some((holder, contender)) = two_stores() else {
        return;
    };
    let (k, a, b) = (name(), owner(), owner());
    holder.acquire_fenced(&k, &a, 300).await.unwrap();
    assert_eq!(contender.acquire_fenced(&k, &b, 10_000).await, None);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(LockStore::extend(&*holder, &k, Renewal::new(&a, 300))
        .await
        .unwrap());
    // The contender's next look finds the new version and starts counting again.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        contender.acquire_fenced(&k, &b, 10_000).await,
        None,
        "the first version was watched for a lease, but it is no longer the lock's"
    );
    let new_version_seen = Instant::now();
    let (_, granted_at) = poll_until_granted(&contender, &k, &b, 10_000).await;
    assert!(granted_at - new_version_seen > LEASE);
}

#[tokio::test]
async fn a_java_clients_item_is_taken_over_and_keeps_its_extra_attributes() {
    let Some((s, api)) = store_and_client().await else {
        return;
    };
    let (k, me) = (name(), owner());
    put_item(&api, TABLE, java_item(&k, "java-host", 200, "java-v1")).await;
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!((info.owner.as_str(), info.fencing_token), ("java-host", 0));
    assert!(info.remaining_ms <= 200);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(
        s.inspect(&k).await.unwrap(),
        None,
        "a version watched for longer than its lease reads as free"
    );
    let before = first_token();
    let (token, _) = poll_until_granted(&s, &k, &me, 10_000).await;
    assert!(
        token > before,
        "an item without a token starts from the clock: {token}"
    );
    let item = get_item(&api, TABLE, &k).await.unwrap();
    assert_eq!(item["extra"], json!({"S": "kept"}));
    assert_eq!(item["ownerName"], json!({"S": me}));
    assert_eq!(item["leaseDuration"], json!({"S": "10000"}));
    assert_ne!(item["recordVersionNumber"], json!({"S": "java-v1"}));
    assert!(s.extend(&k, Renewal::new(&me, 5_000)).await.unwrap());
    assert!(s.released(&k, &me).await);
    let released = get_item(&api, TABLE, &k).await.unwrap();
    assert_eq!(released["isReleased"], json!({"S": "1"}));
    assert_eq!(released["extra"], json!({"S": "kept"}));
    assert_eq!(released["fencingToken"], json!({"N": token.to_string()}));
}

#[tokio::test]
async fn a_released_java_item_is_free_at_once() {
    let Some((s, api)) = store_and_client().await else {
        return;
    };
    let k = name();
    let mut item = java_item(&k, "java-host", 60_000, "java-v1");
    item["isReleased"] = json!({"S": "1"});
    put_item(&api, TABLE, item).await;
    assert_eq!(s.inspect(&k).await.unwrap(), None);
    assert!(s.acquire_fenced(&k, &owner(), 1000).await.is_some());
    let item = get_item(&api, TABLE, &k).await.unwrap();
    assert!(!item.contains_key("isReleased"));
}

#[tokio::test]
async fn delete_on_release_removes_the_item_and_the_next_token_comes_from_the_clock() {
    let Some(s) = store_with(DynamoOptions {
        delete_on_release: true,
        ..DynamoOptions::default()
    }) else {
        return;
    };
    let endpoint = dynalite().unwrap();
    let (k, a, b) = (name(), owner(), owner());
    let first = s.acquire_fenced(&k, &a, 10_000).await.unwrap();
    assert!(s.released(&k, &a).await);
    assert_eq!(get_item(&raw(&endpoint).await, TABLE, &k).await, None);
    tokio::time::sleep(Duration::from_millis(2)).await;
    let second = s.acquire_fenced(&k, &b, 10_000).await.unwrap();
    assert!(second > first + 1000, "{second} after {first}");
    assert!(s.operator().unwrap().force_release(&k).await.unwrap());
    assert_eq!(get_item(&raw(&endpoint).await, TABLE, &k).await, None);
}

#[tokio::test]
async fn a_sort_key_names_one_item_per_lock_with_the_configured_value() {
    let sort = SortKey {
        name: "lockGroup".into(),
        value: "jobs".into(),
    };
    let Some(endpoint) = dynalite() else { return };
    let table = "deadbolt_rs_sorted";
    let open = |value: &str| {
        let dynamo = DynamoOptions {
            partition_key: "pk".into(),
            sort_key: Some(SortKey {
                value: value.into(),
                ..sort.clone()
            }),
            ..DynamoOptions::default()
        };
        DynamoStore::connect(&url(&endpoint, table), options(dynamo)).unwrap()
    };
    let (jobs, mail) = (open("jobs"), open("mail"));
    let (k, a, b) = (name(), owner(), owner());
    assert!(jobs.acquire_fenced(&k, &a, 10_000).await.is_some());
    assert!(
        mail.acquire_fenced(&k, &b, 10_000).await.is_some(),
        "another sort key value is another lock"
    );
    let listed = jobs.operator().unwrap().list(&k, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].info.owner, a);
    let reply = raw(&endpoint)
        .await
        .call(
            "GetItem",
            &json!({"TableName": table, "Key": {"pk": {"S": k}, "lockGroup": {"S": "jobs"}}}),
            soon(),
        )
        .await
        .unwrap();
    assert_eq!(reply["Item"]["ownerName"], json!({"S": a}));
}

#[tokio::test]
async fn extra_attributes_and_a_java_heartbeat_condition_see_deadbolts_versions() {
    let Some(s) = store() else { return };
    let endpoint = dynalite().unwrap();
    let api = raw(&endpoint).await;
    let (k, me) = (name(), owner());
    s.acquire_granted(&k, &me, 10_000, Some(b"d"), ValueFormat::Fenced)
        .await;
    let v1 = get_item(&api, TABLE, &k).await.unwrap()["recordVersionNumber"].clone();
    assert!(s
        .extend(
            &k,
            Renewal {
                has_data: true,
                ..Renewal::new(&me, 10_000)
            }
        )
        .await
        .unwrap());
    let item = get_item(&api, TABLE, &k).await.unwrap();
    assert_ne!(
        item["recordVersionNumber"], v1,
        "every heartbeat writes a new version"
    );
    assert_eq!(item["data"], json!({"B": "ZA=="}));
    // A takeover conditioned on the old version (what a Java contender sends) fails.
    let stale = api
        .call(
            "PutItem",
            &json!({
                "TableName": TABLE, "Item": java_item(&k, "java", 1000, "java-v"),
                "ConditionExpression": "attribute_exists(#pk) AND #rvn = :rvn",
                "ExpressionAttributeNames": {"#pk": "key", "#rvn": "recordVersionNumber"},
                "ExpressionAttributeValues": {":rvn": v1},
            }),
            soon(),
        )
        .await;
    assert!(matches!(stale, Err(Failure::Condition(_))), "{stale:?}");
}

#[tokio::test]
async fn the_watch_map_is_empty_after_locks_come_and_go() {
    let Some((a, b)) = two_stores() else { return };
    let keys: Vec<String> = (0..5).map(|_| name()).collect();
    for k in &keys {
        let (x, y) = (owner(), owner());
        a.acquire_fenced(k, &x, 10_000).await.unwrap();
        assert_eq!(b.acquire_fenced(k, &y, 10_000).await, None);
        assert!(a.released(k, &x).await);
        let token = b.acquire_fenced(k, &y, 10_000).await;
        assert!(token.is_some());
        assert!(b.released(k, &y).await);
    }
    assert_eq!((a.watched(), b.watched()), (0, 0));
}

#[tokio::test]
async fn a_missing_table_is_named_in_the_error_and_created_when_asked() {
    let Some(endpoint) = dynalite() else { return };
    let table = format!("missing_{}", uuid::Uuid::new_v4().simple());
    let plain = DynamoStore::connect(
        &url(&endpoint, &table),
        DynamoStoreOptions {
            dynamo: DynamoOptions {
                credentials: Some(test_credentials()),
                ..DynamoOptions::default()
            },
            connect_timeout_ms: 2000,
            response_timeout_ms: 5000,
        },
    )
    .unwrap();
    let err = plain.ping().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoDatabase);
    assert!(
        err.message.contains(&table) && err.message.contains("createTable"),
        "{err}"
    );
    let creating =
        DynamoStore::connect(&url(&endpoint, &table), options(DynamoOptions::default())).unwrap();
    creating.ping().await.unwrap();
    plain.ping().await.unwrap();
}

#[tokio::test]
async fn a_server_that_is_not_there_is_unreachable_and_one_that_never_answers_times_out() {
    if dynalite().is_none() {
        return;
    }
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let s = DynamoStore::connect(
        &url(&format!("http://127.0.0.1:{closed}"), TABLE),
        options(DynamoOptions::default()),
    )
    .unwrap();
    assert_eq!(s.ping().await.unwrap_err().kind, ErrorKind::Unreachable);
    // Accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let store = DynamoStore::connect(
        &url(&format!("http://127.0.0.1:{port}"), TABLE),
        DynamoStoreOptions {
            connect_timeout_ms: 100,
            response_timeout_ms: 200,
            ..options(DynamoOptions::default())
        },
    )
    .unwrap();
    // As the registry opens it: within the call bound.
    let s = crate::store::bounded::Bounded::new("dynamodb", store, Duration::from_millis(300));
    let err = s.ping().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
}

#[test]
fn urls_and_options_are_checked_before_any_io() {
    let bad = |url: &str, dynamo: DynamoOptions| {
        DynamoStore::connect(url, options(dynamo))
            .unwrap_err()
            .message
    };
    let ok = DynamoOptions::default;
    assert!(bad("dynamodb://ab", ok()).contains("table name"));
    assert!(bad("dynamodb://table?regin=x", ok()).contains("\"regin\""));
    assert!(bad("dynamodb://table?region=US_EAST", ok()).contains("region"));
    assert!(bad("dynamodb://table?endpoint=ftp://x", ok()).contains("endpoint"));
    assert!(bad("dynamodb://table?endpoint=http://h/path", ok()).contains("endpoint"));
    let reserved = DynamoOptions {
        partition_key: "ownerName".into(),
        ..ok()
    };
    assert!(bad("dynamodb://table", reserved).contains("partitionKey"));
    let location = Location::parse(
        "dynamodb://My.Table-1?region=eu-west-1&endpoint=http%3A%2F%2F127.0.0.1%3A8000",
    )
    .unwrap();
    assert_eq!(
        (
            location.table.as_str(),
            location.region.as_deref(),
            location.endpoint.as_deref()
        ),
        (
            "My.Table-1",
            Some("eu-west-1"),
            Some("http://127.0.0.1:8000")
        )
    );
}

#[tokio::test]
async fn a_server_that_keeps_failing_is_asked_again_until_the_deadline_then_reported() {
    use tokio::io::AsyncWriteExt;
    // Answers every request with 503, as an overloaded endpoint does.
    let failing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = failing.local_addr().unwrap().port();
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = failing.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                while read_http_message(&mut socket).await.is_some() {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let body = "Service Unavailable";
                    let reply = format!(
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if socket.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let api = raw(&format!("http://127.0.0.1:{port}")).await;
    let deadline = Instant::now() + Duration::from_millis(1500);
    let result = api
        .call("GetItem", &json!({"TableName": TABLE}), deadline)
        .await;
    let Err(Failure::Error(e)) = result else {
        panic!("{result:?}");
    };
    assert_eq!(e.error.kind, ErrorKind::Server);
    assert!(e.error.message.contains("HTTP 503"), "{}", e.error.message);
    assert!(
        requests.load(std::sync::atomic::Ordering::SeqCst) > 1,
        "asked again"
    );
    assert!(
        Instant::now() < deadline,
        "gave up before the deadline rather than after"
    );
}

/// Reads one HTTP/1.1 message (headers, then a body of the length they state) from `socket`;
/// `None` once it is closed.
async fn read_http_message(socket: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 65536];
    let mut got = Vec::new();
    loop {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
        let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let length = String::from_utf8_lossy(&got[..end])
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>().unwrap())
            })
            .unwrap_or(0);
        if got.len() >= end + 4 + length {
            return Some(got);
        }
    }
}

/// Established connections to `port` on this machine (the server's side, from /proc/net/tcp).
fn connections_to(port: u16) -> usize {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    cols.len() > 3
                        && cols[3] == "01"
                        && cols[1]
                            .rsplit(':')
                            .next()
                            .and_then(|p| u16::from_str_radix(p, 16).ok())
                            == Some(port)
                })
                .map(|_| ())
                .collect::<Vec<_>>()
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_calls_opens_a_bounded_number_of_connections() {
    let Some(s) = store() else { return };
    let endpoint = dynalite().unwrap();
    let port: u16 = endpoint.rsplit(':').next().unwrap().parse().unwrap();
    s.ping().await.unwrap();
    let before = connections_to(port);
    let a = owner();
    let keys: Vec<String> = (0..400).map(|_| name()).collect();
    let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watching = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(connections_to(port), std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let calls = keys
        .iter()
        .map(|k| s.try_acquire(k, Acquisition::fenced(&a, 10_000)));
    for granted in futures_util::future::join_all(calls).await {
        assert!(granted.unwrap().is_some());
    }
    watching.abort();
    let opened = peak.load(std::sync::atomic::Ordering::SeqCst);
    assert!(opened > before, "the burst was measured");
    // A connection goes back to the pool a moment after its request ends, so a few more than
    // the cap may open; without the cap there would be one per call.
    assert!(
        opened <= before + 2 * client::MAX_IN_FLIGHT && opened < before + keys.len(),
        "{opened} connections (before: {before})"
    );
}
