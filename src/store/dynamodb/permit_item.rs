//! The semaphore item: one item per semaphore, in the lock table but in a key space no lock
//! item can reach. Its partition key is [`PREFIX`] followed by the semaphore's name (and, on a
//! table with a sort key, the configured sort key value, as for locks); lock names starting
//! with [`PREFIX`] are refused, so a lock and a semaphore never share an item, whatever their
//! names. The item has two attributes of its own:
//!
//! - `permitState` (S): the semaphore's holders, queue and fencing counter, as JSON text:
//!   `{"fence": 17, "holders": [{"owner": "…", "permits": 2, "token": 17, "lease": 10000,
//!   "version": "…"}], "queue": [{"owner": "…", "permits": 3, "lease": 10000, "version":
//!   "…"}]}`;
//! - `permitVersion` (S): a new random value at every write, the condition of the next one.
//!
//! As in the Java lock client's lock items, a holder's or a queued place's lease is a
//! duration (`lease`, ms) with a `version` that changes whenever the lease is set again; when
//! it ends is for each reader to reckon by watching the version (see `permits.rs`). The item
//! has no `ownerName` or `recordVersionNumber`, so nothing reads it as a lock.

use serde_json::{json, Map, Value};

/// What every semaphore item's partition key starts with: a NUL, which no one puts in a lock
/// name, and a name that says whose item it is to whoever scans the table.
pub const PREFIX: &str = "\u{0}deadbolt:permits\u{0}";
/// The semaphore's state, as JSON text.
pub const STATE: &str = "permitState";
/// The version of the state, a new one at every write.
pub const VERSION: &str = "permitVersion";
/// Attributes a semaphore item uses, which no key attribute may be named after.
pub const ATTRIBUTES: [&str; 2] = [STATE, VERSION];

/// The partition key value of semaphore `name`.
pub fn partition_value(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// A holder as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredHolder {
    /// Owner token.
    pub owner: String,
    /// Permits held.
    pub permits: u32,
    /// Fencing token.
    pub token: u64,
    /// Lease in ms, counted from when a reader first saw `version`.
    pub lease: u64,
    /// Changes whenever the lease is set.
    pub version: String,
}

/// A queued request as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredWaiter {
    /// Owner token.
    pub owner: String,
    /// Permits asked for.
    pub permits: u32,
    /// How long the place is kept, in ms, counted as a holder's lease.
    pub lease: u64,
    /// Changes whenever the place is renewed.
    pub version: String,
}

/// A semaphore's state as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stored {
    /// The last fencing token issued.
    pub fence: u64,
    /// Holders.
    pub holders: Vec<StoredHolder>,
    /// Queued requests, in the order they joined.
    pub queue: Vec<StoredWaiter>,
}

impl Stored {
    /// The state as `permitState` holds it.
    pub fn encode(&self) -> String {
        let holders: Vec<Value> = self
            .holders
            .iter()
            .map(|h| {
                let mut e = entry(&h.owner, h.permits, h.lease, &h.version);
                e["token"] = h.token.into();
                e
            })
            .collect();
        let queue: Vec<Value> = self
            .queue
            .iter()
            .map(|w| entry(&w.owner, w.permits, w.lease, &w.version))
            .collect();
        json!({ "fence": self.fence, "holders": holders, "queue": queue }).to_string()
    }

    /// Reads `permitState`.
    pub fn decode(text: &str) -> Result<Stored, String> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| format!("{STATE} is not JSON ({e})"))?;
        let state = value
            .as_object()
            .ok_or_else(|| format!("{STATE} is not a JSON object"))?;
        let list = |field: &str| -> Result<Vec<&Map<String, Value>>, String> {
            state
                .get(field)
                .and_then(Value::as_array)
                .ok_or_else(|| format!("{STATE}.{field} is not a list"))?
                .iter()
                .map(|e| {
                    e.as_object()
                        .ok_or_else(|| format!("an entry of {STATE}.{field} is not an object"))
                })
                .collect()
        };
        let holders = list("holders")?
            .into_iter()
            .map(|h| Ok(StoredWaiter::read(h)?.holding(number(h, "token")?)))
            .collect::<Result<_, String>>()?;
        let queue = list("queue")?
            .into_iter()
            .map(StoredWaiter::read)
            .collect::<Result<_, String>>()?;
        Ok(Stored {
            fence: number(state, "fence")?,
            holders,
            queue,
        })
    }

    /// Whether nothing but the fencing counter is left.
    pub fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty()
    }
}

impl StoredWaiter {
    /// Reads the fields a queued place and a holder share from an entry of `permitState`.
    fn read(entry: &Map<String, Value>) -> Result<StoredWaiter, String> {
        Ok(StoredWaiter {
            owner: text_field(entry, "owner")?,
            permits: permits_field(entry)?,
            lease: number(entry, "lease")?,
            version: text_field(entry, "version")?,
        })
    }

    /// The holder these fields and `token` make.
    fn holding(self, token: u64) -> StoredHolder {
        let StoredWaiter {
            owner,
            permits,
            lease,
            version,
        } = self;
        StoredHolder {
            owner,
            permits,
            token,
            lease,
            version,
        }
    }
}

/// An entry of `permitState` with the fields a queued place and a holder share.
fn entry(owner: &str, permits: u32, lease: u64, version: &str) -> Value {
    json!({ "owner": owner, "permits": permits, "lease": lease, "version": version })
}

fn number(object: &Map<String, Value>, field: &str) -> Result<u64, String> {
    object
        .get(field)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("{STATE}: {field} is not a whole number below 2^64"))
}

fn permits_field(object: &Map<String, Value>) -> Result<u32, String> {
    u32::try_from(number(object, "permits")?)
        .map_err(|_| format!("{STATE}: permits is not below 2^32"))
}

fn text_field(object: &Map<String, Value>, field: &str) -> Result<String, String> {
    object
        .get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("{STATE}: {field} is not a string"))
}

/// A semaphore item as read: its state and version, or `None` when there is no item (or one
/// without a version, which no deadbolt wrote).
pub fn parse(item: Option<&Map<String, Value>>) -> Result<Option<(Stored, String)>, String> {
    let Some(item) = item else {
        return Ok(None);
    };
    let Some(version) = super::item::get_s(item, VERSION) else {
        return Ok(None);
    };
    let state = super::item::get_s(item, STATE)
        .ok_or_else(|| format!("the semaphore item has a {VERSION} but no {STATE}"))?;
    Ok(Some((Stored::decode(state)?, version.to_owned())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::dynamodb::item::s;

    fn sample() -> Stored {
        Stored {
            fence: u64::MAX - 1,
            holders: vec![StoredHolder {
                owner: "a\u{0}\"b".into(),
                permits: 2,
                token: u64::MAX - 1,
                lease: 10_000,
                version: "v1".into(),
            }],
            queue: vec![StoredWaiter {
                owner: "w".into(),
                permits: 3,
                lease: 500,
                version: "v2".into(),
            }],
        }
    }

    #[test]
    fn the_state_reads_back_as_it_was_written_even_with_tokens_above_2_pow_53() {
        let stored = sample();
        assert_eq!(Stored::decode(&stored.encode()).unwrap(), stored);
        let item: Map<String, Value> = [
            (STATE.to_owned(), s(&stored.encode())),
            (VERSION.to_owned(), s("rv")),
        ]
        .into_iter()
        .collect();
        assert_eq!(parse(Some(&item)).unwrap(), Some((stored, "rv".into())));
        assert_eq!(parse(None).unwrap(), None);
    }

    #[test]
    fn a_malformed_state_is_an_error_that_names_the_field() {
        assert!(Stored::decode("[]").unwrap_err().contains("object"));
        let no_queue = r#"{"fence": 1, "holders": []}"#;
        assert!(Stored::decode(no_queue).unwrap_err().contains("queue"));
        let big = r#"{"fence": 1, "holders": [], "queue": [
            {"owner": "w", "permits": 4294967296, "lease": 1, "version": "v"}]}"#;
        assert!(Stored::decode(big).unwrap_err().contains("permits"));
        let negative = r#"{"fence": -1, "holders": [], "queue": []}"#;
        assert!(Stored::decode(negative).unwrap_err().contains("fence"));
    }

    #[test]
    fn a_semaphores_key_is_its_name_after_the_prefix() {
        assert_eq!(partition_value("jobs"), "\u{0}deadbolt:permits\u{0}jobs");
    }
}
