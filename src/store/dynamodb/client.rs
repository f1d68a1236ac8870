//! One DynamoDB API call: a JSON body POSTed with the `X-Amz-Target` of the operation,
//! signed with SigV4 by the AWS SDK's own signer, over a pooled reqwest client (HTTP/1.1,
//! rustls). Throttling, 5xx answers and connections that broke are retried with jittered
//! exponential backoff while the caller's deadline allows; a failed condition is an outcome,
//! not an error; every other failure becomes a [`StoreError`] of the matching kind.
//!
//! Messages never hold a credential: the server's own text is scrubbed of the keys (a server
//! may echo the `Authorization` header), and nothing here prints a request.

use super::credentials::AwsCredentials;
use crate::runtime::debug::debug;
use crate::store::{http, ErrorKind, StoreError};
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use serde_json::{Map, Value};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The API version every operation is addressed to.
const TARGET_PREFIX: &str = "DynamoDB_20120810.";
/// First backoff step; each retry doubles it, up to [`BACKOFF_CAP`], and draws the actual
/// delay uniformly below it ("full jitter").
const BACKOFF_BASE: Duration = Duration::from_millis(25);
const BACKOFF_CAP: Duration = Duration::from_secs(1);
/// Most attempts of one call, whatever its deadline.
const MAX_ATTEMPTS: u32 = 10;
/// Longest piece of a server's error text carried into a message.
const MAX_MESSAGE_CHARS: usize = 300;
/// Most requests in flight at once per client. HTTP/1.1 carries one request per connection at
/// a time, so this also bounds the connections a burst of calls opens; a call waits for a slot
/// within its own bound.
pub const MAX_IN_FLIGHT: usize = 128;

/// How a call did not succeed.
#[derive(Debug)]
pub enum Failure {
    /// The condition of a conditional write did not hold (`ConditionalCheckFailedException`):
    /// an outcome, with the item as it was when the server sent it back
    /// (`ReturnValuesOnConditionCheckFailure`, which not every server honours).
    Condition(Option<Map<String, Value>>),
    /// The call failed.
    Error(ApiError),
}

/// A failed call: the store error, and the AWS error code when the server gave one.
#[derive(Debug)]
pub struct ApiError {
    /// The AWS error code (`ResourceNotFoundException`, …), if the server answered.
    pub code: Option<String>,
    /// What the caller reports.
    pub error: StoreError,
}

/// A signed-request client for one endpoint and region.
pub struct Api {
    http: reqwest::Client,
    endpoint: String,
    region: String,
    identity: Identity,
    /// Credential strings to mask in any text that came from the server.
    secrets: Vec<String>,
    /// Requests in flight (see [`MAX_IN_FLIGHT`]).
    slots: tokio::sync::Semaphore,
}

crate::store::redact::debug_fields!(Api: endpoint, region);

impl Api {
    /// A client for `endpoint` (`https://dynamodb.<region>.amazonaws.com`, or a local
    /// server's URL) signing for `region` with `credentials`. Connecting is bounded by
    /// `connect_timeout`; the caller bounds the rest.
    pub fn new(
        endpoint: &str,
        region: &str,
        credentials: &AwsCredentials,
        connect_timeout: Duration,
    ) -> Result<Api, String> {
        let http = http::build_client(
            http::client_builder(connect_timeout).pool_max_idle_per_host(MAX_IN_FLIGHT),
        )?;
        let identity = aws_credential_types::Credentials::new(
            credentials.access_key_id.clone(),
            credentials.secret_access_key.clone(),
            credentials.session_token.clone(),
            None,
            "deadbolt",
        )
        .into();
        let mut secrets: Vec<String> = [
            Some(&credentials.access_key_id),
            Some(&credentials.secret_access_key),
            credentials.session_token.as_ref(),
        ]
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .cloned()
        .collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Ok(Api {
            http,
            endpoint: endpoint.trim_end_matches('/').to_owned() + "/",
            region: region.to_owned(),
            identity,
            secrets,
            slots: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
        })
    }

    /// Calls `operation` (`GetItem`, `UpdateItem`, …) with `body`, retrying what may be
    /// retried until `deadline`. Returns the reply's JSON object.
    ///
    /// A write that broke off may have taken effect before it is sent again; every caller
    /// checks for its own earlier success (see `DynamoStore::try_acquire`).
    ///
    /// # Cancel Safety
    /// As safe as the operation: a dropped call may or may not have reached the server.
    pub async fn call(
        &self,
        operation: &str,
        body: &Value,
        deadline: Instant,
    ) -> Result<Map<String, Value>, Failure> {
        let body = serde_json::to_vec(body).map_err(|e| {
            Failure::Error(ApiError {
                code: None,
                error: StoreError::internal(format!("dynamodb: {operation}: {e}")),
            })
        })?;
        let target = format!("{TARGET_PREFIX}{operation}");
        let mut attempt = 0;
        loop {
            attempt += 1;
            let failure = match self.send(&target, &body).await {
                Ok((200, reply)) => return parse_object(operation, &reply).map_err(Failure::Error),
                Ok((status, reply)) => self.http_failure(operation, status, &reply),
                // Nothing listens there (or the name does not resolve): said at once, as the
                // other stores do. A connection that broke once made is worth another try.
                Err(e) if e.is_connect() => {
                    Attempt::Done(Failure::Error(transport_error(operation, &e)))
                }
                Err(e) => Attempt::Retry(transport_error(operation, &e)),
            };
            let error = match failure {
                Attempt::Done(f) => return Err(f),
                Attempt::Retry(error) => error,
            };
            let cap = BACKOFF_CAP.min(BACKOFF_BASE.saturating_mul(1 << (attempt - 1).min(10)));
            let pause = cap.mul_f64(fastrand::f64());
            if attempt >= MAX_ATTEMPTS || Instant::now() + pause >= deadline {
                return Err(Failure::Error(error));
            }
            debug!(
                "dynamodb {operation}: retrying in {pause:?} after: {}",
                error.error
            );
            tokio::time::sleep(pause).await;
        }
    }

    /// Sends one signed request; the status and body of the reply.
    async fn send(&self, target: &str, body: &[u8]) -> Result<(u16, Vec<u8>), reqwest::Error> {
        // The semaphore is never closed, so a permit always comes.
        let _slot = self.slots.acquire().await.ok();
        let headers = [
            ("content-type", "application/x-amz-json-1.0"),
            ("x-amz-target", target),
        ];
        let mut request = self
            .http
            .post(&self.endpoint)
            .header(headers[0].0, headers[0].1)
            .header(headers[1].0, headers[1].1);
        for (name, value) in self.signature(&headers, body) {
            request = request.header(name, value);
        }
        let reply = request.body(body.to_vec()).send().await?;
        let status = reply.status().as_u16();
        Ok((status, reply.bytes().await?.to_vec()))
    }

    /// The headers SigV4 adds (`authorization`, `x-amz-date`, `x-amz-security-token`). A
    /// failure to sign (which valid input never meets) leaves the request unsigned, and the
    /// server refuses it with a message that says so.
    fn signature(&self, headers: &[(&str, &str)], body: &[u8]) -> Vec<(String, String)> {
        let params = v4::SigningParams::builder()
            .identity(&self.identity)
            .region(&self.region)
            .name("dynamodb")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build();
        let Ok(params) = params else {
            return Vec::new();
        };
        let signable = SignableRequest::new(
            "POST",
            self.endpoint.as_str(),
            headers.iter().copied(),
            SignableBody::Bytes(body),
        );
        let Ok(signable) = signable else {
            return Vec::new();
        };
        match sign(signable, &params.into()) {
            Ok(output) => {
                let (instructions, _) = output.into_parts();
                instructions
                    .headers()
                    .map(|(name, value)| (name.to_owned(), value.to_owned()))
                    .collect()
            }
            Err(_) => Vec::new(),
        }
    }

    /// Classifies an HTTP error reply.
    fn http_failure(&self, operation: &str, status: u16, reply: &[u8]) -> Attempt {
        let parsed: Option<Map<String, Value>> = serde_json::from_slice(reply).ok();
        let field = |name: &str| {
            parsed
                .as_ref()
                .and_then(|o| o.get(name))
                .and_then(Value::as_str)
        };
        // `__type` is `com.amazonaws.dynamodb.v20120810#Code`.
        let code = field("__type").map(|t| t.rsplit('#').next().unwrap_or(t).to_owned());
        let text = field("message")
            .or_else(|| field("Message"))
            .map(str::to_owned)
            .unwrap_or_else(|| String::from_utf8_lossy(reply).into_owned());
        let text = self.scrub(&text);
        let Some(code) = code else {
            let error = StoreError::new(
                ErrorKind::Server,
                format!("dynamodb: {operation}: HTTP {status}: {text}"),
            );
            let failure = ApiError { code: None, error };
            return if status >= 500 {
                Attempt::Retry(failure)
            } else {
                Attempt::Done(Failure::Error(failure))
            };
        };
        if code == "ConditionalCheckFailedException" {
            let item = parsed
                .as_ref()
                .and_then(|o| o.get("Item"))
                .and_then(Value::as_object)
                .cloned();
            return Attempt::Done(Failure::Condition(item));
        }
        let (kind, hint) = classify(&code);
        let error = StoreError::new(kind, format!("dynamodb: {operation}: {code}: {text}{hint}"));
        let failure = ApiError {
            code: Some(code.clone()),
            error,
        };
        if status >= 500 || is_throttling(&code) {
            Attempt::Retry(failure)
        } else {
            Attempt::Done(Failure::Error(failure))
        }
    }

    fn scrub(&self, text: &str) -> String {
        let mut out: String = text.chars().take(MAX_MESSAGE_CHARS).collect();
        for secret in &self.secrets {
            out = out.replace(secret.as_str(), "***");
        }
        out
    }
}

/// The outcome of one attempt that did not succeed.
enum Attempt {
    /// Final.
    Done(Failure),
    /// Worth another attempt if time allows.
    Retry(ApiError),
}

fn parse_object(operation: &str, reply: &[u8]) -> Result<Map<String, Value>, ApiError> {
    serde_json::from_slice(reply).map_err(|e| ApiError {
        code: None,
        error: StoreError::new(
            ErrorKind::Server,
            format!("dynamodb: {operation}: the reply is not a JSON object ({e})"),
        ),
    })
}

/// Errors that mean "too many requests now": nothing was done, so a retry is safe.
fn is_throttling(code: &str) -> bool {
    matches!(
        code,
        "ProvisionedThroughputExceededException"
            | "ThrottlingException"
            | "RequestLimitExceeded"
            | "TransactionConflictException"
    )
}

/// The error kind of an AWS error code, and a hint to add to its message.
fn classify(code: &str) -> (ErrorKind, &'static str) {
    match code {
        "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "IncompleteSignatureException"
        | "MissingAuthenticationToken"
        | "MissingAuthenticationTokenException"
        | "InvalidClientTokenId"
        | "SignatureDoesNotMatch"
        | "ExpiredTokenException" => (
            ErrorKind::Auth,
            " (the credentials were refused: check the access key, the secret and the session token)",
        ),
        "AccessDeniedException" => (
            ErrorKind::Server,
            " (these credentials may not use this table: check the IAM policy)",
        ),
        "ValidationException" | "SerializationException" => (ErrorKind::Invalid, ""),
        _ => (ErrorKind::Server, ""),
    }
}

fn transport_error(operation: &str, e: &reqwest::Error) -> ApiError {
    ApiError {
        code: None,
        error: http::transport_error("dynamodb", operation, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api() -> Api {
        let credentials = AwsCredentials {
            access_key_id: "AKIDEXAMPLEKEYID".into(),
            secret_access_key: "wJalrXUtnFEMIEXAMPLESECRET".into(),
            session_token: Some("FQoGZXIvYXdzEXAMPLETOKEN".into()),
        };
        Api::new(
            "https://dynamodb.us-east-1.amazonaws.com",
            "us-east-1",
            &credentials,
            Duration::from_secs(1),
        )
        .unwrap()
    }

    fn reply(code: &str, message: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "__type": format!("com.amazonaws.dynamodb.v20120810#{code}"),
            "message": message,
        }))
        .unwrap()
    }

    #[test]
    fn a_refused_signature_names_the_cause_and_no_credential() {
        let echoed = "Authorization=AWS4-HMAC-SHA256 Credential=AKIDEXAMPLEKEYID/20260101, token FQoGZXIvYXdzEXAMPLETOKEN";
        for code in [
            "UnrecognizedClientException",
            "InvalidSignatureException",
            "ExpiredTokenException",
            "AccessDeniedException",
        ] {
            let Attempt::Done(Failure::Error(e)) =
                api().http_failure("GetItem", 400, &reply(code, echoed))
            else {
                panic!("{code} is final");
            };
            // Refused credentials are an authentication failure; a refused permission is not.
            let kind = if code == "AccessDeniedException" {
                ErrorKind::Server
            } else {
                ErrorKind::Auth
            };
            assert_eq!(e.error.kind, kind, "{code}");
            let m = e.error.message;
            assert!(m.contains(code) && m.contains("GetItem"), "{m}");
            assert!(m.contains("credentials") || m.contains("IAM policy"), "{m}");
            assert!(
                !m.contains("AKIDEXAMPLEKEYID")
                    && !m.contains("EXAMPLETOKEN")
                    && !m.contains("EXAMPLESECRET"),
                "{m}"
            );
        }
    }

    #[test]
    fn throttling_and_server_errors_are_retried_and_bad_requests_are_not() {
        let api = api();
        for (status, body) in [
            (
                400,
                reply("ProvisionedThroughputExceededException", "slow down"),
            ),
            (400, reply("ThrottlingException", "slow down")),
            (500, reply("InternalServerError", "oops")),
            (503, b"<html>Service Unavailable</html>".to_vec()),
        ] {
            assert!(
                matches!(
                    api.http_failure("PutItem", status, &body),
                    Attempt::Retry(_)
                ),
                "{status}"
            );
        }
        let Attempt::Done(Failure::Error(e)) = api.http_failure(
            "PutItem",
            400,
            &reply(
                "ValidationException",
                "Item size has exceeded the maximum allowed size",
            ),
        ) else {
            panic!("a bad request is final");
        };
        assert_eq!(
            (e.error.kind, e.code.as_deref()),
            (ErrorKind::Invalid, Some("ValidationException"))
        );
    }

    #[test]
    fn a_failed_condition_is_an_outcome_with_the_item_when_sent() {
        let mut body: Value = serde_json::from_slice(&reply(
            "ConditionalCheckFailedException",
            "The conditional request failed",
        ))
        .unwrap();
        assert!(matches!(
            api().http_failure("UpdateItem", 400, &serde_json::to_vec(&body).unwrap()),
            Attempt::Done(Failure::Condition(None))
        ));
        body["Item"] = serde_json::json!({"ownerName": {"S": "other"}});
        let Attempt::Done(Failure::Condition(Some(item))) =
            api().http_failure("UpdateItem", 400, &serde_json::to_vec(&body).unwrap())
        else {
            panic!("the item comes along");
        };
        assert_eq!(item["ownerName"]["S"], "other");
    }
}
