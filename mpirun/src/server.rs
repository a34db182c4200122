//! The bootstrap key-value server (protocol in [`rankwire::bootstrap::proto`]).
//!
//! One task accepts on 127.0.0.1 (ephemeral port); each connection gets its own task, so
//! a client that connects and says nothing blocks nobody (and is dropped after
//! [`HELLO_TIMEOUT`]). The first message must be `Hello` with this job's id, its secret
//! (compared in constant time) and a rank below the job size; otherwise the client gets
//! `Error`, rwrun logs one line and closes the connection.
//!
//! Shared state (the key-value map, held `Get`s, fence generations) sits behind one
//! mutex that is never held across an await. A held `Get` or `Fence` waits on a oneshot
//! channel that `Put` or the last `Fence` of a generation completes; meanwhile the
//! connection is watched for EOF, so a rank that exits while a request is held is seen
//! to be gone.
//!
//! The job supervisor learns through [`ServerEvent`]s which ranks joined (a `Hello` was
//! accepted), which finalized, which asked to abort, and when a rank's connection
//! closed. Every event is sent *before* the answer to the request that caused it, so a
//! rank that waits for its answers cannot exit before the supervisor can see the event.

use crate::spawn::JobIdentity;
use rankwire::bootstrap::proto::{self, Request, Response};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// How long a new connection may take to send its `Hello`.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest `Hello` accepted before authentication, in bytes (limits what an
/// unauthenticated peer can make rwrun allocate).
const MAX_HELLO_BYTES: usize = 64 * 1024;

/// What the server tells the job supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ServerEvent {
    /// A rank asked to abort the job.
    Abort {
        /// Rank that asked.
        rank: u32,
        /// Requested exit status.
        code: i32,
        /// Its message.
        message: String,
    },
    /// A rank finalized.
    Finalized {
        /// Rank.
        rank: u32,
    },
    /// A connection authenticated as `rank` (its `Hello` was accepted): the rank joined
    /// the bootstrap. Sent for every connection of the rank (a rank has several).
    Joined {
        /// Rank.
        rank: u32,
    },
    /// A connection of `rank` that was announced with [`ServerEvent::Joined`] ended;
    /// every request read from it was handled (and its events sent) before.
    Disconnected {
        /// Rank.
        rank: u32,
    },
}

/// Bind the server on 127.0.0.1 (or, with `network`, on every IPv4 address, for ranks
/// on other nodes; the job secret keeps others out) on an ephemeral port and start
/// accepting in a task.
///
/// # Errors
/// Binding the listener failed.
pub(crate) async fn start(
    size: u32,
    ident: JobIdentity,
    events: mpsc::UnboundedSender<ServerEvent>,
    network: bool,
) -> io::Result<SocketAddr> {
    let ip = if network {
        Ipv4Addr::UNSPECIFIED
    } else {
        Ipv4Addr::LOCALHOST
    };
    let listener = TcpListener::bind(SocketAddr::from((ip, 0))).await?;
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared {
        size,
        ident,
        events,
        kv: Mutex::new(Kv {
            fences_entered: vec![0; size as usize],
            ..Kv::default()
        }),
    });
    tokio::spawn(accept_loop(listener, shared));
    Ok(addr)
}

// Everything connection tasks share.
struct Shared {
    size: u32,
    ident: JobIdentity,
    events: mpsc::UnboundedSender<ServerEvent>,
    kv: Mutex<Kv>,
}

// Key-value map plus the requests held until they can be answered.
//
// Fences are counted per rank: a rank's k-th fence belongs to generation k, and
// generation k is released when all `size` ranks entered it. Repeated fences work, and
// a rank that runs ahead simply waits in a later generation.
#[derive(Default)]
struct Kv {
    map: HashMap<String, Vec<u8>>,
    held_gets: HashMap<String, Vec<oneshot::Sender<Vec<u8>>>>,
    fences_entered: Vec<u64>,
    fence_generations: BTreeMap<u64, (u32, Vec<oneshot::Sender<()>>)>,
}

impl Shared {
    fn kv(&self) -> std::sync::MutexGuard<'_, Kv> {
        // A panic while holding the lock cannot leave the map half-updated in a way that
        // matters more than stopping the job would; keep serving.
        self.kv.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn put(&self, key: String, value: Vec<u8>) {
        let mut kv = self.kv();
        if let Some(waiters) = kv.held_gets.remove(&key) {
            for w in waiters {
                let _ = w.send(value.clone());
            }
        }
        kv.map.insert(key, value);
    }

    async fn get(&self, key: String) -> Option<Vec<u8>> {
        let rx = {
            let mut kv = self.kv();
            if let Some(v) = kv.map.get(&key) {
                return Some(v.clone());
            }
            let (tx, rx) = oneshot::channel();
            kv.held_gets.entry(key).or_default().push(tx);
            rx
        };
        rx.await.ok()
    }

    async fn fence(&self, rank: u32) -> Option<()> {
        let rx = {
            let mut kv = self.kv();
            let generation = kv.fences_entered[rank as usize];
            kv.fences_entered[rank as usize] += 1;
            let (tx, rx) = oneshot::channel();
            let entry = kv.fence_generations.entry(generation).or_default();
            entry.0 += 1;
            entry.1.push(tx);
            if entry.0 >= self.size
                && let Some((_, waiters)) = kv.fence_generations.remove(&generation)
            {
                tracing::debug!("bootstrap: fence generation {generation} complete");
                for w in waiters {
                    let _ = w.send(());
                }
            }
            rx
        };
        rx.await.ok()
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                tokio::spawn(serve_connection(stream, peer, shared.clone()));
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("bootstrap server: accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn serve_connection(mut stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!("bootstrap: TCP_NODELAY for {peer}: {e}");
    }
    let hello = tokio::time::timeout(HELLO_TIMEOUT, read_frame(&mut stream, MAX_HELLO_BYTES)).await;
    let rank = match hello {
        Err(_) => {
            tracing::debug!("bootstrap: {peer} sent no hello within {HELLO_TIMEOUT:?}; closing");
            return;
        }
        Ok(Err(e)) => {
            tracing::debug!("bootstrap: {peer}: reading hello: {e}");
            if e.kind() == io::ErrorKind::InvalidData {
                refuse(&mut stream, peer, &format!("malformed hello ({e})")).await;
            }
            return;
        }
        Ok(Ok(req)) => match check_hello(&shared, req) {
            Ok(rank) => rank,
            Err(reason) => {
                refuse(&mut stream, peer, &reason).await;
                return;
            }
        },
    };
    // Before the answer: a rank that got its Ok is known to have joined.
    let _ = shared.events.send(ServerEvent::Joined { rank });
    if write_frame(&mut stream, &Response::Ok).await.is_ok() {
        tracing::debug!("bootstrap: rank {rank} connected from {peer}");
        if let Err(e) = serve_requests(&mut stream, rank, &shared).await {
            tracing::debug!("bootstrap: rank {rank} ({peer}): {e}");
        }
    }
    let _ = shared.events.send(ServerEvent::Disconnected { rank });
}

// Resolves when the peer closed the connection (or it failed) while a request is held.
// Only peeks: a pipelined request stays in the socket for `serve_requests` (and then
// this never resolves).
async fn closed(stream: &TcpStream) {
    let mut b = [0u8; 1];
    match stream.peek(&mut b).await {
        Ok(0) | Err(_) => {}
        Ok(_) => std::future::pending().await,
    }
}

// Requests of an authenticated connection, answered one by one in order.
async fn serve_requests(stream: &mut TcpStream, rank: u32, shared: &Shared) -> io::Result<()> {
    loop {
        let req = match read_frame(stream, proto::MAX_MESSAGE_BYTES).await {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        };
        let resp = match req {
            Request::Put { key, value } => {
                shared.put(key, value);
                Response::Ok
            }
            Request::Get { key } => {
                let got = tokio::select! {
                    v = shared.get(key) => v,
                    () = closed(stream) => None,
                };
                match got {
                    Some(value) => Response::Value { value },
                    None => return Ok(()),
                }
            }
            Request::GetMany { keys } if keys.len() > proto::MAX_GET_MANY_KEYS => Response::Error {
                message: format!(
                    "GetMany of {} keys (at most {})",
                    keys.len(),
                    proto::MAX_GET_MANY_KEYS
                ),
            },
            Request::GetMany { keys } => {
                let all = async {
                    let mut values = Vec::with_capacity(keys.len());
                    for key in keys {
                        values.push(shared.get(key).await?);
                    }
                    Some(values)
                };
                let got = tokio::select! {
                    v = all => v,
                    () = closed(stream) => None,
                };
                match got {
                    Some(values) => Response::Values { values },
                    None => return Ok(()),
                }
            }
            Request::Fence => {
                let passed = tokio::select! {
                    v = shared.fence(rank) => v,
                    () = closed(stream) => None,
                };
                match passed {
                    Some(()) => Response::Ok,
                    None => return Ok(()),
                }
            }
            Request::Abort { code, message } => {
                // Tell the supervisor before acknowledging, so the abort is seen before
                // the rank's exit.
                let _ = shared.events.send(ServerEvent::Abort {
                    rank,
                    code,
                    message,
                });
                Response::Ok
            }
            Request::Finalize => {
                let _ = shared.events.send(ServerEvent::Finalized { rank });
                Response::Ok
            }
            Request::Watch => {
                // Never answered: hold the connection open until either side goes away.
                let mut sink = [0u8; 256];
                while stream.read(&mut sink).await? > 0 {}
                return Ok(());
            }
            Request::Hello { .. } => Response::Error {
                message: "hello sent twice".into(),
            },
        };
        write_frame(stream, &resp).await?;
    }
}

// Validate the first message; the secret is compared in constant time.
fn check_hello(shared: &Shared, req: Request) -> Result<u32, String> {
    let Request::Hello {
        job_id,
        secret,
        rank,
    } = req
    else {
        return Err("first message was not a hello".into());
    };
    if job_id != shared.ident.job_id {
        return Err(format!("wrong job id {job_id:?}"));
    }
    if !bool::from(secret.as_bytes().ct_eq(shared.ident.secret.as_bytes())) {
        return Err("wrong job secret".into());
    }
    if rank >= shared.size {
        return Err(format!(
            "rank {rank} out of range for a job of {} ranks",
            shared.size
        ));
    }
    Ok(rank)
}

async fn refuse(stream: &mut TcpStream, peer: SocketAddr, reason: &str) {
    note!("rwrun: refused bootstrap connection from {peer}: {reason}");
    let _ = write_frame(
        stream,
        &Response::Error {
            message: reason.to_string(),
        },
    )
    .await;
    let _ = stream.shutdown().await;
}

async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max_bytes: usize) -> io::Result<Request> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let n = proto::decode_len(u32::from_be_bytes(len) as usize)?;
    if n > max_bytes {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("message of {n} bytes exceeds {max_bytes}"),
        ));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body).await?;
    proto::decode_body(&body)
}

async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, msg: &Response) -> io::Result<()> {
    let mut buf = Vec::new();
    proto::write_message(&mut buf, msg)?;
    w.write_all(&buf).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankwire::bootstrap::client::{BootstrapClient, BootstrapError};

    fn ident() -> JobIdentity {
        JobIdentity {
            job_id: "rwtest1".into(),
            secret: "0123456789abcdef0123456789abcdef".into(),
        }
    }

    // The server runs on a current-thread runtime in a background thread; the blocking
    // rankwire client talks to it from test threads, as ranks would.
    fn server(size: u32) -> (SocketAddr, std::sync::mpsc::Receiver<ServerEvent>) {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (ev_tx, ev_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (tx, mut rx) = mpsc::unbounded_channel();
                let addr = start(size, ident(), tx, false).await.unwrap();
                addr_tx.send(addr).unwrap();
                while let Some(ev) = rx.recv().await {
                    let _ = ev_tx.send(ev);
                }
            });
        });
        (addr_rx.recv().unwrap(), ev_rx)
    }

    fn client(addr: SocketAddr, rank: u32) -> BootstrapClient {
        let id = ident();
        let mut c = BootstrapClient::connect(
            &addr.to_string(),
            &id.job_id,
            &id.secret,
            rank,
            Duration::from_secs(10),
        )
        .unwrap();
        c.set_timeout(Duration::from_secs(20));
        c
    }

    #[test]
    fn put_get_fence_across_ranks() {
        let (addr, events) = server(3);
        let threads: Vec<_> = (0..3u32)
            .map(|r| {
                std::thread::spawn(move || {
                    let mut c = client(addr, r);
                    // Held get: rank r waits for rank (r+1)%3, which may not have put yet.
                    let next = (r + 1) % 3;
                    c.put(&format!("addr{r}"), &[r as u8; 3]).unwrap();
                    assert_eq!(c.get(&format!("addr{next}")).unwrap(), vec![next as u8; 3]);
                    for round in 0..5u8 {
                        c.put(&format!("round{r}"), &[round]).unwrap();
                        c.fence().unwrap();
                        assert_eq!(c.get(&format!("round{next}")).unwrap(), vec![round]);
                        c.fence().unwrap();
                    }
                    c.finalize().unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let (mut joined, mut finalized, mut gone) = (Vec::new(), Vec::new(), Vec::new());
        while gone.len() < 3 {
            match events.recv_timeout(Duration::from_secs(10)).unwrap() {
                ServerEvent::Joined { rank } => joined.push(rank),
                ServerEvent::Finalized { rank } => {
                    // Joined before finalizing, finalized before the connection ended.
                    assert!(joined.contains(&rank) && !gone.contains(&rank));
                    finalized.push(rank)
                }
                ServerEvent::Disconnected { rank } => gone.push(rank),
                other => panic!("{other:?}"),
            }
        }
        for v in [&mut joined, &mut finalized, &mut gone] {
            v.sort();
            assert_eq!(*v, vec![0, 1, 2]);
        }
    }

    #[test]
    fn a_client_gone_during_a_held_get_is_seen() {
        let (addr, events) = server(2);
        let mut c = client(addr, 1);
        assert_eq!(
            events.recv_timeout(Duration::from_secs(10)).unwrap(),
            ServerEvent::Joined { rank: 1 }
        );
        // The get is held (nobody puts the key); the client gives up and goes away.
        c.set_timeout(Duration::from_millis(200));
        assert!(matches!(
            c.get("never"),
            Err(BootstrapError::Timeout { .. })
        ));
        assert!(events.try_recv().is_err());
        drop(c);
        assert_eq!(
            events.recv_timeout(Duration::from_secs(10)).unwrap(),
            ServerEvent::Disconnected { rank: 1 }
        );
    }

    /// GetMany is answered once every key exists, with the values in the keys' order.
    #[test]
    fn get_many_waits_for_every_key() {
        let (addr, _events) = server(2);
        let mut a = client(addr, 0);
        let mut b = client(addr, 1);
        a.put("k-1", b"one").unwrap();
        let keys: Vec<String> = ["k-1", "k-0"].iter().map(|k| k.to_string()).collect();
        let reader = std::thread::spawn(move || (b.get_many(&keys), b));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!reader.is_finished(), "answered before k-0 existed");
        a.put("k-0", b"zero").unwrap();
        let (got, mut b) = reader.join().unwrap();
        assert_eq!(got.unwrap(), vec![b"one".to_vec(), b"zero".to_vec()]);
        // More keys than one request may carry: the client splits them.
        let keys: Vec<String> = (0..proto::MAX_GET_MANY_KEYS + 1)
            .map(|i| format!("x{i}"))
            .collect();
        b.set_timeout(Duration::from_secs(5));
        for k in &keys {
            b.put(k, b"v").unwrap();
        }
        assert_eq!(b.get_many(&keys).unwrap().len(), keys.len());
    }

    #[test]
    fn refusals() {
        let (addr, _events) = server(2);
        let a = addr.to_string();
        let id = ident();
        let t = Duration::from_secs(10);
        let wrong = "0123456789abcdef0123456789abcdee";
        for (job, secret, rank, want) in [
            (id.job_id.as_str(), wrong, 0, "wrong job secret"),
            (id.job_id.as_str(), "short", 0, "wrong job secret"),
            ("rwother", id.secret.as_str(), 0, "wrong job id"),
            (id.job_id.as_str(), id.secret.as_str(), 2, "out of range"),
        ] {
            match BootstrapClient::connect(&a, job, secret, rank, t) {
                Err(BootstrapError::Refused { message, .. }) => {
                    assert!(message.contains(want), "{message}")
                }
                other => panic!("expected refusal, got {other:?}"),
            }
        }
    }

    #[test]
    fn silent_and_garbage_clients_block_nobody() {
        let (addr, events) = server(1);
        let mut silent = std::net::TcpStream::connect(addr).unwrap();
        let mut garbage = std::net::TcpStream::connect(addr).unwrap();
        use std::io::{Read, Write};
        garbage
            .write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3])
            .unwrap();
        let mut c = client(addr, 0);
        c.put("k", b"v").unwrap();
        assert_eq!(c.get("k").unwrap(), b"v");
        c.fence().unwrap();
        c.abort(7, "bye").unwrap();
        assert_eq!(
            events.recv_timeout(Duration::from_secs(10)).unwrap(),
            ServerEvent::Joined { rank: 0 }
        );
        assert_eq!(
            events.recv_timeout(Duration::from_secs(10)).unwrap(),
            ServerEvent::Abort {
                rank: 0,
                code: 7,
                message: "bye".into()
            }
        );
        // The garbage client was closed; the silent one is still waiting for its hello.
        garbage
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = Vec::new();
        let _ = garbage.read_to_end(&mut buf);
        silent.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        assert!(matches!(silent.read(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock));
    }
}
