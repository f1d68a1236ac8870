//! TLS for `mysql://`: the URL's own TLS parameters and `options.tls` (checked together by
//! [`UrlTls`]), applied to sqlx's connect options.

use crate::store::sql::tls::{UrlTls, Verify};
use crate::store::tls::TlsOptions;
use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};

/// The TLS parameters of a `mysql://` URL, as sqlx reads them.
const URL_TLS: UrlTls = UrlTls {
    server: "MySQL",
    names: [
        (&["sslmode", "ssl-mode"], "ssl-mode"),
        (&["sslca", "ssl-ca"], "ssl-ca"),
        (&["sslcert", "ssl-cert"], "ssl-cert"),
        (&["sslkey", "ssl-key"], "ssl-key"),
    ],
    verify_full: "verify_identity",
    verify_ca: "verify_ca",
    require: "required",
    unverified: &["required", "preferred"],
};

/// Applies `tls` to options parsed from `url`, refusing combinations with the URL's own TLS
/// parameters that would silently drop one of them. Messages never quote the material.
pub(super) fn apply_tls(
    options: MySqlConnectOptions,
    url: &str,
    tls: &TlsOptions,
) -> Result<MySqlConnectOptions, String> {
    let verify = URL_TLS.verify(url, options.get_host(), tls)?;
    let mut options = options.ssl_mode(match verify {
        Verify::Full => MySqlSslMode::VerifyIdentity,
        Verify::Ca => MySqlSslMode::VerifyCa,
        Verify::Nothing => MySqlSslMode::Required,
    });
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
