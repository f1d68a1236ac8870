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

fn answers(port: u16) -> bool {
    TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// Whether `redis-server` can be run here; without it the test is skipped with a message,
/// except under `CI`, where it fails.
pub fn redis_server_or_skip() -> bool {
    let ok = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-server is not installed"
        );
        eprintln!("skipped: redis-server is not installed");
    }
    ok
}

impl TestServer {
    /// Starts a server on a free port with `extra` arguments (no persistence), and waits
    /// until it accepts connections.
    pub fn start(extra: &[&str]) -> TestServer {
        Self::start_on(free_port(), extra)
    }

    /// Starts a server on `port`.
    pub fn start_on(port: u16, extra: &[&str]) -> TestServer {
        Self::start_in(port, extra, None)
    }

    /// Starts a server on `port` whose files go to `dir` (created here, removed with the server).
    fn start_in(port: u16, extra: &[&str], dir: Option<&std::path::Path>) -> TestServer {
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
        let deadline = Instant::now() + Duration::from_secs(10);
        while !answers(port) {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on {port}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        TestServer {
            port,
            pid,
            stdin: shell.stdin.take(),
            shell,
        }
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
        self.signal("-KILL");
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        let _ = self.shell.wait();
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
                let port = cluster_port();
                let dir = std::env::temp_dir().join(format!("deadbolt-cluster-{port}"));
                TestServer::start_in(
                    port,
                    &["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"],
                    Some(&dir),
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
