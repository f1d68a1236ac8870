//! How an etcd answer or a transport failure becomes a [`StoreError`]: the gRPC status code
//! the JSON gateway reports (`{"error", "code"}`) decides the kind, as SQLSTATE does for the
//! SQL stores. Messages carry etcd's own text, which never holds a credential (the token and
//! the password travel in headers and bodies that nothing here prints).

use crate::store::{http, ErrorKind, StoreError};

/// gRPC status codes etcd answers with (google.golang.org/grpc/codes).
pub mod code {
    /// `InvalidArgument`: a request etcd refuses as malformed (too large, bad range).
    pub const INVALID_ARGUMENT: i64 = 3;
    /// `DeadlineExceeded`: etcd's own request timeout (no quorum in time).
    pub const DEADLINE_EXCEEDED: i64 = 4;
    /// `PermissionDenied`: the user's roles do not allow the key.
    pub const PERMISSION_DENIED: i64 = 7;
    /// `Unavailable`: no leader, leader changed, the member is stopping.
    pub const UNAVAILABLE: i64 = 14;
    /// `Unauthenticated`: a wrong password, or a token that expired.
    pub const UNAUTHENTICATED: i64 = 16;
}

/// The kind of a failure etcd answered with `code` (and `text`).
pub fn kind_of(code: i64, text: &str) -> ErrorKind {
    // etcd answers auth failures with InvalidArgument ("authentication failed, invalid user ID
    // or password", "user name is empty": no credentials while auth is enabled).
    const AUTH: [&str; 3] = [
        "authentication failed",
        "user name is empty",
        "invalid auth token",
    ];
    if AUTH.iter().any(|t| text.contains(t)) {
        return ErrorKind::Auth;
    }
    match code {
        code::UNAUTHENTICATED | code::PERMISSION_DENIED => ErrorKind::Auth,
        // "etcdserver: request timed out": the member could not reach a quorum in time; the
        // request may still be applied (an outcome unknown, as a timeout of ours).
        code::DEADLINE_EXCEEDED => ErrorKind::Timeout,
        // No leader, or leader changed: the member stands apart from the quorum; the request
        // was not applied by it, but one forwarded to an old leader may have been.
        code::UNAVAILABLE => ErrorKind::Unreachable,
        code::INVALID_ARGUMENT => ErrorKind::Invalid,
        _ => ErrorKind::Server,
    }
}

/// A failure etcd answered with.
pub fn server_error(path: &str, code: i64, text: &str) -> StoreError {
    let text: String = text.chars().take(300).collect();
    StoreError::new(kind_of(code, &text), format!("etcd: {path}: {text}"))
}

/// A transport failure of reqwest: a timeout, a connection that could not be made or broke,
/// a TLS handshake that failed. reqwest's text names the URL, which never carries the
/// credentials (they are sent in the authenticate request's body).
pub fn transport_error(path: &str, e: &reqwest::Error) -> StoreError {
    http::transport_error("etcd", path, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_grpc_code_maps_to_its_kind() {
        assert_eq!(kind_of(code::UNAUTHENTICATED, ""), ErrorKind::Auth);
        assert_eq!(kind_of(code::PERMISSION_DENIED, ""), ErrorKind::Auth);
        assert_eq!(kind_of(code::DEADLINE_EXCEEDED, ""), ErrorKind::Timeout);
        assert_eq!(kind_of(code::UNAVAILABLE, ""), ErrorKind::Unreachable);
        assert_eq!(kind_of(code::INVALID_ARGUMENT, ""), ErrorKind::Invalid);
        assert_eq!(
            kind_of(
                code::INVALID_ARGUMENT,
                "etcdserver: authentication failed, invalid user ID or password"
            ),
            ErrorKind::Auth
        );
        // NotFound: a lease that does not exist (any more).
        assert_eq!(kind_of(5, ""), ErrorKind::Server);
    }
}
