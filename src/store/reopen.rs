//! The pause of a background task between attempts to reopen a connection that failed or
//! broke (MySQL's doorbell, PostgreSQL's `LISTEN`, etcd's watch stream): from
//! [`REOPEN_FIRST`], doubling up to [`REOPEN_MAX`], and the first again once one worked, so
//! a server that is down is not hammered and one that is back is found soon.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// First and longest pause between attempts to reopen a connection.
pub const REOPEN_FIRST: Duration = Duration::from_millis(50);
/// See [`REOPEN_FIRST`].
pub const REOPEN_MAX: Duration = Duration::from_secs(1);

/// The pause before the next attempt to reopen a connection that failed to open or broke: from
/// [`REOPEN_FIRST`], doubling up to [`REOPEN_MAX`], and the first again once one opened.
#[derive(Debug)]
pub struct Reopen(Duration);

impl Default for Reopen {
    fn default() -> Self {
        Reopen(REOPEN_FIRST)
    }
}

impl Reopen {
    /// Waits the pause after a failed attempt, doubling the next one. Returns `false` if
    /// `stop` came first.
    ///
    /// # Cancel Safety
    /// Cancel safe: a dropped wait leaves the pause as it was.
    pub async fn wait(&mut self, stop: &CancellationToken) -> bool {
        tokio::select! {
            _ = stop.cancelled() => return false,
            _ = tokio::time::sleep(self.0) => {}
        }
        self.0 = (self.0 * 2).min(REOPEN_MAX);
        true
    }

    /// A connection opened: the next failure waits the first pause again.
    pub fn opened(&mut self) {
        self.0 = REOPEN_FIRST;
    }
}
