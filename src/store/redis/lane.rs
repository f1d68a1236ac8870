//! A foreground lane: a connection to a server of its own, read on the calling thread by its
//! event loop (see [`crate::runtime::foreground`]), for the requests that thread issues in a
//! flush scope. Its replies then wake nobody but that thread, once, as a JavaScript client's
//! would. Everything else (heartbeats, waits, announcements, requests made on the runtime)
//! uses the server's [`Pipe`](super::pipe::Pipe), which keeps working while the event loop is
//! blocked.
//!
//! A thread has up to [`LANES_PER_THREAD`] lanes per server, each taking up to
//! [`MAX_IN_FLIGHT`] requests: the next one is opened only when the ones before are full.
//!
//! A lane is opened on the runtime (connect, `AUTH`, `SELECT`, every script loaded) and only
//! then used; until it is, and after it failed, requests go through the pipe. A lane that
//! breaks, meets `NOSCRIPT`, or loses its event loop hands every request still waiting to
//! the pipe, which sends them again, up to `MAX_REPEATS` times in all (every script is safe to repeat). Replies overdue by
//! the response timeout fail from a timer on the runtime, as on the pipe.

use super::pipe::{answer_front, deliver, Answered, Deliveries, Pending, PipeHandle};
use super::scripts::load_all;
use super::socket::{connect, PipeConfig, Stream};
use crate::runtime::debug::debug;
use crate::runtime::flush::{self, Flush};
use crate::runtime::foreground::{self, Interest, Orphan};
use bytes::BytesMut;
use redis::{RedisResult, Value};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::codec::Decoder;

/// The lane's socket, non-blocking, read and written only by its thread (and shut down from
/// anywhere).
enum Socket {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl Socket {
    fn fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        match self {
            Socket::Tcp(s) => s.as_raw_fd(),
            Socket::Unix(s) => s.as_raw_fd(),
        }
    }

    /// Reads once into `chunk` (the lane's own, reused: a fresh zeroed array per read cost
    /// ~1.1k instructions per acquire+release pair at 100 in flight, bench/PROFILE.md) and
    /// appends what came to `buf`.
    fn read_buf(&self, chunk: &mut [u8], buf: &mut BytesMut) -> io::Result<usize> {
        let n = match self {
            Socket::Tcp(s) => (&*s).read(chunk),
            Socket::Unix(s) => (&*s).read(chunk),
        }?;
        buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    fn write(&self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => (&*s).write(bytes),
            Socket::Unix(s) => (&*s).write(bytes),
        }
    }

    fn shutdown(&self) {
        let _ = match self {
            Socket::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Socket::Unix(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

/// Most bytes one read takes. A read that returns fewer has emptied the socket: the lane's
/// watch is level-triggered (libuv's), so it is not read again until more arrives, which
/// saves the read that would only have said "would block".
const READ_CHUNK: usize = 16 * 1024;

/// Where a lane is in its life.
enum Phase {
    /// Being opened on the runtime.
    Opening,
    /// Open, not watched by its thread's event loop yet.
    Open(Socket),
    /// Watched and in use.
    Live(Socket),
    /// Failed or closed: requests go through the pipe. A socket its thread still watches is
    /// kept (shut down) until the watch is gone: libuv must never watch a closed descriptor.
    Dead(Option<Socket>),
}

struct State {
    phase: Phase,
    /// Encoded commands not yet written.
    out: Vec<u8>,
    /// Written (or to be written) requests, oldest first.
    queue: VecDeque<Pending>,
    buf: BytesMut,
    /// What each read of the socket goes into first ([`READ_CHUNK`] bytes, made once).
    chunk: Box<[u8]>,
    codec: redis::ValueCodec,
    last_read: Instant,
    /// Whether the watch also waits for the socket to be writable.
    want_write: bool,
}

/// One thread's foreground connection to one server.
pub(super) struct Lane {
    state: Mutex<State>,
    pipe: PipeHandle,
    response_timeout: Duration,
    me: Weak<Lane>,
    /// When it died (a new one is not opened again for a while after that).
    died: Mutex<Option<Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Most requests a lane has in flight; more go to the thread's next lane (opened when first
/// needed), and beyond [`LANES_PER_THREAD`] lanes through the pipe.
const MAX_IN_FLIGHT: usize = 48;

/// Foreground lanes one thread may open to one server. One connection serves a pipelined load
/// in strict alternation: the server answers a whole batch while JavaScript waits, then
/// JavaScript finishes it while the server waits (100 in flight on one lane: ~0.7x the
/// pairs/s of one lane of 16 with the pipe beside it). With three, the server works on one
/// lane's batch while JavaScript finishes another's, and no other thread is involved: 100 in
/// flight, 3 lanes of 48 made 83k pairs/s at 9.7 us of CPU per pair where 1 lane of 16 and
/// the pipe made ~46k at 15 us (bench/PROFILE.md). Sequential calls use only the first.
pub(super) const LANES_PER_THREAD: usize = 3;

/// How long after a lane died no new one is opened for its thread (the server may be down).
const REOPEN_AFTER: Duration = Duration::from_secs(1);

impl Lane {
    /// Starts opening a lane to the pipe's server (on the runtime; must be called inside
    /// it). Until it is open, [`Lane::try_request`] declines.
    pub(super) fn open(pipe: PipeHandle, config: &PipeConfig) -> Arc<Lane> {
        let lane = Arc::new_cyclic(|me| Lane {
            state: Mutex::new(State {
                phase: Phase::Opening,
                out: Vec::new(),
                queue: VecDeque::new(),
                buf: BytesMut::new(),
                chunk: vec![0u8; READ_CHUNK].into_boxed_slice(),
                codec: redis::ValueCodec::default(),
                last_read: Instant::now(),
                want_write: false,
            }),
            pipe,
            response_timeout: config.response_timeout,
            me: me.clone(),
            died: Mutex::new(None),
        });
        let config = config.clone();
        let weak = Arc::downgrade(&lane);
        tokio::spawn(async move {
            let opened = tokio::time::timeout(config.connect_timeout, open_socket(&config)).await;
            let Some(lane) = weak.upgrade() else { return };
            match opened {
                Ok(Ok(socket)) => {
                    let mut st = lock(&lane.state);
                    if matches!(st.phase, Phase::Opening) {
                        st.phase = Phase::Open(socket);
                    }
                }
                _ => {
                    debug!("redis: the foreground connection could not be opened");
                    lane.die();
                    return;
                }
            }
            tokio::spawn(time_out(weak));
        });
        lane
    }

    /// Whether this lane is dead long enough ago that its thread may open another.
    pub(super) fn replaceable(&self) -> bool {
        matches!(lock(&self.state).phase, Phase::Dead(_))
            && lock(&self.died).is_none_or(|at| at.elapsed() >= REOPEN_AFTER)
    }

    /// Whether this lane is live and has as many requests in flight as it takes.
    pub(super) fn is_full(&self) -> bool {
        let st = lock(&self.state);
        matches!(st.phase, Phase::Live(_)) && st.queue.len() >= MAX_IN_FLIGHT
    }

    /// Queues `pending` on this lane if it is open (watching its socket on this thread, the
    /// lane's own, the first time) and has fewer than [`MAX_IN_FLIGHT`] requests in flight, to
    /// be written at the end of the caller's flush scope. `Err` gives the request back when
    /// the lane does not take it.
    pub(super) fn try_request(&self, pending: Pending) -> Result<(), Pending> {
        let mut st = lock(&self.state);
        if let Phase::Open(_) = st.phase {
            let Phase::Open(socket) = std::mem::replace(&mut st.phase, Phase::Dead(None)) else {
                unreachable!()
            };
            let owner: Weak<dyn Orphan> = self.me.clone();
            let fd = socket.fd();
            // The watch keeps the lane (and so its socket) alive until libuv let go of it.
            let Some(lane) = self.me.upgrade() else {
                return Err(pending);
            };
            let ready = Box::new(move || lane.on_ready());
            let watched = foreground::watch(
                owner,
                fd,
                Interest {
                    readable: true,
                    writable: false,
                },
                ready,
            );
            if !watched {
                drop(st);
                self.die();
                return Err(pending);
            }
            st.phase = Phase::Live(socket);
            st.last_read = Instant::now();
        }
        if !matches!(st.phase, Phase::Live(_)) || st.queue.len() >= MAX_IN_FLIGHT {
            return Err(pending);
        }
        let mut pending = pending;
        pending.deadline = Instant::now() + self.response_timeout;
        st.out.extend_from_slice(&pending.packed);
        st.queue.push_back(pending);
        drop(st);
        if let Some(me) = self.me.upgrade() {
            if !flush::defer(me.clone()) {
                me.flush();
            }
        }
        Ok(())
    }

    /// The socket is ready (on the lane's thread): write what is left, read every reply.
    fn on_ready(&self) {
        let mut deliveries = Vec::new();
        let failed = {
            let mut st = lock(&self.state);
            if !matches!(st.phase, Phase::Live(_)) {
                drop(st);
                self.stop_watching();
                return;
            }
            write_out(&mut st).and_then(|_| read_in(&mut st, &mut deliveries))
        };
        deliver(deliveries);
        match failed {
            Ok(noscript) => {
                if !noscript.is_empty() {
                    // The server forgot the scripts: the pipe loads them and repeats these.
                    self.pipe.adopt(noscript);
                }
                self.update_interest();
            }
            Err(e) => {
                debug!("redis: the foreground connection ended ({:?})", e.kind());
                self.die();
                self.stop_watching();
            }
        }
    }

    fn update_interest(&self) {
        let (want, changed) = {
            let mut st = lock(&self.state);
            let want = !st.out.is_empty();
            let changed = want != st.want_write;
            st.want_write = want;
            (want, changed)
        };
        if changed {
            let owner: Weak<dyn Orphan> = self.me.clone();
            foreground::set_interest(
                &owner,
                Interest {
                    readable: true,
                    writable: want,
                },
            );
        }
    }

    /// Stops the watch (on the lane's thread). The socket is closed when libuv has let go
    /// of the watch's callback, which holds the lane.
    fn stop_watching(&self) {
        let owner: Weak<dyn Orphan> = self.me.clone();
        foreground::unwatch(&owner);
    }

    /// Marks the lane dead and hands every request still waiting to the pipe. Callable from
    /// any thread; the watch is stopped by the lane's thread when it next hears of it.
    fn die(&self) {
        let waiting: Vec<Pending> = {
            let mut st = lock(&self.state);
            match std::mem::replace(&mut st.phase, Phase::Dead(None)) {
                Phase::Live(socket) => {
                    // Wakes the watch (hang-up), so the thread lets go of it, and of the socket.
                    socket.shutdown();
                    st.phase = Phase::Dead(Some(socket));
                }
                Phase::Dead(kept) => st.phase = Phase::Dead(kept),
                Phase::Open(_) | Phase::Opening => {}
            }
            st.out.clear();
            std::mem::take(&mut st.queue)
                .into_iter()
                .filter(|p| p.reply.is_some())
                .map(|mut p| {
                    // Perhaps already run by the server: sending it on the pipe counts as a
                    // repeat (see `MAX_REPEATS`).
                    p.repeats += 1;
                    p
                })
                .collect()
        };
        *lock(&self.died) = Some(Instant::now());
        if !waiting.is_empty() {
            self.pipe.adopt(waiting);
        }
    }
}

impl Lane {
    /// Closes the lane (its requests go to the pipe).
    pub(super) fn close(&self) {
        self.die();
    }
}

impl Orphan for Lane {
    fn orphan(&self) {
        self.die();
    }
}

impl Flush for Lane {
    /// Writes the queued commands from the lane's thread; the rest waits for writability.
    fn flush(&self) {
        let failed = {
            let mut st = lock(&self.state);
            write_out(&mut st)
        };
        match failed {
            Ok(()) => self.update_interest(),
            Err(_) => {
                self.die();
                self.stop_watching();
            }
        }
    }
}

/// Writes what it can of `out` without blocking.
fn write_out(st: &mut State) -> io::Result<()> {
    let State { phase, out, .. } = st;
    let Phase::Live(socket) = phase else {
        return Ok(());
    };
    super::pipe::write_without_blocking(out, |b| socket.write(b))
}

/// Reads every reply that arrived and matches them to the oldest requests. Returns the
/// requests that met `NOSCRIPT`, for the pipe.
fn read_in(st: &mut State, deliveries: &mut Deliveries) -> io::Result<Vec<Pending>> {
    let mut noscript = Vec::new();
    loop {
        let n = {
            let State {
                phase, buf, chunk, ..
            } = &mut *st;
            let Phase::Live(socket) = phase else {
                return Ok(noscript);
            };
            match socket.read_buf(chunk, buf) {
                Ok(0) => return Err(io::ErrorKind::ConnectionReset.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        if n > 0 {
            st.last_read = Instant::now();
        }
        loop {
            let State {
                codec, buf, queue, ..
            } = &mut *st;
            let value = match codec.decode(buf) {
                Ok(Some(v)) => v,
                Ok(None) => break,
                Err(e) => return Err(io::Error::other(e.to_string())),
            };
            match answer_front(queue, value).map_err(|e| io::Error::other(e.to_string()))? {
                Answered::Waiting => {}
                Answered::Done(tx, got) => deliveries.push((tx, Ok(got))),
                Answered::NoScript(p) => noscript.push(p),
            }
        }
        if n < READ_CHUNK {
            return Ok(noscript);
        }
    }
}

/// Opens the socket on the runtime, logs in and loads every script, then hands the socket
/// over in blocking-free standard form (the runtime no longer watches it).
async fn open_socket(config: &PipeConfig) -> RedisResult<Socket> {
    let stream = connect(config).await?;
    let loads = load_all();
    let refs: Vec<&redis::Cmd> = loads.iter().collect();
    let replies = super::socket::exchange(&stream, &refs).await?;
    if let Some(Value::ServerError(e)) = replies
        .into_iter()
        .find(|v| matches!(v, Value::ServerError(_)))
    {
        return Err(e.into());
    }
    Ok(match stream {
        Stream::Tcp(s) => Socket::Tcp(s.into_std()?),
        Stream::Unix(s) => Socket::Unix(s.into_std()?),
    })
}

/// Fails overdue requests, looking every [`tick`](super::pipe::tick) (nothing wakes it per
/// request: that would cost the runtime a wake-up per call); a lane that got nothing back for
/// a whole response timeout is given up (its requests go to the pipe, which has its own
/// bound). Ends with the lane.
async fn time_out(lane: Weak<Lane>) {
    let every = match lane.upgrade() {
        Some(l) => super::pipe::tick(l.response_timeout),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(l) = lane.upgrade() else { return };
        let now = Instant::now();
        let (dead, overdue, silent) = {
            let mut st = lock(&l.state);
            let dead = matches!(st.phase, Phase::Dead(_));
            let overdue: Vec<_> = st
                .queue
                .iter_mut()
                .filter(|p| p.deadline <= now)
                .filter_map(|p| p.reply.take())
                .collect();
            (dead, overdue, st.last_read.elapsed() >= l.response_timeout)
        };
        if dead {
            return;
        }
        let any = !overdue.is_empty();
        for tx in overdue {
            let _ = tx.send(Err(super::pipe::timeout_error(l.response_timeout)));
        }
        if any && silent {
            l.die();
            return;
        }
    }
}
