//! The lock item, in the Java `amazon-dynamodb-lock-client`'s layout: the key attribute(s),
//! `ownerName` (S), `leaseDuration` (S, milliseconds), `recordVersionNumber` (S, a new UUID on
//! every acquisition and heartbeat), `data` (B) and `isReleased` (S, present once released),
//! plus deadbolt's `fencingToken` (N). Other attributes are left as they are. Values travel
//! in DynamoDB's JSON: `{"S": "…"}`, `{"N": "…"}`, `{"B": "<base64>"}`.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{json, Map, Value};
use std::time::Duration;

/// The partition key attribute of the Java client's tables.
pub const DEFAULT_PARTITION_KEY: &str = "key";
/// Who holds the lock.
pub const OWNER: &str = "ownerName";
/// The holder's lease in milliseconds, as a decimal string.
pub const LEASE: &str = "leaseDuration";
/// Changes on every acquisition and heartbeat: a contender watches it.
pub const VERSION: &str = "recordVersionNumber";
/// The payload.
pub const DATA: &str = "data";
/// Present (with the value `"1"`) once the lock was released and the item kept.
pub const RELEASED: &str = "isReleased";
/// What the Java client writes into `isReleased`.
pub const RELEASED_VALUE: &str = "1";
/// deadbolt's fencing counter: the Java client neither reads nor keeps it.
pub const FENCE: &str = "fencingToken";
/// The type tag deadbolt's JavaScript layer puts before a payload of bytes (lib/validate.js:
/// `s` for a string, `b` for bytes).
const BYTES_TAG: u8 = b'b';

/// Attributes a lock item uses, which no key attribute may be named after.
pub const LOCK_ATTRIBUTES: [&str; 6] = [OWNER, LEASE, VERSION, DATA, RELEASED, FENCE];

/// A held lock as read from its item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// `ownerName`.
    pub owner: String,
    /// `recordVersionNumber`.
    pub version: String,
    /// `leaseDuration`.
    pub lease: Duration,
    /// `fencingToken`; 0 when the item has none (written by a Java client).
    pub fence: u64,
    /// `data`.
    pub data: Option<Vec<u8>>,
}

/// What an item (or its absence) says about a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lock {
    /// No item, a released one, or one without an owner or version (no lock client's).
    Free,
    /// Held, as far as the item tells: whether the lease still runs is for the watcher to
    /// decide.
    Held(Holder),
}

/// A string attribute.
pub fn s(value: &str) -> Value {
    json!({ "S": value })
}

/// A number attribute.
pub fn n(value: u64) -> Value {
    json!({ "N": value.to_string() })
}

/// A binary attribute.
pub fn b(value: &[u8]) -> Value {
    json!({ "B": BASE64.encode(value) })
}

fn get<'a>(item: &'a Map<String, Value>, name: &str, kind: &str) -> Option<&'a str> {
    item.get(name)?.get(kind)?.as_str()
}

/// The number attribute `name` as a `u64`; `None` if absent. A value that is not a whole
/// number in range is an error.
pub fn get_u64(item: &Map<String, Value>, name: &str) -> Result<Option<u64>, String> {
    get(item, name, "N")
        .map(|v| {
            v.parse()
                .map_err(|_| format!("{name} is not a whole number below 2^64"))
        })
        .transpose()
}

/// The string attribute `name`, if present.
pub fn get_s<'a>(item: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    get(item, name, "S")
}

/// Reads a lock from an item (`None`: no item).
pub fn parse(item: Option<&Map<String, Value>>) -> Result<Lock, String> {
    let Some(item) = item.filter(|i| !i.is_empty()) else {
        return Ok(Lock::Free);
    };
    let (Some(owner), Some(version)) = (get_s(item, OWNER), get_s(item, VERSION)) else {
        return Ok(Lock::Free);
    };
    // The Java client reads any `isReleased` as released, whatever its value.
    if item.contains_key(RELEASED) {
        return Ok(Lock::Free);
    }
    let lease = get_s(item, LEASE)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .ok_or_else(|| format!("the lock item's {LEASE} is not a whole number of milliseconds"))?;
    let fence = get_u64(item, FENCE)?.unwrap_or(0);
    let data = match get(item, DATA, "B") {
        Some(encoded) => {
            let mut data = BASE64
                .decode(encoded)
                .map_err(|_| format!("the lock item's {DATA} is not base64"))?;
            // Only deadbolt writes a fencing token, and only deadbolt tags its payloads: a
            // Java client's payload is tagged as bytes here, so it reads back as it is
            // instead of losing a first byte that happens to be a tag.
            if fence == 0 {
                data.insert(0, BYTES_TAG);
            }
            Some(data)
        }
        None => None,
    };
    Ok(Lock::Held(Holder {
        owner: owner.to_owned(),
        version: version.to_owned(),
        lease: Duration::from_millis(lease),
        fence,
        data,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_java_item_is_held_with_no_token_and_a_released_one_is_free() {
        let java = item(json!({
            "key": s("k"), "ownerName": s("host-1"), "leaseDuration": s("20000"),
            "recordVersionNumber": s("v1"), "data": b(b"\x00\xff"), "extra": s("kept")
        }));
        assert_eq!(
            parse(Some(&java)).unwrap(),
            Lock::Held(Holder {
                owner: "host-1".into(),
                version: "v1".into(),
                lease: Duration::from_secs(20),
                fence: 0,
                data: Some(vec![BYTES_TAG, 0, 255]),
            })
        );
        let mut released = java.clone();
        released.insert(RELEASED.into(), s(RELEASED_VALUE));
        assert_eq!(parse(Some(&released)).unwrap(), Lock::Free);
        assert_eq!(parse(None).unwrap(), Lock::Free);
        assert_eq!(
            parse(Some(&item(json!({"key": s("k")})))).unwrap(),
            Lock::Free
        );
    }

    #[test]
    fn a_malformed_lease_or_token_is_an_error() {
        let bad_lease = item(json!({
            "ownerName": s("o"), "recordVersionNumber": s("v"), "leaseDuration": s("soon")
        }));
        assert!(parse(Some(&bad_lease)).unwrap_err().contains(LEASE));
        let bad_fence = item(json!({
            "ownerName": s("o"), "recordVersionNumber": s("v"), "leaseDuration": s("1"),
            "fencingToken": {"N": "1.5"}
        }));
        assert!(parse(Some(&bad_fence)).unwrap_err().contains(FENCE));
        let big = item(json!({ "fencingToken": {"N": "18446744073709551615"} }));
        assert_eq!(get_u64(&big, FENCE).unwrap(), Some(u64::MAX));
    }
}
