//! The Redis key layout: what a lock keeps besides its own key, and where.
//!
//! The lock key is the user's key, holding the owner (redislock's wire format). Everything
//! else lives under a **reserved namespace** that no lock name can produce: side keys start
//! with the byte `0xFF`, which never occurs in UTF-8, and every lock name is a JavaScript
//! string sent as UTF-8. So no lock name can reach another lock's state.
//!
//! Every side key carries a `{tag}` chosen so that it hashes to the same Redis Cluster slot as
//! the lock key, so one script can touch all of them:
//! - `0xFF deadbolt:fence:{tag}`: the fencing counter, **one per hash slot** (at most 16 384
//!   keys however many names are ever locked). Every name in a slot draws its tokens from the
//!   same counter, which only increases, so tokens strictly increase per name.
//! - `0xFF deadbolt:data:{tag}<key>`: the payload of a held lock, expiring with it.
//! - `deadbolt:released:{tag}<key>`: the pub/sub channel on which a release is announced
//!   (channels are not keys; the tag keeps sharded pub/sub in the lock's slot).
//! - `0xFF deadbolt:permits:{tag}<watch key>`: a counting semaphore's state. A semaphore's
//!   keys are reckoned from its watch key (`name` followed by `\0permits`, where waiters
//!   listen) instead of its name: the state, the counter `fence_key(watch key)` and the
//!   channel `release_channel(watch key)` then share a slot (see `super::permits`).
//!
//! `tag` is taken from a table built the same way by every process: for each slot, the first
//! string in the sequence "0", "1", …, "z", "10", … (base 36) whose CRC16 falls in that slot.

use std::sync::OnceLock;

/// Number of hash slots in Redis Cluster.
pub const SLOTS: usize = 16_384;

/// Longest slot tag (base 36: every slot is covered before "10000").
pub const MAX_TAG_LEN: usize = 4;

/// First byte of every side key: never part of a UTF-8 string, hence of a lock name.
const RESERVED: u8 = 0xFF;

/// The part of `key` Redis Cluster hashes: the first non-empty `{...}`, else the whole key.
fn hashed_part(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// The Redis Cluster hash slot of `key`.
pub fn hash_slot(key: &[u8]) -> usize {
    // CRC16/XMODEM, as Redis Cluster (and redis-rs's own routing) computes it.
    usize::from(crc16::State::<crc16::XMODEM>::calculate(hashed_part(key))) % SLOTS
}

fn base36(mut n: u32) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII digits")
}

/// For each slot, the hash tag used by the side keys of that slot's locks.
fn slot_tags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        let mut tags = vec![String::new(); SLOTS];
        let mut missing = SLOTS;
        let mut n = 0u32;
        while missing > 0 {
            let tag = base36(n);
            let slot = hash_slot(tag.as_bytes());
            if tags[slot].is_empty() {
                tags[slot] = tag;
                missing -= 1;
            }
            n += 1;
        }
        tags
    })
}

/// Every fencing counter's key, one per slot (see `super::sentinel`: a primary new to the
/// clients has them all lifted at once).
pub fn every_fence_key() -> impl Iterator<Item = Vec<u8>> {
    slot_tags().iter().map(|tag| {
        SideKeys {
            key: "",
            tag: tag.as_str(),
        }
        .fence()
    })
}

/// The hash tag (without braces) of the slot `key` is in.
pub fn slot_tag(key: &str) -> &'static str {
    &slot_tags()[hash_slot(key.as_bytes())]
}

/// Room for a key that needs no name in it ([`SideKeys::fence_inline`]): the reserved byte,
/// `deadbolt:fence:{`, a slot's tag (at most [`MAX_TAG_LEN`]) and `}`.
const INLINE_KEY: usize = 1 + 16 + MAX_TAG_LEN + 1;

/// A short key on the stack (see [`SideKeys::fence_inline`]).
pub struct InlineKey {
    bytes: [u8; INLINE_KEY],
    len: usize,
}

impl std::ops::Deref for InlineKey {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// A lock name and the tag of its slot: every side key of one operation is made from one
/// hash of the name.
#[derive(Clone, Copy)]
pub struct SideKeys<'a> {
    key: &'a str,
    tag: &'static str,
}

impl<'a> SideKeys<'a> {
    /// The side keys of `key`.
    pub fn of(key: &'a str) -> Self {
        SideKeys {
            key,
            tag: slot_tag(key),
        }
    }

    /// The hash tag (without braces) that puts the side keys in the name's slot.
    pub fn tag(&self) -> &'static str {
        self.tag
    }

    /// The name's reserved key of `kind`, in its slot: the reserved byte, then
    /// `deadbolt:<kind>:{<tag>}<name>`.
    fn reserved(&self, kind: &str) -> Vec<u8> {
        let key = self.key;
        let mut out = Vec::with_capacity(1 + 9 + kind.len() + 2 + self.tag.len() + 1 + key.len());
        out.push(RESERVED);
        out.extend_from_slice(b"deadbolt:");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b":{");
        out.extend_from_slice(self.tag.as_bytes());
        out.push(b'}');
        out.extend_from_slice(key.as_bytes());
        out
    }

    /// Key of the fencing counter that serves the name (shared by every name in its slot).
    pub fn fence(&self) -> Vec<u8> {
        self.fence_inline().to_vec()
    }

    /// [`SideKeys::fence`], made on the stack: an acquisition names it every time, and a
    /// slot's tag is a few base-36 digits, so it always fits.
    pub fn fence_inline(&self) -> InlineKey {
        const PREFIX: &[u8] = b"deadbolt:fence:{";
        let mut key = InlineKey {
            bytes: [0; INLINE_KEY],
            len: 0,
        };
        for part in [&[RESERVED][..], PREFIX, self.tag.as_bytes(), b"}"] {
            key.bytes[key.len..key.len + part.len()].copy_from_slice(part);
            key.len += part.len();
        }
        key
    }

    /// Key of the name's data payload (expires with the lock).
    pub fn data(&self) -> Vec<u8> {
        self.reserved("data")
    }

    /// Pub/sub channel on which a release of the name is announced.
    pub fn channel(&self) -> String {
        const PREFIX: &str = "deadbolt:released:{";
        let mut out = String::with_capacity(PREFIX.len() + self.tag.len() + 1 + self.key.len());
        out.push_str(PREFIX);
        out.push_str(self.tag);
        out.push('}');
        out.push_str(self.key);
        out
    }
}

/// Key of the fencing counter that serves `key` (shared by every name in its slot).
pub fn fence_key(key: &str) -> Vec<u8> {
    SideKeys::of(key).fence()
}

/// Key of the data payload of `key` (expires with the lock).
pub fn data_key(key: &str) -> Vec<u8> {
    SideKeys::of(key).data()
}

/// Key of the state (holders and queue) of semaphore `name`. It is reckoned from the
/// semaphore's watch key ([`crate::store::permits::watch_key`]), like the fencing counter
/// (`fence_key(watch_key)`) and the release channel (`release_channel(watch_key)`) that serve
/// it, so the three share a slot: announcing on that channel is where waiters listen.
pub fn permits_key(watch_key: &str) -> Vec<u8> {
    SideKeys::of(watch_key).reserved("permits")
}

/// Pub/sub channel on which a release of `key` is announced.
pub fn release_channel(key: &str) -> String {
    SideKeys::of(key).channel()
}

/// Where version 0.1 kept `key`'s fencing counter (`{key}:fence`, or `key:fence` when the key
/// has a hash tag). Read by the acquire script the first time a store locks the name, to carry
/// its count over, then deleted (see `RedisStore::try_acquire`).
pub fn legacy_fence_key(key: &str) -> String {
    if hashed_part(key.as_bytes()).len() == key.len() {
        format!("{{{key}}}:fence")
    } else {
        format!("{key}:fence")
    }
}

/// Separates the owner from the fencing token in a lock key's value (`owner 0xFF token`).
/// Like [`RESERVED`], it cannot occur in an owner, which is UTF-8.
pub const TOKEN_SEPARATOR: u8 = 0xFF;

/// Ends a modern lock key's value once an acquisition was refused it ("someone waits": its
/// release is announced). Like [`TOKEN_SEPARATOR`], it cannot occur in an owner.
pub const WAITED_MARK: u8 = 0xFE;

/// Whether a string value is one a lock writes, as opposed to another application's string
/// under a name that happens to match: a modern lock's value carries [`TOKEN_SEPARATOR`] (with
/// or without a token after it), and redislock (and deadbolt's redislock face) write a bare
/// UUID (`8-4-4-4-12` hexadecimal digits). The views (`list`, `top`, the dashboard) show only
/// these.
pub fn is_lock_value(value: &[u8]) -> bool {
    if value.contains(&TOKEN_SEPARATOR) {
        return true;
    }
    value.len() == 36
        && value.iter().enumerate().all(|(i, &b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// Follows the token in the value of a Redlock grant, before the attempt that made it
/// (`owner 0xFF token 0xFD attempt`, see `scripts::ACQUIRE`). Like [`TOKEN_SEPARATOR`], it
/// cannot occur in an owner.
pub const ATTEMPT_SEPARATOR: u8 = 0xFD;

/// Splits a lock key's value into the owner and, if the value carries one, the fencing token
/// (a waiters' mark after it, or a Redlock attempt's tag, is not part of either). A lock taken
/// with `fencing: false` has the separator and nothing after it: the owner, no token.
pub fn split_value(value: &[u8]) -> (&[u8], Option<u64>) {
    let unmarked = match value.split_last() {
        Some((&WAITED_MARK, rest)) if rest.contains(&TOKEN_SEPARATOR) => rest,
        _ => value,
    };
    match unmarked.iter().rposition(|&b| b == TOKEN_SEPARATOR) {
        Some(at) if at + 1 == unmarked.len() => (&unmarked[..at], None),
        Some(at) => {
            let after = &unmarked[at + 1..];
            let digits = match after.iter().position(|&b| b == ATTEMPT_SEPARATOR) {
                Some(end) => &after[..end],
                None => after,
            };
            let token = std::str::from_utf8(digits)
                .ok()
                .and_then(|t| t.parse().ok());
            match token {
                Some(t) => (&unmarked[..at], Some(t)),
                None => (value, None),
            }
        }
        None => (value, None),
    }
}

#[cfg(test)]
mod tests;
