//! Cross-process wake-ups where there are no Unix datagram sockets (Windows): none. Waiters
//! in other processes poll; the store offers no `ReleaseNotifications`.

/// What telling the waiters of a release found: nobody can be told.
#[derive(Debug, Default)]
pub struct Told {
    /// Whether another process waits for the name (unknown here: false).
    pub others: bool,
    /// Addresses nobody listens on any more (none).
    pub dead: Vec<String>,
}

/// No side channel.
pub struct Wake;

impl Wake {
    /// No side channel.
    pub fn new() -> Self {
        Wake
    }

    /// No address: nothing is ever registered under it.
    pub fn addr(&self) -> &str {
        ""
    }

    /// No names: nobody watches here.
    pub fn watched(&self) -> super::connection::WatchedFn {
        Box::new(Vec::new)
    }

    /// Tells nobody.
    pub fn tell(&self, _key: &str, _addrs: &str) -> Told {
        Told::default()
    }

    /// Tells nobody (nobody watches here).
    pub fn tell_here(&self, _key: &str) {}

    /// Nothing to stop.
    pub fn close(&self) {}
}

/// Every address is taken as alive (none is ever probed here).
pub fn alive(_addr: &str) -> bool {
    true
}
