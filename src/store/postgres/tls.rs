//! The project's `tls` option on a `postgres://` URL: checked with the URL's own TLS
//! parameters by [`UrlTls`], then mapped onto sqlx's `sslmode` and PEM material. With `tls`,
//! the connection is always encrypted: `verify-full` by default, `verify-ca` if the URL asks
//! for it, `require` (no verification) when `rejectUnauthorized` is false.

use sqlx::postgres::{PgConnectOptions, PgSslMode};

use crate::store::sql::tls::{UrlTls, Verify};
use crate::store::tls::TlsOptions;

/// The TLS parameters of a `postgres://` URL, as sqlx reads them.
const URL_TLS: UrlTls = UrlTls {
    server: "PostgreSQL",
    names: [
        (&["sslmode", "ssl-mode"], "sslmode"),
        (&["sslrootcert", "ssl-root-cert", "ssl-ca"], "sslrootcert"),
        (&["sslcert", "ssl-cert"], "sslcert"),
        (&["sslkey", "ssl-key"], "sslkey"),
    ],
    verify_full: "verify-full",
    verify_ca: "verify-ca",
    require: "require",
    unverified: &["require", "prefer", "allow"],
};

/// Applies `tls` to options parsed from `url`, refusing combinations with the URL's own TLS
/// parameters that would silently drop one of them. Messages never quote the material.
pub fn apply_tls(
    options: PgConnectOptions,
    url: &str,
    tls: &TlsOptions,
) -> Result<PgConnectOptions, String> {
    let verify = URL_TLS.verify(url, options.get_host(), tls)?;
    let mut options = options.ssl_mode(match verify {
        Verify::Full => PgSslMode::VerifyFull,
        Verify::Ca => PgSslMode::VerifyCa,
        Verify::Nothing => PgSslMode::Require,
    });
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
