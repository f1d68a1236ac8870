#![deny(clippy::all)]
#![deny(missing_docs)]
//! deadbolt: distributed locks for Node.js. See README.md and docs/design.md.

mod binding;
pub mod core;
pub mod limits;
pub mod runtime;
#[cfg(test)]
mod sim;
pub mod store;

pub use binding::{limits, protocol, release_on_exit, stores, NativeClient};
