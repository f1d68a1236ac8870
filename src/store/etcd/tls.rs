//! The HTTP client of an etcd store: `etcds://` takes the TLS options the other stores take
//! (a private CA, a client certificate for mutual TLS, whether to verify), given to reqwest's
//! rustls. Every error names the option, never its contents.

use crate::store::http;
use crate::store::tls::TlsOptions;
use std::time::Duration;

/// The reqwest client for a store: connections bounded by `connect_timeout`, kept alive by
/// TCP keep-alive (a watch stream over a connection that died unseen is noticed), and TLS as
/// `tls` says (`None`: plain HTTP).
pub fn http_client(
    tls: Option<&TlsOptions>,
    hosts: &[String],
    connect_timeout: Duration,
) -> Result<reqwest::Client, String> {
    let mut builder = http::client_builder(connect_timeout).tcp_keepalive(Duration::from_secs(5));
    if let Some(tls) = tls {
        tls.check()?;
        for host in hosts {
            tls.check_servername(host, "etcd")?;
        }
        if let Some(ca) = &tls.ca {
            let certs = reqwest::Certificate::from_pem_bundle(ca)
                .map_err(|_| "options.tls.ca must be PEM-encoded certificates".to_string())?;
            builder = builder.tls_built_in_root_certs(false);
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
            let mut pem = cert.clone();
            pem.push(b'\n');
            pem.extend_from_slice(key);
            let identity = reqwest::Identity::from_pem(&pem).map_err(|_| {
                "options.tls.cert and options.tls.key must be a PEM certificate chain and its \
                 private key"
                    .to_string()
            })?;
            builder = builder.identity(identity);
        }
        if !tls.reject_unauthorized {
            builder = builder.danger_accept_invalid_certs(true);
        }
    }
    http::build_client(builder)
}
