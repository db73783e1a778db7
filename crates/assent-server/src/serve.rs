//! Serving connections with bounded resources (issue 10 §12): a cap on concurrent
//! connections, shared by client network (`serve_slots.rs`: one over it takes the slot of a
//! connection serving no known request, or is answered `503 TOO_MANY_CONNECTIONS` and
//! closed), a header-read timeout that also ends idle keep-alive connections, the open-file
//! soft limit raised to the
//! hard limit, and a graceful drain at shutdown. HTTP/1.1 (hyper's own connection, so the
//! header-read timeout runs from the first byte awaited: a socket that never sends one is
//! closed too; a proxy in front may speak HTTP/2 to clients); each request carries the peer
//! address as `ConnectInfo<SocketAddr>` (none on the hub's private socket).

use crate::serve_slots::{ConnSlot, EVICT_GRACE, Held, Refusal, Slots};
use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// Connection limits (`max_connections`, `max_connections_per_address`,
/// `header_read_timeout_seconds` and `trusted_proxies` in the config).
#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// Concurrent connections served; more are answered `503` and closed.
    pub max_connections: usize,
    /// Concurrent connections served from one peer address (a trusted proxy's are not
    /// counted); more are answered `503` and closed.
    pub per_address: usize,
    /// Peers not held to `per_address` (`trusted_proxies`: every client comes through them).
    pub trusted: Arc<[IpAddr]>,
    /// Time a client has to send a request's headers, and the longest idle keep-alive wait.
    pub header_read_timeout: Duration,
    /// The longest a response may wait for a TCP client to take any of its bytes (the same
    /// `header_read_timeout_seconds`); then the connection is closed.
    pub write_stall: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            per_address: 1_000,
            trusted: Arc::from([]),
            header_read_timeout: Duration::from_secs(30),
            write_stall: Duration::from_secs(30),
        }
    }
}

/// Raises the open-file soft limit to the hard limit (each connection is a file), and returns
/// the limit in force; `None` when it cannot be read or raised (a warning is logged).
pub fn raise_open_file_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-file limit");
            None
        }
    }
}

/// The connection cap to use: `wanted`, kept 64 files below the open-file limit so the store,
/// logs and webhooks always have descriptors.
pub fn effective_cap(wanted: usize, nofile: Option<u64>) -> usize {
    match nofile.and_then(|n| usize::try_from(n.saturating_sub(64)).ok()) {
        Some(n) => wanted.min(n.max(1)),
        None => wanted,
    }
}

/// The most a connection buffers while it reads a request's head (bytes).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Serves `app` on `listener` (and on `private`, a Unix socket only this process's own
/// clients use: the MCP hub's; its connections share `max_connections` but count against no
/// address, and carry no peer address, so the throttle counts nothing against an address for
/// them) until `shutdown` completes, then lets open
/// connections finish for at most `drain`.
pub async fn serve(
    listener: TcpListener,
    private: Option<Private>,
    app: Router,
    limits: ConnLimits,
    drain: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // A request's head (line and headers) fits in 64 KiB, else `431` (found by review:
        // hyper's default buffer of about 400 KiB let a client with no key hold that much per
        // connection in headers it never finished, across every connection it may open).
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    let slots = Slots::new(limits.max_connections, limits.per_address);
    let (stop, stopping) = tokio::sync::watch::channel(false);
    // Every connection task holds a sender: the drain waits for the last to be dropped.
    let (open, mut all_closed) = tokio::sync::mpsc::channel::<()>(1);
    let ends = Ends {
        builder,
        app,
        stopping,
        open,
    };
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            own = accept_private(private.as_ref()) => {
                let Some(held) = slots.own() else {
                    tokio::spawn(refuse(own.into_inner(), FULL));
                    continue;
                };
                // No peer address: what the hub asks here for a client was counted against
                // that client's address at `/mcp` already (found by review: carrying
                // 127.0.0.1, a wrong key's `initialize` was counted again there, so a few
                // of them from anywhere locked loopback out of the throttle for every agent).
                ends.serve_one(own, None, held);
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors or a reset before accept: wait a little, go on.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Attack (found by review): idle sockets from one address held every slot for the
        // header-read timeout, again and again, shutting out operators and health checks;
        // and from ten addresses, with the cap per address (see `serve_slots`).
        let ip = peer.ip().to_canonical();
        let trusted = limits.trusted.contains(&ip);
        let net = if trusted {
            ip
        } else {
            crate::throttle::network(ip)
        };
        let held = match slots.admit(net, trusted) {
            Ok(h) => h,
            Err(Refusal::Full) => {
                tokio::spawn(refuse(tcp, FULL));
                continue;
            }
            Err(Refusal::ForAddress) => {
                tokio::spawn(refuse(tcp, FULL_FOR_ADDRESS));
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        // Attack (found by review): a client that sends requests and never reads the answers
        // (or an SSE stream) held its slot for ever — the header timeout never starts while
        // hyper waits to write — so a few addresses could keep every slot. A write that takes
        // no byte for `write_stall` ends the connection (`tokio-io-timeout`).
        let mut tcp = tokio_io_timeout::TimeoutStream::new(tcp);
        tcp.set_write_timeout(Some(limits.write_stall));
        ends.serve_one(TokioIo::new(Box::pin(tcp)), Some(peer), held);
    }
    drop(listener);
    drop(private);
    let _ = stop.send(true);
    drop(ends);
    if tokio::time::timeout(drain, all_closed.recv())
        .await
        .is_err()
    {
        tracing::info!("connections still open after the drain period; closing them");
    }
    Ok(())
}

/// The Unix socket [`serve`] serves the process's own clients on.
#[cfg(unix)]
pub type Private = tokio::net::UnixListener;
/// The Unix socket [`serve`] serves the process's own clients on (none off Unix).
#[cfg(not(unix))]
pub type Private = std::convert::Infallible;

/// The next connection on `private`; pends for ever without one (after an accept error,
/// logged, it tries again a moment later).
#[cfg(unix)]
async fn accept_private(private: Option<&Private>) -> TokioIo<tokio::net::UnixStream> {
    let Some(l) = private else {
        return std::future::pending().await;
    };
    loop {
        match l.accept().await {
            Ok((s, _)) => return TokioIo::new(s),
            Err(e) => {
                tracing::warn!(error = %e, "accept on the private socket failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Off Unix there is no private socket: pends for ever.
#[cfg(not(unix))]
async fn accept_private(_: Option<&Private>) -> TokioIo<tokio::net::TcpStream> {
    std::future::pending().await
}

/// What every connection task is served with.
struct Ends {
    builder: hyper::server::conn::http1::Builder,
    app: Router,
    /// Turns `true` when the gateway stops: connections finish what is in flight and close.
    stopping: tokio::sync::watch::Receiver<bool>,
    /// Held by every connection task until it ends (the drain waits for the last).
    open: tokio::sync::mpsc::Sender<()>,
}

impl Ends {
    /// Serves one connection `io` from `peer` (`ConnectInfo`; none on the private socket),
    /// holding `held` (its slot) until it ends; each request carries the connection
    /// ([`ConnSlot`]), on which the throttle counts a known key's or session's request in
    /// flight. When the gateway stops, keep-alive is turned off and what is in flight finished
    /// (the drain bounds it). When the slot is given to another, keep-alive is turned off too,
    /// and unless the connection has served a known request, it is closed [`EVICT_GRACE`]
    /// later (found by review: a keyless request in flight, a body sent a byte at a time,
    /// shielded it).
    fn serve_one<IO>(&self, io: IO, peer: Option<std::net::SocketAddr>, held: Held)
    where
        IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let conn = held.conn.clone();
        let slot = ConnSlot(conn.clone());
        let svc =
            self.app
                .clone()
                .map_request(move |req: hyper::Request<hyper::body::Incoming>| {
                    let mut req = req.map(axum::body::Body::new);
                    if let Some(peer) = peer {
                        req.extensions_mut().insert(ConnectInfo(peer));
                    }
                    req.extensions_mut().insert(slot.clone());
                    req
                });
        let svc = hyper_util::service::TowerToHyperService::new(svc);
        let served = self.builder.serve_connection(io, svc);
        let mut stopping = self.stopping.clone();
        let open = self.open.clone();
        tokio::spawn(async move {
            tokio::pin!(served);
            let evicted = tokio::select! {
                _ = served.as_mut() => return drop((held, open)),
                () = conn.evicted() => true,
                _ = stopping.wait_for(|s| *s) => false,
            };
            served.as_mut().graceful_shutdown();
            // A connection that never served a known request is closed after the grace; one
            // that did is let finish (hyper flushes what it holds; found by review: cut, the
            // tail of a known answer still in hyper's buffer was lost).
            if evicted {
                match tokio::time::timeout(EVICT_GRACE, served.as_mut()).await {
                    Err(_) if conn.known_seen() > 0 => {}
                    _ => return drop((held, open)),
                }
            }
            let _ = served.await;
            drop((held, open));
        });
    }
}

/// The body of a refusal over `max_connections`.
const FULL: &str = r#"{"code":"TOO_MANY_CONNECTIONS","message":"the gateway serves its maximum number of connections (max_connections); retry shortly"}"#;

/// The body of a refusal over `max_connections_per_address`.
const FULL_FOR_ADDRESS: &str = r#"{"code":"TOO_MANY_CONNECTIONS","message":"the gateway serves its maximum number of connections from this address (max_connections_per_address); close some or retry shortly"}"#;

/// Answers a connection over a cap with `503 TOO_MANY_CONNECTIONS` (JSON `body`) and closes it.
async fn refuse(mut tcp: impl tokio::io::AsyncWrite + Unpin, body: &'static str) {
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = tcp.write_all(reply.as_bytes()).await;
        let _ = tcp.shutdown().await;
    })
    .await;
}
