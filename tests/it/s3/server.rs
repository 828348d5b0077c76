//! A real S3 server for tests and benches: `s3s-fs`, which stores buckets
//! as directories and checks request signatures (SigV4), started on
//! 127.0.0.1 on a free port with a fresh root directory, and killed when
//! dropped. Its binary comes from `REX_S3S_FS`, else `PATH`, else
//! `$CARGO_HOME/bin`; CI installs it with
//! `cargo install s3s-fs@0.14.1 --features binary`.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The access key the server accepts.
pub const ACCESS_KEY: &str = "rexctl-test";
/// The secret key the server accepts.
pub const SECRET_KEY: &str = "rexctl-test-secret-key";
/// How to install the server.
pub const INSTALL: &str = "cargo install s3s-fs@0.14.1 --features binary";

/// Finds the `s3s-fs` binary.
pub fn find_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REX_S3S_FS").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "REX_S3S_FS={} is not a file: install the S3 test server with `{INSTALL}`",
            p.display()
        );
        return Some(p);
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    dirs.extend(cargo_home.map(|c| c.join("bin")));
    dirs.into_iter()
        .map(|d| d.join("s3s-fs"))
        .find(|p| p.is_file())
}

/// Whether the S3 tests are explicitly skipped (`REX_SKIP_S3_TESTS=1`).
pub fn skipped() -> bool {
    std::env::var("REX_SKIP_S3_TESTS").is_ok_and(|v| v == "1")
}

/// A running `s3s-fs` and its storage.
pub struct S3Server {
    bin: PathBuf,
    child: Mutex<Option<Child>>,
    dir: tempfile::TempDir,
    /// The TCP port it listens on (kept across restarts).
    pub port: u16,
    /// The bucket created at start.
    pub bucket: String,
}

impl S3Server {
    /// Starts a server with one bucket, `bucket`. Panics, saying how to
    /// install it, when the binary is missing; returns `None` only when
    /// `REX_SKIP_S3_TESTS=1` asks to skip.
    pub fn start(bucket: &str) -> Option<S3Server> {
        let Some(bin) = find_binary() else {
            if skipped() {
                eprintln!("REX_SKIP_S3_TESTS=1: S3 test skipped (s3s-fs not installed)");
                return None;
            }
            panic!(
                "the S3 tests need a real S3 server, s3s-fs, and it is not installed: run `{INSTALL}` \
                 (CI does), or set REX_S3S_FS=/path/to/s3s-fs; set REX_SKIP_S3_TESTS=1 to skip these tests explicitly"
            );
        };
        if skipped() {
            eprintln!("REX_SKIP_S3_TESTS=1: S3 test skipped");
            return None;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("root").join(bucket)).expect("bucket dir");
        let mut s = S3Server {
            bin,
            child: Mutex::new(None),
            dir,
            port: 0,
            bucket: bucket.to_string(),
        };
        let mut last = String::new();
        // A free port may be taken between looking and binding: try again.
        for _ in 0..5 {
            s.port = free_port();
            match s.spawn() {
                Ok(()) => return Some(s),
                Err(e) => last = e,
            }
        }
        panic!("could not start s3s-fs: {last}");
    }

    /// Starts the server process on `self.port` and waits until it accepts
    /// connections.
    fn spawn(&self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))
            .map_err(|e| e.to_string())?;
        let mut child = Command::new(&self.bin)
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(self.root())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.bin.display()))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("s3s-fs exited with {st}: {}", self.log()));
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                *self.child.lock().unwrap() = Some(child);
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "s3s-fs did not listen on port {} within 20 s: {}",
                    self.port,
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// The server's storage root (a bucket is a directory in it, an object
    /// a file).
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// The file that holds object `key` of the bucket.
    pub fn object_file(&self, key: &str) -> PathBuf {
        self.root().join(&self.bucket).join(key)
    }

    /// The server's own records of object `key` (its metadata and internal
    /// JSON files, beside the buckets), which every GET of the object
    /// reads: unreadable, they make the server answer 500 (an internal
    /// error) to every GET of it, as a store out of reach would.
    pub fn object_records(&self, key: &str) -> [PathBuf; 2] {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let stem = format!(".bucket-{}.object-{}", b64(&self.bucket), b64(key));
        ["metadata", "internal"].map(|k| self.root().join(format!("{stem}.{k}.json")))
    }

    /// The endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `s3://bucket/prefix`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// The environment a client needs (endpoint, credentials, plain HTTP).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
            ("AWS_REGION", "us-east-1".to_string()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ]
    }

    /// Kills the server (SIGKILL, as a crash would).
    pub fn kill(&self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again, on the same port and storage.
    pub fn restart(&self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => panic!("could not restart s3s-fs: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Multipart parts the server holds for uploads neither completed nor
    /// aborted (s3s-fs keeps them as `.upload_id-<id>.part-<n>` in its root).
    pub fn pending_parts(&self) -> Vec<String> {
        names(&self.root())
            .into_iter()
            .filter(|n| n.starts_with(".upload_id-") && n.contains(".part-"))
            .collect()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
