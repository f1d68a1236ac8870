//! Debug logging the Node way: `DEBUG=deadbolt` (or `deadbolt:*`, or `*`) or
//! `NODE_DEBUG=deadbolt` prints what the engine does (acquire attempts, wake-ups, handoffs,
//! heartbeats, losses, reconnects) on stderr, as `DEADBOLT <pid>: …` lines like Node's
//! `util.debuglog`. Off by default, and then free: one relaxed atomic load per event, nothing
//! formatted. Lines name keys and kinds, never a URL, a password or a driver's message.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

static ENABLED: AtomicBool = AtomicBool::new(false);
static INIT: Once = Once::new();

/// Whether `DEBUG` or `NODE_DEBUG` asks for deadbolt's debug output.
pub fn wanted(debug: Option<&str>, node_debug: Option<&str>) -> bool {
    let names = |v: Option<&str>, sep: &[char]| -> Vec<String> {
        v.unwrap_or("")
            .split(sep)
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let debug_on = names(debug, &[',', ' '])
        .iter()
        .any(|n| n == "*" || n == "deadbolt" || n.starts_with("deadbolt:"));
    let node_on = names(node_debug, &[','])
        .iter()
        .any(|n| n == "deadbolt" || n == "*");
    debug_on || node_on
}

/// Reads the environment once.
pub fn init() {
    INIT.call_once(|| {
        let debug = std::env::var("DEBUG").ok();
        let node = std::env::var("NODE_DEBUG").ok();
        ENABLED.store(wanted(debug.as_deref(), node.as_deref()), Ordering::Relaxed);
    });
}

/// Whether debug output is on.
pub fn enabled() -> bool {
    init();
    ENABLED.load(Ordering::Relaxed)
}

/// Writes one debug line (call through [`crate::debug!`], which checks [`enabled`] first).
pub fn write(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    // Never `eprintln!`: Node makes a piped stderr non-blocking, and a full pipe would make it
    // panic (inside a lock operation). A line that cannot be written now is dropped.
    let line = format!("DEADBOLT {}: {args}\n", std::process::id());
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Logs a debug line when debug output is on; formats nothing otherwise.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => {
        if $crate::runtime::debug::enabled() {
            $crate::runtime::debug::write(format_args!($($arg)*));
        }
    };
}

#[cfg(test)]
mod tests {
    use super::wanted;

    #[test]
    fn the_usual_debug_settings_turn_it_on_and_others_do_not() {
        assert!(wanted(Some("deadbolt:*"), None));
        assert!(wanted(Some("express,deadbolt"), None));
        assert!(wanted(Some("*"), None));
        assert!(wanted(None, Some("http,deadbolt")));
        assert!(!wanted(Some("express:*"), None));
        assert!(!wanted(None, Some("http")));
        assert!(!wanted(None, None));
    }
}
