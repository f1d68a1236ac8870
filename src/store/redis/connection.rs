//! One Redis server's connection layer: deadbolt's own connection ([`super::pipe`]) and the
//! JavaScript thread's foreground lanes for `redis://` and unix sockets, or redis-rs's
//! multiplexed connection fed by the batcher for `rediss://`.

use super::batcher::{batch_loop, is_reconnectable, Command, Request};
use super::errors::{closed, store_err};
#[cfg(unix)]
use super::lane;
use super::{pipe, socket, tls, RedisOptions};
use crate::store::{ErrorKind, StoreError, StoreResult};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError, ServerErrorKind, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// One server: a connection of deadbolt's own ([`pipe`]) for `redis://` and unix sockets,
/// or redis-rs's multiplexed connection written to through the batcher for `rediss://`
/// (TLS state cannot be written from two threads).
pub(super) struct Node {
    pub(super) client: Client,
    /// The server as messages name it: host:port, or the socket's path.
    pub(super) server: String,
    pub(super) transport: Transport,
    /// For `rediss://`: that the server speaks TLS, checked before the first connection.
    pub(super) handshake: Option<tls::HandshakeCheck>,
}

/// The foreground lanes of a node: each event-loop thread's, by thread and index.
#[cfg(unix)]
type Lanes = Vec<((std::thread::ThreadId, usize), Arc<lane::Lane>)>;

/// The calling thread's id, from a thread-local (`thread::current()` clones and drops an `Arc`
/// at every call, and a request looks for its lane at every operation).
#[cfg(unix)]
fn this_thread() -> std::thread::ThreadId {
    thread_local! {
        static ID: std::thread::ThreadId = std::thread::current().id();
    }
    ID.with(|id| *id)
}

/// How a [`Node`] reaches its server.
pub(super) enum Transport {
    /// Our own connection: commands may be written by the thread that issues them, and, on a
    /// thread with an event loop of its own, read there through a foreground lane.
    Pipe {
        pipe: pipe::Pipe,
        /// Each event-loop thread's foreground lanes, by thread and index (none when
        /// `ordered`: two connections could reorder an undo and what it undoes).
        #[cfg(unix)]
        lanes: Mutex<Lanes>,
        ordered: bool,
    },
    /// redis-rs's multiplexed connection (TLS), fed by the batcher.
    Managed {
        conn: ConnectionManager,
        batcher: mpsc::UnboundedSender<Request>,
    },
}

impl Node {
    /// The connection (opened lazily) for `client`. Must run inside a runtime. `ordered`:
    /// operations reach the server in the order they were issued (see
    /// `batcher::batch_loop`; a pipe always keeps that order).
    pub(super) fn open(client: Client, opts: &RedisOptions, ordered: bool) -> StoreResult<Node> {
        let info = client.get_connection_info();
        let redis_info = info.redis_settings();
        let server = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port)
            | redis::ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
            #[cfg(unix)]
            redis::ConnectionAddr::Unix(path) => path.display().to_string(),
            other => other.to_string(),
        };
        let addr = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => Some(socket::Addr::Tcp(host.clone(), *port)),
            #[cfg(unix)]
            redis::ConnectionAddr::Unix(path) => Some(socket::Addr::Unix(path.clone())),
            _ => None,
        };
        if let Some(addr) = addr {
            let pipe = pipe::Pipe::open(socket::PipeConfig {
                addr,
                auth: redis_info
                    .password()
                    .map(|p| (redis_info.username().map(str::to_string), p.to_string())),
                db: redis_info.db(),
                connect_timeout: Duration::from_millis(opts.connect_timeout_ms),
                response_timeout: Duration::from_millis(opts.response_timeout_ms),
            });
            return Ok(Node {
                client,
                server,
                transport: Transport::Pipe {
                    pipe,
                    #[cfg(unix)]
                    lanes: Mutex::new(Vec::new()),
                    ordered,
                },
                handshake: None,
            });
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(opts.connect_timeout_ms)))
            .set_response_timeout(Some(Duration::from_millis(opts.response_timeout_ms)))
            // Reconnect a couple of times, then report: a lock call must fail in bounded time.
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| StoreError::invalid(e.to_string()))?;
        let (batcher, requests) = mpsc::unbounded_channel();
        tokio::spawn(batch_loop(conn.clone(), requests, ordered));
        let handshake = tls::HandshakeCheck::for_client(&client, opts.connect_timeout_ms);
        Ok(Node {
            client,
            server,
            transport: Transport::Managed { conn, batcher },
            handshake,
        })
    }

    /// A store error for `e`; one that concerns reaching the server or logging in names it
    /// (host:port, or the socket's path; never the password).
    pub(super) fn err(&self, e: RedisError) -> StoreError {
        let error = store_err(e);
        match error.kind {
            ErrorKind::Unreachable
            | ErrorKind::Timeout
            | ErrorKind::Auth
            | ErrorKind::NoDatabase
            | ErrorKind::Protocol => StoreError::new(
                error.kind,
                format!("redis {}: {}", self.server, error.message),
            ),
            _ => error,
        }
    }

    /// Fails fast if a `rediss://` server does not speak TLS (see `tls`).
    pub(super) async fn check_tls(&self) -> StoreResult<()> {
        match &self.handshake {
            Some(check) => check.ensure().await,
            None => Ok(()),
        }
    }

    /// Sends one command (and a `WAIT` behind it: the reply is then `[reply, WAIT's reply]`).
    /// A server's error is the call's.
    pub(super) async fn send(&self, command: Command) -> StoreResult<Value> {
        self.check_tls().await?;
        match &self.transport {
            Transport::Pipe { .. } => {
                let replies = match &command.wait {
                    Some(w) => self.request(&[&command.cmd, w]).await,
                    None => self.request(&[&command.cmd]).await,
                }
                .map_err(|e| self.err(e))?;
                let mut replies = replies.into_iter();
                let value = match replies.next() {
                    Some(Value::ServerError(e)) => return Err(self.err(e.into())),
                    Some(v) => v,
                    None => return Err(StoreError::internal("a reply is missing")),
                };
                match replies.next() {
                    // WAIT refused (a replica: the primary changed) fails the whole request.
                    Some(Value::ServerError(e)) => Err(self.err(e.into())),
                    Some(w) => Ok(Value::Array(vec![value, w])),
                    None => Ok(value),
                }
            }
            Transport::Managed { batcher, .. } => {
                let (reply, rx) = oneshot::channel();
                batcher
                    .send(Request { command, reply })
                    .map_err(|_| closed())?;
                match rx.await {
                    Ok(result) => result.map_err(|e| self.err(e)),
                    Err(_) => Err(closed()),
                }
            }
        }
    }

    /// Sends `cmds` in one pipelined round trip; one reply per command, a server's error as
    /// a value. A connection that broke is tried once more, and scripts the server forgot are
    /// loaded again (every command given here must be safe to repeat).
    pub(super) async fn pipeline(
        &self,
        cmds: &[redis::Cmd],
        script: &'static redis::Script,
    ) -> StoreResult<Vec<Value>> {
        self.check_tls().await?;
        match &self.transport {
            Transport::Pipe { .. } => {
                let refs: Vec<&redis::Cmd> = cmds.iter().collect();
                self.request(&refs).await.map_err(|e| self.err(e))
            }
            Transport::Managed { conn, .. } => {
                let mut conn = conn.clone();
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                for cmd in cmds {
                    pipe.add_command(cmd.clone());
                }
                let mut first = pipe.query_async::<Vec<Value>>(&mut conn).await;
                if first.as_ref().is_err_and(is_reconnectable) {
                    first = pipe.query_async::<Vec<Value>>(&mut conn).await;
                }
                // After a server restart the script cache is empty: load it once and send again.
                if let Ok(values) = &first {
                    if values.iter().any(|v| {
                        matches!(v, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript))
                    }) {
                        script
                            .prepare_invoke()
                            .load_async(&mut conn)
                            .await
                            .map_err(|e| self.err(e))?;
                        first = pipe.query_async::<Vec<Value>>(&mut conn).await;
                    }
                }
                first.map_err(|e| self.err(e))
            }
        }
    }

    /// Sends `cmds` as one request on the pipe, or on the first of this thread's foreground
    /// lanes with room when it is issued in a flush scope on a thread with an event loop (see
    /// [`lane`]).
    pub(super) async fn request(&self, cmds: &[&redis::Cmd]) -> redis::RedisResult<Vec<Value>> {
        let Transport::Pipe {
            pipe,
            #[cfg(unix)]
            lanes,
            ordered,
        } = &self.transport
        else {
            return Err(RedisError::from((redis::ErrorKind::Client, "not a pipe")));
        };
        #[cfg(unix)]
        if !*ordered
            && !cmds.is_empty()
            && crate::runtime::flush::in_scope()
            && crate::runtime::foreground::available()
        {
            let (pending, rx) = pipe::Pending::new(cmds, pipe.config().response_timeout);
            let mut left = Some(pending);
            let me = this_thread();
            for i in 0..lane::LANES_PER_THREAD {
                let Some(pending) = left.take() else { break };
                let lane = Self::lane(pipe, lanes, (me, i));
                if let Err(back) = lane.try_request(pending) {
                    left = Some(back);
                    // The next lane is for a load this one cannot take, not for a lane that
                    // is still opening or has failed (the pipe serves that).
                    if !lane.is_full() {
                        break;
                    }
                }
            }
            if let Some(pending) = left {
                pipe.adopt(vec![pending]);
            }
            return pipe::replies(rx).await;
        }
        #[cfg(not(unix))]
        let _ = ordered;
        pipe.request(cmds).await
    }

    /// This thread's lane number `i`, opened (on the runtime) if it has none or its last one
    /// died a while ago.
    #[cfg(unix)]
    pub(super) fn lane(
        pipe: &pipe::Pipe,
        lanes: &Mutex<Lanes>,
        me: (std::thread::ThreadId, usize),
    ) -> Arc<lane::Lane> {
        let mut lanes = lanes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, lane)) = lanes.iter_mut().find(|(t, _)| *t == me) {
            if lane.replaceable() {
                *lane = lane::Lane::open(pipe.handle(), pipe.config());
            }
            return lane.clone();
        }
        let lane = lane::Lane::open(pipe.handle(), pipe.config());
        lanes.push((me, lane.clone()));
        lane
    }

    /// Sends one command that is not a script and returns its reply.
    pub(super) async fn query(&self, cmd: redis::Cmd) -> StoreResult<Value> {
        self.check_tls().await?;
        match &self.transport {
            Transport::Pipe { .. } => self.send(Command::plain(cmd)).await,
            Transport::Managed { conn, .. } => cmd
                .query_async(&mut conn.clone())
                .await
                .map_err(|e| self.err(e)),
        }
    }
}

#[cfg(unix)]
impl Drop for Node {
    /// Closes the foreground lanes with the node (their timers would otherwise keep them).
    fn drop(&mut self) {
        if let Transport::Pipe { lanes, .. } = &self.transport {
            for (_, lane) in lanes.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
                lane.close();
            }
        }
    }
}
