//! The sessions opened in each JavaScript environment (the main thread, each worker thread).
//!
//! Engines are shared by every environment of the process, so a worker that is terminated
//! without closing its clients would leave its locks extended forever and its queued
//! acquisitions waiting to take locks nobody will use. Each environment's sessions are listed
//! per JavaScript thread (an environment runs on exactly one), and one environment clean-up
//! hook per thread closes every session still open there when Node tears the environment
//! down: pending acquisitions cancelled, heartbeats stopped, held locks released.
//!
//! The hook waits for those releases, up to [`EXIT_RELEASE_BOUND`]: when the main thread's
//! environment ends (the event loop emptied, `process.exit()`), the process ends right after
//! the hook returns, and a release still on its way would be lost with it.

use crate::core::session::Session;
use napi::Env;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{mpsc, Arc, Weak};
use std::time::{Duration, Instant};

/// How long an environment's end waits for the releases of the locks still held there. A store
/// that answers within it frees every such lock at once; one that does not leaves them to
/// their ttl, as a killed process would.
pub const EXIT_RELEASE_BOUND: Duration = Duration::from_secs(1);

type Sessions = Rc<RefCell<Vec<Weak<Session>>>>;

thread_local! {
    /// This thread's environment's sessions, once it has one (with its clean-up hook).
    static SESSIONS: RefCell<Option<Sessions>> = const { RefCell::new(None) };
}

fn close_all(sessions: Sessions) {
    let open: Vec<Arc<Session>> = sessions
        .borrow_mut()
        .drain(..)
        .filter_map(|s| s.upgrade())
        .collect();
    let count = open.len();
    let (done, finished) = mpsc::channel();
    for session in open {
        let done = done.clone();
        napi::bindgen_prelude::spawn(async move {
            session.close().await;
            let _ = done.send(());
        });
    }
    // The closes run on the runtime's threads, never on this one, so blocking it here cannot
    // hold them up.
    let deadline = Instant::now() + EXIT_RELEASE_BOUND;
    for _ in 0..count {
        let left = deadline.saturating_duration_since(Instant::now());
        if finished.recv_timeout(left).is_err() {
            break;
        }
    }
}

/// Closes every session still open in the calling thread's environment, waiting for their
/// releases up to [`EXIT_RELEASE_BOUND`]. `lib/native.js` calls it from the `process`
/// `'exit'` event, which `process.exit()` emits but after which Node runs no environment
/// clean-up hook; the hook then finds nothing left to close.
#[napi_derive::napi(catch_unwind)]
pub fn release_on_exit() {
    let sessions = SESSIONS.with(|slot| slot.borrow().clone());
    if let Some(sessions) = sessions {
        close_all(sessions);
    }
}

/// Records `session` as belonging to `env`, the environment of the calling thread.
pub fn track(env: &Env, session: &Arc<Session>) -> napi::Result<()> {
    SESSIONS.with(|slot| {
        let mut slot = slot.borrow_mut();
        let sessions = match slot.as_ref() {
            Some(sessions) => sessions.clone(),
            None => {
                let sessions: Sessions = Rc::default();
                env.add_env_cleanup_hook(sessions.clone(), close_all)?;
                *slot = Some(sessions.clone());
                sessions
            }
        };
        let mut list = sessions.borrow_mut();
        // Forget closed and collected sessions now and then, so the list stays as long as
        // the number of live clients (amortised O(1) per client).
        if list.len() >= 64 && list.len().is_power_of_two() {
            list.retain(|s| s.upgrade().is_some_and(|s| !s.is_closed()));
        }
        list.push(Arc::downgrade(session));
        Ok(())
    })
}
