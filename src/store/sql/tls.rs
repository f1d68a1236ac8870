//! The project's `tls` option against a SQL URL's own TLS parameters: which verification it
//! asks for, refusing the combinations that would silently drop one of them. A dialect
//! describes its parameter names ([`UrlTls`]) and maps the [`Verify`] it gets onto its
//! driver's mode and PEM material. Messages never quote the material.

use crate::store::tls::TlsOptions;

/// How a dialect's URL spells its TLS parameters (the names its driver reads).
pub struct UrlTls {
    /// The server's name in messages (`MySQL`, `PostgreSQL`).
    pub server: &'static str,
    /// Every accepted spelling of a parameter, with the name messages use for it: the mode
    /// first, then the CA, the client certificate and its key.
    pub names: [(&'static [&'static str], &'static str); 4],
    /// The modes, as the URL writes them: verifying the name and the CA, the CA only,
    /// and encrypting without verifying.
    pub verify_full: &'static str,
    /// See [`UrlTls::verify_full`].
    pub verify_ca: &'static str,
    /// See [`UrlTls::verify_full`].
    pub require: &'static str,
    /// The URL's modes that may leave the connection unencrypted or unverified, `require`
    /// included.
    pub unverified: &'static [&'static str],
}

/// What the connection verifies, once `tls` and the URL agree. It is always encrypted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// The server's certificate and name (the default with `tls`).
    Full,
    /// The server's certificate only (the URL asked for it).
    Ca,
    /// Nothing (`rejectUnauthorized: false`).
    Nothing,
}

impl UrlTls {
    /// The URL's TLS parameters (by the names of [`UrlTls::names`]), values lower-cased.
    fn params(&self, url: &str) -> Vec<(&'static str, String)> {
        let query = url
            .split_once('?')
            .map_or("", |(_, q)| q.split('#').next().unwrap_or(""));
        query
            .split('&')
            .filter_map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                let (_, name) = self.names.iter().find(|(all, _)| all.contains(&k))?;
                Some((*name, v.to_ascii_lowercase()))
            })
            .collect()
    }

    /// Checks `tls` (its material, and its servername against `host`) and the URL's own TLS
    /// parameters together, and says what the connection verifies.
    pub fn verify(&self, url: &str, host: &str, tls: &TlsOptions) -> Result<Verify, String> {
        let mode_param = self.names[0].1;
        tls.check()?;
        tls.check_servername(host, self.server).map_err(|e| {
            format!(
                "{e} (or use ?{mode_param}={} to verify the CA only)",
                self.verify_ca
            )
        })?;
        let params = self.params(url);
        let in_url = |what: &str| params.iter().find(|(w, _)| *w == what).map(|(_, v)| v);
        for ((_, what), option, given) in [
            (self.names[1], "ca", tls.ca.is_some()),
            (self.names[2], "cert", tls.cert.is_some()),
            (self.names[3], "key", tls.key.is_some()),
        ] {
            if given && in_url(what).is_some() {
                return Err(format!(
                    "options.tls.{option} and the URL's {what} both name a {option}: give one"
                ));
            }
        }
        let verifying = [self.verify_full, self.verify_ca];
        Ok(
            match (
                in_url(mode_param).map(String::as_str),
                tls.reject_unauthorized,
            ) {
                (None, true) => Verify::Full,
                (None, false) => Verify::Nothing,
                (Some(mode), true) if mode == self.verify_full => Verify::Full,
                (Some(mode), true) if mode == self.verify_ca => Verify::Ca,
                (Some(mode), false) if mode == self.require => Verify::Nothing,
                (Some(mode), false) if verifying.contains(&mode) => {
                    return Err(format!(
                    "options.tls.rejectUnauthorized is false but the URL's {mode_param}={mode} \
                     verifies the server: drop one of them"
                ))
                }
                (Some(mode), true) if self.unverified.contains(&mode) => {
                    return Err(format!(
                        "the URL's {mode_param}={mode} does not verify the server's certificate, \
                     so options.tls would not be checked: drop {mode_param} (options.tls then \
                     verifies the server), use {} or {}, or set \
                     options.tls.rejectUnauthorized to false",
                        self.verify_ca, self.verify_full
                    ))
                }
                (Some(mode), _) => {
                    return Err(format!(
                        "the URL's {mode_param}={mode} cannot be combined with options.tls, which \
                     requires an encrypted connection"
                    ))
                }
            },
        )
    }
}
