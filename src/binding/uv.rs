//! Node's own event loop (libuv) as the JavaScript thread's [`Reactor`]: a foreground socket
//! is watched with a `uv_poll_t`, so its replies are read on the JavaScript thread, in the
//! loop's poll phase, and the operations they complete take their next step right there (see
//! `first_step`). libuv's functions are looked up in the running process (`node` exports
//! them); where they cannot be found, no reactor is installed and every operation uses the
//! runtime's connections, as on Windows.

use crate::runtime::foreground::{self, Interest, Reactor, Watch};
use std::ffi::c_void;
use std::os::raw::{c_char, c_int};
use std::rc::Rc;
use std::sync::OnceLock;

type PollCb = unsafe extern "C" fn(*mut c_void, c_int, c_int);
type CloseCb = unsafe extern "C" fn(*mut c_void);

/// libuv's entry points this reactor needs. Each is a C function taking raw pointers, so
/// each is `unsafe` to call: the caller vouches for the handle it passes.
struct Uv {
    handle_size: unsafe extern "C" fn(c_int) -> usize,
    poll_init: unsafe extern "C" fn(*mut c_void, *mut c_void, c_int) -> c_int,
    poll_start: unsafe extern "C" fn(*mut c_void, c_int, PollCb) -> c_int,
    poll_stop: unsafe extern "C" fn(*mut c_void) -> c_int,
    close: unsafe extern "C" fn(*mut c_void, Option<CloseCb>),
    unref: unsafe extern "C" fn(*mut c_void),
    get_data: unsafe extern "C" fn(*const c_void) -> *mut c_void,
    set_data: unsafe extern "C" fn(*mut c_void, *mut c_void),
}

/// `UV_POLL` in `uv_handle_type`; `UV_READABLE`, `UV_WRITABLE` in `uv_poll_event`.
const UV_POLL: c_int = 8;
const UV_READABLE: c_int = 1;
const UV_WRITABLE: c_int = 2;

fn symbol(name: &[u8]) -> Option<*mut c_void> {
    // SAFETY: `name` is NUL-terminated; RTLD_DEFAULT searches the process's global symbols.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr() as *const c_char) };
    (!p.is_null()).then_some(p)
}

/// libuv's function `name` as a `T`.
///
/// # Safety
/// `T` must be the function pointer type of that function's C signature.
unsafe fn function<T: Copy>(name: &[u8]) -> Option<T> {
    let p = symbol(name)?;
    // SAFETY: a function pointer has the size of a data pointer on the platforms Node runs
    // on, and the caller names the right type.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

fn uv() -> Option<&'static Uv> {
    static UV: OnceLock<Option<Uv>> = OnceLock::new();
    UV.get_or_init(|| {
        // SAFETY: each symbol is libuv's function of that name, whose C signature is the one
        // the field declares (libuv's stable API, unchanged since 1.19).
        unsafe {
            Some(Uv {
                handle_size: function(b"uv_handle_size\0")?,
                poll_init: function(b"uv_poll_init\0")?,
                poll_start: function(b"uv_poll_start\0")?,
                poll_stop: function(b"uv_poll_stop\0")?,
                close: function(b"uv_close\0")?,
                unref: function(b"uv_unref\0")?,
                get_data: function(b"uv_handle_get_data\0")?,
                set_data: function(b"uv_handle_set_data\0")?,
            })
        }
    })
    .as_ref()
}

/// The JavaScript thread's loop.
struct UvReactor {
    uv: &'static Uv,
    uv_loop: *mut c_void,
}

/// What a poll handle's `data` points to.
struct Watched {
    ready: Box<dyn FnMut()>,
}

/// A handle's memory, in words (libuv handles are pointer-aligned).
fn handle_words(uv: &Uv) -> usize {
    // SAFETY: `uv_handle_size` reads no memory; UV_POLL is a valid handle type.
    let bytes = unsafe { (uv.handle_size)(UV_POLL) };
    bytes.div_ceil(std::mem::size_of::<u64>())
}

/// libuv's poll callback.
///
/// # Safety
/// `handle` must be a poll handle initialised by [`UvReactor::watch`] and not yet closed
/// (libuv calls this only for such a handle, on the loop's thread).
unsafe extern "C" fn on_poll(handle: *mut c_void, _status: c_int, _events: c_int) {
    let Some(uv) = uv() else { return };
    // SAFETY: `handle` is a live poll handle (this function's contract).
    let data = unsafe { (uv.get_data)(handle) } as *mut Watched;
    if data.is_null() {
        return;
    }
    // A panic must not unwind into libuv: it is caught and the callback just returns (the
    // operations involved fail by their response timeouts).
    // The completions it makes reach JavaScript at the end, by a direct call of the drain.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        super::js_thread::run(super::js_thread::Step::Replies, || {
            // SAFETY: `data` lives until the close callback, which libuv calls only after
            // this callback returned.
            let watched = unsafe { &mut *data };
            (watched.ready)();
        })
    }));
}

/// libuv's close callback: frees the handle and what it points to.
///
/// # Safety
/// `handle` must be a poll handle made by [`UvReactor::watch`] whose close libuv has just
/// completed; it is freed here and must not be used again.
unsafe extern "C" fn on_close(handle: *mut c_void) {
    let Some(uv) = uv() else { return };
    // SAFETY: libuv calls this with the handle it closed, whose memory is still ours.
    let data = unsafe { (uv.get_data)(handle) } as *mut Watched;
    if !data.is_null() {
        // SAFETY: made by `Box::into_raw` in `watch`; freed once, here.
        drop(unsafe { Box::from_raw(data) });
    }
    let words = handle_words(uv);
    // SAFETY: made by `Box::into_raw` of a boxed slice of `words` words in `watch`.
    drop(unsafe {
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            handle as *mut u64,
            words,
        ))
    });
}

struct UvWatch {
    uv: &'static Uv,
    handle: *mut c_void,
}

fn events(interest: Interest) -> c_int {
    (if interest.readable { UV_READABLE } else { 0 })
        | (if interest.writable { UV_WRITABLE } else { 0 })
}

impl Watch for UvWatch {
    fn set(&self, interest: Interest) {
        // SAFETY: `handle` was initialised in `watch` and is closed only by this watch's drop.
        unsafe { (self.uv.poll_start)(self.handle, events(interest), on_poll) };
    }
}

impl Drop for UvWatch {
    fn drop(&mut self) {
        // SAFETY: `handle` is live until this close; libuv frees nothing itself and calls
        // `on_close` (which frees it) once the loop let go of it.
        unsafe {
            (self.uv.poll_stop)(self.handle);
            (self.uv.close)(self.handle, Some(on_close));
        }
    }
}

impl Reactor for UvReactor {
    fn watch(
        &self,
        fd: i32,
        interest: Interest,
        ready: Box<dyn FnMut()>,
    ) -> Option<Box<dyn Watch>> {
        let uv = self.uv;
        let words = handle_words(uv);
        let handle = Box::into_raw(vec![0u64; words].into_boxed_slice()) as *mut c_void;
        // SAFETY: `handle` is zeroed memory of the size libuv asked for, pointer-aligned;
        // `uv_loop` is this thread's loop (from napi); `fd` is the caller's open socket.
        if unsafe { (uv.poll_init)(self.uv_loop, handle, fd) } != 0 {
            // Never initialised: libuv knows nothing of it.
            // SAFETY: made just above from a boxed slice of `words` words.
            drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    handle as *mut u64,
                    words,
                ))
            });
            return None;
        }
        let data = Box::into_raw(Box::new(Watched { ready }));
        // SAFETY: `handle` was initialised just above; `data` stays valid until `on_close`.
        unsafe { (uv.set_data)(handle, data as *mut c_void) };
        // Never keeps the process alive: pending requests do, through the completion wake-up.
        // SAFETY: as above, an initialised handle.
        unsafe { (uv.unref)(handle) };
        let watch = UvWatch { uv, handle };
        // SAFETY: as above; on failure `watch`'s drop closes the handle, which frees it.
        if unsafe { (uv.poll_start)(handle, events(interest), on_poll) } != 0 {
            return None;
        }
        Some(Box::new(watch))
    }
}

/// Makes Node's loop this thread's reactor (once per thread), and lets go of it when `env`
/// is torn down. Without libuv's symbols it does nothing.
pub fn install(env: &napi::Env) -> napi::Result<()> {
    if foreground::available() {
        return Ok(());
    }
    let Some(uv) = uv() else { return Ok(()) };
    let uv_loop = env.get_uv_event_loop()? as *mut c_void;
    foreground::install(Rc::new(UvReactor { uv, uv_loop }));
    env.add_env_cleanup_hook((), |_| foreground::shutdown())?;
    Ok(())
}
