//! The project's `tls` option on a `postgres://` URL: mapped onto sqlx's `sslmode` and PEM
//! material, refusing combinations with the URL's own TLS parameters that would silently drop
//! one of them. Messages never quote the material.

use sqlx::postgres::{PgConnectOptions, PgSslMode};

use crate::store::tls::TlsOptions;

/// The TLS query parameters of a `postgres://` URL (names as sqlx reads them), by what they
/// set, with lower-cased values.
fn url_tls_params(url: &str) -> Vec<(&'static str, String)> {
    let query = url
        .split_once('?')
        .map_or("", |(_, q)| q.split('#').next().unwrap_or(""));
    query
        .split('&')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let what = match k {
                "sslmode" | "ssl-mode" => "sslmode",
                "sslrootcert" | "ssl-root-cert" | "ssl-ca" => "sslrootcert",
                "sslcert" | "ssl-cert" => "sslcert",
                "sslkey" | "ssl-key" => "sslkey",
                _ => return None,
            };
            Some((what, v.to_ascii_lowercase()))
        })
        .collect()
}

/// Applies `tls` to options parsed from `url`. With `tls`, the connection is always
/// encrypted: `verify-full` by default, `verify-ca` if the URL asks for it, `require` (no
/// verification) when `rejectUnauthorized` is false.
pub fn apply_tls(
    mut options: PgConnectOptions,
    url: &str,
    tls: &TlsOptions,
) -> Result<PgConnectOptions, String> {
    tls.check()?;
    tls.check_servername(options.get_host(), "PostgreSQL")
        .map_err(|e| format!("{e} (or use ?sslmode=verify-ca to verify the CA only)"))?;
    let params = url_tls_params(url);
    let in_url = |what: &str| params.iter().find(|(w, _)| *w == what).map(|(_, v)| v);
    for (what, option, given) in [
        ("sslrootcert", "ca", tls.ca.is_some()),
        ("sslcert", "cert", tls.cert.is_some()),
        ("sslkey", "key", tls.key.is_some()),
    ] {
        if given && in_url(what).is_some() {
            return Err(format!(
                "options.tls.{option} and the URL's {what} both name a {option}: give one"
            ));
        }
    }
    let mode = match (
        in_url("sslmode").map(String::as_str),
        tls.reject_unauthorized,
    ) {
        (None, true) | (Some("verify-full"), true) => PgSslMode::VerifyFull,
        (Some("verify-ca"), true) => PgSslMode::VerifyCa,
        (None, false) | (Some("require"), false) => PgSslMode::Require,
        (Some(mode @ ("verify-full" | "verify-ca")), false) => {
            return Err(format!(
                "options.tls.rejectUnauthorized is false but the URL's sslmode={mode} verifies \
                 the server: drop one of them"
            ))
        }
        (Some(mode @ ("require" | "prefer" | "allow")), true) => {
            return Err(format!(
                "the URL's sslmode={mode} does not verify the server's certificate, so \
                 options.tls would not be checked: drop sslmode (options.tls then verifies \
                 the server), use verify-ca or verify-full, or set \
                 options.tls.rejectUnauthorized to false"
            ))
        }
        (Some(mode), _) => {
            return Err(format!(
                "the URL's sslmode={mode} cannot be combined with options.tls, which \
                 requires an encrypted connection"
            ))
        }
    };
    options = options.ssl_mode(mode);
    if let Some(ca) = &tls.ca {
        options = options.ssl_root_cert_from_pem(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        options = options
            .ssl_client_cert_from_pem(cert)
            .ssl_client_key_from_pem(key);
    }
    Ok(options)
}
