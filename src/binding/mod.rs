//! The only napi layer. Calls return at once and never wait on a store: acquisitions,
//! releases and extensions queued during one JavaScript tick cross in one `submit` call (a
//! batch of numeric records, laid out in `protocol.rs`), the rarer operations (inspect, list,
//! ping, …) in one call each; every one starts a task on the tokio runtime under a request id.
//! Results come back through one long-lived, weak threadsafe function per client that wakes the
//! JS thread once per batch of completions (a `#[napi] async fn` costs a threadsafe function, a
//! cleanup hook and two spawns per call). JavaScript then takes the whole batch with one call
//! and settles its promises, building every error itself so that classes and `code`s are its
//! own.

mod adopt;
mod client;
mod completions;
mod connect_options;
mod direct_drain;
mod engines;
mod env_sessions;
mod js_thread;
mod protocol;
mod runtime;
mod submit;
#[cfg(unix)]
mod uv;

pub use client::NativeClient;
pub use env_sessions::release_on_exit;
pub use protocol::{limits, protocol, stores};

/// mimalloc: the addon allocates on the JS thread and frees on a tokio worker (and back) for
/// every operation, where glibc's per-thread arenas spent ~10 % of the CPU in a profile.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
