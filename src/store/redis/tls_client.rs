//! A Redis client for a `rediss://` URL with TLS material of the caller's (a private CA, a
//! client certificate).

use crate::store::tls::TlsOptions;
use crate::store::{StoreError, StoreResult};
use redis::{Client, ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, TlsCertificates};

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
