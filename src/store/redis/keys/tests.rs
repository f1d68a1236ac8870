use super::*;

#[test]
fn the_slot_of_a_key_matches_redis_cluster() {
    // Values from `CLUSTER KEYSLOT` on a real server.
    assert_eq!(hash_slot(b"foo"), 12182);
    assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
    // The hash tag rules of the Redis Cluster specification: the first `{`, the first `}`
    // after it, and only a non-empty tag counts.
    assert_eq!(hash_slot(b"foo{bar}{zap}"), hash_slot(b"bar"));
    assert_eq!(hash_slot(b"foo{{bar}}zap"), hash_slot(b"{bar"));
    assert_ne!(hash_slot(b"foo{}{bar}"), hash_slot(b"bar"));
    assert_eq!(hash_slot(b"foo{}{bar}"), 8363);
    assert_eq!(hash_slot(b"123456789"), 0x31C3);
}

#[test]
fn every_slot_has_a_tag_that_hashes_to_it() {
    let tags = slot_tags();
    assert_eq!(tags.len(), SLOTS);
    for (slot, tag) in tags.iter().enumerate() {
        assert_eq!(hash_slot(tag.as_bytes()), slot, "tag {tag:?}");
        assert!(tag.len() <= 4);
    }
}

#[test]
fn no_slot_tag_is_longer_than_max_tag_len() {
    let longest = slot_tags().iter().map(String::len).max().unwrap();
    assert!(longest <= MAX_TAG_LEN, "{longest}");
}

#[test]
fn side_keys_share_the_lock_keys_slot() {
    for key in [
        "orders:42",
        "a{user1}b",
        "a{}b",
        "{x}",
        "x",
        "{",
        "}{",
        "ключ",
        "{a}:fence",
    ] {
        let slot = hash_slot(key.as_bytes());
        assert_eq!(hash_slot(&fence_key(key)), slot, "{key}");
        assert_eq!(hash_slot(&data_key(key)), slot, "{key}");
        assert_eq!(hash_slot(release_channel(key).as_bytes()), slot, "{key}");
    }
}

#[test]
fn no_side_key_is_valid_utf8_so_no_lock_name_can_be_one() {
    for key in ["a", "{a}:fence", "{a}:data"] {
        assert!(std::str::from_utf8(&fence_key(key)).is_err());
        assert!(std::str::from_utf8(&data_key(key)).is_err());
    }
}

#[test]
fn names_that_shared_side_keys_in_version_0_1_no_longer_do() {
    assert_ne!(data_key("x"), data_key("{x}"));
    assert_ne!(release_channel("x"), release_channel("{x}"));
    assert_ne!(data_key("c"), data_key("{c}:data"));
}

#[test]
fn the_legacy_counter_name_is_the_one_version_0_1_wrote() {
    assert_eq!(legacy_fence_key("orders:42"), "{orders:42}:fence");
    assert_eq!(legacy_fence_key("a{user1}b"), "a{user1}b:fence");
    assert_eq!(legacy_fence_key("a{}b"), "{a{}b}:fence");
}

#[test]
fn a_value_splits_into_owner_and_token() {
    assert_eq!(split_value(b"own\xff42"), (&b"own"[..], Some(42)));
    assert_eq!(split_value(b"legacy-uuid"), (&b"legacy-uuid"[..], None));
    assert_eq!(
        split_value(b"o\xff18446744073709551615"),
        (&b"o"[..], Some(u64::MAX))
    );
    assert_eq!(split_value(b"o\xffx"), (&b"o\xffx"[..], None));
    assert_eq!(split_value(b"own\xff42\xfe"), (&b"own"[..], Some(42)));
    // A Redlock attempt's tag follows the token.
    assert_eq!(split_value(b"own\xff42\xfd7"), (&b"own"[..], Some(42)));
    assert_eq!(split_value(b"own\xff42\xfd7\xfe"), (&b"own"[..], Some(42)));
    // `fencing: false`: the separator and no token, marked or not.
    assert_eq!(split_value(b"own\xff"), (&b"own"[..], None));
    assert_eq!(split_value(b"own\xff\xfe"), (&b"own"[..], None));
    // Only a modern value is ever marked: a bare owner keeps every byte.
    assert_eq!(split_value(b"own\xfe"), (&b"own\xfe"[..], None));
}

#[test]
fn a_semaphores_state_counter_and_channel_share_its_watch_keys_slot() {
    use crate::store::permits::watch_key;
    for name in ["orders:42", "a{user1}b", "{x}", "x", "ключ"] {
        let watch = watch_key(name);
        let slot = hash_slot(watch.as_bytes());
        assert_eq!(hash_slot(&permits_key(&watch)), slot, "{name}");
        assert_eq!(hash_slot(&fence_key(&watch)), slot, "{name}");
        assert_eq!(
            hash_slot(release_channel(&watch).as_bytes()),
            slot,
            "{name}"
        );
        assert!(std::str::from_utf8(&permits_key(&watch)).is_err());
        assert_ne!(permits_key(&watch), data_key(name));
    }
}

#[test]
fn every_fence_key_names_one_counter_in_each_slot() {
    let keys: Vec<Vec<u8>> = super::every_fence_key().collect();
    assert_eq!(keys.len(), super::SLOTS);
    for (slot, key) in keys.iter().enumerate() {
        assert_eq!(super::hash_slot(key), slot);
    }
}

#[test]
fn the_fence_key_of_every_slot_is_the_reserved_byte_the_counter_name_and_its_tag() {
    for tag in slot_tags() {
        let expected = [&[RESERVED][..], b"deadbolt:fence:{", tag.as_bytes(), b"}"].concat();
        assert_eq!(&*SideKeys::of(tag).fence_inline(), &expected[..], "{tag}");
    }
}
