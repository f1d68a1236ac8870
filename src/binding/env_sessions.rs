//! The sessions opened in each JavaScript environment (the main thread, each worker thread).
//!
//! Engines are shared by every environment of the process, so a worker that is terminated
//! without closing its clients would leave its locks extended forever and its queued
//! acquisitions waiting to take locks nobody will use. Each environment's sessions are listed
//! per JavaScript thread (an environment runs on exactly one), and one environment clean-up
//! hook per thread closes every session still open there when Node tears the environment
//! down: pending acquisitions cancelled, heartbeats stopped, held locks released.

use crate::core::session::Session;
use napi::Env;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Weak};

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
    for session in open {
        napi::bindgen_prelude::spawn(async move {
            session.close().await;
        });
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
