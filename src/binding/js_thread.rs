//! The scopes in which the JavaScript thread runs lock operations' steps, composed in one
//! place for the two ways it does: submitting a tick's operations, and reading replies in
//! libuv's poll callback.

use super::direct_drain;
use crate::runtime::{first_step, flush};

/// Why the JavaScript thread runs operations' steps.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// `submit`: each operation's first step (`first_step::start`).
    Submit,
    /// A foreground socket became readable: the replies complete operations, which take
    /// their next steps here, and the completions they make reach JavaScript at the end.
    Replies,
}

/// Runs `f` inside the runtime's context (a step may spawn or set timers) and a write-behind
/// scope (the commands the steps queue are written from this thread when `f` returns). For
/// [`Step::Replies`] also: operations woken meanwhile take their next step on this thread
/// (`first_step::draining`), and the completions made are handed to JavaScript by a direct
/// call of the drain when the whole scope ends (`direct_drain::deferring`), after the
/// writes.
pub(super) fn run(step: Step, f: impl FnOnce()) {
    let steps = || {
        napi::bindgen_prelude::within_runtime_if_available(|| {
            flush::scope(|| match step {
                Step::Submit => f(),
                Step::Replies => first_step::draining(f),
            })
        })
    };
    match step {
        Step::Submit => steps(),
        Step::Replies => direct_drain::deferring(steps),
    }
}
