//! TLS for `mysql://`: the URL's own TLS parameters and `options.tls`, applied to sqlx's
//! connect options.

use crate::store::tls::TlsOptions;
use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};

/// The TLS query parameters of a `mysql://` URL (names as sqlx reads them), by what they set.
pub(super) fn url_tls_params(url: &str) -> Vec<(&'static str, String)> {
    let query = url
        .split_once('?')
        .map_or("", |(_, q)| q.split('#').next().unwrap_or(""));
    query
        .split('&')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let what = match k {
                "sslmode" | "ssl-mode" => "ssl-mode",
                "sslca" | "ssl-ca" => "ssl-ca",
                "sslcert" | "ssl-cert" => "ssl-cert",
                "sslkey" | "ssl-key" => "ssl-key",
                _ => return None,
            };
            Some((what, v.to_ascii_lowercase()))
        })
        .collect()
}

/// Applies `tls` to options parsed from `url`, refusing combinations with the URL's own TLS
/// parameters that would silently drop one of them. Messages never quote the material.
pub(super) fn apply_tls(
    mut options: MySqlConnectOptions,
    url: &str,
    tls: &TlsOptions,
) -> Result<MySqlConnectOptions, String> {
    tls.check()?;
    tls.check_servername(options.get_host(), "MySQL")
        .map_err(|e| format!("{e} (or use ?ssl-mode=verify_ca to verify the CA only)"))?;
    let params = url_tls_params(url);
    let in_url = |what: &str| params.iter().find(|(w, _)| *w == what).map(|(_, v)| v);
    for (what, given) in [
        ("ssl-ca", tls.ca.is_some()),
        ("ssl-cert", tls.cert.is_some()),
        ("ssl-key", tls.key.is_some()),
    ] {
        let option = &what[4..];
        if given && in_url(what).is_some() {
            return Err(format!(
                "options.tls.{option} and the URL's {what} both name a {option}: give one"
            ));
        }
    }
    let mode = match (
        in_url("ssl-mode").map(String::as_str),
        tls.reject_unauthorized,
    ) {
        (None, true) => MySqlSslMode::VerifyIdentity,
        (None, false) => MySqlSslMode::Required,
        (Some("verify_identity"), true) => MySqlSslMode::VerifyIdentity,
        (Some("verify_ca"), true) => MySqlSslMode::VerifyCa,
        (Some("required"), false) => MySqlSslMode::Required,
        (Some(mode @ ("verify_identity" | "verify_ca")), false) => {
            return Err(format!(
                "options.tls.rejectUnauthorized is false but the URL's ssl-mode={mode} verifies \
                 the server: drop one of them"
            ))
        }
        (Some(mode @ ("required" | "preferred")), true) => {
            return Err(format!(
                "the URL's ssl-mode={mode} does not verify the server's certificate, so \
                 options.tls would not be checked: drop ssl-mode (options.tls then verifies \
                 the server), use verify_ca or verify_identity, or set \
                 options.tls.rejectUnauthorized to false"
            ))
        }
        (Some(mode), _) => {
            return Err(format!(
                "the URL's ssl-mode={mode} cannot be combined with options.tls, which \
                 requires an encrypted connection"
            ))
        }
    };
    options = options.ssl_mode(mode);
    if let Some(ca) = &tls.ca {
        options = options.ssl_ca_from_pem(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        options = options
            .ssl_client_cert_from_pem(cert)
            .ssl_client_key_from_pem(key);
    }
    Ok(options)
}
