//! A relay in front of one server whose connections can be held: what a client sends on a
//! held connection waits in the relay, as in the socket of a paused server, and reaches the
//! server only when let go, after what newer connections sent meanwhile (which a paused
//! server may also do when it goes on: it reads its clients in no promised order).

use crate::store::test_servers::TestServer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};

/// One client's connection through the relay.
struct Conn {
    /// What the client sent while the connection is held; `None`: passed on at once.
    held: Mutex<Option<Vec<u8>>>,
    upstream: tokio::sync::Mutex<OwnedWriteHalf>,
    /// The client closed its side.
    client_closed: AtomicBool,
    /// The server closed its side (it has read and run everything it was sent).
    server_closed: AtomicBool,
}

/// The relay: a port of its own that leads to one server.
pub(in crate::store::redlock) struct Gate {
    port: u16,
    conns: Arc<Mutex<Vec<Arc<Conn>>>>,
    accept: tokio::task::JoinHandle<()>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Gate {
    /// A relay to `server`.
    pub(in crate::store::redlock) async fn open(server: &TestServer) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = server.url().trim_start_matches("redis://").to_string();
        let conns: Arc<Mutex<Vec<Arc<Conn>>>> = Arc::default();
        let all = conns.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = TcpStream::connect(&target).await else {
                    continue;
                };
                let (mut client_r, mut client_w) = client.into_split();
                let (mut up_r, up_w) = upstream.into_split();
                let conn = Arc::new(Conn {
                    held: Mutex::new(None),
                    upstream: tokio::sync::Mutex::new(up_w),
                    client_closed: AtomicBool::new(false),
                    server_closed: AtomicBool::new(false),
                });
                lock(&all).push(conn.clone());
                let to_client = conn.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        match up_r.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            // A client that left no longer reads its replies.
                            Ok(n) => drop(client_w.write_all(&buf[..n]).await),
                        }
                    }
                    to_client.server_closed.store(true, Ordering::Release);
                });
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = client_r.read(&mut buf).await.unwrap_or(0);
                        let mut up = conn.upstream.lock().await;
                        if n == 0 {
                            conn.client_closed.store(true, Ordering::Release);
                            if lock(&conn.held).is_none() {
                                let _ = up.shutdown().await;
                            }
                            return;
                        }
                        let pass = {
                            let mut held = lock(&conn.held);
                            match held.as_mut() {
                                Some(kept) => {
                                    kept.extend_from_slice(&buf[..n]);
                                    false
                                }
                                None => true,
                            }
                        };
                        if pass && up.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Gate {
            port,
            conns,
            accept,
        }
    }

    /// The server's URL through the relay.
    pub(in crate::store::redlock) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Holds every connection open now: what their clients send from now on waits here.
    /// Connections opened later pass.
    pub(in crate::store::redlock) fn hold(&self) {
        for conn in lock(&self.conns).iter() {
            lock(&conn.held).get_or_insert_with(Vec::new);
        }
    }

    /// How many bytes the held connections kept so far.
    pub(in crate::store::redlock) fn held_bytes(&self) -> usize {
        lock(&self.conns)
            .iter()
            .map(|c| lock(&c.held).as_ref().map_or(0, Vec::len))
            .sum()
    }

    /// Whether every held connection was closed by its client.
    pub(in crate::store::redlock) fn held_ones_closed(&self) -> bool {
        lock(&self.conns)
            .iter()
            .filter(|c| lock(&c.held).is_some())
            .all(|c| c.client_closed.load(Ordering::Acquire))
    }

    /// Sends on what the held connections kept (and their clients' close), to the server.
    pub(in crate::store::redlock) async fn let_go(&self) {
        let conns: Vec<Arc<Conn>> = lock(&self.conns).clone();
        for conn in conns {
            let mut up = conn.upstream.lock().await;
            let Some(kept) = lock(&conn.held).take() else {
                continue;
            };
            let _ = up.write_all(&kept).await;
            if conn.client_closed.load(Ordering::Acquire) {
                let _ = up.shutdown().await;
            }
        }
    }

    /// Whether the server closed every connection whose client closed: it has run all they
    /// sent.
    pub(in crate::store::redlock) fn drained(&self) -> bool {
        lock(&self.conns)
            .iter()
            .filter(|c| c.client_closed.load(Ordering::Acquire))
            .all(|c| c.server_closed.load(Ordering::Acquire))
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
