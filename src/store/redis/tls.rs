//! A Redis client for a `rediss://` URL with TLS material of the caller's (a private CA, a
//! client certificate), and the check that a `rediss://` server speaks TLS at all.

use crate::store::tls::TlsOptions;
use crate::store::{ErrorKind, StoreError, StoreResult};
use redis::{Client, ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, TlsCertificates};
use rustls_pki_types::ServerName;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A client for `url` that uses `tls`. Errors name the option at fault, never its contents.
pub(super) fn tls_client(url: &str, tls: &TlsOptions) -> StoreResult<Client> {
    tls.check().map_err(StoreError::invalid)?;
    let info = url
        .into_connection_info()
        .map_err(|e| StoreError::invalid(format!("Invalid Redis URL: {e}")))?;
    let ConnectionAddr::TcpTls {
        host,
        port,
        insecure,
        ..
    } = info.addr().clone()
    else {
        return Err(StoreError::invalid(
            "options.tls needs a rediss:// URL (TLS over TCP)",
        ));
    };
    tls.check_servername(&host, "Redis")
        .map_err(StoreError::invalid)?;
    let info = info.set_addr(ConnectionAddr::TcpTls {
        host,
        port,
        // `rediss://…#insecure` keeps meaning what it meant.
        insecure: insecure || !tls.reject_unauthorized,
        tls_params: None,
    });
    let client_tls = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: cert.clone(),
            client_key: key.clone(),
        }),
        _ => None,
    };
    let certs = TlsCertificates {
        client_tls,
        root_cert: tls.ca.clone(),
    };
    // The material was checked above; redis-rs's own message could quote a line of it.
    Client::build_with_tls(info, certs)
        .map_err(|_| StoreError::invalid("options.tls: the certificates or key could not be used"))
}

/// Checks, before a `rediss://` store's first connection, that the server speaks TLS at all.
///
/// A plaintext Redis reads a TLS ClientHello as the start of an inline command and waits for
/// the rest, so redis-rs's handshake just hangs until its connect time-out, is retried, and
/// ends as a bare "timed out" after twice the bound. This check sends one ClientHello itself
/// and looks at the first byte of the answer (a TLS record starts with 0x15 or 0x16), within
/// the connect time-out, and reports a server that answers in plaintext or not at all as a
/// failed TLS handshake. Once a server has answered like a TLS server the check is not made
/// again; everything else (certificates, client authentication) is left to redis-rs.
pub(super) struct HandshakeCheck {
    host: String,
    port: u16,
    timeout: Duration,
    verified: AtomicBool,
    /// One check at a time: callers arriving meanwhile wait for its outcome.
    gate: tokio::sync::Mutex<()>,
}

/// What one look at the server's first answer found, short of a failure.
enum Probe {
    /// It answered with a TLS record, or in a way this check cannot read (it closed the
    /// connection): redis-rs's handshake takes it from here, and the check is not made again.
    Settled,
    /// No TCP connection (refused, a name that does not resolve): the store's connection
    /// reports that itself, and the check is made again before the next one.
    NoConnection,
}

impl HandshakeCheck {
    /// The check for `client`'s server, or None if its URL is not TLS over TCP.
    pub(super) fn for_client(client: &Client, connect_timeout_ms: u64) -> Option<Self> {
        match client.get_connection_info().addr() {
            ConnectionAddr::TcpTls { host, port, .. } => Some(HandshakeCheck {
                host: host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
                port: *port,
                timeout: Duration::from_millis(connect_timeout_ms),
                verified: AtomicBool::new(false),
                gate: tokio::sync::Mutex::new(()),
            }),
            _ => None,
        }
    }

    /// Ok once the server has answered like a TLS server (or could not be asked); an
    /// `Unreachable` error naming the TLS handshake otherwise. Bounded by the connect
    /// time-out, waiting for a check already under way included.
    ///
    /// # Cancel Safety
    /// Cancel safe: a dropped check leaves the server unverified, to be checked again.
    pub(super) async fn ensure(&self) -> StoreResult<()> {
        if self.verified.load(Ordering::Acquire) {
            return Ok(());
        }
        let deadline = Instant::now() + self.timeout;
        let Ok(_gate) = tokio::time::timeout_at(deadline, self.gate.lock()).await else {
            return Err(self.no_answer());
        };
        if self.verified.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Probe::Settled = self.probe(deadline).await? {
            self.verified.store(true, Ordering::Release);
        }
        Ok(())
    }

    async fn probe(&self, deadline: Instant) -> StoreResult<Probe> {
        let addr = (self.host.as_str(), self.port);
        let mut tcp = match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(_)) => return Ok(Probe::NoConnection),
            Err(_) => {
                return Err(StoreError::new(
                    ErrorKind::Timeout,
                    format!(
                        "connecting to {}:{} timed out after {} ms",
                        self.host,
                        self.port,
                        self.timeout.as_millis()
                    ),
                ))
            }
        };
        let Some(hello) = client_hello(&self.host) else {
            return Ok(Probe::Settled);
        };
        let mut first = [0u8; 1];
        let answer = tokio::time::timeout_at(deadline, async {
            tcp.write_all(&hello).await?;
            tcp.read(&mut first).await
        })
        .await;
        match answer {
            // Handshake (0x16) or alert (0x15): a TLS server, whatever it thinks of us.
            Ok(Ok(1)) if first[0] == 0x15 || first[0] == 0x16 => Ok(Probe::Settled),
            Ok(Ok(1)) => Err(StoreError::new(
                ErrorKind::Unreachable,
                format!(
                    "TLS handshake with {}:{} failed: the server answered in plaintext, so it \
                     does not speak TLS on this port (use redis:// for a plaintext server, or \
                     the port of its TLS listener)",
                    self.host, self.port
                ),
            )),
            Ok(_) => Ok(Probe::Settled),
            Err(_) => Err(self.no_answer()),
        }
    }

    fn no_answer(&self) -> StoreError {
        StoreError::new(
            ErrorKind::Unreachable,
            format!(
                "TLS handshake with {}:{} failed: no answer to it within {} ms (connectTimeout); \
                 the server accepted the connection, and a server that does not speak TLS on \
                 this port, such as a plaintext Redis, never answers one (use redis:// for a \
                 plaintext server, or the port of its TLS listener)",
                self.host,
                self.port,
                self.timeout.as_millis()
            ),
        )
    }
}

/// The bytes of a TLS ClientHello for `host`, from rustls. Nothing of the server's answer is
/// processed, so no certificate is ever looked at and the empty root store is never used.
fn client_hello(host: &str) -> Option<Vec<u8>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_owned()).ok()?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).ok()?;
    Some(hello)
}
