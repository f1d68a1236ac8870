//! A connection of deadbolt's own to one Redis server over plain TCP or a unix socket: one
//! socket, commands written in the order they were issued, replies matched to them in that
//! order. It exists so that the thread that issues a command can also write it: inside a
//! [`flush`](crate::runtime::flush) scope (the JavaScript thread submitting one tick's
//! operations) the commands of the whole batch go out in one non-blocking `write` from that
//! thread, at the end of the scope, with no wake-up of the runtime on the way out. Replies
//! are read by a driver task on the runtime, which also writes whatever a caller outside a
//! scope issued (coalesced per scheduler tick) and the rest of a write that would have
//! blocked.
//!
//! Commands are encoded and replies parsed by redis-rs (`Cmd::write_packed_command`, its
//! `ValueCodec`); only the connection is ours. Behaviour kept from the multiplexed connection
//! it replaces:
//! - opened lazily, within the connect timeout (connect, `AUTH`, `SELECT`);
//! - every script is loaded (`SCRIPT LOAD`) ahead of the first command on each connection
//!   and again after a server answered `NOSCRIPT`; a command that met `NOSCRIPT` is sent once
//!   more behind the reload. Commands sent after it meet `NOSCRIPT` too and follow it in
//!   order, unless another connection loads the scripts in between (a server restarted, or
//!   still loading its data when the preload was refused): those run first. Every script is
//!   keyed by owner (Redlock's by attempt) and one owner's calls follow each other, so such a
//!   reordering can leave a grant nobody believes in (until its lease ends, or the engine's
//!   clean-up frees it), never free a believed one;
//! - a command whose reply is overdue (the response timeout, from when it was written) fails
//!   with a timeout; its place is kept, so a late reply is dropped rather than given to the
//!   next caller;
//! - when the connection breaks, commands that were not answered are sent once more on a
//!   new connection (every script is safe to repeat), the others fail as unreachable.

use super::scripts::load_all;
use super::socket::{connect, decode_error, PipeConfig, Stream};
use crate::runtime::debug::debug;
use crate::runtime::flush::{self, Flush};
use bytes::BytesMut;
use redis::{RedisError, RedisResult, ServerErrorKind, Value};
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tokio_util::codec::Decoder;

/// Where a request's replies go: one value per command, in order.
pub(super) type ReplyTx = oneshot::Sender<RedisResult<Vec<Value>>>;

/// One request in the order it was (or will be) written.
pub(super) struct Pending {
    /// Its commands, encoded (kept to send again on a new connection).
    pub(super) packed: Vec<u8>,
    /// How many replies it expects.
    pub(super) replies: usize,
    /// Replies received so far.
    pub(super) got: Vec<Value>,
    /// `None`: nobody waits (the script preload, or a request whose caller timed out).
    pub(super) reply: Option<ReplyTx>,
    /// When its reply is overdue (set when it is queued on a live connection).
    pub(super) deadline: Instant,
    /// How many times it was sent again (after a broken connection, a broken lane or
    /// `NOSCRIPT`): at most [`MAX_REPEATS`].
    pub(super) repeats: u8,
}

impl Pending {
    /// A request for `cmds`, due within `timeout`, and where its replies will go.
    pub(super) fn new(
        cmds: &[&redis::Cmd],
        timeout: Duration,
    ) -> (Pending, oneshot::Receiver<RedisResult<Vec<Value>>>) {
        let mut packed = Vec::new();
        for cmd in cmds {
            cmd.write_packed_command(&mut packed);
        }
        let (tx, rx) = oneshot::channel();
        let pending = Pending {
            packed,
            replies: cmds.len(),
            got: Vec::with_capacity(cmds.len()),
            reply: Some(tx),
            deadline: Instant::now() + timeout,
            repeats: 0,
        };
        (pending, rx)
    }
}

/// Waits for a request's replies.
pub(super) async fn replies(
    rx: oneshot::Receiver<RedisResult<Vec<Value>>>,
) -> RedisResult<Vec<Value>> {
    rx.await.unwrap_or_else(|_| Err(closed_error()))
}

struct State {
    /// Encoded commands not yet written, in queue order.
    out: Vec<u8>,
    /// Requests written or to be written, oldest first; replies answer the front.
    queue: VecDeque<Pending>,
    /// The live connection, if any.
    stream: Option<Arc<Stream>>,
    /// Whether the scripts' preload is already queued on this connection.
    scripts_queued: bool,
    closed: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the driver: work queued (connect, write), or closed.
    wake: Notify,
    config: PipeConfig,
}

/// Locks `m` even if poisoned: replies must still be delivered after a bug elsewhere.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn closed_error() -> RedisError {
    RedisError::from(io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the connection has been closed",
    ))
}

pub(super) fn timeout_error(after: Duration) -> RedisError {
    RedisError::from(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no reply within {} ms", after.as_millis()),
    ))
}

/// How many times a request is sent again after its first send: every script is safe to
/// repeat, and two let a request that a broken lane handed over survive the pipe's own
/// connection breaking at the same moment (one cut of the network breaks both); the bound
/// keeps a server that drops every connection from being sent the same request for ever.
pub(super) const MAX_REPEATS: u8 = 2;

/// Whether a broken connection lets the same commands be sent again on a fresh one.
fn repeatable(e: &RedisError) -> bool {
    (e.is_connection_dropped() || e.is_io_error()) && !e.is_timeout()
}

/// One connection to one server; see the module's documentation. Closed when dropped.
pub(super) struct Pipe {
    shared: Arc<Shared>,
}

impl Pipe {
    /// A pipe to `config.addr`, connected on first use. Must be called inside a runtime.
    pub(super) fn open(config: PipeConfig) -> Pipe {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                out: Vec::new(),
                queue: VecDeque::new(),
                stream: None,
                scripts_queued: false,
                closed: false,
            }),
            wake: Notify::new(),
            config,
        });
        tokio::spawn(drive(shared.clone()));
        Pipe { shared }
    }

    /// Sends `cmds` as one request and waits for their replies (server errors are values).
    ///
    /// # Cancel Safety
    /// Cancel safe for the pipe (the reply is dropped); the commands may still run.
    pub(super) async fn request(&self, cmds: &[&redis::Cmd]) -> RedisResult<Vec<Value>> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        let (pending, rx) = Pending::new(cmds, self.shared.config.response_timeout);
        self.adopt(vec![pending]);
        replies(rx).await
    }

    /// Queues requests made elsewhere (a foreground lane that failed) behind everything
    /// else; they fail at once if the pipe is closed.
    pub(super) fn adopt(&self, pendings: Vec<Pending>) {
        adopt(&self.shared, pendings);
    }

    /// Another handle on the same pipe (it closes with the last one).
    pub(super) fn handle(&self) -> PipeHandle {
        PipeHandle(self.shared.clone())
    }

    /// The pipe's connection settings.
    pub(super) fn config(&self) -> &PipeConfig {
        &self.shared.config
    }
}

/// A handle on a [`Pipe`] that does not close it when dropped.
#[derive(Clone)]
pub(super) struct PipeHandle(Arc<Shared>);

impl PipeHandle {
    /// See [`Pipe::adopt`].
    pub(super) fn adopt(&self, pendings: Vec<Pending>) {
        adopt(&self.0, pendings);
    }
}

/// Queues `pendings` on the pipe of `shared` (see [`Pipe::adopt`]).
fn adopt(shared: &Arc<Shared>, pendings: Vec<Pending>) {
    let notify = {
        let mut st = lock(&shared.state);
        if st.closed {
            drop(st);
            for mut p in pendings {
                if let Some(tx) = p.reply.take() {
                    let _ = tx.send(Err(closed_error()));
                }
            }
            return;
        }
        let deadline = Instant::now() + shared.config.response_timeout;
        for mut p in pendings {
            p.deadline = deadline;
            p.got.clear();
            st.push(p, deadline);
        }
        // Written at the end of the caller's flush scope if it has one, else by the driver.
        !flush::defer(shared.clone())
    };
    if notify {
        shared.wake.notify_one();
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        lock(&self.shared.state).closed = true;
        self.shared.wake.notify_one();
    }
}

impl State {
    /// Queues `p` behind everything else (behind the scripts' preload if this connection has
    /// not had it yet).
    fn push(&mut self, p: Pending, deadline: Instant) {
        if !self.scripts_queued {
            self.scripts_queued = true;
            let loads = load_all();
            let mut packed = Vec::new();
            for load in &loads {
                load.write_packed_command(&mut packed);
            }
            self.out.extend_from_slice(&packed);
            self.queue.push_back(Pending {
                packed,
                replies: loads.len(),
                got: Vec::new(),
                reply: None,
                deadline,
                repeats: 0,
            });
        }
        self.out.extend_from_slice(&p.packed);
        self.queue.push_back(p);
    }

    /// Writes what it can of `out` without blocking. `Err`: the connection failed.
    fn write_some(&mut self) -> io::Result<()> {
        let Some(stream) = self.stream.clone() else {
            return Ok(());
        };
        write_without_blocking(&mut self.out, |b| stream.try_write(b))
    }
}

/// Writes what `write` takes of `out` without blocking, and removes it from `out`. `Err`: the
/// connection failed.
pub(super) fn write_without_blocking(
    out: &mut Vec<u8>,
    mut write: impl FnMut(&[u8]) -> io::Result<usize>,
) -> io::Result<()> {
    let mut written = 0;
    while written < out.len() {
        match write(&out[written..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    out.drain(..written);
    Ok(())
}

impl State {
    /// The earliest deadline of a request somebody waits for.
    fn next_deadline(&self) -> Option<Instant> {
        self.queue
            .iter()
            .filter(|p| p.reply.is_some())
            .map(|p| p.deadline)
            .min()
    }
}

impl Flush for Shared {
    /// Writes the queued commands from the calling thread; whatever would block (or a
    /// connection not open yet) is left to the driver.
    fn flush(&self) {
        let rest = {
            let mut st = lock(&self.state);
            let _ = st.write_some();
            !st.out.is_empty()
        };
        if rest {
            self.wake.notify_one();
        }
    }
}

/// Replies to deliver once the state's lock is let go.
pub(super) type Deliveries = Vec<(ReplyTx, RedisResult<Vec<Value>>)>;

pub(super) fn deliver(deliveries: Deliveries) {
    for (tx, result) in deliveries {
        let _ = tx.send(result);
    }
}

/// The driver: connects when there is work, reads replies, writes what callers outside a
/// flush scope queued, times out overdue requests, reconnects after a failure.
async fn drive(shared: Arc<Shared>) {
    loop {
        // Idle until something is queued (or the pipe is dropped).
        loop {
            let (closed, work) = {
                let st = lock(&shared.state);
                (st.closed, st.queue.iter().any(|p| p.reply.is_some()))
            };
            if closed {
                fail_all(&shared, closed_error);
                return;
            }
            if work {
                break;
            }
            shared.wake.notified().await;
        }
        let stream = match tokio::time::timeout(
            shared.config.connect_timeout,
            connect(&shared.config),
        )
        .await
        {
            Ok(Ok(stream)) => Arc::new(stream),
            Ok(Err(e)) => {
                debug!("redis: could not connect ({:?})", e.kind());
                fail_all(&shared, || e.clone());
                continue;
            }
            Err(_) => {
                let after = shared.config.connect_timeout;
                fail_all(&shared, || {
                    RedisError::from(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("could not connect within {} ms", after.as_millis()),
                    ))
                });
                continue;
            }
        };
        {
            // Everything waiting goes out on the new connection, behind the scripts' preload.
            let mut st = lock(&shared.state);
            st.stream = Some(stream.clone());
            st.out.clear();
            st.scripts_queued = false;
            let now = Instant::now();
            let deadline = now + shared.config.response_timeout;
            for mut p in std::mem::take(&mut st.queue) {
                if p.reply.is_some() {
                    p.deadline = deadline;
                    p.got.clear();
                    st.push(p, deadline);
                }
            }
        }
        let failure = run(&shared, &stream).await;
        debug!("redis: the connection ended ({:?})", failure.kind());
        let mut deliveries = Deliveries::new();
        {
            let mut st = lock(&shared.state);
            st.stream = None;
            st.out.clear();
            let again = repeatable(&failure) && !st.closed;
            for mut p in std::mem::take(&mut st.queue) {
                let Some(tx) = p.reply.take() else { continue };
                if again && p.repeats < MAX_REPEATS {
                    p.repeats += 1;
                    p.reply = Some(tx);
                    st.queue.push_back(p);
                } else {
                    deliveries.push((tx, Err(failure.clone())));
                }
            }
        }
        deliver(deliveries);
    }
}

/// Fails every request waiting for a reply with `error()`.
fn fail_all(shared: &Shared, error: impl Fn() -> RedisError) {
    let deliveries: Deliveries = {
        let mut st = lock(&shared.state);
        st.out.clear();
        st.scripts_queued = false;
        std::mem::take(&mut st.queue)
            .into_iter()
            .filter_map(|mut p| p.reply.take().map(|tx| (tx, Err(error()))))
            .collect()
    };
    deliver(deliveries);
}

/// Serves one connection until it fails (or the pipe is closed); returns why it ended.
async fn run(shared: &Shared, stream: &Stream) -> RedisError {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut codec = redis::ValueCodec::default();
    let mut last_read = Instant::now();
    loop {
        let (blocked, deadline) = {
            let mut st = lock(&shared.state);
            if st.closed {
                return closed_error();
            }
            if let Err(e) = st.write_some() {
                return e.into();
            }
            (!st.out.is_empty(), st.next_deadline())
        };
        tokio::select! {
            ready = stream.readable() => {
                if let Err(e) = ready {
                    return e.into();
                }
                match stream.try_read_buf(&mut buf) {
                    Ok(0) => return io::Error::from(io::ErrorKind::ConnectionReset).into(),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return e.into(),
                }
                last_read = Instant::now();
                let mut deliveries = Deliveries::new();
                let outcome = answer(shared, &mut codec, &mut buf, &mut deliveries);
                deliver(deliveries);
                if let Err(e) = outcome {
                    return e;
                }
            }
            ready = stream.writable(), if blocked => {
                if let Err(e) = ready {
                    return e.into();
                }
            }
            _ = shared.wake.notified() => {
                // Let every task that is ready this tick queue its command: one write for all.
                tokio::task::yield_now().await;
            }
            // Also on a tick: a thread that wrote a request itself did not wake the driver.
            _ = sleep_until(deadline, tick(shared.config.response_timeout)) => {
                let after = shared.config.response_timeout;
                if time_out(shared) && last_read.elapsed() >= after {
                    // Nothing at all came back for a whole response timeout: the server or
                    // the path to it is gone (a half-open connection never says so itself).
                    // The next request opens a new connection.
                    return timeout_error(after);
                }
            }
        }
    }
}

/// How often a connection looks for overdue requests it was not told about (requests written
/// by the thread that issued them): a request fails at most this much after its bound.
pub(super) fn tick(response_timeout: Duration) -> Duration {
    (response_timeout / 4).clamp(Duration::from_millis(10), Duration::from_millis(250))
}

/// Sleeps until `deadline`, or for one `tick` at most.
async fn sleep_until(deadline: Option<Instant>, tick: Duration) {
    let next = Instant::now() + tick;
    tokio::time::sleep_until(deadline.map_or(next, |d| d.min(next))).await;
}

/// Fails overdue requests; their places stay, so their late replies are dropped. Returns
/// whether any was overdue.
fn time_out(shared: &Shared) -> bool {
    let now = Instant::now();
    let after = shared.config.response_timeout;
    let deliveries: Deliveries = {
        let mut st = lock(&shared.state);
        st.queue
            .iter_mut()
            .filter(|p| p.deadline <= now)
            .filter_map(|p| p.reply.take().map(|tx| (tx, Err(timeout_error(after)))))
            .collect()
    };
    let any = !deliveries.is_empty();
    deliver(deliveries);
    any
}

/// Matches the complete replies in `buf` to the oldest requests.
fn answer(
    shared: &Shared,
    codec: &mut redis::ValueCodec,
    buf: &mut BytesMut,
    deliveries: &mut Deliveries,
) -> Result<(), RedisError> {
    let mut st = lock(&shared.state);
    while let Some(value) = codec.decode(buf).map_err(|e| decode_error(e, buf))? {
        match answer_front(&mut st.queue, value)? {
            Answered::Waiting => {}
            Answered::Done(tx, got) => deliveries.push((tx, Ok(got))),
            Answered::NoScript(mut p) => {
                // The server forgot the scripts (SCRIPT FLUSH): load them again, then repeat.
                debug!("redis: NOSCRIPT; loading the scripts and sending again");
                p.deadline = Instant::now() + shared.config.response_timeout;
                st.scripts_queued = false;
                let deadline = p.deadline;
                st.push(p, deadline);
            }
        }
    }
    Ok(())
}

/// What one reply did to the oldest request.
pub(super) enum Answered {
    /// It still waits for replies of its own, or nobody waited for it.
    Waiting,
    /// It has all its replies.
    Done(ReplyTx, Vec<Value>),
    /// The server answered `NOSCRIPT` to a request not repeated [`MAX_REPEATS`] times yet: it is
    /// handed back, counted and with its replies cleared, to be sent again behind a reload of
    /// the scripts.
    NoScript(Pending),
}

/// Adds `value` to the replies of the oldest request in `queue` (replies come in the order
/// requests were written). `Err`: a reply nobody asked for.
pub(super) fn answer_front(
    queue: &mut VecDeque<Pending>,
    value: Value,
) -> Result<Answered, RedisError> {
    let Some(front) = queue.front_mut() else {
        return Err(RedisError::from((
            redis::ErrorKind::Client,
            "a reply nobody asked for",
        )));
    };
    front.got.push(value);
    if front.got.len() < front.replies {
        return Ok(Answered::Waiting);
    }
    let Some(mut p) = queue.pop_front() else {
        return Ok(Answered::Waiting);
    };
    let Some(tx) = p.reply.take() else {
        return Ok(Answered::Waiting);
    };
    let noscript = p
        .got
        .iter()
        .any(|v| matches!(v, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript)));
    if noscript && p.repeats < MAX_REPEATS {
        p.repeats += 1;
        p.got.clear();
        p.reply = Some(tx);
        return Ok(Answered::NoScript(p));
    }
    Ok(Answered::Done(tx, std::mem::take(&mut p.got)))
}
