//! Cross-process wake-ups for the SQLite store: a side channel of Unix datagram sockets.
//!
//! A process that waits for a name binds one datagram socket (on Linux in the abstract
//! namespace, so nothing is left on disk when it dies; elsewhere a socket file in the
//! temporary directory) and registers `(name, address)` in the waiter table of the database
//! (see `sql::WATCH`). A release's `DELETE … RETURNING` also returns the addresses waiting for
//! the name (a semaphore's: for its `permits::watch_key`), in the same statement, and the
//! releaser sends each of them the name in one non-blocking datagram, after its commit: the
//! woken waiter's next read sees the release.
//!
//! Nothing here can make a release fail or wait: a send that fails is dropped (the waiter
//! falls back to its poll), and an address nobody listens on any more (a process that died
//! without unregistering) is forgotten. Waiters register before their last look at the
//! store (the engine looks once more after `watch`), so a release between a refusal and the
//! registration is not missed.

use super::SqliteStore;
use crate::runtime::debug::debug;
use crate::store::watched::Watched;
use crate::store::ReleaseNotifications;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use std::io;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// What the receiving task shares with the store.
struct Shared {
    /// Names waited for in this process, with the number of `watch` calls for each.
    watched: Watched,
    /// Released names heard from other processes, for the engine.
    released: broadcast::Sender<String>,
}

/// One store's side of the side channel.
pub struct Wake {
    /// This store's address as registered: `@<name>` for a Linux abstract socket, otherwise
    /// the socket file's path.
    addr: String,
    shared: Arc<Shared>,
    /// Whether the receiving socket is bound (bound on the first `watch`, kept until close).
    listening: tokio::sync::OnceCell<bool>,
    /// The unbound socket releases are sent from (created on first use; `None`: unavailable).
    sender: OnceLock<Option<std::os::unix::net::UnixDatagram>>,
    /// Stops the receiving task.
    stop: CancellationToken,
}

/// What telling the waiters of a release found.
#[derive(Debug, Default)]
pub struct Told {
    /// Whether another process waits for the name.
    pub others: bool,
    /// Addresses nobody listens on any more.
    pub dead: Vec<String>,
}

impl Wake {
    /// A side channel with a fresh random address; binds nothing yet.
    pub fn new() -> Self {
        let (released, _) = broadcast::channel(1024);
        Wake {
            addr: own_address(),
            shared: Arc::new(Shared {
                watched: Watched::default(),
                released,
            }),
            listening: tokio::sync::OnceCell::new(),
            sender: OnceLock::new(),
            stop: CancellationToken::new(),
        }
    }

    /// This store's registered address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The names this process waits for, as a function (for registering them again in a new
    /// file: see `connection`).
    pub fn watched(&self) -> super::connection::WatchedFn {
        let shared = self.shared.clone();
        Box::new(move || shared.watched.keys())
    }

    /// Binds the receiving socket and starts its task, once. Returns whether it listens.
    async fn listen(&self) -> bool {
        *self
            .listening
            .get_or_init(|| async {
                if self.stop.is_cancelled() {
                    return false;
                }
                match bind(&self.addr) {
                    Ok(socket) => {
                        let (shared, stop, addr) =
                            (self.shared.clone(), self.stop.clone(), self.addr.clone());
                        tokio::spawn(receive(socket, shared, stop, addr));
                        true
                    }
                    Err(e) => {
                        debug!("sqlite: no wake-up socket ({e}); waiters poll");
                        false
                    }
                }
            })
            .await
    }

    /// Sends `key` to every address in `addrs` (newline-separated, as the release statement
    /// returns them) but this store's own. Never blocks and never fails.
    pub fn tell(&self, key: &str, addrs: &str) -> Told {
        let mut told = Told::default();
        let sender = self.sender.get_or_init(|| {
            let socket = std::os::unix::net::UnixDatagram::unbound().ok()?;
            socket.set_nonblocking(true).ok()?;
            Some(socket)
        });
        for addr in addrs
            .split('\n')
            .filter(|a| !a.is_empty() && *a != self.addr)
        {
            let Some(sender) = sender else {
                told.others = true;
                continue;
            };
            match socket_address(addr).and_then(|to| sender.send_to_addr(key.as_bytes(), &to)) {
                Err(e) if is_gone(&e) => {
                    remove_stale(addr);
                    told.dead.push(addr.to_string());
                }
                // Sent, or not (a full receive buffer): that process waits; if it missed
                // this, it polls.
                _ => told.others = true,
            }
        }
        told
    }

    /// Passes `key` to this store's own waiters, if it watches it: a release made here that
    /// the side channel does not carry (it skips this store's own address).
    pub fn tell_here(&self, key: &str) {
        if self.shared.watched.contains(key) {
            // Nobody listening (no engine) is fine: the send finds no receiver.
            let _ = self.shared.released.send(key.to_string());
        }
    }

    /// Stops listening (the store is closing).
    pub fn close(&self) {
        self.stop.cancel();
        // At once, not in the receiving task, which may never run again (the runtime may be
        // shutting down).
        if self.listening.get() == Some(&true) {
            remove_stale(&self.addr);
        }
    }
}

impl Drop for Wake {
    fn drop(&mut self) {
        self.close();
    }
}

/// Whether a send or connect to a datagram socket failed because nobody listens there, or
/// because the address cannot be one here (an abstract name off Linux, a path too long).
fn is_gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::NotFound
            | io::ErrorKind::InvalidInput
            | io::ErrorKind::Unsupported
    )
}

/// Deletes the socket file of a dead process's address, if it is one deadbolt made (in the
/// temporary directory, named `deadbolt-<32 hex digits>.sock`): a process killed before it
/// could delete its own leaves it behind. Any other path read from the file is left alone.
pub fn remove_stale(addr: &str) {
    if addr.starts_with('@') {
        return;
    }
    let path = std::path::Path::new(addr);
    let ours = path.parent() == Some(std::env::temp_dir().as_path())
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("deadbolt-"))
            .and_then(|n| n.strip_suffix(".sock"))
            .is_some_and(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()));
    if ours {
        let _ = std::fs::remove_file(path);
    }
}

/// Whether a process still listens on `addr`: connecting a datagram socket sends nothing
/// but fails at once when nobody is bound there.
pub fn alive(addr: &str) -> bool {
    let Ok(probe) = std::os::unix::net::UnixDatagram::unbound() else {
        return true;
    };
    match socket_address(addr).and_then(|to| probe.connect_addr(&to)) {
        Err(e) if is_gone(&e) => {
            remove_stale(addr);
            false
        }
        _ => true,
    }
}

/// Receives released names until the store closes, and passes on those waited for here.
async fn receive(
    socket: tokio::net::UnixDatagram,
    shared: Arc<Shared>,
    stop: CancellationToken,
    addr: String,
) {
    // Room for the longest key watched: a semaphore's watch key of the longest name.
    let longest = crate::store::permits::watch_key(&"k".repeat(crate::limits::MAX_KEY_BYTES));
    let mut buf = vec![0u8; longest.len() + 1];
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            got = socket.recv(&mut buf) => match got {
                Ok(n) => {
                    let Ok(key) = std::str::from_utf8(&buf[..n]) else { continue };
                    if shared.watched.contains(key) {
                        // Nobody listening (no engine) is fine: the send finds no receiver.
                        let _ = shared.released.send(key.to_string());
                    }
                }
                // Should not happen on a bound datagram socket; do not spin if it does.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
    drop(socket);
    remove_stale(&addr);
}

/// A fresh address for this store: an abstract socket name on Linux.
#[cfg(target_os = "linux")]
fn own_address() -> String {
    format!("@deadbolt-{}", uuid::Uuid::new_v4().simple())
}

/// A fresh address for this store: a socket file in the temporary directory (kept short:
/// socket paths are limited to about 100 bytes).
#[cfg(not(target_os = "linux"))]
fn own_address() -> String {
    let dir = std::env::temp_dir();
    let name = format!("deadbolt-{}.sock", uuid::Uuid::new_v4().simple());
    dir.join(name).to_string_lossy().into_owned()
}

/// The socket address a registered address names.
fn socket_address(addr: &str) -> io::Result<std::os::unix::net::SocketAddr> {
    if let Some(name) = addr.strip_prefix('@') {
        #[cfg(target_os = "linux")]
        {
            use std::os::linux::net::SocketAddrExt;
            return std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes());
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = name;
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "abstract socket names are Linux only",
            ));
        }
    }
    std::os::unix::net::SocketAddr::from_pathname(addr)
}

/// Binds the receiving socket at `addr`.
fn bind(addr: &str) -> io::Result<tokio::net::UnixDatagram> {
    let socket = std::os::unix::net::UnixDatagram::bind_addr(&socket_address(addr)?)?;
    socket.set_nonblocking(true)?;
    tokio::net::UnixDatagram::from_std(socket)
}

/// Release announcements from other processes through the side channel.
impl ReleaseNotifications for SqliteStore {
    fn releases(&self) -> broadcast::Receiver<String> {
        self.wake.shared.released.subscribe()
    }

    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        async move {
            // Registered at the first watch of the name, unregistered at its last unwatch.
            if !self.wake.shared.watched.add(key) || !self.wake.listen().await {
                return;
            }
            // Not registered (the store failed or is slow): this waiter polls.
            let _ = self.register(key).await;
        }
        .boxed()
    }

    fn unwatch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        async move {
            if self.wake.shared.watched.remove(key) {
                // Left behind on failure: the next release of the name, or the next
                // process to listen, finds this address alive (and keeps it: it is ours)
                // or gone (and forgets it).
                let _ = self.unregister(key).await;
            }
        }
        .boxed()
    }

    fn watched(&self) -> usize {
        self.wake.shared.watched.len()
    }
}
