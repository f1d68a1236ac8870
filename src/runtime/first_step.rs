//! Runs the first step of each submitted operation on the submitting (JavaScript) thread:
//! the operation is polled once right there, which takes it as far as its first I/O (a
//! command queued on a connection, written at the end of the submission by the same thread:
//! see `runtime::flush`). Only when it is woken again (its reply arrived, a timer fired) does it
//! move onto the runtime, where it goes on as an ordinary task. A lock operation then costs no
//! wake-up of the runtime on its way to the server, and nothing at all when it completes in
//! its first step (the memory store).

use futures_util::future::BoxFuture;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Wake, Waker};
use tokio::runtime::Handle;

/// Where an operation is between its first step and the runtime.
enum Slot {
    /// Its first step is running.
    Polling,
    /// It was woken during its first step: move it on as soon as that step ends.
    Woken,
    /// Waiting for a wake-up.
    Parked(BoxFuture<'static, ()>),
    /// Woken on this thread while it drains (see [`draining`]): its next step runs there.
    Queued(BoxFuture<'static, ()>),
    /// On the runtime (or finished): later wake-ups of this waker are stale.
    Moved,
}

struct Operation {
    slot: Mutex<Slot>,
    runtime: Handle,
}

fn lock(m: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Operation {
    /// Sends a woken operation on to its next step: queued on this thread if it drains (see
    /// [`draining`]), else spawned on the runtime (from a runtime worker, a reply or a timer,
    /// onto that worker's own queue). `slot` is the operation's, locked.
    fn next_step(self: &Arc<Self>, mut slot: MutexGuard<'_, Slot>, fut: BoxFuture<'static, ()>) {
        let here = READY.with(|r| match r.borrow_mut().as_mut() {
            Some(ready) => {
                ready.push_back(self.clone());
                true
            }
            None => false,
        });
        if here {
            *slot = Slot::Queued(fut);
        } else {
            drop(slot);
            self.runtime.spawn(fut);
        }
    }
}

impl Wake for Operation {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut slot = lock(&self.slot);
        match std::mem::replace(&mut *slot, Slot::Moved) {
            Slot::Polling | Slot::Woken => *slot = Slot::Woken,
            Slot::Parked(fut) => self.next_step(slot, fut),
            queued @ Slot::Queued(_) => *slot = queued,
            Slot::Moved => {}
        }
    }
}

thread_local! {
    /// Operations woken on this thread while it drains, in order; `None` when it does not.
    static READY: RefCell<Option<VecDeque<Arc<Operation>>>> = const { RefCell::new(None) };
}

/// Polls `fut` once on this thread, then leaves it to the runtime (see the module's
/// documentation). Must be called inside the runtime's context. The caller boxes the future
/// where it makes it: an operation's future is a few kilobytes, and passing it by value copied
/// it once more on its way into the box (~1 % of the process's CPU at 100 in flight).
pub fn start(fut: BoxFuture<'static, ()>) {
    let op = Arc::new(Operation {
        slot: Mutex::new(Slot::Polling),
        runtime: Handle::current(),
    });
    step(op, fut);
}

/// Runs one step of `op` on this thread, then parks it (or moves it on if it was woken
/// meanwhile, when this thread does not drain).
fn step(op: Arc<Operation>, mut fut: BoxFuture<'static, ()>) {
    let waker = Waker::from(op.clone());
    if fut
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_ready()
    {
        *lock(&op.slot) = Slot::Moved;
        return;
    }
    let mut slot = lock(&op.slot);
    match std::mem::replace(&mut *slot, Slot::Moved) {
        Slot::Woken => op.next_step(slot, fut),
        _ => *slot = Slot::Parked(fut),
    }
}

/// Runs `f` with this thread draining: operations woken on it meanwhile (by replies `f`
/// reads) take their next step here, after `f`, instead of moving to the runtime; so do the
/// ones they wake in turn. Must be called inside the runtime's context.
pub fn draining(f: impl FnOnce()) {
    let outer = READY.with(|r| {
        let mut r = r.borrow_mut();
        if r.is_some() {
            true
        } else {
            *r = Some(VecDeque::new());
            false
        }
    });
    if outer {
        return f();
    }
    /// Ends the drain even if a step panics; whatever is still queued moves to the runtime.
    struct End;
    impl Drop for End {
        fn drop(&mut self) {
            let left = READY.with(|r| r.borrow_mut().take()).unwrap_or_default();
            for op in left {
                let mut slot = lock(&op.slot);
                if let Slot::Queued(fut) = std::mem::replace(&mut *slot, Slot::Moved) {
                    drop(slot);
                    op.runtime.spawn(fut);
                }
            }
        }
    }
    let _end = End;
    f();
    while let Some(op) = READY.with(|r| r.borrow_mut().as_mut().and_then(VecDeque::pop_front)) {
        let fut = {
            let mut slot = lock(&op.slot);
            match std::mem::replace(&mut *slot, Slot::Polling) {
                Slot::Queued(fut) => Some(fut),
                other => {
                    *slot = other;
                    None
                }
            }
        };
        if let Some(fut) = fut {
            step(op, fut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn an_operation_woken_after_its_first_step_finishes_on_the_runtime() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<u32>();
        start(Box::pin(async move {
            let v = rx.await.unwrap_or(0);
            let _ = done_tx.send(v + 1);
        }));
        tx.send(41).unwrap();
        assert_eq!(done_rx.await.unwrap(), 42);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn an_operation_that_completes_in_its_first_step_runs_on_the_calling_thread() {
        let ran_here = Arc::new(AtomicBool::new(false));
        let me = std::thread::current().id();
        let flag = ran_here.clone();
        start(Box::pin(async move {
            flag.store(std::thread::current().id() == me, Ordering::SeqCst);
        }));
        assert!(ran_here.load(Ordering::SeqCst));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn an_operation_woken_while_its_thread_drains_takes_its_next_step_there() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let me = std::thread::current().id();
        let here = Arc::new(AtomicBool::new(false));
        let flag = here.clone();
        start(Box::pin(async move {
            let _ = rx.await;
            flag.store(std::thread::current().id() == me, Ordering::SeqCst);
        }));
        draining(|| {
            tx.send(1).unwrap();
        });
        assert!(
            here.load(Ordering::SeqCst),
            "finished on the draining thread"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_wake_up_during_the_first_step_is_not_lost() {
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let mut first = true;
        start(Box::pin(std::future::poll_fn(move |cx| {
            if first {
                first = false;
                // Woken before the first step returns Pending.
                cx.waker().wake_by_ref();
                return std::task::Poll::Pending;
            }
            std::task::Poll::Ready(())
        })));
        start(Box::pin(async move {
            let _ = done_tx.send(());
        }));
        done_rx.await.unwrap();
    }
}
