//! The composition root of the stores: a client's URL and options open its store here
//! ([`open_store`]), and the engine over it is shared by every client of this process that
//! targets the same store with the same options, found by [`Target`], a key of plain values.
//! The engine itself knows only the store contract.

use crate::core::engine::Engine;
use crate::core::error::LockError;
use crate::store::open::{open_store, ConnectOptions};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// What a client targets: its URL and its options, compared field by field (two clients
/// share an engine only when every setting that shapes the connection is the same).
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Target {
    url: String,
    opts: ConnectOptions,
}

/// The engines in use, by target; an engine nothing holds any more is dropped from it on the
/// next open.
fn engines() -> &'static Mutex<HashMap<Target, Weak<Engine>>> {
    static ENGINES: OnceLock<Mutex<HashMap<Target, Weak<Engine>>>> = OnceLock::new();
    ENGINES.get_or_init(Default::default)
}

/// The engine for `url` and `opts`, shared with every other client of this process that
/// targets the same; opened (store and engine) when there is none. Must run inside a tokio
/// runtime; does no I/O. A URL or option the store cannot use is [`LockError::Invalid`].
pub(crate) fn shared_engine(url: &str, opts: &ConnectOptions) -> Result<Arc<Engine>, LockError> {
    let target = Target {
        url: url.to_string(),
        opts: opts.clone(),
    };
    let mut engines = engines().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(engine) = engines.get(&target).and_then(Weak::upgrade) {
        return Ok(engine);
    }
    engines.retain(|_, e| e.strong_count() > 0);
    let store = open_store(url, opts).map_err(|e| LockError::Invalid(e.message))?;
    let engine = Engine::new(store);
    engine.set_response_timeout(Duration::from_millis(opts.response_timeout_ms));
    engines.insert(target, Arc::downgrade(&engine));
    Ok(engine)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tls::TlsOptions;
    use crate::store::topology::Topology;

    fn memory() -> String {
        format!("memory://engines-test-{}", uuid::Uuid::new_v4())
    }

    fn with_ca(ca: &[u8]) -> ConnectOptions {
        ConnectOptions {
            tls: Some(TlsOptions {
                ca: Some(ca.to_vec()),
                ..TlsOptions::default()
            }),
            ..ConnectOptions::default()
        }
    }

    #[tokio::test]
    async fn clients_with_the_same_url_and_options_share_one_engine() {
        let (url, opts) = (memory(), ConnectOptions::default());
        let a = shared_engine(&url, &opts).unwrap();
        let b = shared_engine(&url, &opts.clone()).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }

    #[tokio::test]
    async fn clients_that_differ_in_any_option_get_engines_of_their_own() {
        let url = memory();
        let a = shared_engine(&url, &ConnectOptions::default()).unwrap();
        let other = ConnectOptions {
            response_timeout_ms: 1_234,
            ..ConnectOptions::default()
        };
        let b = shared_engine(&url, &other).unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(
            &a,
            &shared_engine(&memory(), &ConnectOptions::default()).unwrap()
        ));
    }

    #[test]
    fn targets_are_equal_exactly_when_every_setting_is() {
        let target = |opts: ConnectOptions| Target {
            url: "redis://h:6379".into(),
            opts,
        };
        assert!(target(with_ca(b"CA-ONE")) == target(with_ca(b"CA-ONE")));
        assert!(target(with_ca(b"CA-ONE")) != target(with_ca(b"CA-TWO")));
        let servers = |password: &str| ConnectOptions {
            topology: Topology::Redlock(vec![format!("redis://:{password}@a:1")]),
            ..ConnectOptions::default()
        };
        assert!(target(servers("ONE")) != target(servers("TWO")));
        assert!(target(ConnectOptions::default()) != target(with_ca(b"CA-ONE")));
    }
}
