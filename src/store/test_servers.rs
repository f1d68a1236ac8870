//! Throwaway `redis-server` processes on free loopback ports, for tests that pause, kill or
//! reconfigure servers (never the shared one on 6379). Each runs under a small shell that
//! kills it when this process's end closes the shell's stdin, so none outlives the tests even
//! when they live in a `static`.

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
        let mut shell = Command::new("sh")
            .arg("-c")
            .arg(r#"redis-server "$@" >/dev/null 2>&1 & echo $!; read _; kill -9 $! 2>/dev/null"#)
            .arg("sh")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(extra)
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
