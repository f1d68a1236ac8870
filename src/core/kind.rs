//! What a local queue waits for: a lock or a semaphore's permits. Its own file so that the
//! engine, the held-lock registry and the heartbeat all import it from below.

use crate::core::options::AcquireSpec;

/// What a local queue waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A lock.
    Lock = 0,
    /// Permits of a counting semaphore.
    Permits = 1,
}

impl Kind {
    /// What `spec` asks for.
    pub fn of(spec: &AcquireSpec) -> Kind {
        if spec.permits.is_some() {
            Kind::Permits
        } else {
            Kind::Lock
        }
    }
}
