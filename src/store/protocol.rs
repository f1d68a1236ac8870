//! Whether what answers at a server's address speaks the store's protocol: a `mysql://` or
//! `postgres://` URL pointed at an HTTP or Redis port would otherwise wait for a greeting that
//! never comes until the connect timeout, and a `redis://` URL at a MySQL port would report
//! the parser's bytes. A wrong port is reported as such ([`ErrorKind::Protocol`]), naming the
//! address and, when its first bytes tell, what kind of server answered.

use super::{ErrorKind, StoreError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long a first login may take before [`wrong_protocol`] looks at what answers: a server
/// of the right kind has answered by then, so the check costs it nothing.
pub const SLOW_LOGIN: Duration = Duration::from_millis(200);

/// How long [`wrong_protocol`] waits for a MySQL server's greeting before it closes its side
/// of the connection (a server that speaks first has spoken by then; one that waits for the
/// client, such as an HTTP or Redis server, then closes).
const GREETING: Duration = Duration::from_millis(100);

/// PostgreSQL's SSLRequest: what every PostgreSQL client may send first, answered with one
/// byte, `S` or `N`.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// The protocol a store expects at its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// MySQL and MariaDB: the server speaks first, a handshake packet (protocol 10) or an
    /// error packet.
    Mysql,
    /// PostgreSQL: the server answers an SSLRequest with `S` or `N` (or an error, `E`).
    Postgres,
}

impl Expect {
    /// The protocol's name in messages.
    fn name(self) -> &'static str {
        match self {
            Expect::Mysql => "MySQL",
            Expect::Postgres => "PostgreSQL",
        }
    }

    /// Whether `bytes`, the first a server sent, are enough to tell.
    fn enough(self, bytes: &[u8]) -> bool {
        match self {
            Expect::Mysql => bytes.len() >= 5,
            Expect::Postgres => !bytes.is_empty(),
        }
    }

    /// Whether `bytes` are this protocol's first answer.
    fn speaks(self, bytes: &[u8]) -> bool {
        match self {
            Expect::Mysql => mysql_greeting(bytes),
            // A MySQL greeting's first byte (its length) may be any of these.
            Expect::Postgres => {
                matches!(bytes, [b'S' | b'N'])
                    || (bytes.first() == Some(&b'E') && !mysql_greeting(bytes))
            }
        }
    }
}

/// Whether `bytes` begin with a MySQL packet (3 bytes of length, sequence 0) holding a
/// handshake (protocol 10) or an error (0xff).
fn mysql_greeting(bytes: &[u8]) -> bool {
    bytes.len() >= 5 && bytes[3] == 0 && matches!(bytes[4], 10 | 0xff)
}

/// What kind of server sent `bytes` (the first bytes it sent), in words, if they tell.
pub fn who_answered(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"HTTP/") {
        Some("an HTTP server")
    } else if mysql_greeting(bytes) {
        Some("a MySQL or MariaDB server")
    } else if bytes.starts_with(b"SSH-") {
        Some("an SSH server")
    } else if ["-ERR", "-NOAUTH", "-WRONGPASS", "-DENIED", "+OK", "+PONG"]
        .iter()
        .any(|p| bytes.starts_with(p.as_bytes()))
    {
        Some("a Redis server")
    } else if bytes.first() == Some(&b'E') && bytes.windows(6).any(|w| w == b"SFATAL") {
        // An ErrorResponse: what PostgreSQL answers to a startup packet it cannot read.
        Some("a PostgreSQL server")
    } else {
        None
    }
}

/// Resolves with an [`ErrorKind::Protocol`] error if what answers at `host:port` does not
/// speak `expect`'s protocol, and never otherwise (a server of the right kind, one that could
/// not be reached, or one that stays silent until `timeout` are left to the caller, whose own
/// attempt reports them). `store` names the store in the message.
///
/// Meant to race a first login after [`SLOW_LOGIN`]: it opens a connection of its own, sends
/// PostgreSQL an SSLRequest (MySQL nothing: its server speaks first), and closes its side of
/// the connection so that a server waiting for a request of another protocol closes too.
///
/// # Cancel Safety
/// Cancel safe: it only opens, reads and drops a socket of its own.
pub async fn wrong_protocol(
    store: &str,
    host: &str,
    port: u16,
    timeout: Duration,
    expect: Expect,
) -> StoreError {
    match answer(host, port, timeout, expect).await {
        Some(bytes) if !expect.speaks(&bytes) => {
            let what = if bytes.is_empty() {
                "it closed the connection without answering".to_string()
            } else {
                match who_answered(&bytes) {
                    Some(who) => format!("it answered as {who} does"),
                    None => "it answered in another protocol".to_string(),
                }
            };
            StoreError::new(
                ErrorKind::Protocol,
                format!(
                    "{store} {host}:{port}: the server does not speak the {} protocol ({what}); \
                     is the URL's port that of a {} server?",
                    expect.name(),
                    expect.name()
                ),
            )
        }
        _ => std::future::pending().await,
    }
}

/// The first bytes the server at `host:port` sends (all of them if it closes first), or
/// `None` when it could not be reached, or said nothing within `timeout`.
async fn answer(host: &str, port: u16, timeout: Duration, expect: Expect) -> Option<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut stream = tokio::time::timeout_at(deadline, TcpStream::connect((host, port)))
        .await
        .ok()?
        .ok()?;
    if expect == Expect::Postgres {
        stream.write_all(&SSL_REQUEST).await.ok()?;
    }
    let mut shut = false;
    if expect == Expect::Postgres {
        // The request is whole: a PostgreSQL server answers it whether or not more comes.
        stream.shutdown().await.ok()?;
        shut = true;
    }
    let greeting = Instant::now() + GREETING;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 256];
    loop {
        let until = if shut {
            deadline
        } else {
            greeting.min(deadline)
        };
        match tokio::time::timeout_at(until, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(bytes),
            Ok(Ok(n)) => {
                bytes.extend_from_slice(&chunk[..n]);
                if expect.enough(&bytes) {
                    return Some(bytes);
                }
            }
            Err(_) if !shut && until < deadline => {
                stream.shutdown().await.ok()?;
                shut = true;
            }
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_bytes_tell_the_kind_of_server() {
        assert_eq!(
            who_answered(b"HTTP/1.1 400 Bad Request\r\n"),
            Some("an HTTP server")
        );
        assert_eq!(
            who_answered(b"\x5b\0\0\0\x0a5.5.5-10.11.6-MariaDB"),
            Some("a MySQL or MariaDB server")
        );
        assert_eq!(
            who_answered(b"-ERR unknown command"),
            Some("a Redis server")
        );
        assert_eq!(
            who_answered(b"E\0\0\0\x50SFATAL\0VFATAL\0C08P01\0"),
            Some("a PostgreSQL server")
        );
        assert_eq!(who_answered(b"\x01\x02garbage"), None);
    }

    #[test]
    fn each_protocol_knows_its_first_answer() {
        assert!(Expect::Mysql.speaks(b"\x5b\0\0\0\x0a5.5.5"));
        assert!(Expect::Mysql.speaks(b"\x17\0\0\0\xff\x10\x04Too many connections"));
        assert!(!Expect::Mysql.speaks(b"HTTP/1.1 400"));
        assert!(!Expect::Mysql.speaks(b""));
        assert!(Expect::Postgres.speaks(b"N"));
        assert!(Expect::Postgres.speaks(b"S"));
        assert!(!Expect::Postgres.speaks(b"HTTP/1.1 400"));
        assert!(!Expect::Postgres.speaks(b""));
    }
}
