//! etcd's JSON gateway (`/v3/…`, the gRPC API as JSON over HTTP, keys and values in base64)
//! over a pooled reqwest client, the HTTP client the DynamoDB store already uses: every
//! request a POST, bounded by the response timeout, sent to one member of the cluster at a
//! time and to the next one when that member cannot be reached or stands apart from the
//! quorum (each request asks the member to refuse it without a leader: the gateway turns the
//! `Grpc-Metadata-hasleader` header into the gRPC metadata that etcd's own `WithRequireLeader`
//! sends).
//!
//! With a user in the URL, the client authenticates once (`/v3/auth/authenticate`) and sends
//! the token with every request, authenticating again when etcd says it expired. The password
//! and the token are never printed: `Debug` names the user only.

use super::errors::{self, code};
use crate::runtime::debug::debug;
use crate::store::{ErrorKind, StoreError, StoreResult};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// Whether a request may be sent again, to the same member or another, after it may have
/// reached one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// A read, or a write whose repeat does no harm: sent again while the deadline allows.
    Safe,
    /// A write whose repeat could act twice: sent again only when it cannot have left (the
    /// connection was never made).
    Once,
}

/// A user and password for etcd's auth.
#[derive(Clone)]
pub struct Credentials {
    /// User name.
    pub user: String,
    /// Password (never printed).
    pub password: String,
}

crate::store::redact::debug_fields!(Credentials: user);

/// A client of one etcd cluster's gateway.
pub struct Api {
    http: reqwest::Client,
    /// `http(s)://host:port` of each member given in the URL.
    endpoints: Vec<String>,
    /// The member requests go to, until it fails.
    current: AtomicUsize,
    credentials: Option<Credentials>,
    token: tokio::sync::Mutex<Option<String>>,
    response_timeout: Duration,
}

crate::store::redact::debug_fields!(Api: endpoints, credentials);

/// Whether a request that failed reached etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// No connection could be made to the member: the request never left.
    Unconnected,
    /// The member answered that it refused it before applying it (no leader).
    Refused,
    /// It may have been applied.
    Maybe,
}

/// A member's failure that another member may not share: the next request goes elsewhere.
fn member_failure(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::Unreachable | ErrorKind::Timeout)
}

impl Api {
    /// A client of the members at `endpoints` over `http`.
    pub fn new(
        http: reqwest::Client,
        endpoints: Vec<String>,
        credentials: Option<Credentials>,
        response_timeout: Duration,
    ) -> Api {
        Api {
            http,
            endpoints,
            current: AtomicUsize::new(0),
            credentials,
            token: tokio::sync::Mutex::new(None),
            response_timeout,
        }
    }

    /// The member requests go to now, and its index.
    fn member(&self) -> (usize, &str) {
        let i = self.current.load(Ordering::Relaxed) % self.endpoints.len();
        (i, &self.endpoints[i])
    }

    /// Moves on from member `i` (unless another request already did).
    fn rotate(&self, i: usize) {
        let next = (i + 1) % self.endpoints.len();
        let _ = self
            .current
            .compare_exchange(i, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The auth token to send, authenticating first when there is a user and no token yet.
    async fn token(&self, deadline: Instant) -> StoreResult<Option<String>> {
        let Some(credentials) = &self.credentials else {
            return Ok(None);
        };
        let mut token = self.token.lock().await;
        if let Some(t) = token.as_ref() {
            return Ok(Some(t.clone()));
        }
        let body = json!({"name": credentials.user, "password": credentials.password});
        let body = serde_json::to_vec(&body)
            .map_err(|e| StoreError::internal(format!("etcd: authenticate: {e}")))?;
        let reply = self
            .send_all("/v3/auth/authenticate", &body, None, deadline, Retry::Safe)
            .await?;
        let t = reply
            .get("token")
            .and_then(Value::as_str)
            .ok_or_else(|| StoreError::internal("etcd: authenticate: no token in the answer"))?
            .to_owned();
        *token = Some(t.clone());
        Ok(Some(t))
    }

    /// Posts `body` to `path` (`/v3/kv/txn`, …) and returns the answer's JSON, trying the
    /// members in turn as `retry` allows, until `deadline`.
    ///
    /// # Cancel Safety
    /// As safe as the request: a dropped call may or may not have reached etcd.
    pub async fn call(
        &self,
        path: &str,
        body: &Value,
        deadline: Instant,
        retry: Retry,
    ) -> StoreResult<Value> {
        let body = serde_json::to_vec(body)
            .map_err(|e| StoreError::internal(format!("etcd: {path}: {e}")))?;
        self.call_bytes(path, &body, deadline, retry).await
    }

    /// Posts `bodies` to the stream at `path` (`/v3/lease/keepalive`) as one request, one
    /// message a line, and returns the stream's answers in order (one per message).
    ///
    /// # Cancel Safety
    /// As safe as the requests: a dropped call may or may not have reached etcd.
    pub async fn call_lines(
        &self,
        path: &str,
        bodies: &[Value],
        deadline: Instant,
        retry: Retry,
    ) -> StoreResult<Vec<Value>> {
        let mut body = Vec::new();
        for b in bodies {
            serde_json::to_writer(&mut body, b)
                .map_err(|e| StoreError::internal(format!("etcd: {path}: {e}")))?;
            body.push(b'\n');
        }
        Ok(match self.call_bytes(path, &body, deadline, retry).await? {
            Value::Array(answers) => answers,
            answer => vec![answer],
        })
    }

    async fn call_bytes(
        &self,
        path: &str,
        body: &[u8],
        deadline: Instant,
        retry: Retry,
    ) -> StoreResult<Value> {
        let token = self.token(deadline).await?;
        match self
            .send_all(path, body, token.as_deref(), deadline, retry)
            .await
        {
            // A token that expired (etcd's simple tokens last 5 minutes by default): once more
            // with a fresh one. The request was refused, so it is safe to send again.
            Err(e) if e.kind == ErrorKind::Auth && token.is_some() => {
                *self.token.lock().await = None;
                let token = self.token(deadline).await?;
                self.send_all(path, body, token.as_deref(), deadline, retry)
                    .await
            }
            other => other,
        }
    }

    async fn send_all(
        &self,
        path: &str,
        body: &[u8],
        token: Option<&str>,
        deadline: Instant,
        retry: Retry,
    ) -> StoreResult<Value> {
        let mut tried = 0;
        // Members of this round that could not be connected to (refused, no such name):
        // reported at once when all of them, as the other stores report it.
        let mut unconnected = 0;
        loop {
            let (i, member) = self.member();
            tried += 1;
            let (error, reach) = match self.send(member, path, body, token, deadline).await {
                Ok(v) => return Ok(v),
                Err(failure) => failure,
            };
            if reach == Reach::Unconnected && error.kind == ErrorKind::Unreachable {
                unconnected += 1;
            }
            let sent = reach == Reach::Maybe;
            if !member_failure(error.kind) {
                return Err(error);
            }
            self.rotate(i);
            let again = !sent || retry == Retry::Safe;
            // Each member once per round; a round more while the deadline allows, after a
            // pause, for a cluster electing a leader.
            if !again || Instant::now() >= deadline {
                return Err(error);
            }
            if tried % self.endpoints.len() == 0 {
                // No member could be connected to (nothing listens at their addresses): said
                // at once, as the other stores do, rather than at the deadline. A member that
                // is up but stands apart from the quorum answers, and is waited for.
                if unconnected == self.endpoints.len() {
                    return Err(error);
                }
                unconnected = 0;
                let pause = Duration::from_millis(50).mul_f64(0.5 + fastrand::f64());
                if Instant::now() + pause >= deadline {
                    return Err(error);
                }
                tokio::time::sleep(pause).await;
            }
            debug!("etcd {path}: trying another member after: {error}");
        }
    }

    /// Opens a stream (`/v3/watch`): posts `body` to a member, moving on as [`Api::call`]
    /// does, and returns the answer once its headers came, its body still streaming. Only the
    /// headers are bounded (by the response timeout): a watch may stay silent for good.
    ///
    /// # Cancel Safety
    /// Cancel safe: a dropped stream is closed.
    pub async fn open_stream(
        &self,
        path: &str,
        body: &Value,
        deadline: Instant,
    ) -> StoreResult<reqwest::Response> {
        let token = self.token(deadline).await?;
        let body = serde_json::to_vec(body)
            .map_err(|e| StoreError::internal(format!("etcd: {path}: {e}")))?;
        let (i, member) = self.member();
        let mut request = self
            .http
            .post(format!("{member}{path}"))
            .header("content-type", "application/json")
            .header("grpc-metadata-hasleader", "true")
            .body(body);
        if let Some(t) = token {
            request = request.header("authorization", t);
        }
        let failed = |e: StoreError| {
            self.rotate(i);
            e
        };
        match tokio::time::timeout(self.response_timeout, request.send()).await {
            Err(_) => Err(failed(StoreError::timeout(format!(
                "etcd: {path}: no answer within {} ms",
                self.response_timeout.as_millis()
            )))),
            Ok(Err(e)) => Err(failed(errors::transport_error(path, &e))),
            Ok(Ok(r)) if r.status().is_success() => Ok(r),
            Ok(Ok(r)) => {
                let status = r.status().as_u16();
                if status == 401 {
                    *self.token.lock().await = None;
                }
                Err(failed(StoreError::new(
                    ErrorKind::Server,
                    format!("etcd: {path}: HTTP {status}"),
                )))
            }
        }
    }

    /// One request to one member. On failure: the error, and whether the request may have
    /// reached etcd.
    async fn send(
        &self,
        member: &str,
        path: &str,
        body: &[u8],
        token: Option<&str>,
        deadline: Instant,
    ) -> Result<Value, (StoreError, Reach)> {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut request = self
            .http
            .post(format!("{member}{path}"))
            .header("content-type", "application/json")
            .header("grpc-metadata-hasleader", "true")
            .timeout(
                self.response_timeout
                    .min(left)
                    .max(Duration::from_millis(1)),
            )
            .body(body.to_vec());
        if let Some(t) = token {
            request = request.header("authorization", t);
        }
        let reply = request.send().await.map_err(|e| {
            let reach = if e.is_connect() {
                Reach::Unconnected
            } else {
                Reach::Maybe
            };
            (errors::transport_error(path, &e), reach)
        })?;
        let status = reply.status().as_u16();
        let bytes = reply
            .bytes()
            .await
            .map_err(|e| (errors::transport_error(path, &e), Reach::Maybe))?;
        let value = parse_lines(&bytes).ok_or_else(|| {
            let text: String = String::from_utf8_lossy(&bytes).chars().take(200).collect();
            (
                StoreError::new(
                    ErrorKind::Server,
                    format!("etcd: {path}: HTTP {status}: {text}"),
                ),
                Reach::Maybe,
            )
        })?;
        // A stream's answers (keep-alives) are checked one by one: the first error is the
        // answer's.
        let value = match value {
            Value::Array(lines) => match lines.iter().find(|v| v.get("error").is_some()) {
                Some(e) => e.clone(),
                None if status == 200 => return Ok(Value::Array(lines)),
                None => Value::Null,
            },
            v => v,
        };
        if status == 200 && value.get("error").is_none() {
            return Ok(value);
        }
        // A unary error is `{"error", "message", "code"}`; a streamed one (a keep-alive) is
        // `{"error": {"grpc_code", "message", …}}`.
        let (code, text) = match value.get("error") {
            Some(e @ Value::Object(_)) => (int(e.get("grpc_code")), e.get("message")),
            _ => (
                int(value.get("code")),
                value.get("message").or_else(|| value.get("error")),
            ),
        };
        let text = text.and_then(Value::as_str).unwrap_or("no message");
        let error = errors::server_error(path, code, text);
        // "no leader" and "leader changed" are refusals before the request was applied.
        let reach = if code == code::UNAVAILABLE {
            Reach::Refused
        } else {
            Reach::Maybe
        };
        Err((error, reach))
    }
}

/// An answer's JSON: one value, or for a stream that answered more than once (several
/// keep-alives in one request) an array of its answers in order. `None`: not JSON.
fn parse_lines(bytes: &[u8]) -> Option<Value> {
    let mut values = serde_json::Deserializer::from_slice(bytes)
        .into_iter::<Value>()
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    match values.len() {
        0 => None,
        1 => values.pop(),
        _ => Some(Value::Array(values)),
    }
}

/// An int64 of the gateway's JSON: a decimal string (or a number), 0 when absent (proto3
/// leaves out fields at their default).
pub fn int(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// Bytes as the gateway takes them.
pub fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// Bytes of a base64 field (empty when absent).
pub fn bytes(v: Option<&Value>) -> Vec<u8> {
    v.and_then(Value::as_str)
        .and_then(|s| B64.decode(s).ok())
        .unwrap_or_default()
}

/// The revision in an answer's header.
pub fn revision(reply: &Value) -> i64 {
    int(reply.pointer("/header/revision"))
}

/// A key-value as a range returns it.
#[derive(Debug, Clone)]
pub struct Kv {
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
    /// Revision of the put that created it (since it last did not exist).
    pub create_revision: i64,
    /// Revision of its last put.
    pub mod_revision: i64,
    /// The lease it is attached to (0: none).
    pub lease: i64,
}

impl Kv {
    /// A key-value of the gateway's JSON.
    pub fn parse(v: &Value) -> Kv {
        Kv {
            key: bytes(v.get("key")),
            value: bytes(v.get("value")),
            create_revision: int(v.get("create_revision")),
            mod_revision: int(v.get("mod_revision")),
            lease: int(v.get("lease")),
        }
    }
}

/// The key-values of the range answer `reply` (a `/v3/kv/range` answer, or a
/// `response_range` inside a transaction's).
pub fn kvs(reply: &Value) -> Vec<Kv> {
    reply
        .get("kvs")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(Kv::parse).collect())
        .unwrap_or_default()
}

/// The `n`th answer of a transaction, inside its `response_…` wrapper.
pub fn txn_response<'a>(reply: &'a Value, n: usize, kind: &str) -> Option<&'a Value> {
    reply
        .get("responses")
        .and_then(Value::as_array)
        .and_then(|r| r.get(n))
        .and_then(|r| r.get(kind))
}

/// Whether a transaction's compares held.
pub fn succeeded(reply: &Value) -> bool {
    reply
        .get("succeeded")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The first key after every key that starts with `prefix` (etcd's `range_end` for a prefix;
/// `\0` for "to the end").
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}
