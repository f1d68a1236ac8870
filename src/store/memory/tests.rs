use super::*;
use crate::store::conformance::next_owner;
use crate::store::ValueFormat;

#[test]
fn a_held_key_is_refused_to_another_owner() {
    let s = MemoryStore::default();
    assert_eq!(s.try_acquire("k", "a", 1000, None), Some(1));
    assert_eq!(s.try_acquire("k", "b", 1000, None), None);
}

#[test]
fn fencing_tokens_keep_increasing_after_release() {
    let s = MemoryStore::default();
    assert_eq!(s.try_acquire("k", "a", 1000, None), Some(1));
    assert!(s.release("k", "a"));
    assert_eq!(s.try_acquire("k", "b", 1000, None), Some(2));
}

#[test]
fn an_expired_lease_can_be_taken_and_not_extended_by_its_old_owner() {
    let s = MemoryStore::default();
    assert_eq!(s.try_acquire("k", "a", 1, None), Some(1));
    std::thread::sleep(Duration::from_millis(5));
    assert!(!s.extend("k", "a", 1000));
    assert_eq!(s.try_acquire("k", "b", 1000, None), Some(2));
    assert!(!s.release("k", "a"));
}

#[test]
fn a_handoff_moves_the_lock_to_the_next_owner_with_a_new_token() {
    let s = MemoryStore::default();
    s.try_acquire("k", "a", 1000, Some(b"x"));
    let next = crate::store::NextOwner {
        previous_had_data: true,
        ..next_owner("b", 500, ValueFormat::Fenced)
    };
    assert_eq!(s.handoff("k", "a", &next), Some(2));
    let info = s.inspect("k").unwrap();
    assert_eq!((info.owner.as_str(), info.data), ("b", None));
    assert_eq!(s.handoff("k", "a", &next), None, "a no longer holds it");
}

#[test]
fn released_and_expired_names_leave_nothing_behind() {
    let s = MemoryStore::default();
    for i in 0..1000 {
        s.try_acquire(&format!("gone{i}"), "a", 1, None);
    }
    std::thread::sleep(Duration::from_millis(5));
    for i in 0..1000 {
        let key = format!("kept{i}");
        s.try_acquire(&key, "a", 60_000, None);
        assert!(s.release(&key, "a"));
    }
    assert!(
        s.state.lock().unwrap().held.len() <= 64,
        "expired names were swept"
    );
    assert_eq!(s.try_acquire("kept0", "b", 1000, None), Some(2001));
}

#[test]
fn inspect_reports_owner_token_and_data() {
    let s = MemoryStore::default();
    s.try_acquire("k", "a", 1000, Some(b"\x00hi"));
    let info = s.inspect("k").unwrap();
    assert_eq!(info.owner, "a");
    assert_eq!(info.fencing_token, 1);
    assert_eq!(info.data.as_deref(), Some(&b"\x00hi"[..]));
    assert!(info.remaining_ms > 900 && info.remaining_ms <= 1000);
}

mod conformance {
    use crate::store::memory::MemoryStore;
    use std::sync::Arc;

    crate::conformance_suite!(Some(Arc::new(MemoryStore::default())));
}

mod permits {
    use crate::store::memory::MemoryStore;
    use std::sync::Arc;

    crate::permits_suite!(Some(Arc::new(MemoryStore::default())));
}
