//! The only napi layer. Every lock operation is one synchronous call that starts a task on
//! the tokio runtime and returns at once; results come back through one long-lived, weak
//! threadsafe function per client that wakes the JS thread once per batch of completions
//! (see FACTS.md: a `#[napi] async fn` costs a threadsafe function, a cleanup hook and two
//! spawns per call). JavaScript then takes the whole batch with one call and settles its
//! promises, building every error itself so that classes and `code`s are its own.

mod client;
mod completions;
mod runtime;

pub use client::NativeClient;
