//! The gateway's connection slots under a flood of idle sockets from a few addresses: a
//! newcomer from another address takes an idle flooder's slot, a request in flight keeps its
//! own, and one key shields no more than its share (issue 10 §12; `serve_slots.rs`).

use crate::{BOT_KEY, free_port, held, write_config};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A connection to the gateway on `port` from the loopback address `127.0.0.{from}`.
async fn connect(from: u8, port: u16) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::new(IpAddr::from([127, 0, 0, from]), 0))
        .unwrap();
    s.connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .unwrap()
}

/// What `c` receives until the gateway closes it, or `None` when nothing comes within `wait`.
async fn answer(c: &mut TcpStream, wait: Duration) -> Option<String> {
    let mut out = Vec::new();
    match tokio::time::timeout(wait, c.read_to_end(&mut out)).await {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(_) => None,
    }
}

/// `GET path` from `127.0.0.{from}` (key `key` when given), the whole answer.
async fn get(from: u8, port: u16, path: &str, key: Option<&str>) -> String {
    let mut c = connect(from, port).await;
    let auth = key.map_or(String::new(), |k| format!("authorization: Bearer {k}\r\n"));
    let ask = format!("GET {path} HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n");
    c.write_all(ask.as_bytes()).await.unwrap();
    answer(&mut c, Duration::from_secs(20)).await.unwrap()
}

/// Attack (found by review): addresses each holding `max_connections_per_address` idle
/// sockets took every one of `max_connections` slots, and everyone else — operators, agents,
/// health checks — was answered `503` for as long as the sockets were re-opened; and a keyless
/// request in flight (a body sent a byte at a time) shielded a socket as well as a real
/// request. Here one address (127.0.0.1) holds all 16 slots: an agent's long-poll, 8 idle
/// sockets and 7 sending a keyless body that never ends. Fifteen other addresses each take a
/// flooding socket's slot, the flooder cannot take one back, a sixteenth newcomer finds nobody
/// holding two more than it would and is refused, and the long-poll, in flight throughout,
/// wakes with the decision made once the newcomers leave.
#[test]
fn idle_sockets_from_a_few_addresses_cannot_keep_other_clients_out() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let extra = "max_connections: 16\nmax_connections_per_address: 1000\n";
    let cfg = write_config(dir.path(), port, extra);
    let from = Some(IpAddr::from([127, 0, 0, 3]));
    let mut server = crate::serve_checked_from(crate::serve_cmd(&cfg), port, from);
    let id = held(&server.url, 5000);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // Whatever the set-up left open is closed by now.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let poll = format!("/v1/approvals/{id}?wait=60");
        let long_poll = tokio::spawn(async move { get(1, port, &poll, Some(BOT_KEY)).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut flood = Vec::new();
        for n in 0..15 {
            let mut c = connect(1, port).await;
            if n % 2 == 1 {
                let head = "POST /v1/tool-calls HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{";
                c.write_all(head.as_bytes()).await.unwrap();
            }
            flood.push(c);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut over = connect(1, port).await;
        let refused = answer(&mut over, Duration::from_secs(3)).await;
        let refused = refused.expect("the flooder's 17th connection is answered");
        assert!(
            refused.starts_with("HTTP/1.1 503") && refused.contains("(max_connections)"),
            "{refused}"
        );
        // Without eviction: `503 TOO_MANY_CONNECTIONS (max_connections)`.
        let health = get(2, port, "/healthz", None).await;
        assert!(health.starts_with("HTTP/1.1 200"), "{health}");
        // Its slot is free again before the newcomers come (it closed after its answer).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut newcomers = Vec::new();
        for from in 10..25 {
            newcomers.push(connect(from, port).await);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let again = get(1, port, "/healthz", None).await;
        assert!(again.starts_with("HTTP/1.1 503"), "{again}");
        let last = get(25, port, "/healthz", None).await;
        assert!(last.starts_with("HTTP/1.1 503"), "{last}");
        // Every flooding socket, idle or sending its endless body, was closed without an
        // answer; no newcomer was answered.
        for c in &mut flood {
            let closed = answer(c, Duration::from_secs(5)).await;
            assert_eq!(closed.as_deref(), Some(""), "an evicted socket is closed");
        }
        for c in &mut newcomers {
            assert_eq!(answer(c, Duration::from_millis(50)).await, None);
        }
        drop(newcomers);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let approve = get(2, port, &format!("/v1/approvals/{id}"), Some(crate::OP_KEY)).await;
        assert!(approve.starts_with("HTTP/1.1 200"), "{approve}");
        let url = format!("http://127.0.0.1:{port}");
        let decided = tokio::task::spawn_blocking(move || crate::cli(&url, &["approve", &id]));
        crate::ok(&decided.await.unwrap());
        let polled = tokio::time::timeout(Duration::from_secs(10), long_poll).await;
        let polled = polled.expect("the long-poll wakes").unwrap();
        assert!(polled.starts_with("HTTP/1.1 200"), "{polled}");
        assert!(polled.contains(r#""status":"approved""#), "{polled}");
    });
    server.kill9();
}

/// Attack (found by review): a valid agent key sending requests whose body never comes (one
/// declared byte, or a hundred, never sent) shielded every connection it held from eviction,
/// so from enough networks it took every slot and a full gateway refused everyone else. One
/// principal's requests in flight now shield at most its long-polls' cap and 64 more, and
/// never more than half the slots (here 40 of 80: found by review, the default cap of 1,088
/// was every slot of a smaller gateway): a newcomer takes the slot of one of the others.
#[test]
fn one_key_cannot_shield_every_slot_with_bodies_it_never_sends() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let extra = "max_connections: 80\nmax_connections_per_address: 1000\n";
    let cfg = write_config(dir.path(), port, extra);
    let from = Some(IpAddr::from([127, 0, 0, 3]));
    let mut server = crate::serve_checked_from(crate::serve_cmd(&cfg), port, from);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut flood = Vec::new();
        for _ in 0..80 {
            let mut c = connect(1, port).await;
            let head = format!("POST /v1/tool-calls HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {BOT_KEY}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{");
            c.write_all(head.as_bytes()).await.unwrap();
            flood.push(c);
        }
        tokio::time::sleep(Duration::from_millis(800)).await;
        let seen = get(2, port, "/v1/approvals", Some(crate::OP_KEY)).await;
        assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
        drop(flood);
    });
    server.kill9();
}
