//! Where an etcd store keeps what, and how a lock's value is written.
//!
//! - A lock `name` is the key `deadbolt/l/<name>`; a semaphore's holders and queued requests
//!   are keys `deadbolt/s/<name> 0xFF h <owner>` and `… 0xFF q <owner>`; a store refused a
//!   lock marks it `deadbolt/w/<name> 0xFF <store id>` until its next release (which then
//!   knows that other processes wait). Fixed prefixes and
//!   the byte `0xFF`, which no UTF-8 name contains, so no name reaches another lock's or
//!   semaphore's keys, and the keys of one semaphore are exactly one prefix.
//! - A lock's value is `<owner> 0xFE v [<token>] 0xFE [d <data>]`: the owner (UTF-8, so it
//!   holds no `0xFE`), the fencing token when it is not the key's `mod_revision` (see
//!   `mod.rs`), and the payload, if any. "Held by `owner`" is then a range of values, `owner
//!   0xFE` < value < `owner 0xFF`, which etcd can compare in a transaction: release, extension
//!   and handoff are one transaction each, with no read before.

/// Prefix of every key of the store.
pub const ROOT: &[u8] = b"deadbolt/";
/// Prefix of the lock keys.
pub const LOCKS: &[u8] = b"deadbolt/l/";
/// Prefix of the semaphore keys.
pub const SEMAPHORES: &[u8] = b"deadbolt/s/";
/// Prefix of the waiters' marks.
pub const WAITERS: &[u8] = b"deadbolt/w/";

const SEP: u8 = 0xfe;

/// The key of lock `name`.
pub fn lock_key(name: &str) -> Vec<u8> {
    [LOCKS, name.as_bytes()].concat()
}

/// The prefix of every waiters' mark of lock `name`.
pub fn marks_prefix(name: &str) -> Vec<u8> {
    [WAITERS, name.as_bytes(), &[0xff]].concat()
}

/// The mark that store `store_id` was refused lock `name` since it was last released.
pub fn mark_key(name: &str, store_id: &str) -> Vec<u8> {
    [&marks_prefix(name)[..], store_id.as_bytes()].concat()
}

/// The lock name of a lock key, if it is one.
pub fn lock_name(key: &[u8]) -> Option<String> {
    key.strip_prefix(LOCKS)
        .and_then(|n| String::from_utf8(n.to_vec()).ok())
}

/// The prefix of every key of semaphore `name`.
pub fn semaphore_prefix(name: &str) -> Vec<u8> {
    [SEMAPHORES, name.as_bytes(), &[0xff]].concat()
}

/// The key of `owner`'s permits of semaphore `name`.
pub fn holder_key(name: &str, owner: &str) -> Vec<u8> {
    [&semaphore_prefix(name)[..], b"h", owner.as_bytes()].concat()
}

/// The key of `owner`'s place in the queue of semaphore `name`.
pub fn queued_key(name: &str, owner: &str) -> Vec<u8> {
    [&semaphore_prefix(name)[..], b"q", owner.as_bytes()].concat()
}

/// What a semaphore key is: its semaphore's name, whether it is a holder's (else a queued
/// request's), and the owner.
pub fn semaphore_entry(key: &[u8]) -> Option<(String, bool, String)> {
    let rest = key.strip_prefix(SEMAPHORES)?;
    let at = rest.iter().position(|&b| b == 0xff)?;
    let name = String::from_utf8(rest[..at].to_vec()).ok()?;
    let (&kind, owner) = rest[at + 1..].split_first()?;
    let owner = String::from_utf8(owner.to_vec()).ok()?;
    Some((name, kind == b'h', owner))
}

/// A lock's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockValue {
    /// Owner token of the holder.
    pub owner: String,
    /// Its fencing token when the key was written again for the same holder (a move to
    /// another lease); `None`: the key's `mod_revision` is the token.
    pub token: Option<u64>,
    /// Payload stored with the lock.
    pub data: Option<Vec<u8>>,
}

impl LockValue {
    /// The bytes etcd stores.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.owner.len() + 24);
        v.extend_from_slice(self.owner.as_bytes());
        v.push(SEP);
        v.push(b'v');
        if let Some(t) = self.token {
            v.extend_from_slice(t.to_string().as_bytes());
        }
        v.push(SEP);
        if let Some(d) = &self.data {
            v.push(b'd');
            v.extend_from_slice(d);
        }
        v
    }

    /// A value as [`LockValue::encode`] wrote it, or `None` for anything else.
    pub fn decode(bytes: &[u8]) -> Option<LockValue> {
        let at = bytes.iter().position(|&b| b == SEP)?;
        let owner = std::str::from_utf8(&bytes[..at]).ok()?.to_owned();
        let rest = bytes[at + 1..].strip_prefix(b"v")?;
        let end = rest.iter().position(|&b| b == SEP)?;
        let token = match &rest[..end] {
            [] => None,
            digits => Some(std::str::from_utf8(digits).ok()?.parse().ok()?),
        };
        let data = match &rest[end + 1..] {
            [] => None,
            [b'd', d @ ..] => Some(d.to_vec()),
            _ => return None,
        };
        Some(LockValue { owner, token, data })
    }

    /// The token of a lock whose key has this value and `mod_revision`.
    pub fn token_at(&self, mod_revision: i64) -> u64 {
        self.token.unwrap_or(mod_revision.max(0) as u64)
    }
}

/// The bounds of the values held by `owner` (exclusive both): `owner 0xFE` and `owner 0xFF`.
pub fn owner_bounds(owner: &str) -> (Vec<u8>, Vec<u8>) {
    let low = [owner.as_bytes(), &[SEP]].concat();
    let high = [owner.as_bytes(), &[0xff]].concat();
    (low, high)
}

/// A holder's or queued request's value: its permits, and for a holder moved to another
/// lease its token (else the key's `mod_revision`).
pub fn permit_value(permits: u32, token: Option<u64>) -> Vec<u8> {
    match token {
        Some(t) => format!("{permits}:{t}").into_bytes(),
        None => permits.to_string().into_bytes(),
    }
}

/// The permits and token of a [`permit_value`].
pub fn parse_permit_value(bytes: &[u8]) -> Option<(u32, Option<u64>)> {
    let s = std::str::from_utf8(bytes).ok()?;
    match s.split_once(':') {
        Some((p, t)) => Some((p.parse().ok()?, Some(t.parse().ok()?))),
        None => Some((s.parse().ok()?, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_round_trips_and_falls_between_its_owners_bounds_only() {
        for data in [None, Some(vec![]), Some(vec![0xfe, 0xff, 0, b'd'])] {
            for token in [None, Some(42)] {
                let v = LockValue {
                    owner: "ab".into(),
                    token,
                    data: data.clone(),
                };
                let bytes = v.encode();
                assert_eq!(LockValue::decode(&bytes), Some(v));
                let (low, high) = owner_bounds("ab");
                assert!(bytes > low && bytes < high);
                for other in ["a", "abc", "ab\u{10ffff}", ""] {
                    let (low, high) = owner_bounds(other);
                    assert!(!(bytes > low && bytes < high), "{other:?}");
                }
            }
        }
    }

    #[test]
    fn semaphore_keys_name_their_semaphore_kind_and_owner() {
        let k = holder_key("s\u{0}x", "o");
        assert_eq!(
            semaphore_entry(&k),
            Some(("s\u{0}x".into(), true, "o".into()))
        );
        let q = queued_key("s", "o");
        assert_eq!(semaphore_entry(&q), Some(("s".into(), false, "o".into())));
        assert!(!k.starts_with(&semaphore_prefix("s")));
    }
}
