//! The sessions opened in each JavaScript environment (the main thread, each worker thread).
//!
//! Engines are shared by every environment of the process, so a worker that is terminated
//! without closing its clients would leave its locks extended forever and its queued
//! acquisitions waiting to take locks nobody will use. When an environment is torn down,
//! Node runs the finaliser of the environment's instance data: every session still open there
//! is closed (pending acquisitions cancelled, heartbeats stopped, held locks released).

use crate::core::session::Session;
use napi::Env;
use std::sync::{Arc, Mutex, Weak};

#[derive(Default)]
struct EnvSessions {
    sessions: Mutex<Vec<Weak<Session>>>,
}

/// Records `session` as belonging to `env`.
pub fn track(env: &Env, session: &Arc<Session>) -> napi::Result<()> {
    if env.get_instance_data::<EnvSessions>()?.is_none() {
        env.set_instance_data(EnvSessions::default(), (), |ctx| {
            let sessions = std::mem::take(&mut *lock(&ctx.value.sessions));
            for session in sessions.iter().filter_map(Weak::upgrade) {
                napi::bindgen_prelude::spawn(async move {
                    session.close().await;
                });
            }
        })?;
    }
    if let Some(data) = env.get_instance_data::<EnvSessions>()? {
        let mut sessions = lock(&data.sessions);
        // Forget closed and collected sessions now and then, so the list stays as long as
        // the number of live clients (amortised O(1) per client).
        if sessions.len() >= 64 && sessions.len().is_power_of_two() {
            sessions.retain(|s| s.upgrade().is_some_and(|s| !s.is_closed()));
        }
        sessions.push(Arc::downgrade(session));
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
