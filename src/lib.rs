#![deny(clippy::all)]
#![deny(missing_docs)]
//! deadbolt: distributed locks for Node.js. See README.md and docs/design.md.

pub mod backend;
mod binding;
pub mod core;

pub use binding::NativeClient;
