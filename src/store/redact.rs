//! `Debug` output that never shows a secret: a struct names only the fields it lists
//! ([`debug_fields!`](crate::store::redact::debug_fields)), and secret material appears as
//! whether it is set and a per-process [`fingerprint`] (so that two settings' `Debug` output
//! tells them apart without printing either).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::sync::OnceLock;

/// A fingerprint of `value`: two SipHash values under keys drawn once per process, so it
/// tells two values apart within this process and means nothing outside it.
pub fn fingerprint<T: Hash + ?Sized>(value: &T) -> String {
    static KEYS: OnceLock<(RandomState, RandomState)> = OnceLock::new();
    let (a, b) = KEYS.get_or_init(|| (RandomState::new(), RandomState::new()));
    format!("{:016x}{:016x}", a.hash_one(value), b.hash_one(value))
}

/// `<set>` or `<unset>`: whether a secret was given, never what it is.
pub fn set<T>(v: &Option<T>) -> &'static str {
    if v.is_some() {
        "<set>"
    } else {
        "<unset>"
    }
}

/// Implements `Debug` for a struct, naming only the fields given.
///
/// `debug_fields!(Api: endpoint, region)` shows those fields and `..` for the others.
/// `debug_fields!(Options { a, b })` shows every field: it destructures the struct, so that
/// a field added later fails to compile until it is listed here (and so considered).
macro_rules! debug_fields {
    ($ty:ident { $($field:ident),+ $(,)? }) => {
        impl ::std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                let Self { $($field),+ } = self;
                f.debug_struct(stringify!($ty))
                    $(.field(stringify!($field), $field))+
                    .finish()
            }
        }
    };
    ($ty:ident: $($field:ident),+ $(,)?) => {
        impl ::std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    $(.field(stringify!($field), &self.$field))+
                    .finish_non_exhaustive()
            }
        }
    };
}

pub(crate) use debug_fields;
