//! A server that answers wrongly: an HTTP relay in front of a real server
//! that takes each request apart (request line, headers, a body of
//! `Content-Length` bytes) and, for the requests a rule picks, answers
//! itself instead of passing the request on: an error status, as an
//! overloaded or misconfigured S3 service does (503 SlowDown, 500, 403), or
//! a success without doing anything (a PUT acknowledged and not kept). Every other
//! request goes to the server on a connection of its own (`Connection:
//! close`), and the server's answer comes back whole.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Chooses the answer to a request from its method and path (without the
/// query): `Some((status, S3 error code or reason))` to answer it so.
pub type Rule = dyn Fn(&str, &str) -> Option<(u16, &'static str)> + Send + Sync;

/// The relay; it runs until the process ends.
pub struct Faulty {
    /// The port clients connect to.
    pub port: u16,
    faults: Arc<AtomicU64>,
}

impl Faulty {
    /// Relays to 127.0.0.1:`port` (the server), answering by `rule`.
    pub fn to(port: u16, rule: Box<Rule>) -> Faulty {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let faults = Arc::new(AtomicU64::new(0));
        let relay = Faulty {
            port: listener.local_addr().unwrap().port(),
            faults: Arc::clone(&faults),
        };
        let rule: Arc<Rule> = Arc::from(rule);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let (rule, faults) = (Arc::clone(&rule), Arc::clone(&faults));
                std::thread::spawn(move || serve(client, port, &*rule, &faults));
            }
        });
        relay
    }

    /// The endpoint URL clients use.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How many requests the rule answered.
    pub fn faults(&self) -> u64 {
        self.faults.load(Ordering::SeqCst)
    }
}

/// Serves the requests of one client connection in turn.
fn serve(client: TcpStream, port: u16, rule: &Rule, faults: &AtomicU64) {
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut client = client;
    loop {
        // The request head, up to its blank line.
        let mut head: Vec<String> = Vec::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            head.push(line.trim_end().to_string());
        }
        let Some(first) = head.first().cloned() else {
            return;
        };
        let mut parts = first.split(' ');
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let path = target.split('?').next().unwrap_or("");
        let header = |name: &str| {
            head.iter().skip(1).find_map(|h| {
                let (k, v) = h.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_string())
            })
        };
        assert!(
            header("transfer-encoding").is_none(),
            "the fault relay reads bodies of Content-Length bytes only: {head:?}"
        );
        let len: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        if let Some((status, code)) = rule(method, path) {
            faults.fetch_add(1, Ordering::SeqCst);
            let answer = if (200..300).contains(&status) {
                // Success, and nothing done (a PUT acknowledged, not kept).
                format!(
                    "HTTP/1.1 {status} {code}\r\nETag: \"0123456789abcdef0123456789abcdef\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
            } else {
                let xml = format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>injected by the test's relay</Message></Error>"
                );
                format!(
                    "HTTP/1.1 {status} {code}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{xml}",
                    xml.len()
                )
            };
            let _ = client.write_all(answer.as_bytes());
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        // Passed on, on a connection of its own that the server closes
        // after its answer: the answer is then all the server sends.
        let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)) else {
            return;
        };
        let mut req = Vec::new();
        req.extend_from_slice(first.as_bytes());
        req.extend_from_slice(b"\r\n");
        for h in head.iter().skip(1) {
            if !h.to_ascii_lowercase().starts_with("connection:") {
                req.extend_from_slice(h.as_bytes());
                req.extend_from_slice(b"\r\n");
            }
        }
        req.extend_from_slice(b"Connection: close\r\n\r\n");
        req.extend_from_slice(&body);
        if server.write_all(&req).is_err() {
            return;
        }
        let mut answer = Vec::new();
        if server.read_to_end(&mut answer).is_err() || client.write_all(&answer).is_err() {
            return;
        }
    }
}
