//! The backend-agnostic engine: acquire loop (deadline, attempts, jittered backoff, wake-ups,
//! a fair local queue per key), heartbeats, the registry of held locks. No napi here.

pub mod engine;
pub mod error;
pub mod heartbeat;
pub mod held;
pub mod kind;
pub mod options;
pub mod session;
