//! Debug logging the Node way: `DEBUG=deadbolt:*` (or `deadbolt`, or `*`) or
//! `NODE_DEBUG=deadbolt` prints what the engine does (acquire attempts, wake-ups, handoffs,
//! heartbeats, losses, reconnects) on stderr, as `DEADBOLT <pid>: …` lines like Node's
//! `util.debuglog`. Off by default, and then free: one relaxed atomic load per event, nothing
//! formatted. Lines name keys and kinds, never a URL, a password or a driver's message.
//!
//! Each line belongs to the namespace `deadbolt:<its first word>` (`deadbolt:acquire`,
//! `deadbolt:redis` …, [`NAMESPACES`]), and `DEBUG` picks namespaces as the `debug` package
//! does: names separated by commas or spaces, `*` matching anything, a leading `-` excluding
//! (`DEBUG=deadbolt:*,-deadbolt:heartbeat`). A bare `deadbolt` stands for every namespace, as
//! it always did, and so does `NODE_DEBUG=deadbolt`. lib/debug.js reads `DEBUG` the same way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The namespaces the engine logs in: a line's first word (without its colon).
pub const NAMESPACES: &[&str] = &[
    "acquire",
    "handoff",
    "wake",
    "lost",
    "heartbeat",
    "panic",
    "redis",
    "sentinel",
    "redlock",
    "etcd",
    "postgres",
    "sqlite",
    "dynamodb",
];

static ENABLED: AtomicBool = AtomicBool::new(false);
static FILTER: OnceLock<Filter> = OnceLock::new();

/// Which `deadbolt:` namespaces `DEBUG` and `NODE_DEBUG` ask for.
#[derive(Debug, Default)]
pub struct Filter {
    /// `NODE_DEBUG=deadbolt` or a bare `deadbolt` in `DEBUG`: every namespace.
    all: bool,
    include: Vec<String>,
    exclude: Vec<String>,
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters.
fn glob(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was, and where in `name` it started matching.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

impl Filter {
    /// Reads `DEBUG` and `NODE_DEBUG`'s values.
    pub fn parse(debug: Option<&str>, node_debug: Option<&str>) -> Filter {
        let names = |v: Option<&str>, sep: &[char]| -> Vec<String> {
            v.unwrap_or("")
                .split(sep)
                .map(|s| s.trim().to_ascii_lowercase())
                .filter(|s| !s.is_empty())
                .collect()
        };
        let mut filter = Filter {
            all: names(node_debug, &[','])
                .iter()
                .any(|n| n == "deadbolt" || n == "*"),
            ..Filter::default()
        };
        for name in names(debug, &[',', ' ', '\t', '\n']) {
            if let Some(excluded) = name.strip_prefix('-') {
                filter.exclude.push(excluded.to_owned());
            } else if name == "deadbolt" {
                filter.all = true;
            } else {
                filter.include.push(name);
            }
        }
        filter
    }

    /// Whether lines of namespace `deadbolt:<ns>` are printed.
    pub fn wants(&self, ns: &str) -> bool {
        let full = format!("deadbolt:{ns}");
        if self.exclude.iter().any(|p| glob(p, &full)) {
            return false;
        }
        self.all || self.include.iter().any(|p| glob(p, &full))
    }

    /// Whether any of the engine's namespaces is printed.
    pub fn any(&self) -> bool {
        NAMESPACES.iter().any(|ns| self.wants(ns))
    }
}

/// Whether `DEBUG` or `NODE_DEBUG` asks for any of deadbolt's debug output.
pub fn wanted(debug: Option<&str>, node_debug: Option<&str>) -> bool {
    Filter::parse(debug, node_debug).any()
}

fn filter() -> &'static Filter {
    FILTER.get_or_init(|| {
        let debug = std::env::var("DEBUG").ok();
        let node = std::env::var("NODE_DEBUG").ok();
        let filter = Filter::parse(debug.as_deref(), node.as_deref());
        ENABLED.store(filter.any(), Ordering::Relaxed);
        filter
    })
}

/// Reads the environment once.
pub fn init() {
    filter();
}

/// Whether debug output is on (for some namespace).
pub fn enabled() -> bool {
    init();
    ENABLED.load(Ordering::Relaxed)
}

/// The namespace of a line: its format string's first word, without a colon.
pub fn namespace(format: &str) -> &str {
    let end = format.find([' ', ':']).unwrap_or(format.len());
    &format[..end]
}

/// Whether lines whose format string is `format` are printed (see [`namespace`]).
pub fn wants(format: &str) -> bool {
    filter().wants(namespace(format))
}

/// Writes one debug line (call through [`debug!`], which checks [`enabled`] first).
pub fn write(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    // Never `eprintln!`: Node makes a piped stderr non-blocking, and a full pipe would make it
    // panic (inside a lock operation). A line that cannot be written now is dropped.
    let line = format!("DEADBOLT {}: {args}\n", std::process::id());
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Logs a debug line when debug output is on for its namespace (the format string's first
/// word); formats nothing otherwise. Import it from here: `use crate::runtime::debug::debug;`.
macro_rules! debug {
    ($format:literal $($rest:tt)*) => {
        if $crate::runtime::debug::enabled() && $crate::runtime::debug::wants($format) {
            $crate::runtime::debug::write(format_args!($format $($rest)*));
        }
    };
}

pub(crate) use debug;

#[cfg(test)]
mod tests {
    use super::{namespace, wanted, Filter, NAMESPACES};

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

    #[test]
    fn namespaces_are_picked_and_excluded_as_the_debug_package_does() {
        let only = Filter::parse(Some("deadbolt:acquire"), None);
        assert!(only.wants("acquire"));
        assert!(!only.wants("handoff") && !only.wants("redis"));
        let but = Filter::parse(Some("deadbolt:*,-deadbolt:heartbeat"), None);
        assert!(but.wants("acquire") && !but.wants("heartbeat"));
        let glob = Filter::parse(Some("deadbolt:re*"), None);
        assert!(glob.wants("redis") && glob.wants("redlock") && !glob.wants("etcd"));
        let nothing = Filter::parse(Some("-deadbolt:*"), Some("deadbolt"));
        assert!(!nothing.any());
    }

    #[test]
    fn every_line_names_a_known_namespace_by_its_first_word() {
        assert_eq!(namespace("acquire {:?}: busy"), "acquire");
        assert_eq!(namespace("redis: the connection ended ({:?})"), "redis");
        assert_eq!(namespace("heartbeat: {} lease(s)"), "heartbeat");
        assert!(NAMESPACES.contains(&namespace("panic: an operation panicked: {what}")));
    }
}
