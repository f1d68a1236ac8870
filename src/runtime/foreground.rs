//! The caller's own event loop as a reactor. A thread that runs one (the JavaScript thread:
//! Node's libuv loop) installs a [`Reactor`] here; a store can then keep a connection whose
//! replies are read on that thread when its socket becomes readable, so a reply settles its
//! caller with no thread wake-up in between (what a JavaScript client gets for free). Nothing
//! here knows about Node: the binding supplies the reactor.
//!
//! Such a connection is only a fast lane: what must go on while the event loop is blocked
//! (heartbeats, waits, announcements) stays on the runtime's connections, and a lane that
//! fails hands its requests to them.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Weak;

/// Readiness interest of a [`Watch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interest {
    /// Call back when the socket can be read.
    pub readable: bool,
    /// Call back when the socket can be written.
    pub writable: bool,
}

/// A socket being watched by the reactor; dropping it stops the watch (the callback is never
/// called afterwards, and is freed only once the reactor let go of it, so dropping a watch
/// from inside its own callback is safe).
pub trait Watch {
    /// Changes what the callback is called for.
    fn set(&self, interest: Interest);
}

/// An event loop that calls back on its own thread when a socket is ready.
pub trait Reactor {
    /// Calls `ready` on this thread whenever `fd` is ready as `interest` asks, until the watch
    /// is dropped. `None` when the loop refuses the socket. The watch never keeps the loop
    /// alive by itself.
    fn watch(&self, fd: i32, interest: Interest, ready: Box<dyn FnMut()>)
        -> Option<Box<dyn Watch>>;
}

/// A connection that a thread's shutdown leaves without its reactor.
pub trait Orphan: Send + Sync {
    /// The reactor is gone: stop using it and hand pending work to the runtime.
    fn orphan(&self);
}

/// A watch made on this thread, with the connection to tell at shutdown.
type Registered = (Weak<dyn Orphan>, Box<dyn Watch>);

thread_local! {
    static REACTOR: RefCell<Option<Rc<dyn Reactor>>> = const { RefCell::new(None) };
    /// Watches made on this thread, with what to tell their connections at shutdown.
    static WATCHES: RefCell<Vec<Registered>> = const { RefCell::new(Vec::new()) };
}

/// Installs this thread's reactor (once; later calls keep the first).
pub fn install(reactor: Rc<dyn Reactor>) {
    REACTOR.with(|r| {
        let mut r = r.borrow_mut();
        if r.is_none() {
            *r = Some(reactor);
        }
    });
}

/// Whether this thread has a reactor.
pub fn available() -> bool {
    REACTOR.with(|r| r.borrow().is_some())
}

/// Watches `fd` on this thread's reactor for `owner`, keeping the watch in this thread's
/// registry until [`unwatch`] or [`shutdown`]. Returns whether it is watched.
pub fn watch(
    owner: Weak<dyn Orphan>,
    fd: i32,
    interest: Interest,
    ready: Box<dyn FnMut()>,
) -> bool {
    let Some(reactor) = REACTOR.with(|r| r.borrow().clone()) else {
        return false;
    };
    let Some(watch) = reactor.watch(fd, interest, ready) else {
        return false;
    };
    WATCHES.with(|w| w.borrow_mut().push((owner, watch)));
    true
}

/// Changes the interest of `owner`'s watch on this thread.
pub fn set_interest(owner: &Weak<dyn Orphan>, interest: Interest) {
    WATCHES.with(|w| {
        if let Some((_, watch)) = w.borrow().iter().find(|(o, _)| o.ptr_eq(owner)) {
            watch.set(interest);
        }
    });
}

/// Stops `owner`'s watch on this thread, if it has one.
pub fn unwatch(owner: &Weak<dyn Orphan>) {
    let removed: Vec<Registered> = WATCHES.with(|w| {
        let mut w = w.borrow_mut();
        let (gone, kept) = std::mem::take(&mut *w)
            .into_iter()
            .partition(|(o, _)| o.ptr_eq(owner) || o.strong_count() == 0);
        *w = kept;
        gone
    });
    drop(removed);
}

/// The thread's event loop is going away (its environment is torn down): every watch is
/// stopped, their connections are told, and the reactor is forgotten.
pub fn shutdown() {
    let watches = WATCHES.with(|w| std::mem::take(&mut *w.borrow_mut()));
    for (owner, watch) in watches {
        drop(watch);
        if let Some(owner) = owner.upgrade() {
            owner.orphan();
        }
    }
    REACTOR.with(|r| r.borrow_mut().take());
}
