//! A socket to one Redis server over plain TCP or a unix socket: opened and logged in
//! (connect, `AUTH`, `SELECT`), and the first exchanges made on it while nobody else uses it.
//! A [`Pipe`](super::pipe::Pipe) and a foreground [lane](super::lane) both start from one.

use bytes::BytesMut;
use redis::{RedisError, RedisResult, ServerErrorKind, Value};
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
#[cfg(unix)]
use tokio::net::UnixStream;
use tokio_util::codec::Decoder;

/// Where the server is.
#[derive(Debug, Clone)]
pub(super) enum Addr {
    /// Host and port.
    Tcp(String, u16),
    /// Path of a unix socket.
    #[cfg(unix)]
    Unix(std::path::PathBuf),
}

/// What a new connection needs besides an address.
#[derive(Clone)]
pub(super) struct PipeConfig {
    /// The server.
    pub addr: Addr,
    /// `AUTH` with these (username, password), if a password is set.
    pub auth: Option<(Option<String>, String)>,
    /// Database to `SELECT` (0: none).
    pub db: i64,
    /// Bound on connecting (TCP, `AUTH`, `SELECT`).
    pub connect_timeout: Duration,
    /// Bound on each reply, from when its command was written.
    pub response_timeout: Duration,
}

/// The socket, shared by the driver (reads, writes) and the threads that flush (writes).
pub(super) enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Stream {
    pub(super) async fn readable(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.readable().await,
            #[cfg(unix)]
            Stream::Unix(s) => s.readable().await,
        }
    }

    pub(super) async fn writable(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.writable().await,
            #[cfg(unix)]
            Stream::Unix(s) => s.writable().await,
        }
    }

    pub(super) fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_read_buf(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.try_read_buf(buf),
        }
    }

    /// Non-blocking write; callable from any thread (no runtime context needed).
    pub(super) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_write(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.try_write(buf),
        }
    }
}

/// Opens the socket and logs in (`AUTH`, `SELECT`).
pub(super) async fn connect(config: &PipeConfig) -> RedisResult<Stream> {
    let stream = match &config.addr {
        Addr::Tcp(host, port) => {
            let s = TcpStream::connect((host.as_str(), *port)).await?;
            s.set_nodelay(true)?;
            Stream::Tcp(s)
        }
        #[cfg(unix)]
        Addr::Unix(path) => Stream::Unix(UnixStream::connect(path).await?),
    };
    let mut hello = Vec::new();
    let mut expected = 0;
    if let Some((user, password)) = &config.auth {
        let mut auth = redis::cmd("AUTH");
        if let Some(user) = user {
            auth.arg(user);
        }
        auth.arg(password);
        auth.write_packed_command(&mut hello);
        expected += 1;
    }
    if config.db != 0 {
        redis::cmd("SELECT")
            .arg(config.db)
            .write_packed_command(&mut hello);
        expected += 1;
    }
    if expected > 0 {
        let replies = exchange_packed(&stream, &hello, expected).await?;
        if let Some((i, Value::ServerError(e))) = replies
            .into_iter()
            .enumerate()
            .find(|(_, v)| matches!(v, Value::ServerError(_)))
        {
            let e = RedisError::from(e);
            return Err(if i == 0 && config.auth.is_some() {
                // The server's words may repeat what was sent; say only what failed.
                RedisError::from((
                    redis::ErrorKind::AuthenticationFailed,
                    "the server refused the login",
                ))
            } else if e.code() == Some("NOAUTH") {
                // SELECT on a server that wants a password, none given.
                RedisError::from((
                    redis::ErrorKind::AuthenticationFailed,
                    "the server requires a password",
                ))
            } else if e.kind() == redis::ErrorKind::Server(ServerErrorKind::ResponseError) {
                // A plain error answering SELECT: an index beyond the server's `databases`.
                RedisError::from(io::Error::other(NoSuchDatabase(config.db)))
            } else {
                e
            });
        }
    }
    Ok(stream)
}

/// The server refused to `SELECT` the URL's database: carried inside the connection's error
/// as a type of its own, so that the store reports an unknown database (see
/// [`is_no_such_database`]) without reading a message.
#[derive(Debug)]
pub(super) struct NoSuchDatabase(pub i64);

impl std::fmt::Display for NoSuchDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server has no database {} (SELECT refused)", self.0)
    }
}

impl std::error::Error for NoSuchDatabase {}

/// Whether `e` is a [`NoSuchDatabase`] (redis-rs keeps an I/O error as its source, behind an
/// `Arc`).
pub(super) fn is_no_such_database(e: &RedisError) -> bool {
    inner(e).is_some_and(|inner| inner.is::<NoSuchDatabase>())
}

/// Bytes that are no Redis reply came from the server: what answers at the address is another
/// kind of server (named when its first bytes tell). Carried inside the connection's error as
/// a type of its own, as [`NoSuchDatabase`] is (see [`is_not_redis`]).
#[derive(Debug)]
pub(super) struct NotRedis(pub &'static str);

impl std::fmt::Display for NotRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server does not speak the Redis protocol (it answered as {} does); is the \
             URL's port that of a Redis server?",
            self.0
        )
    }
}

impl std::error::Error for NotRedis {}

/// A decoding failure of the bytes in `buf`: for bytes that are no reply, a [`NotRedis`] (the
/// parser's own text, which quotes the bytes, is not kept); the error itself otherwise (an
/// I/O error).
pub(super) fn decode_error(e: RedisError, buf: &[u8]) -> RedisError {
    if e.kind() == redis::ErrorKind::Parse {
        let who = crate::store::protocol::who_answered(buf).unwrap_or("a server of another kind");
        RedisError::from(io::Error::other(NotRedis(who)))
    } else {
        e
    }
}

/// The error inside an I/O error of redis-rs (which keeps it as its source, behind an `Arc`).
fn inner(e: &RedisError) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
    use std::error::Error;
    e.source()
        .and_then(|s| s.downcast_ref::<Arc<dyn Error + Send + Sync>>())
        .and_then(|a| a.downcast_ref::<io::Error>())
        .and_then(|io| io.get_ref())
}

/// Whether `e` is a [`NotRedis`].
pub(super) fn is_not_redis(e: &RedisError) -> bool {
    inner(e).is_some_and(|inner| inner.is::<NotRedis>())
}

/// Writes `cmds` on a connection nobody else uses yet and reads their replies.
pub(super) async fn exchange(stream: &Stream, cmds: &[&redis::Cmd]) -> RedisResult<Vec<Value>> {
    let mut packed = Vec::new();
    for cmd in cmds {
        cmd.write_packed_command(&mut packed);
    }
    exchange_packed(stream, &packed, cmds.len()).await
}

async fn exchange_packed(
    stream: &Stream,
    packed: &[u8],
    expected: usize,
) -> RedisResult<Vec<Value>> {
    let mut written = 0;
    while written < packed.len() {
        stream.writable().await?;
        match stream.try_write(&packed[written..]) {
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let mut buf = BytesMut::with_capacity(256);
    let mut codec = redis::ValueCodec::default();
    let mut replies = Vec::with_capacity(expected);
    while replies.len() < expected {
        match codec.decode(&mut buf).map_err(|e| decode_error(e, &buf))? {
            Some(v) => replies.push(v),
            None => {
                stream.readable().await?;
                match stream.try_read_buf(&mut buf) {
                    Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(replies)
}
