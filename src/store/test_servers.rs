//! Throwaway `redis-server` processes on free loopback ports, for tests that pause, kill or
//! reconfigure servers (never the shared one on 6379). Each runs under a small shell that
//! kills it (and removes its working directory, if it has one of its own) when this process's
//! end closes the shell's stdin, so none outlives the tests, nor leaves files behind, even when
//! they live in a `static`.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server of a test's own.
pub struct TestServer {
    /// Its loopback port.
    pub port: u16,
    pid: u32,
    shell: Child,
    stdin: Option<ChildStdin>,
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The pid of the redis-server answering on `port` (`INFO server`'s `process_id`), if one does.
fn server_pid(port: u16) -> Option<u32> {
    use std::io::Read;
    let mut stream = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")
        .ok()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&reply);
        if let Some(rest) = text.split("process_id:").nth(1) {
            if let Some(end) = rest.find("\r\n") {
                return rest[..end].trim().parse().ok();
            }
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
        }
    }
}

fn answers(port: u16) -> bool {
    TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// Whether a tool the test needs is there (`installed`); without it the test is skipped with
/// `missing` as its message, except under `CI`, where it fails with it.
pub fn installed_or_skip(installed: bool, missing: &str) -> bool {
    if !installed {
        assert!(std::env::var_os("CI").is_none(), "{missing}");
        eprintln!("skipped: {missing}");
    }
    installed
}

/// Whether `program --version` runs and succeeds here.
pub fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A plain connection of the test's own (not a store's) to the Redis at `url`.
pub async fn redis_connection(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Whether `redis-server` can be run here; without it the test is skipped with a message,
/// except under `CI`, where it fails.
pub fn redis_server_or_skip() -> bool {
    installed_or_skip(runs("redis-server"), "redis-server is not installed")
}

/// Starts the node script `__test__/fixtures/<fixture>` and returns the port it reports on
/// its first line (`listening <port>`), with the child: the fixture ends its server when its
/// stdin (held by the child handle) closes, so when this process ends.
pub fn node_fixture(fixture: &str) -> (u16, Child) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut child = Command::new("node")
        .arg(root.join("__test__/fixtures").join(fixture))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node runs");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("{fixture} said {line:?}"));
    (port, child)
}

impl TestServer {
    /// Starts a server on a free port with `extra` arguments (no persistence), and waits
    /// until it accepts connections.
    ///
    /// A free port is only free until someone binds it: when another test's server took it
    /// first (ours then exits, unable to bind), this starts again on another one.
    pub fn start(extra: &[&str]) -> TestServer {
        Self::start_somewhere(free_port, extra, |_| None)
    }

    /// Starts a server on a port `port()` picks, with files in `dir(port)`, retrying on
    /// another port while the one picked turns out to be taken.
    fn start_somewhere(
        port: impl Fn() -> u16,
        extra: &[&str],
        dir: impl Fn(u16) -> Option<std::path::PathBuf>,
    ) -> TestServer {
        for _ in 0..20 {
            let port = port();
            if let Some(server) = Self::start_in(port, extra, dir(port).as_deref()) {
                return server;
            }
        }
        panic!("redis-server found no free port in 20 attempts");
    }

    /// Starts a server on `port` whose files go to `dir` (created here, removed with the
    /// server); `None` when the server answering on `port` is not the one started (the port
    /// was taken), which is then stopped.
    fn start_in(port: u16, extra: &[&str], dir: Option<&std::path::Path>) -> Option<TestServer> {
        let own_dir = dir.map(|d| {
            std::fs::create_dir_all(d).expect("a temporary directory");
            d.to_string_lossy().into_owned()
        });
        let mut shell = Command::new("sh")
            .arg("-c")
            .arg(concat!(
                r#"redis-server "$@" >/dev/null 2>&1 & echo $!; read _; kill -9 $! 2>/dev/null; "#,
                r#"wait $! 2>/dev/null; [ -n "$OWN_DIR" ] && rm -rf "$OWN_DIR""#
            ))
            .arg("sh")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(extra)
            .args(own_dir.iter().flat_map(|d| ["--dir", d.as_str()]))
            .env("OWN_DIR", own_dir.as_deref().unwrap_or(""))
            // Whatever a server writes (a replica's synced snapshot) goes to the temporary
            // directory, never the working tree.
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh runs");
        let mut line = String::new();
        BufReader::new(shell.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the server's pid");
        let pid = line.trim().parse().expect("a pid");
        let mut server = TestServer {
            port,
            pid,
            stdin: shell.stdin.take(),
            shell,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match server_pid(port) {
                Some(answering) if answering == pid => return Some(server),
                // Another server holds the port: ours cannot bind it.
                Some(_) => {
                    server.kill_own();
                    return None;
                }
                None => {
                    if server.server_exited() {
                        // Ours exited without ever answering: the port was taken meanwhile.
                        server.kill_own();
                        return None;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "redis-server did not start on {port}"
                    );
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }

    /// Whether the server's process has exited. Until the shell is told to end it does not
    /// reap its child, so an exited server is a zombie (`kill -0` would still succeed).
    fn server_exited(&self) -> bool {
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            // The state follows the command name in parentheses.
            Ok(stat) => stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z')),
            Err(_) => !Command::new("kill")
                .args(["-0", &self.pid.to_string()])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
        }
    }

    /// Ends the server's shell without waiting for the port to close (it may be another's).
    fn kill_own(&mut self) {
        self.signal("-KILL");
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        let _ = self.shell.wait();
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, &self.pid.to_string()])
            .stderr(Stdio::null())
            .status();
    }

    /// Stops it answering without closing its connections (SIGSTOP).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills it (SIGKILL) and waits until its port is closed.
    pub fn kill(&mut self) {
        if self.stdin.is_none() {
            return;
        }
        self.kill_own();
        let deadline = Instant::now() + Duration::from_secs(5);
        while answers(self.port) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster of throwaway servers (primaries only), made with `redis-cli --cluster
/// create` and ready (`cluster_state:ok` on every node) when returned.
pub struct TestCluster {
    /// Its nodes.
    pub nodes: Vec<TestServer>,
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A free port whose cluster bus port (+10 000) is free too and exists.
fn cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

impl TestCluster {
    /// Starts `n` (at least 3) primaries and joins them into a cluster.
    pub fn start(n: usize) -> TestCluster {
        let nodes: Vec<TestServer> = (0..n)
            .map(|_| {
                TestServer::start_somewhere(
                    cluster_port,
                    &["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"],
                    |port| Some(std::env::temp_dir().join(format!("deadbolt-cluster-{port}"))),
                )
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-yes"])
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(status.success(), "redis-cli --cluster create failed");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !nodes
            .iter()
            .all(|s| cli(s.port, &["cluster", "info"]).contains("cluster_state:ok"))
        {
            assert!(
                Instant::now() < deadline,
                "the cluster did not become ready"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        TestCluster { nodes }
    }

    /// The nodes' URLs (seeds).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(TestServer::url).collect()
    }
}

#[test]
fn a_server_whose_picked_port_another_server_holds_starts_on_another() {
    if !redis_server_or_skip() {
        return;
    }
    let other = TestServer::start(&[]);
    let picks = std::cell::Cell::new(0);
    let server = TestServer::start_somewhere(
        || {
            picks.set(picks.get() + 1);
            if picks.get() == 1 {
                other.port
            } else {
                free_port()
            }
        },
        &[],
        |_| None,
    );
    assert_eq!(picks.get(), 2);
    assert_ne!(server.port, other.port);
    assert_eq!(server_pid(server.port), Some(server.pid));
    assert_eq!(server_pid(other.port), Some(other.pid));
}
