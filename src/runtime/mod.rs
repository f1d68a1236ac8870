//! What the engine (`core`), the stores and the binding all stand on, below each of them:
//! time arithmetic that cannot panic and the lease's local deadline, thread scopes, and the
//! foreground path by which the JavaScript thread takes an operation's first step, writes
//! its commands and reads its replies. Nothing here knows about locks, stores or napi.

pub mod clock;
pub mod debug;
pub mod first_step;
pub mod flush;
pub mod foreground;
pub mod lease;
pub mod thread_scope;
