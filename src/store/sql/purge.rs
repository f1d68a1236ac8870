//! When a SQL store purges the rows of names nobody holds: at most once per [`PURGE_EVERY`]
//! and process, started after a release, so an idle store costs nothing and a busy one
//! purges rarely. Each dialect writes its own purge statements.

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a process purges free rows at most.
pub const PURGE_EVERY: Duration = Duration::from_secs(60);

/// When the last purge started (`None`: never).
#[derive(Debug, Default)]
pub struct PurgeClock {
    last: Mutex<Option<Instant>>,
}

impl PurgeClock {
    /// Runs `purge` in the background, within `bound`, if none started in this process for
    /// [`PURGE_EVERY`]. Best effort: a failed purge is tried again after the next interval.
    pub fn run_if_due<F>(&self, bound: Duration, purge: impl FnOnce() -> F)
    where
        F: Future + Send + 'static,
    {
        let now = Instant::now();
        {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|at| now.duration_since(at) < PURGE_EVERY) {
                return;
            }
            *last = Some(now);
        }
        let purge = purge();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(bound, purge).await;
        });
    }
}
