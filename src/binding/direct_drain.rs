//! Completions made on the JavaScript thread inside one of Node's own callbacks (a lane's
//! replies, read in libuv's poll phase: see `uv`) are handed to JavaScript at the end of that
//! callback by calling the client's drain function right there, instead of through its
//! threadsafe function: that would write an `eventfd`, and the loop would take one more turn
//! to read it and call the same function on the same thread.
//!
//! The call is `napi_make_callback`, so the microtasks and `process.nextTick` callbacks the
//! drain queues (promise continuations) run before it returns, as after any callback Node
//! makes; an exception the drain throws goes to `uncaughtException`, as from the threadsafe
//! function.

use crate::runtime::thread_scope::{self, Registry};
use napi::sys;
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A client's drain function, callable from its own JavaScript thread.
pub struct DirectDrain {
    inner: Mutex<Option<Handles>>,
    thread: ThreadId,
}

/// The napi handles; valid on `DirectDrain::thread` until `release`.
struct Handles {
    env: sys::napi_env,
    /// Weak: the threadsafe function keeps the function alive; this never does.
    func: sys::napi_ref,
    context: sys::napi_async_context,
}

// SAFETY: the handles are only used on the thread that made them (`DirectDrain::thread`,
// checked before every use); other threads only move the (inert) pointers around.
unsafe impl Send for Handles {}

/// Whether a napi call succeeded.
fn ok(status: sys::napi_status) -> bool {
    status == sys::Status::napi_ok
}

impl DirectDrain {
    /// The drain function `func` of a client made on this thread in `env`. `None` if napi
    /// refuses a handle (the threadsafe function is used then).
    pub fn new(env: sys::napi_env, func: sys::napi_value) -> Option<DirectDrain> {
        let mut name = ptr::null_mut();
        let mut func_ref = ptr::null_mut();
        let mut context = ptr::null_mut();
        let label = "deadbolt:drain";
        // SAFETY: called on the JavaScript thread, inside a napi call, with its `env`; `func`
        // is a live value of that call.
        unsafe {
            if !ok(sys::napi_create_string_utf8(
                env,
                label.as_ptr().cast(),
                label.len() as isize,
                &mut name,
            )) || !ok(sys::napi_create_reference(env, func, 0, &mut func_ref))
            {
                return None;
            }
            if !ok(sys::napi_async_init(
                env,
                ptr::null_mut(),
                name,
                &mut context,
            )) {
                sys::napi_delete_reference(env, func_ref);
                return None;
            }
        }
        Some(DirectDrain {
            inner: Mutex::new(Some(Handles {
                env,
                func: func_ref,
                context,
            })),
            thread: std::thread::current().id(),
        })
    }

    /// Calls the drain function now. False when it cannot be called here (another thread,
    /// released, or the function is gone).
    pub fn call(&self) -> bool {
        if std::thread::current().id() != self.thread {
            return false;
        }
        let (env, func_ref, context) = match lock(&self.inner).as_ref() {
            Some(h) => (h.env, h.func, h.context),
            None => return false,
        };
        // SAFETY: on the handles' own thread, outside any JavaScript call (the end of one
        // of libuv's callbacks), with handles not yet released; every napi value lives in
        // the handle scope opened here.
        unsafe {
            let mut scope = ptr::null_mut();
            if !ok(sys::napi_open_handle_scope(env, &mut scope)) {
                return false;
            }
            let mut func = ptr::null_mut();
            let mut recv = ptr::null_mut();
            let called = ok(sys::napi_get_reference_value(env, func_ref, &mut func))
                && !func.is_null()
                && ok(sys::napi_get_global(env, &mut recv));
            if called {
                let mut result = ptr::null_mut();
                let status =
                    sys::napi_make_callback(env, context, recv, func, 0, ptr::null(), &mut result);
                if status == sys::Status::napi_pending_exception {
                    let mut err = ptr::null_mut();
                    if ok(sys::napi_get_and_clear_last_exception(env, &mut err)) {
                        sys::napi_fatal_exception(env, err);
                    }
                }
            }
            sys::napi_close_handle_scope(env, scope);
            called
        }
    }

    /// Lets go of the handles; must be called on their thread (a client's `dispose`).
    pub fn release(&self) {
        if std::thread::current().id() != self.thread {
            return;
        }
        if let Some(h) = lock(&self.inner).take() {
            // SAFETY: on the handles' own thread, each released once.
            unsafe {
                sys::napi_async_destroy(h.env, h.context);
                sys::napi_delete_reference(h.env, h.func);
            }
        }
    }
}

/// Something whose first completion of a batch may be handed over by calling its drain.
pub trait Deferred: Send + Sync {
    /// Calls the drain directly; false when it could not (the caller then wakes it as usual).
    fn drain_now(&self) -> bool;
    /// Wakes the drain the usual way (the threadsafe function).
    fn wake(&self);
}

thread_local! {
    /// Inside `deferring`: the clients whose drain is due at its end.
    static DUE: Registry<dyn Deferred> = const { Registry::new() };
}

/// Runs `f`; completions made meanwhile on this thread for clients that can be drained here
/// (see `defer`) are handed to JavaScript when `f` returns. If `f` panics, every client due is
/// woken the usual way instead. Not reentrant: a nested call runs `f` inside the outer scope.
pub fn deferring(f: impl FnOnce()) {
    thread_scope::scope(&DUE, f, |due, returned| {
        for c in due {
            if !(returned && c.drain_now()) {
                c.wake();
            }
        }
    })
}

/// Takes `c`'s wake-up when inside `deferring` on this thread: true if it will be drained at
/// the scope's end.
pub fn defer(c: Arc<dyn Deferred>) -> bool {
    thread_scope::register(&DUE, c)
}

/// Whether this thread is inside `deferring`.
pub fn active() -> bool {
    thread_scope::active(&DUE)
}
