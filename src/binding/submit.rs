//! The decoding of a submitted batch (records laid out as `protocol.rs` defines) into
//! operations, and how each operation runs and completes.

use super::completions::{Completions, Kind};
use super::protocol::{
    acquire, held, FLAG_CANCELLABLE, FLAG_PLAIN, FLAG_REPORT_EXTENSIONS, FLAG_UNFENCED,
    FLAG_WATCH_EXPIRY, OP_ACQUIRE, OP_EXTEND, OP_RELEASE, REQ,
};
use crate::core::error::LockError;
use crate::core::options::{AcquireSpec, AutoExtend, PermitSpec};
use crate::core::session::Session;
use crate::runtime::clock;
use crate::runtime::debug::debug;
use crate::store::ValueFormat;
use napi::bindgen_prelude::Buffer;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One operation of a submitted batch.
pub(super) enum Op {
    Acquire {
        req: f64,
        spec: AcquireSpec,
        cancel: Option<CancellationToken>,
    },
    Release {
        req: f64,
        id: f64,
    },
    Extend {
        req: f64,
        id: f64,
        ttl: f64,
    },
}

/// Decodes the first `len` numbers of `ops`, taking keys and owners from `text` (each record
/// gives their lengths in UTF-16 code units, as JavaScript counts them) and payloads from
/// `data`, in order. `owner_prefix`: what owners made from an `ownerSeq` start with. A
/// cancellable acquisition is registered with `session` here, on the submitting thread, so a
/// cancel that follows the submission finds it even before its task starts. Nothing runs
/// unless the whole batch decodes; the error says what was malformed.
pub(super) fn decode(
    ops: &[f64],
    len: u32,
    text: &str,
    data: &[Buffer],
    owner_prefix: Option<&str>,
    session: &Session,
) -> Result<Vec<Op>, String> {
    let ops = ops.get(..len as usize).ok_or("len beyond the ops buffer")?;
    let mut rest = text;
    let mut batch = Vec::new();
    let mut i = 0;
    while i < ops.len() {
        let op = ops[i] as u32;
        let need = match op {
            OP_ACQUIRE => acquire::LEN,
            OP_RELEASE => held::RELEASE_LEN,
            OP_EXTEND => held::EXTEND_LEN,
            _ => return Err(format!("unknown op {op}")),
        };
        let r = ops.get(i..i + need).ok_or("truncated op record")?;
        batch.push(match op {
            OP_ACQUIRE => {
                let key = take_units(&mut rest, r[acquire::KEY_LEN])?.to_string();
                let seq = r[acquire::OWNER_SEQ];
                let owner = if seq >= 0.0 {
                    let prefix = owner_prefix.ok_or("no owner prefix set")?;
                    if seq.fract() != 0.0 || seq > MAX_OWNER_SEQ {
                        return Err("bad ownerSeq".into());
                    }
                    owner_of(prefix, seq as u64)
                } else {
                    take_units(&mut rest, r[acquire::OWNER_LEN])?.to_string()
                };
                let flags = r[acquire::FLAGS] as u32;
                Op::Acquire {
                    req: r[REQ],
                    spec: acquire_spec(r, key, owner, data, flags)?,
                    cancel: (flags & FLAG_CANCELLABLE != 0)
                        .then(|| session.cancellable(r[REQ] as u64)),
                }
            }
            OP_RELEASE => Op::Release {
                req: r[REQ],
                id: r[held::ID],
            },
            _ => Op::Extend {
                req: r[REQ],
                id: r[held::ID],
                ttl: r[held::TTL],
            },
        });
        i += need;
    }
    if !rest.is_empty() {
        return Err("text left over after the last record".into());
    }
    Ok(batch)
}

/// Takes from the front of `rest` the string of `units` UTF-16 code units (JavaScript's
/// `length` of a string it appended to the batch's text). The text reached here as UTF-8,
/// a lone surrogate as U+FFFD, which is one unit as the surrogate was, so the counts agree.
fn take_units<'a>(rest: &mut &'a str, units: f64) -> Result<&'a str, &'static str> {
    // Every unit is at least one byte of UTF-8, so a count past the bytes left is malformed.
    if !(units >= 0.0 && units.fract() == 0.0 && units <= rest.len() as f64) {
        return Err("a string length beyond the batch's text");
    }
    let n = units as usize;
    let end = if rest.as_bytes()[..n].is_ascii() {
        // The common case: n ASCII bytes are n units, and byte n starts a character.
        n
    } else {
        let mut counted = 0;
        let mut end = rest.len();
        for (at, c) in rest.char_indices() {
            if counted >= n {
                end = at;
                break;
            }
            counted += c.len_utf16();
        }
        if counted != n {
            return Err("a string length that splits a character");
        }
        end
    };
    let (taken, left) = rest.split_at(end);
    *rest = left;
    Ok(taken)
}

/// The acquisition an acquire record `r` asks for.
fn acquire_spec(
    r: &[f64],
    key: String,
    owner: String,
    data: &[Buffer],
    flags: u32,
) -> Result<AcquireSpec, String> {
    use acquire::*;
    let (permits, limit) = (r[PERMITS], r[LIMIT]);
    // Permits within 1..=limit<=MAX_PERMITS, or none (a lock): the store's rules count on it,
    // whatever JavaScript sent.
    if permits >= 1.0 && !(permits <= limit && limit <= f64::from(crate::limits::MAX_PERMITS)) {
        return Err("permits must be from 1 to the semaphore's limit".into());
    }
    Ok(AcquireSpec {
        key,
        owner,
        ttl_ms: whole_ms(r[TTL]),
        wait: (r[WAIT] >= 0.0).then(|| ms(r[WAIT])),
        max_attempts: (r[MAX_ATTEMPTS] >= 0.0).then_some(r[MAX_ATTEMPTS] as u64),
        retry_delay: ms(r[RETRY_DELAY]),
        jitter: r[JITTER].clamp(0.0, 1.0),
        data: (r[DATA_INDEX] >= 0.0)
            .then(|| data.get(r[DATA_INDEX] as usize).map(|b| b.to_vec()))
            .flatten(),
        auto_extend: (r[EXTEND_EVERY] > 0.0).then(|| AutoExtend {
            every: ms(r[EXTEND_EVERY]),
            max_hold: (r[MAX_HOLD] >= 0.0).then(|| ms(r[MAX_HOLD])),
        }),
        watch_expiry: flags & FLAG_WATCH_EXPIRY != 0,
        report_extensions: flags & FLAG_REPORT_EXTENSIONS != 0,
        format: match (flags & FLAG_PLAIN != 0, flags & FLAG_UNFENCED != 0) {
            (true, true) => ValueFormat::PlainUnfenced,
            (true, false) => ValueFormat::Plain,
            (false, true) => ValueFormat::Unfenced,
            (false, false) => ValueFormat::Fenced,
        },
        permits: (permits >= 1.0).then_some(PermitSpec {
            count: permits as u32,
            limit: limit as u32,
        }),
    })
}

/// `n` in base 36 with lowercase digits, as JavaScript's `n.toString(36)` writes an integer.
fn base36(mut n: u64, out: &mut String) {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut buf = [0u8; 13];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = DIGITS[(n % 36) as usize];
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.extend(buf[i..].iter().map(|&b| char::from(b)));
}

/// Largest `ownerSeq` (JavaScript's largest exact integer).
const MAX_OWNER_SEQ: f64 = 9_007_199_254_740_991.0;

/// The owner of sequence number `seq` of a client whose owners start with `prefix`.
fn owner_of(prefix: &str, seq: u64) -> String {
    let mut owner = String::with_capacity(prefix.len() + 13);
    owner.push_str(prefix);
    base36(seq, &mut owner);
    owner
}

fn ms(v: f64) -> Duration {
    clock::from_ms(v)
}

/// A whole number of milliseconds from a JavaScript number (NaN and negatives give 0; `as`
/// saturates the rest).
fn whole_ms(v: f64) -> u64 {
    v as u64
}

/// Runs an operation; if it panics (a bug), its request still completes, with an error,
/// instead of leaving the caller's promise pending forever.
pub(super) fn guarded<F: std::future::Future<Output = ()>>(
    req: f64,
    completions: Arc<Completions>,
    run: F,
) -> impl std::future::Future<Output = ()> {
    catch_panics(run, move |what| {
        debug!("panic: an operation panicked: {what}");
        completions.error(
            req,
            LockError::Backend(crate::store::StoreError::internal(
                "internal error: the operation panicked (a bug in deadbolt, please report it)",
            )),
        );
    })
}

/// Runs `run`; if it panics, calls `on_panic` with the panic's message instead.
///
/// Made of combinators, not an `async fn`: an `async fn` keeps its argument `run` and the
/// `CatchUnwind` made of it side by side in its state, so every operation's future was twice
/// the size of the operation itself (3.5 KB), all of it copied into its box at submission
/// (bench/PROFILE.md, "A release profile of the default path").
fn catch_panics<F: std::future::Future<Output = ()>>(
    run: F,
    on_panic: impl FnOnce(String),
) -> impl std::future::Future<Output = ()> {
    use futures_util::FutureExt;
    std::panic::AssertUnwindSafe(run)
        .catch_unwind()
        .map(move |outcome| {
            if let Err(panic) = outcome {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                on_panic(what);
            }
        })
}

impl Op {
    /// The request this operation completes.
    pub(super) fn req(&self) -> f64 {
        match self {
            Op::Acquire { req, .. } | Op::Release { req, .. } | Op::Extend { req, .. } => *req,
        }
    }

    /// Runs the operation and completes its request.
    pub(super) async fn run(self, session: Arc<Session>, completions: Arc<Completions>) {
        match self {
            Op::Acquire { req, spec, cancel } => {
                match session.acquire(req as u64, spec, cancel).await {
                    Ok(Some(grant)) => completions.granted(req, grant.token),
                    Ok(None) => completions.record(req, Kind::Refused, 0.0),
                    Err(e) => completions.error(req, e),
                }
            }
            Op::Release { req, id } => {
                complete(&completions, req, session.release(id as u64).await)
            }
            Op::Extend { req, id, ttl } => complete(
                &completions,
                req,
                session.extend(id as u64, whole_ms(ttl)).await,
            ),
        }
    }
}

fn complete(completions: &Completions, req: f64, result: Result<bool, LockError>) {
    match result {
        Ok(true) => completions.record(req, Kind::Succeeded, 0.0),
        Ok(false) => completions.record(req, Kind::Refused, 0.0),
        Err(e) => completions.error(req, e),
    }
}

#[cfg(test)]
mod tests {
    use super::{catch_panics, owner_of, take_units};
    use std::sync::{Arc, Mutex};

    #[tokio::test]
    async fn an_operation_that_panics_ends_with_its_message_reported_not_unwound() {
        let heard = Arc::new(Mutex::new(None));
        let into = heard.clone();
        catch_panics(
            async {
                tokio::task::yield_now().await;
                panic!("boom {}", 7);
            },
            move |what| *into.lock().unwrap() = Some(what),
        )
        .await;
        assert_eq!(heard.lock().unwrap().as_deref(), Some("boom 7"));
    }

    #[tokio::test]
    async fn an_operation_that_ends_normally_reports_no_panic() {
        let heard = Arc::new(Mutex::new(false));
        let into = heard.clone();
        catch_panics(async {}, move |_| *into.lock().unwrap() = true).await;
        assert!(!*heard.lock().unwrap());
    }

    #[test]
    fn an_owner_made_from_a_sequence_number_is_what_javascript_writes() {
        // `n.toString(36)` in JavaScript, which `Lock#owner` shows.
        for (seq, js) in [
            (0, "0"),
            (35, "z"),
            (36, "10"),
            (60_466_176, "100000"),
            (9_007_199_254_740_991, "2gosa7pa2gv"),
        ] {
            assert_eq!(owner_of("p.", seq), format!("p.{js}"));
        }
    }

    #[test]
    fn strings_are_taken_from_the_text_by_their_javascript_lengths() {
        // "é" and "€" are one unit each, "😀" two (a surrogate pair): JavaScript's lengths.
        let text = "ab\u{e9}\u{20ac}x\u{1f600}yz\u{fffd}!";
        let mut rest = text;
        let mut parts = Vec::new();
        for units in [2.0, 2.0, 3.0, 0.0, 2.0, 2.0] {
            parts.push(take_units(&mut rest, units).unwrap());
        }
        assert_eq!(
            parts,
            ["ab", "\u{e9}\u{20ac}", "x\u{1f600}", "", "yz", "\u{fffd}!"]
        );
        assert_eq!(rest, "");
    }

    #[test]
    fn a_length_that_splits_a_character_or_overruns_the_text_is_refused() {
        // Half of a surrogate pair.
        assert!(take_units(&mut "\u{1f600}", 1.0).is_err());
        assert!(take_units(&mut "abc", 4.0).is_err());
        assert!(take_units(&mut "\u{e9}", 2.0).is_err());
        for bad in [-1.0, 1.5, f64::NAN, f64::INFINITY] {
            assert!(take_units(&mut "abc", bad).is_err(), "{bad}");
        }
    }
}
