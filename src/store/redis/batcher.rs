//! The write path to one Redis server: commands issued in the same scheduler tick go out in
//! one pipelined write on the shared multiplexed connection, scripts are run by hash and
//! loaded again when the server forgot them, and a batch whose connection broke is sent once
//! more on the fresh one.

use super::scripts::load_all;
use crate::runtime::debug::debug;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{RedisError, RedisResult, Script, ServerErrorKind, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Most commands one batch carries (one write on the socket).
const MAX_BATCH: usize = 512;

/// One command to send, with what goes along with it.
#[derive(Clone)]
pub(super) struct Command {
    /// The command.
    pub(super) cmd: redis::Cmd,
    /// The script the command runs by hash, to load it if the server answers NOSCRIPT.
    pub(super) script: Option<&'static Script>,
    /// A `WAIT` to send right behind the command (replica acknowledgement of its write): the
    /// reply is then `[command's reply, WAIT's reply]`.
    pub(super) wait: Option<redis::Cmd>,
}

impl Command {
    /// `cmd` alone: no script, no `WAIT`.
    pub(super) fn plain(cmd: redis::Cmd) -> Self {
        Self {
            cmd,
            script: None,
            wait: None,
        }
    }
}

/// A command waiting for the batcher, with where its reply goes.
pub(super) struct Request {
    /// The command.
    pub(super) command: Command,
    /// Where its reply goes.
    pub(super) reply: oneshot::Sender<RedisResult<Value>>,
}

/// Coalesces the commands issued in one scheduler tick into one pipelined write. Without it
/// the multiplexed connection writes each command with its own syscall, which on a loaded
/// core costs more than the command itself. Batches are sent concurrently, replies are
/// matched by order on the multiplexed connection.
///
/// The first batch (and the first after a server answered NOSCRIPT) is preceded by a
/// `SCRIPT LOAD` of every script, in the same write: a command that met NOSCRIPT is sent
/// again after the batches that followed it, so without the preload two operations sent in
/// order (Redlock's acquisition and the release that undoes it) could run in the other order
/// on a fresh server.
///
/// `ordered`: send a batch only once the one before it was answered, so that operations run
/// on the server in the order they were issued even when their callers did not wait for each
/// other (Redlock stops waiting for a server once a quorum answered, then undoes or releases
/// on it: the undo must not overtake what it undoes). Batches then grow with the load, as
/// everything issued during a round trip goes out in the next one.
pub(super) async fn batch_loop(
    conn: ConnectionManager,
    mut requests: mpsc::UnboundedReceiver<Request>,
    ordered: bool,
) {
    let scripts_missing = Arc::new(AtomicBool::new(true));
    while let Some(first) = requests.recv().await {
        // Let every task that is ready this tick queue its command before we send.
        tokio::task::yield_now().await;
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match requests.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let preload = scripts_missing.swap(false, Ordering::AcqRel);
        let send = send_batch(conn.clone(), batch, preload, scripts_missing.clone());
        if ordered {
            send.await;
        } else {
            tokio::spawn(send);
        }
    }
}

async fn send_batch(
    mut conn: ConnectionManager,
    batch: Vec<Request>,
    preload: bool,
    scripts_missing: Arc<AtomicBool>,
) {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    let mut skip = 0;
    if preload {
        for load in load_all() {
            pipe.add_command(load);
            skip += 1;
        }
    }
    let mut replies = Vec::with_capacity(batch.len());
    let mut waits = Vec::with_capacity(batch.len());
    let mut count = 0;
    for Request { command, reply } in batch {
        let Command { cmd, script, wait } = command;
        pipe.add_command(cmd);
        if let Some(wait) = &wait {
            pipe.add_command(wait.clone());
        }
        count += 1 + usize::from(wait.is_some());
        replies.push((script, reply));
        waits.push(wait);
    }
    let mut results = conn.req_packed_commands(&pipe, skip, count).await;
    if results.as_ref().is_err_and(is_reconnectable) {
        debug!(
            "redis: the connection broke; sending {} command(s) again on a new one",
            replies.len()
        );
        // The connection broke (a server restart, a killed client): the manager reconnects,
        // and every script here is safe to send again (see `scripts`).
        results = conn.req_packed_commands(&pipe, skip, count).await;
    }
    let values = match results {
        Ok(values) if values.len() == count => values,
        Ok(values) => {
            let message = format!("expected {} replies, got {}", replies.len(), values.len());
            for (_, reply) in replies {
                let _ = reply.send(Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "pipeline",
                    message.clone(),
                ))));
            }
            return;
        }
        Err(e) => {
            if preload {
                scripts_missing.store(true, Ordering::Release);
            }
            for (_, reply) in replies {
                let _ = reply.send(Err(e.clone()));
            }
            return;
        }
    };
    let mut values = values.into_iter();
    let mut cmds = pipe.cmd_iter().skip(skip);
    for ((script, reply), wait) in replies.into_iter().zip(waits) {
        let (Some(value), Some(cmd)) = (values.next(), cmds.next()) else {
            return;
        };
        let waited = match wait {
            Some(_) => {
                cmds.next();
                values.next()
            }
            None => None,
        };
        let result = match value {
            Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript) => {
                // The script cache is empty (a restart, SCRIPT FLUSH): load it and ask again
                // (with its WAIT), and load them all before the next batch.
                scripts_missing.store(true, Ordering::Release);
                match script {
                    Some(script) => match script.prepare_invoke().load_async(&mut conn).await {
                        Ok(_) => match &wait {
                            Some(w) => {
                                let mut again = redis::pipe();
                                again.add_command(cmd.clone()).add_command(w.clone());
                                conn.req_packed_commands(&again, 0, 2)
                                    .await
                                    .map(Value::Array)
                            }
                            None => conn.req_packed_command(cmd).await,
                        },
                        Err(e) => Err(e),
                    },
                    None => Err(e.into()),
                }
            }
            Value::ServerError(e) => Err(e.into()),
            v => match waited {
                // WAIT refused (a replica: the primary changed) fails the whole request.
                Some(Value::ServerError(e)) => Err(e.into()),
                Some(w) => Ok(Value::Array(vec![v, w])),
                None => Ok(v),
            },
        };
        let _ = reply.send(result);
    }
}

/// Whether `e` says the connection broke before a reply came, so the same commands can be
/// sent again on a fresh one (a timeout is not: it already used the caller's time budget).
pub(super) fn is_reconnectable(e: &RedisError) -> bool {
    (e.is_connection_dropped() || e.is_io_error()) && !e.is_timeout()
}

/// An `EVALSHA` of `script` with `keys` and `args`.
pub(super) fn evalsha(script: &Script, keys: &[&[u8]], args: &[&[u8]]) -> redis::Cmd {
    // Sized up front: the arguments are copied once instead of into a growing buffer.
    let bytes = 7 + 40 + 2 + keys.iter().chain(args).map(|a| a.len()).sum::<usize>();
    let mut cmd = redis::Cmd::with_capacity(3 + keys.len() + args.len(), bytes);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
    for k in keys {
        cmd.arg(*k);
    }
    for a in args {
        cmd.arg(*a);
    }
    cmd
}
