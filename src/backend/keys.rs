//! Names of the side keys kept next to a lock key.
//!
//! Side keys must hash to the same Redis Cluster slot as the lock key, so that one script can
//! touch all of them. A key that already carries a `{hash tag}` keeps it and gets a suffix; any
//! other key is wrapped whole in braces, which makes the whole key the tag.

/// Returns true when `key` contains a non-empty `{...}` hash tag, as Redis Cluster defines it.
pub fn has_hash_tag(key: &str) -> bool {
    let bytes = key.as_bytes();
    match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) => len > 0,
            None => false,
        },
        None => false,
    }
}

/// The side key `suffix` for lock key `key`, in the same cluster slot.
pub fn side_key(key: &str, suffix: &str) -> String {
    if has_hash_tag(key) {
        format!("{key}:{suffix}")
    } else {
        format!("{{{key}}}:{suffix}")
    }
}

/// Key of the fencing counter (never expires, so tokens keep increasing after release).
pub fn fence_key(key: &str) -> String {
    side_key(key, "fence")
}

/// Key of the data payload (expires with the lock).
pub fn data_key(key: &str) -> String {
    side_key(key, "data")
}

/// Pub/sub channel on which a release of `key` is announced.
pub fn release_channel(key: &str) -> String {
    side_key(key, "released")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_key_is_wrapped_in_braces() {
        assert_eq!(fence_key("orders:42"), "{orders:42}:fence");
    }

    #[test]
    fn a_key_with_a_hash_tag_keeps_its_tag() {
        assert_eq!(data_key("a{user1}b"), "a{user1}b:data");
    }

    #[test]
    fn an_empty_hash_tag_does_not_count_as_a_tag() {
        assert!(!has_hash_tag("a{}b"));
        assert_eq!(fence_key("a{}b"), "{a{}b}:fence");
    }

    #[test]
    fn an_unclosed_brace_does_not_count_as_a_tag() {
        assert!(!has_hash_tag("a{b"));
    }
}
