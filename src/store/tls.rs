//! TLS settings shared by every store that takes `options.tls` (which schemes do: the
//! registry, [`super::registry::StoreEntry::tls`]): a private CA, a client certificate and key
//! for mutual TLS, the name to verify, and whether to verify at all.
//!
//! The material is held as PEM bytes and is never printed: `Debug` shows which parts are set
//! and a per-process fingerprint of them, and every error message names the option, never its
//! contents.

use crate::store::redact::set;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::fmt;

/// TLS settings for a store connection, as given to Node's `tls.connect`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TlsOptions {
    /// CA certificates (PEM, one or more) that the server's certificate must chain to,
    /// instead of the built-in public roots.
    pub ca: Option<Vec<u8>>,
    /// Client certificate chain (PEM) presented for mutual TLS; needs `key`.
    pub cert: Option<Vec<u8>>,
    /// Unencrypted private key (PEM: PKCS#8, PKCS#1 or SEC1) of `cert`.
    pub key: Option<Vec<u8>>,
    /// Name the server's certificate must carry. The drivers only verify the URL's host, so
    /// a value other than that host is refused by the stores (see their `connect`).
    pub servername: Option<String>,
    /// Verify the server's certificate (default true). False encrypts without verifying.
    pub reject_unauthorized: bool,
}

impl Default for TlsOptions {
    fn default() -> Self {
        Self {
            ca: None,
            cert: None,
            key: None,
            servername: None,
            reject_unauthorized: true,
        }
    }
}

impl TlsOptions {
    /// A fingerprint of the material: two SipHash values under keys drawn once per process, so
    /// it identifies the material within this process and means nothing outside it.
    pub fn fingerprint(&self) -> String {
        crate::store::redact::fingerprint(&(&self.ca, &self.cert, &self.key))
    }

    /// Checks that the material parses (before any I/O), naming the offending option. The
    /// message never quotes the material.
    pub fn check(&self) -> Result<(), String> {
        if let Some(ca) = &self.ca {
            check_certs(ca, "options.tls.ca")?;
        }
        if let Some(cert) = &self.cert {
            check_certs(cert, "options.tls.cert")?;
        }
        if let Some(key) = &self.key {
            if PrivateKeyDer::from_pem_slice(key).is_err() {
                return Err("options.tls.key must be an unencrypted PEM private key \
                     (-----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY)"
                    .into());
            }
        }
        if self.cert.is_some() != self.key.is_some() {
            return Err("options.tls.cert and options.tls.key must be given together".into());
        }
        if self.servername.as_deref() == Some("") {
            return Err("options.tls.servername must not be empty".into());
        }
        Ok(())
    }

    /// Refuses a `servername` other than `host`: neither driver can verify the server under
    /// another name than the one it connects to.
    pub fn check_servername(&self, host: &str, store: &str) -> Result<(), String> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match &self.servername {
            Some(name) if !name.eq_ignore_ascii_case(host) => Err(format!(
                "options.tls.servername {name:?} is not supported for {store}: the driver \
                 verifies the server's certificate against the URL's host ({host:?}) and cannot \
                 use another name; put that name in the URL instead"
            )),
            _ => Ok(()),
        }
    }
}

fn check_certs(pem: &[u8], name: &str) -> Result<(), String> {
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        if cert.is_err() {
            count = 0;
            break;
        }
        count += 1;
    }
    if count == 0 {
        return Err(format!(
            "{name} must be PEM-encoded certificates (-----BEGIN CERTIFICATE-----)"
        ));
    }
    Ok(())
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Destructured so that a new field must be considered here.
        let Self {
            ca,
            cert,
            key,
            servername,
            reject_unauthorized,
        } = self;
        f.debug_struct("TlsOptions")
            .field("ca", &set(ca))
            .field("cert", &set(cert))
            .field("key", &set(key))
            .field("fingerprint", &self.fingerprint())
            .field("servername", servername)
            .field("reject_unauthorized", reject_unauthorized)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOT_PEM: &[u8] = b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n";

    #[test]
    fn debug_output_names_what_is_set_but_never_prints_the_material() {
        let tls = TlsOptions {
            ca: Some(b"SECRET-CA".to_vec()),
            key: Some(b"SECRET-KEY".to_vec()),
            ..TlsOptions::default()
        };
        let out = format!("{tls:?}");
        assert!(!out.contains("SECRET"), "{out}");
        assert!(out.contains("ca: \"<set>\""), "{out}");
        assert!(out.contains("cert: \"<unset>\""), "{out}");
    }

    #[test]
    fn material_that_is_not_pem_is_refused_naming_the_option_without_quoting_it() {
        let tls = TlsOptions {
            ca: Some(NOT_PEM.to_vec()),
            ..TlsOptions::default()
        };
        let err = tls.check().unwrap_err();
        assert!(err.starts_with("options.tls.ca "), "{err}");
        assert!(!err.contains("bm90"), "{err}");
        let tls = TlsOptions {
            cert: Some(b"plain text".to_vec()),
            key: Some(b"plain text".to_vec()),
            ..TlsOptions::default()
        };
        assert!(tls.check().unwrap_err().starts_with("options.tls.cert "));
    }

    #[test]
    fn a_servername_other_than_the_host_is_refused() {
        let tls = TlsOptions {
            servername: Some("db.internal".into()),
            ..TlsOptions::default()
        };
        assert!(tls.check_servername("DB.internal", "Redis").is_ok());
        let err = tls.check_servername("127.0.0.1", "Redis").unwrap_err();
        assert!(err.starts_with("options.tls.servername"), "{err}");
    }
}
