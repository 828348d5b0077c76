//! A network link that goes down: a TCP relay in front of a server that
//! passes requests through and forwards the server's answers until a byte
//! budget is spent, then cuts every connection and refuses new ones, as a
//! link lost in the middle of a transfer leaves a client.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

/// The relay; it runs until the process ends (its threads end with their
/// connections once it has cut them).
pub struct Link {
    /// The port clients connect to.
    pub port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    /// Bytes of answers still to forward.
    budget: AtomicI64,
    cut: AtomicBool,
    /// Every connection, both ends, to shut down at the cut.
    open: Mutex<Vec<TcpStream>>,
}

impl Shared {
    fn cut_all(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Link {
    /// Relays 127.0.0.1:`port` (the server) and cuts after `budget` bytes
    /// of answers.
    pub fn to(port: u16, budget: u64) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let shared = Arc::new(Shared {
            budget: AtomicI64::new(budget as i64),
            cut: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let link = Link {
            port: listener.local_addr().unwrap().port(),
            shared: Arc::clone(&shared),
        };
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if shared.cut.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                    continue;
                };
                {
                    let mut open = shared.open.lock().unwrap();
                    open.push(client.try_clone().unwrap());
                    open.push(server.try_clone().unwrap());
                }
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let up = Arc::clone(&shared);
                std::thread::spawn(move || relay(c2, s2, &up, false));
                let down = Arc::clone(&shared);
                std::thread::spawn(move || relay(server, client, &down, true));
            }
        });
        link
    }

    /// The endpoint URL clients use.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Whether the budget ran out and the link went down.
    pub fn was_cut(&self) -> bool {
        self.shared.cut.load(Ordering::SeqCst)
    }
}

/// Copies `from` to `to`; answers (`metered`) spend the budget, and the
/// copy that overspends it cuts every connection instead of forwarding.
fn relay(mut from: TcpStream, mut to: TcpStream, shared: &Shared, metered: bool) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if metered && shared.budget.fetch_sub(n as i64, Ordering::SeqCst) < n as i64 {
            shared.cut_all();
            return;
        }
        if shared.cut.load(Ordering::SeqCst) || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
