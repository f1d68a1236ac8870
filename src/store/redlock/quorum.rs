//! Asking every server at once, and deciding as soon as the answers so far settle the
//! outcome: a quorum agreed, or too many refused or failed for one to agree. The servers not
//! heard from by then are not waited for, so a server that is down or paused costs nothing
//! while a quorum answers (its request still reaches it: commands already queued on a
//! connection are sent whether or not anyone waits for the reply).

use crate::store::{ErrorKind, StoreError, StoreResult};
use futures_util::FutureExt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

/// Each server's answer, by position; `None`: not heard from when the outcome was settled.
pub(super) type Answers<T> = Vec<Option<StoreResult<T>>>;

/// Runs every call at once, each bounded by `bound` (a call that exceeds it counts as a
/// [`ErrorKind::Timeout`] failure), until `settled(answers so far)` or every call answered.
///
/// Every call is polled on the first poll, whatever the others do, so each has sent its
/// request before the outcome can be settled (a call never polled would never reach its
/// server: a release that must follow an acquisition there, for one).
pub(super) async fn ask_all<T, F>(
    calls: Vec<F>,
    bound: Option<Duration>,
    mut settled: impl FnMut(&Answers<T>) -> bool,
) -> Answers<T>
where
    F: Future<Output = StoreResult<T>>,
{
    let mut answers: Answers<T> = calls.iter().map(|_| None).collect();
    let mut running: Vec<Option<Pin<Box<_>>>> = calls
        .into_iter()
        .map(|call| {
            Some(Box::pin(async move {
                match bound {
                    Some(bound) => tokio::time::timeout(bound, call).await.unwrap_or_else(|_| {
                        Err(StoreError::timeout(format!(
                            "no answer within {} ms",
                            bound.as_millis()
                        )))
                    }),
                    None => call.await,
                }
            }))
        })
        .collect();
    poll_fn(|cx| {
        let mut left = false;
        // A handful of servers: polling every unfinished call on each wake-up is cheap.
        for (slot, answer) in running.iter_mut().zip(answers.iter_mut()) {
            if let Some(call) = slot {
                match call.as_mut().poll(cx) {
                    Poll::Ready(a) => {
                        *answer = Some(a);
                        *slot = None;
                    }
                    Poll::Pending => left = true,
                }
            }
        }
        if !left || settled(&answers) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    answers
}

/// [`ask_all`] for calls that each grant something (`Some`) or refuse (`None`), bounded by
/// `bound`, until a quorum of `quorum` granted or no longer can; the answers and their tally.
pub(super) async fn ask_grants<T, F>(
    calls: Vec<F>,
    bound: Duration,
    quorum: usize,
) -> (Answers<Option<T>>, Tally)
where
    F: Future<Output = StoreResult<Option<T>>>,
{
    let settled = |a: &Answers<Option<T>>| Tally::of(a, Option::is_some).settled(quorum);
    let answers = ask_all(calls, Some(bound), settled).await;
    let tally = Tally::of(&answers, Option::is_some);
    (answers, tally)
}

/// [`ask_all`] for calls that each answer a batch of `items` results (one pipeline per
/// server), until `settled` holds for every item's answers; then each item's answers, by
/// server. No call is made for no items.
pub(super) async fn ask_all_items<T: Clone, F>(
    calls: Vec<F>,
    items: usize,
    mut settled: impl FnMut(&Answers<T>) -> bool,
) -> Vec<Answers<T>>
where
    F: Future<Output = Vec<StoreResult<T>>>,
{
    if items == 0 {
        return Vec::new();
    }
    let item = |answers: &Answers<Vec<StoreResult<T>>>, j: usize| -> Answers<T> {
        answers
            .iter()
            .map(|a| {
                a.as_ref()
                    .map(|r| r.as_ref().map_err(Clone::clone)?[j].clone())
            })
            .collect()
    };
    let calls = calls.into_iter().map(|c| c.map(Ok)).collect();
    let answers = ask_all(calls, None, |a| (0..items).all(|j| settled(&item(a, j)))).await;
    (0..items).map(|j| item(&answers, j)).collect()
}

/// How the answers so far split: yes, no, failed (an error), and not heard from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Tally {
    pub(super) yes: usize,
    pub(super) no: usize,
    pub(super) failed: usize,
    pub(super) silent: usize,
}

impl Tally {
    /// Counts `answers`, `yes(value)` telling a yes from a no.
    pub(super) fn of<T>(answers: &Answers<T>, yes: impl Fn(&T) -> bool) -> Tally {
        let mut t = Tally::default();
        for a in answers {
            match a {
                None => t.silent += 1,
                Some(Err(_)) => t.failed += 1,
                Some(Ok(v)) if yes(v) => t.yes += 1,
                Some(Ok(_)) => t.no += 1,
            }
        }
        t
    }

    /// Whether the outcome is known: a quorum said yes, or too many said no or failed for
    /// one ever to.
    pub(super) fn settled(&self, quorum: usize) -> bool {
        self.yes >= quorum || self.yes + self.silent < quorum
    }

    /// Whether a release may stop waiting: a quorum let go. Unlike a grant's outcome
    /// (`settled`), a release's is not known when too few are left to say yes: whether it
    /// released or met "no quorum" depends on the servers still silent, which may yet let go
    /// (a dead server's fast refusal and two fast "not mine" answers must not end it).
    pub(super) fn let_go(&self, quorum: usize) -> bool {
        self.yes >= quorum
    }
}

/// The failure to report when too many servers failed for a quorum: the kind most of them
/// met (a timeout wins a tie: it is what a paused server looks like), with how many failed.
pub(super) fn no_quorum<T>(answers: &Answers<T>, what: &str) -> StoreError {
    let errors: Vec<&StoreError> = answers
        .iter()
        .filter_map(|a| match a {
            Some(Err(e)) => Some(e),
            _ => None,
        })
        .collect();
    let count = |k: ErrorKind| errors.iter().filter(|e| e.kind == k).count();
    let kind = ErrorKind::ALL
        .into_iter()
        .max_by_key(|&k| (count(k), k == ErrorKind::Timeout))
        .unwrap_or(ErrorKind::Unreachable);
    let first = errors
        .iter()
        .find(|e| e.kind == kind)
        .map_or_else(String::new, |e| format!(" (first: {e})"));
    StoreError::new(
        kind,
        format!(
            "{what}: no quorum, {} of {} Redlock servers failed{first}",
            errors.len(),
            answers.len()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(spec: &str) -> Answers<bool> {
        spec.chars()
            .map(|c| match c {
                'y' => Some(Ok(true)),
                'n' => Some(Ok(false)),
                't' => Some(Err(StoreError::timeout("t"))),
                'u' => Some(Err(StoreError::new(ErrorKind::Unreachable, "u"))),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_quorum_of_yes_or_too_few_possible_yes_settles_the_outcome() {
        let t = |s| Tally::of(&answers(s), |v| *v);
        assert!(t("yyy..").settled(3));
        assert!(!t("yy...").settled(3));
        assert!(t("nnn..").settled(3), "3 no of 5: no quorum can form");
        assert!(!t("nn...").settled(3));
        assert!(t("ntu..").settled(3));
        assert!(t("yynnt").settled(3));
    }

    #[test]
    fn only_a_quorum_letting_go_ends_a_release_early() {
        let t = |s| Tally::of(&answers(s), |v| *v);
        assert!(t("yyy..").let_go(3));
        assert!(
            !t("..unn").let_go(3),
            "the two silent servers may yet let go"
        );
        assert!(t("..unn").settled(3), "where a grant's outcome is known");
    }

    #[test]
    fn the_reported_failure_is_the_kind_most_servers_met() {
        let e = no_quorum(&answers("uutt."), "acquire");
        assert_eq!(e.kind, ErrorKind::Timeout, "a tie goes to the timeout");
        let e = no_quorum(&answers("uuut."), "acquire");
        assert_eq!(e.kind, ErrorKind::Unreachable);
        assert!(e.message.contains("4 of 5"), "{}", e.message);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_past_its_bound_counts_as_a_timeout_and_later_ones_are_not_awaited() {
        let calls: Vec<std::pin::Pin<Box<dyn Future<Output = StoreResult<bool>> + Send>>> = vec![
            Box::pin(async { Ok(true) }),
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(true)
            }),
            Box::pin(async { Ok(true) }),
        ];
        let started = tokio::time::Instant::now();
        let a = ask_all(calls, Some(Duration::from_millis(100)), |a| {
            Tally::of(a, |v| *v).settled(2)
        })
        .await;
        assert_eq!(Tally::of(&a, |v| *v).yes, 2);
        assert!(started.elapsed() < Duration::from_millis(100));
        let calls: Vec<std::pin::Pin<Box<dyn Future<Output = StoreResult<bool>> + Send>>> = vec![
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(true)
            }),
            Box::pin(async { Ok(true) }),
        ];
        let a = ask_all(calls, Some(Duration::from_millis(100)), |_| false).await;
        assert!(matches!(a[0], Some(Err(ref e)) if e.kind == ErrorKind::Timeout));
    }
}
