//! What the stores that speak HTTP/JSON (DynamoDB, etcd's gateway) share about reqwest: the
//! client's common settings, and how a transport failure becomes a [`StoreError`].

use crate::store::{ErrorKind, StoreError};
use std::time::Duration;

/// A reqwest client builder with the settings every HTTP store uses: connecting bounded by
/// `connect_timeout`, no Nagle delay, idle connections dropped after 50 s (below the 60 s after
/// which a server or a load balancer may close them unseen), and deadbolt's user agent.
pub fn client_builder(connect_timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(50))
        .user_agent(concat!("deadbolt/", env!("CARGO_PKG_VERSION")))
}

/// Builds the client `builder` describes.
pub fn build_client(builder: reqwest::ClientBuilder) -> Result<reqwest::Client, String> {
    builder
        .build()
        .map_err(|e| format!("cannot set up the HTTP client: {e}"))
}

/// Whether the server refused the connection (nothing listens at its address).
pub fn is_refused(e: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        source = cause.source();
    }
    false
}

/// A transport failure of reqwest (a timeout, a connection that could not be made or broke, a
/// TLS handshake that failed) as `<store>: <what>: <the error and its causes>`, or, for a
/// refused connection, `<store>: <what>: connection refused by <host:port>`. A timeout is
/// [`ErrorKind::Timeout`], anything else [`ErrorKind::Unreachable`].
pub fn transport_error(store: &str, what: &str, e: &reqwest::Error) -> StoreError {
    if is_refused(e) {
        if let Some(url) = e.url() {
            let host = url.host_str().unwrap_or("");
            let port = url.port_or_known_default().unwrap_or(0);
            return StoreError::new(
                ErrorKind::Unreachable,
                format!("{store}: {what}: connection refused by {host}:{port}"),
            );
        }
    }
    let kind = if e.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::Unreachable
    };
    // The full chain: reqwest's own text only says "error sending request"; its sources say
    // why. Its Display names the URL, which never carries a credential in these stores.
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    StoreError::new(kind, format!("{store}: {what}: {text}"))
}
