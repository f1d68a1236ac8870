//! The invariants, read off a run's history (the same as the fault harness's):
//! - no two believed holds of a key overlap: a hold runs from the grant's return to the
//!   holder's release or its loss notice;
//! - a holder hears of its loss before the store grants the key to anyone else;
//! - nobody is told it holds a key the store has since given to another (a stale grant);
//! - fencing tokens strictly increase per key, in the store and in what holders believe;
//! - every call returns within its bound;
//! - after the run, nothing is left: no grant nobody believes in (orphans freed, unless the
//!   store stayed silent to their clean-up for a lease: see [`may_outlive`]), no waiter,
//!   timer, clean-up or subscription in any engine.

use super::history::{Event, What};
use std::collections::{BTreeMap, HashMap};

/// Per key: who believes it holds it, and the last tokens seen.
#[derive(Default)]
struct KeyState {
    believers: BTreeMap<String, u64>,
    last_store_token: u64,
    last_store_owner: String,
    last_believed_token: u64,
}

/// The violations in `events`, each as a line naming its event.
pub(super) fn violations(events: &[Event]) -> Vec<String> {
    let mut keys: HashMap<&str, KeyState> = HashMap::new();
    let mut out = Vec::new();
    for (seq, e) in events.iter().enumerate() {
        let k = keys.entry(e.key.as_str()).or_default();
        let at = format!("#{seq} at {} ms", e.at.as_millis());
        match &e.what {
            What::StoreGrant(token) => {
                if let Some((other, _)) = k.believers.iter().find(|(o, _)| **o != e.owner) {
                    out.push(format!(
                        "{at}: the store granted {} to {} while {other} still believed it held it \
                         (it had not heard of its loss)",
                        e.key, e.owner
                    ));
                }
                if *token <= k.last_store_token {
                    out.push(format!(
                        "{at}: the store granted {} to {} with token {token}, not above {}",
                        e.key, e.owner, k.last_store_token
                    ));
                }
                k.last_store_token = *token;
                k.last_store_owner = e.owner.clone();
            }
            What::Believe(token) => {
                if let Some((other, _)) = k.believers.iter().find(|(o, _)| **o != e.owner) {
                    out.push(format!(
                        "{at}: {} believes it holds {} while {other} still does",
                        e.owner, e.key
                    ));
                }
                if k.last_store_owner != e.owner || k.last_store_token != *token {
                    out.push(format!(
                        "{at}: {} was told it holds {} with token {token}, but the store's last \
                         grant is {} to {} (a stale grant)",
                        e.owner, e.key, k.last_store_token, k.last_store_owner
                    ));
                }
                if *token <= k.last_believed_token {
                    out.push(format!(
                        "{at}: {} holds {} with token {token}, not above the last holder's {}",
                        e.owner, e.key, k.last_believed_token
                    ));
                }
                k.last_believed_token = *token;
                k.believers.insert(e.owner.clone(), *token);
            }
            What::Release | What::Lost(_) => {
                k.believers.remove(&e.owner);
            }
            What::ReleaseFailed
            | What::ReleaseRefused
            | What::ReleaseErred
            | What::Asked { .. }
            | What::Trace(_) => {}
            What::Overran { call, took, bound } => out.push(format!(
                "{at}: {call} of {} by {} took {} ms, beyond its bound of {} ms",
                e.key,
                e.owner,
                took.as_millis(),
                bound.as_millis()
            )),
        }
    }
    out
}

/// Owners whose lease may outlive the run by design: a holder that heard of its loss (its
/// lease may have been extended by a renewal whose reply was lost) or whose release failed,
/// and a grant nobody believed in whose clean-up ran out of its bound. Any other live lock
/// after the run is a grant nobody believes in, left behind: the engine gives back every
/// grant it does not return (docs/design.md, "Grants whose reply was lost"), a server error
/// that refused one release included.
pub(super) fn may_outlive(events: &[Event], owner: &str) -> bool {
    events
        .iter()
        .any(|e| e.owner == owner && matches!(e.what, What::Lost(_) | What::ReleaseFailed))
        || clean_up_ran_out(events, owner)
}

/// Whether the clean-up of `owner`'s grant ended by its bound: a release of it failed at or
/// after `sent + ttl` of the last request that could have granted it (docs/design.md, "Grants
/// whose reply was lost": a store silent that long may still grant the request it holds, for
/// one lease). A clean-up that gave up sooner, or never ran, leaves no such failure.
fn clean_up_ran_out(events: &[Event], owner: &str) -> bool {
    let asked = events.iter().rev().find_map(|e| match e.what {
        What::Asked { ttl_ms } if e.owner == owner => {
            Some(e.at + std::time::Duration::from_millis(ttl_ms))
        }
        _ => None,
    });
    asked.is_some_and(|bound| {
        events
            .iter()
            .any(|e| e.owner == owner && e.what == What::ReleaseErred && e.at >= bound)
    })
}
