use super::*;

fn req(owner: &str, permits: u32, queue_ttl_ms: u64) -> PermitRequest<'_> {
    PermitRequest {
        name: "s",
        owner,
        permits,
        limit: 3,
        ttl_ms: 1_000,
        queue_ttl_ms,
    }
}

/// A table where `holder` holds `permits` of three and "w", asking for all three, waits (its
/// place lapses at 100), all at time 0.
fn held_and_waited_for(holder: &str, permits: u32) -> PermitTable {
    let mut t = PermitTable::default();
    assert!(t.acquire(&req(holder, permits, 0), 0).is_some());
    assert_eq!(t.acquire(&req("w", 3, 100), 0), None);
    t
}

#[test]
fn permits_are_granted_up_to_the_limit_and_no_further() {
    let mut t = PermitTable::default();
    assert_eq!(t.acquire(&req("a", 2, 0), 0), Some(1));
    assert_eq!(t.acquire(&req("b", 1, 0), 0), Some(2));
    assert_eq!(t.acquire(&req("c", 1, 0), 0), None);
    assert_eq!(t.taken(), 3);
    assert!(t.queue.is_empty(), "a try is not queued");
}

#[test]
fn an_owner_asking_again_gets_its_own_token_and_a_renewed_lease() {
    let mut t = PermitTable::default();
    assert_eq!(t.acquire(&req("a", 3, 0), 0), Some(1));
    assert_eq!(t.acquire(&req("a", 3, 0), 500), Some(1));
    assert_eq!(t.holders[0].expires, 1_500);
    assert_eq!(t.taken(), 3);
}

#[test]
fn a_queued_request_is_not_overtaken_by_one_it_would_delay() {
    // A writer needs all three: refused, queued.
    let mut t = held_and_waited_for("r1", 1);
    // A reader that would fit beside r1 must not overtake the writer.
    assert_eq!(t.acquire(&req("r2", 1, 100), 10), None);
    assert!(t.release("r1", 20));
    // The reader asking first is still behind the writer.
    assert_eq!(t.acquire(&req("r2", 1, 100), 30), None);
    assert_eq!(t.acquire(&req("w", 3, 100), 30), Some(2));
    assert!(t.release("w", 40));
    assert_eq!(t.acquire(&req("r2", 1, 100), 50), Some(3));
}

#[test]
fn a_request_that_fits_beside_everyone_ahead_is_granted() {
    let mut t = PermitTable::default();
    assert_eq!(t.acquire(&req("b", 1, 0), 0), Some(1));
    assert_eq!(
        t.acquire(&req("c", 1, 100), 0),
        Some(2),
        "nobody waits: granted"
    );
    let wide = |owner| PermitRequest {
        limit: 5,
        ..req(owner, 2, 100)
    };
    // Taken 2 of 5; d (2) fits; e (2) does not (2 + 2 + 2 > 5) and queues; f (1) fits
    // beside e's two (4 + 2 + 1 > 5: no) and waits behind it.
    assert!(t.acquire(&wide("d"), 0).is_some());
    assert_eq!(t.acquire(&wide("e"), 0), None);
    let f = PermitRequest {
        limit: 5,
        ..req("f", 1, 100)
    };
    assert_eq!(t.acquire(&f, 0), None);
    assert!(t.release("b", 0));
    // 3 taken + 2 ahead (e) + 1 > 5: f still waits; e fits.
    assert_eq!(t.acquire(&f, 0), None);
    assert!(t.acquire(&wide("e"), 0).is_some());
}

#[test]
fn lapsed_holders_and_queued_places_are_dropped_by_the_clock() {
    let mut t = held_and_waited_for("a", 3);
    // The waiter died: its place lapses at 100; the holder's lease at 1 000.
    assert_eq!(t.acquire(&req("b", 1, 0), 999), None);
    assert_eq!(t.acquire(&req("b", 1, 0), 1_000), Some(2));
    assert!(t.queue.is_empty());
    assert!(!t.extend("a", 1_000, 1_000));
    assert!(!t.release("a", 1_000));
}

#[test]
fn a_queued_request_keeps_its_place_when_it_asks_again() {
    let mut t = PermitTable::default();
    t.acquire(&req("a", 3, 0), 0).unwrap();
    assert_eq!(t.acquire(&req("x", 1, 100), 0), None);
    assert_eq!(t.acquire(&req("y", 1, 100), 0), None);
    assert_eq!(t.acquire(&req("x", 1, 100), 50), None);
    assert_eq!(t.queue[0].owner, "x");
    assert_eq!(t.queue[0].expires, 150);
}

#[test]
fn tokens_only_increase_across_releases() {
    let mut t = PermitTable::default();
    let mut last = 0;
    for i in 0..10 {
        let token = t.acquire(&req("a", 1, 0), i).unwrap();
        assert!(token > last);
        last = token;
        assert!(t.release("a", i));
    }
    assert!(t.is_idle());
}

#[test]
fn release_gives_up_a_queued_place() {
    let mut t = held_and_waited_for("a", 3);
    assert!(!t.release("w", 0));
    assert!(t.queue.is_empty());
}
