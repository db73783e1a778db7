//! Whether a replica hears the others ([`Listener::listening`], behind `/readyz`'s
//! `not_listening`): a listener whose connection to PostgreSQL is down says so until it is
//! listening again. The database is reached through a Unix-socket relay the test cuts, so that
//! the listener cannot reconnect until the relay is back. PostgreSQL only: SQLite serves one
//! process and has no listener.

use crate::pgkit::fresh_pg;
use assent_store::db::{Database, Heard, listen};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// A relay from `<dir>/.s.PGSQL.<port>` to the cluster's socket of the same name; cut, it
/// closes every relayed connection and accepts no more until [`Relay::restore`].
struct Relay {
    socket: PathBuf,
    target: PathBuf,
    up: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<UnixStream>>>,
}

impl Relay {
    fn start(dir: &Path, target: PathBuf) -> Relay {
        let socket = dir.join(target.file_name().unwrap());
        let relay = Relay {
            socket,
            target,
            up: Arc::new(AtomicBool::new(false)),
            streams: Arc::default(),
        };
        relay.restore();
        relay
    }

    /// Accepts connections and relays them to the cluster, until cut.
    fn restore(&self) {
        let _ = std::fs::remove_file(&self.socket);
        let listener = UnixListener::bind(&self.socket).unwrap();
        listener.set_nonblocking(true).unwrap();
        self.up.store(true, Ordering::SeqCst);
        let (up, target, streams) = (self.up.clone(), self.target.clone(), self.streams.clone());
        std::thread::spawn(move || {
            while up.load(Ordering::SeqCst) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                let server = UnixStream::connect(&target).unwrap();
                let mut kept = streams.lock().unwrap();
                kept.extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
    }

    /// Closes every relayed connection and stops accepting.
    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        let _ = std::fs::remove_file(&self.socket);
        for s in self.streams.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Waits (at most 30 s) until `listening()` is `want`.
fn until(what: &str, want: bool, listening: impl Fn() -> bool) {
    let start = Instant::now();
    while listening() != want {
        assert!(start.elapsed() < Duration::from_secs(30), "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A replica whose LISTEN connection dropped does not hear the others' decisions until it
/// reconnects: its listener says it is not listening for as long as the database cannot be
/// reached, and listening again (after a `Resync`) once it can.
#[test]
fn a_listener_cut_from_the_database_says_it_is_not_listening_until_it_is_back() {
    let Some(Database::Postgres { url }) = fresh_pg() else {
        return;
    };
    let host = url
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("host="))
        .unwrap();
    let port = url
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("port="))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), Path::new(host).join(format!(".s.PGSQL.{port}")));
    let relayed = url.replace(
        &format!("host={host}"),
        &format!("host={}", dir.path().display()),
    );
    let (tx, heard) = mpsc::channel();
    let listener = listen(&relayed, move |h| {
        let _ = tx.send(h);
    })
    .unwrap();
    let wait = Duration::from_secs(30);
    assert_eq!(heard.recv_timeout(wait).unwrap(), Heard::Resync);
    assert!(listener.listening());
    relay.cut();
    until("the cut listener says it listens", false, || {
        listener.listening()
    });
    // It stays so while the database cannot be reached (its reconnections fail).
    std::thread::sleep(Duration::from_millis(700));
    assert!(!listener.listening());
    relay.restore();
    assert_eq!(heard.recv_timeout(wait).unwrap(), Heard::Resync);
    assert!(listener.listening());
}
