//! Connection setup: the listener, and the nonblocking loop that dials lower ranks and
//! accepts higher ranks at the same time, running the handshake of `handshake.rs`.
//!
//! One `poll(2)` loop drives, without threads: one dial attempt per lower peer (candidate
//! addresses in order, each bounded by `addr_timeout`), the listener, and every accepted
//! socket still in its handshake (each bounded by `addr_timeout`). It ends when every
//! dial succeeded and every expected peer was accepted, or fails at `connect_timeout`.
//! After every readiness wake-up it simply tries to progress every socket (they are all
//! nonblocking); setup is not the hot path.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tracing::debug;

use super::config::TcpConfig;
use super::handshake::{
    ACK_LEN, Ack, AckOk, AckStatus, HELLO_LEN, Hello, NONCE_LEN, PROOF_LEN, PROTOCOL_VERSION,
    ack_mac, check_ack, check_proof, may_be_ack, nonce, proof_mac,
};
use crate::TransportError;

/// Bind the listening socket: `[::]:0` dual-stack (IPV6_V6ONLY off), or `0.0.0.0:0`
/// where IPv6 is unavailable. Nonblocking. Returns the socket and whether it accepts
/// IPv6.
pub(crate) fn bind_listener(cfg: &TcpConfig, backlog: i32) -> io::Result<(Socket, bool)> {
    let v6 = (|| -> io::Result<Socket> {
        let s = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
        s.set_only_v6(false)?;
        s.bind(&SockAddr::from(SocketAddr::new(
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            0,
        )))?;
        Ok(s)
    })();
    let (sock, is_v6) = match v6 {
        Ok(s) => (s, true),
        Err(e) => {
            debug!("tcp: no dual-stack IPv6 listener ({e}); listening on IPv4 only");
            let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
            s.bind(&SockAddr::from(SocketAddr::from(([0, 0, 0, 0], 0))))?;
            (s, false)
        }
    };
    // Accepted sockets inherit the buffer sizes (and with them the window scale) and
    // the congestion control.
    set_buffers(&sock, cfg);
    set_congestion(&sock, cfg);
    sock.set_nonblocking(true)?;
    sock.listen(backlog)?;
    Ok((sock, is_v6))
}

/// Apply `cfg.socket_buffer_bytes` where the kernel allows the full size (see
/// [`TcpConfig::socket_buffer_bytes`]). Best effort: failures are logged, not fatal.
pub(crate) fn set_buffers(sock: &Socket, cfg: &TcpConfig) {
    let Some(want) = cfg.socket_buffer_bytes else {
        return;
    };
    let (wmax, rmax) = buffer_limits();
    if wmax >= want
        && let Err(e) = sock.set_send_buffer_size(want)
    {
        debug!("tcp: SO_SNDBUF {want}: {e}");
    }
    if rmax >= want
        && let Err(e) = sock.set_recv_buffer_size(want)
    {
        debug!("tcp: SO_RCVBUF {want}: {e}");
    }
}

/// Apply `cfg.congestion` ([`super::config::Congestion`]) to `sock`, before it connects
/// or listens. Best effort: a refusal is logged once per process (the connection keeps
/// the kernel's default, which works, only slower for large messages under BBR).
pub(crate) fn set_congestion(sock: &Socket, cfg: &TcpConfig) {
    use super::config::Congestion;
    static WARNED: std::sync::Once = std::sync::Once::new();
    let r = match &cfg.congestion {
        Congestion::System => return,
        Congestion::Named(name) => sock
            .set_tcp_congestion(name.as_bytes())
            .map_err(|e| (name.as_str(), e)),
        Congestion::Auto => match sock.tcp_congestion() {
            Ok(cur) if cur.starts_with(b"bbr") => sock
                .set_tcp_congestion(b"cubic")
                .or_else(|_| sock.set_tcp_congestion(b"reno"))
                .map_err(|e| ("cubic or reno", e)),
            _ => return,
        },
    };
    if let Err((name, e)) = r {
        WARNED.call_once(|| {
            tracing::warn!(
                "tcp: congestion control {name} refused ({e}); the connections keep the \
                 kernel's default. Fix: set RANKWIRE_TCP_CONGESTION to one listed in \
                 net.ipv4.tcp_allowed_congestion_control, or to system"
            )
        });
    }
}

/// `net.core.wmem_max`, `net.core.rmem_max` (0 where unreadable), read once.
fn buffer_limits() -> (usize, usize) {
    static LIMITS: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();
    *LIMITS.get_or_init(|| {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .unwrap_or(0)
        };
        (
            read("/proc/sys/net/core/wmem_max"),
            read("/proc/sys/net/core/rmem_max"),
        )
    })
}

/// Inputs of [`establish`].
pub(crate) struct Setup<'a> {
    pub(crate) my_rank: u32,
    pub(crate) size: u32,
    pub(crate) job_hash: u64,
    /// The job secret both sides prove knowledge of (handshake.rs, "Authentication").
    pub(crate) secret: &'a [u8],
    pub(crate) cfg: &'a TcpConfig,
    pub(crate) listener: Socket,
    /// Our own published addresses (for error messages).
    pub(crate) my_addrs: &'a [SocketAddr],
    /// Lower ranks to dial, each with its candidate addresses in order.
    pub(crate) dial: Vec<(u32, Vec<SocketAddr>)>,
    /// Higher ranks expected to dial us.
    pub(crate) expect: Vec<u32>,
}

/// Whether an accepted connection came in on one of the addresses this rank publishes.
/// The listener is bound to every interface (one socket serves them all), so
/// connections to addresses that `RANKWIRE_TCP_IF` / `RANKWIRE_TCP_IF_EXCLUDE` (or the
/// default choice) left out would otherwise be admitted to the handshake; no peer dials
/// them. IPv4-mapped IPv6 addresses compare as IPv4.
///
/// # Errors
/// Why the connection is dropped, for the debug log.
pub(crate) fn arrived_on_published(sock: &Socket, mine: &[SocketAddr]) -> Result<(), String> {
    let canonical = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let Some(local) = sock.local_addr().ok().and_then(|a| a.as_socket()) else {
        return Err("its local address is unknown".into());
    };
    let ip = canonical(local.ip());
    if mine.iter().any(|m| canonical(m.ip()) == ip) {
        Ok(())
    } else {
        Err(format!(
            "it arrived on {ip}, which this rank does not publish (RANKWIRE_TCP_IF, \
             RANKWIRE_TCP_IF_EXCLUDE)"
        ))
    }
}

/// Run the setup loop (module doc). Returns one handshaken, nonblocking socket per peer.
///
/// # Errors
/// [`TransportError::Connect`] naming the peer, every address tried with its error, and
/// the environment variables to set; [`TransportError::Os`] if `poll` itself fails.
pub(crate) fn establish(setup: Setup<'_>) -> Result<BTreeMap<u32, Socket>, TransportError> {
    let Setup {
        my_rank,
        size,
        job_hash,
        secret,
        cfg,
        listener,
        my_addrs,
        dial,
        expect,
    } = setup;
    let start = Instant::now();
    let deadline = start + cfg.connect_timeout;
    let me = Hello {
        version: PROTOCOL_VERSION,
        connector: my_rank,
        acceptor: 0,
        world_size: size,
        job_hash,
        nonce: [0; NONCE_LEN],
    };
    let mut dials: Vec<Dial> = dial
        .into_iter()
        .map(|(peer, addrs)| Dial::new(peer, addrs))
        .collect();
    let mut accept_warned = false;
    let mut done: BTreeMap<u32, Socket> = BTreeMap::new();
    let mut accepted: BTreeMap<u32, Socket> = BTreeMap::new();
    let mut inbound: Vec<Inbound> = Vec::new();
    let acc = Acceptor {
        my_rank,
        size,
        job_hash,
        secret,
        expect: &expect,
    };

    loop {
        let now = Instant::now();
        // Dials: progress the current attempt, or start the next address.
        let mut i = 0;
        while i < dials.len() {
            let d = &mut dials[i];
            match d.progress(&me, secret, cfg, now) {
                DialState::Pending => i += 1,
                DialState::Connected(sock) => {
                    debug!(
                        "tcp: rank {my_rank} connected to rank {} via {}",
                        d.peer,
                        d.addrs[d.next - 1]
                    );
                    done.insert(d.peer, sock);
                    dials.swap_remove(i);
                }
                DialState::Exhausted => {
                    return Err(dial_error(d, cfg, "every candidate address failed"));
                }
                DialState::Yield => {
                    // Only an on-demand acceptor yields; here every pair has one dialler.
                    d.tried.push(format!(
                        "{}: rank {} yielded (it runs with connections on demand: RANKWIRE_TCP_CONNECT differs between ranks?)",
                        d.addrs[d.next - 1],
                        d.peer
                    ));
                    return Err(dial_error(d, cfg, "the peer's connection mode differs"));
                }
            }
        }
        // Listener: take every pending connection.
        loop {
            match listener.accept() {
                Ok((sock, from)) => {
                    if let Err(why) = arrived_on_published(&sock, my_addrs) {
                        debug!("tcp: rank {my_rank} dropped a connection from {from:?}: {why}");
                        continue;
                    }
                    if let Err(e) = sock.set_nonblocking(true) {
                        debug!("tcp: dropping accepted connection: set_nonblocking: {e}");
                        continue;
                    }
                    inbound.push(Inbound::new(sock, from.as_socket(), now + cfg.addr_timeout));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // ECONNABORTED, EMFILE, ...: try again on the next turn.
                    log_accept_error(my_rank, &e, &mut accept_warned);
                    break;
                }
            }
        }
        // Accepted sockets in their handshake.
        let mut i = 0;
        while i < inbound.len() {
            let mut admit = AtInit {
                acc: &acc,
                accepted: &mut accepted,
            };
            match inbound[i].progress(&acc, &mut admit, now) {
                InState::Pending => i += 1,
                InState::Drop(why) => {
                    debug!(
                        "tcp: rank {my_rank} rejected connection from {:?}: {why}",
                        inbound[i].from
                    );
                    inbound.swap_remove(i);
                }
                InState::Refused(why) | InState::Abandoned(why) => {
                    tracing::warn!(
                        "tcp: rank {my_rank} refused a connection from {:?}: {why}",
                        inbound[i].from
                    );
                    inbound.swap_remove(i);
                }
                InState::Accepted(peer) => {
                    let ib = inbound.swap_remove(i);
                    debug!(
                        "tcp: rank {my_rank} accepted rank {peer} from {:?}",
                        ib.from
                    );
                    accepted.insert(peer, ib.sock);
                }
            }
        }

        if dials.is_empty() && expect.iter().all(|r| accepted.contains_key(r)) {
            break;
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(deadline_error(
                &dials, &expect, &accepted, cfg, my_addrs, my_rank,
            ));
        }

        // Sleep until something is ready or the nearest deadline (at most 50 ms).
        let mut wake = deadline.min(now + Duration::from_millis(50));
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(1 + dials.len() + inbound.len());
        fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
        for d in &dials {
            if let Some(a) = &d.attempt {
                wake = wake.min(a.deadline);
                let ev = match a.phase {
                    DialPhase::ReadAck { .. } => PollFlags::POLLIN,
                    _ => PollFlags::POLLOUT,
                };
                fds.push(PollFd::new(a.sock.as_fd(), ev));
            }
        }
        for ib in &inbound {
            wake = wake.min(ib.deadline);
            let ev = if matches!(ib.phase, InPhase::WriteAck { .. }) {
                PollFlags::POLLOUT
            } else {
                PollFlags::POLLIN
            };
            fds.push(PollFd::new(ib.sock.as_fd(), ev));
        }
        let ms = wake.saturating_duration_since(now).as_millis().clamp(1, 50) as u16;
        match nix::poll::poll(&mut fds, ms) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                return Err(TransportError::Os {
                    transport: "tcp",
                    call: "poll",
                    reason: e.to_string(),
                });
            }
        }
    }
    // Handshakes still open when setup ends are dropped; one that was accepted and owes
    // its proof claimed a rank of this job that is connected by now: say so.
    for ib in &inbound {
        if let InPhase::ReadProof { hello, .. } = &ib.phase {
            tracing::warn!(
                "tcp: rank {my_rank} drops a connection from {:?}: it claimed to be rank {} but sent no proof of the job secret before setup ended",
                ib.from,
                hello.connector
            );
        }
    }
    done.append(&mut accepted);
    debug!(
        "tcp: rank {my_rank} set up {} connections in {:?}",
        done.len(),
        start.elapsed()
    );
    Ok(done)
}

// One lower peer being dialled: candidate addresses tried in order, one attempt at a
// time; `tried` collects "addr: error" for the final message.
pub(crate) struct Dial {
    pub(crate) peer: u32,
    pub(crate) addrs: Vec<SocketAddr>,
    /// Index of the next address to try; `next - 1` is the current attempt's.
    pub(crate) next: usize,
    pub(crate) tried: Vec<String>,
    pub(crate) attempt: Option<Attempt>,
    /// Connections on demand: an attempt whose TCP connection is up but whose ack is
    /// late is not given up at `addr_timeout` (the peer may be computing without
    /// polling: its kernel took the connection into the listen backlog); it keeps
    /// waiting here while the next address is tried.
    pub(crate) patient: bool,
    waiting: Vec<(SocketAddr, Attempt)>,
}

pub(crate) struct Attempt {
    pub(crate) sock: Socket,
    deadline: Instant,
    /// This attempt's nonce (fresh for every attempt).
    nonce: [u8; NONCE_LEN],
    phase: DialPhase,
}

pub(crate) enum DialPhase {
    Connecting,
    SendHello {
        sent: usize,
    },
    ReadAck {
        buf: [u8; ACK_LEN],
        got: usize,
    },
    /// The ack was valid: our proof for the acceptor's nonce.
    SendProof {
        proof: [u8; PROOF_LEN],
        sent: usize,
    },
}

pub(crate) enum DialState {
    Pending,
    Connected(Socket),
    Exhausted,
    /// The acceptor is dialling us (its `AckStatus::Yield`, MAC verified).
    Yield,
}

impl Dial {
    /// A dial of `peer` at `addrs`, in order, nothing started yet.
    pub(crate) fn new(peer: u32, addrs: Vec<SocketAddr>) -> Dial {
        Dial {
            peer,
            addrs,
            next: 0,
            tried: Vec::new(),
            attempt: None,
            patient: false,
            waiting: Vec::new(),
        }
    }

    /// Whether some attempt has its TCP connection up and waits for the peer's ack.
    pub(crate) fn awaiting_ack(&self) -> bool {
        !self.waiting.is_empty()
            || self
                .attempt
                .as_ref()
                .is_some_and(|a| !matches!(a.phase, DialPhase::Connecting))
    }

    /// Step the attempts kept waiting (`patient`): one that completes ends the dial.
    fn progress_waiting(&mut self, me: &Hello, secret: &[u8]) -> Option<DialState> {
        let mut i = 0;
        while i < self.waiting.len() {
            let (addr, a) = &mut self.waiting[i];
            let hello = Hello {
                acceptor: self.peer,
                nonce: a.nonce,
                ..*me
            };
            match a.step(&hello, self.peer, secret) {
                Ok(Step::Pending) => i += 1,
                Ok(Step::Proved) => {
                    let (_, a) = self.waiting.swap_remove(i);
                    self.waiting.clear();
                    self.attempt = None;
                    return Some(DialState::Connected(a.sock));
                }
                Ok(Step::Yield) => {
                    self.waiting.clear();
                    self.attempt = None;
                    return Some(DialState::Yield);
                }
                Err(e) => {
                    self.tried.push(format!("{addr}: {e}"));
                    self.waiting.swap_remove(i);
                }
            }
        }
        None
    }

    /// Whether the current attempt waits to write (connect, hello, proof) rather than to
    /// read (the ack).
    pub(crate) fn wants_write(&self) -> bool {
        self.attempt
            .as_ref()
            .is_some_and(|a| !matches!(a.phase, DialPhase::ReadAck { .. }))
    }

    /// Advance without blocking: the current attempt, or the next address (module doc).
    pub(crate) fn progress(
        &mut self,
        me: &Hello,
        secret: &[u8],
        cfg: &TcpConfig,
        now: Instant,
    ) -> DialState {
        if let Some(done) = self.progress_waiting(me, secret) {
            return done;
        }
        loop {
            if self.attempt.is_none() {
                let Some(&addr) = self.addrs.get(self.next) else {
                    if !self.waiting.is_empty() {
                        return DialState::Pending;
                    }
                    return DialState::Exhausted;
                };
                self.next += 1;
                match start_connect(addr, cfg) {
                    Ok(sock) => {
                        self.attempt = Some(Attempt {
                            sock,
                            deadline: now + cfg.addr_timeout,
                            nonce: nonce(),
                            phase: DialPhase::Connecting,
                        })
                    }
                    Err(e) => {
                        self.tried.push(format!("{addr}: {e}"));
                        continue;
                    }
                }
            }
            let addr = self.addrs[self.next - 1];
            let Some(a) = self.attempt.as_mut() else {
                continue;
            };
            let hello = Hello {
                acceptor: self.peer,
                nonce: a.nonce,
                ..*me
            };
            match a.step(&hello, self.peer, secret) {
                Ok(Step::Proved) => {
                    let Some(a) = self.attempt.take() else {
                        continue;
                    };
                    self.waiting.clear();
                    return DialState::Connected(a.sock);
                }
                Ok(Step::Yield) => {
                    self.attempt = None;
                    self.waiting.clear();
                    return DialState::Yield;
                }
                Ok(Step::Pending) if now < a.deadline => return DialState::Pending,
                Ok(Step::Pending) if self.patient && !matches!(a.phase, DialPhase::Connecting) => {
                    debug!(
                        "tcp: dial rank {}: {addr} took the connection but has not answered within {:?}; waiting on it while trying the next address",
                        self.peer, cfg.addr_timeout
                    );
                    if let Some(a) = self.attempt.take() {
                        self.waiting.push((addr, a));
                    }
                    continue;
                }
                Ok(Step::Pending) => {
                    let what = match a.phase {
                        DialPhase::Connecting => "TCP connect",
                        _ => "handshake (a process that is not this job's rank?)",
                    };
                    self.tried.push(format!(
                        "{addr}: {what} timed out after {:?}",
                        cfg.addr_timeout
                    ));
                }
                Err(e) => self.tried.push(format!("{addr}: {e}")),
            }
            debug!(
                "tcp: dial rank {}: {}",
                self.peer,
                self.tried.last().map_or("", |s| s)
            );
            self.attempt = None; // closes the socket before the next address
        }
    }
}

/// Where an attempt stands after [`Attempt::step`].
enum Step {
    Pending,
    /// The ack accepted and our proof is written.
    Proved,
    /// The ack yields: the acceptor dials us instead.
    Yield,
}

impl Attempt {
    /// Advance as far as possible without blocking.
    fn step(&mut self, hello: &Hello, peer: u32, secret: &[u8]) -> Result<Step, String> {
        loop {
            match &mut self.phase {
                DialPhase::Connecting => {
                    match self.sock.take_error() {
                        Ok(None) => {}
                        Ok(Some(e)) | Err(e) => return Err(e.to_string()),
                    }
                    match self.sock.peer_addr() {
                        Ok(_) => self.phase = DialPhase::SendHello { sent: 0 },
                        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                            return Ok(Step::Pending);
                        }
                        Err(e) => return Err(e.to_string()),
                    }
                }
                DialPhase::SendHello { sent } => {
                    let bytes = hello.encode();
                    match (&self.sock).write(&bytes[*sent..]) {
                        Ok(n) => {
                            *sent += n;
                            if *sent == HELLO_LEN {
                                self.phase = DialPhase::ReadAck {
                                    buf: [0; ACK_LEN],
                                    got: 0,
                                };
                            }
                        }
                        Err(e) if would_block(&e) => return Ok(Step::Pending),
                        Err(e) => return Err(format!("sending hello: {e}")),
                    }
                }
                DialPhase::ReadAck { buf, got } => {
                    match (&self.sock).read(&mut buf[*got..]) {
                        Ok(0) => {
                            return Err(
                                "closed during the handshake (not a rankwire rank of this job?)"
                                    .into(),
                            );
                        }
                        Ok(n) => *got += n,
                        Err(e) if would_block(&e) => return Ok(Step::Pending),
                        Err(e) => return Err(format!("reading ack: {e}")),
                    }
                    if !may_be_ack(&buf[..*got]) {
                        return Err(
                            "reached a process that is not a rankwire TCP rank (bad ack magic)"
                                .into(),
                        );
                    }
                    if *got == ACK_LEN {
                        let ack_nonce = match check_ack(buf, hello, peer, secret)? {
                            AckOk::Accepted(n) => n,
                            AckOk::Yield => return Ok(Step::Yield),
                        };
                        self.phase = DialPhase::SendProof {
                            proof: proof_mac(secret, hello, &ack_nonce),
                            sent: 0,
                        };
                    }
                }
                DialPhase::SendProof { proof, sent } => match (&self.sock).write(&proof[*sent..]) {
                    Ok(n) => {
                        *sent += n;
                        if *sent == PROOF_LEN {
                            return Ok(Step::Proved);
                        }
                    }
                    Err(e) if would_block(&e) => return Ok(Step::Pending),
                    Err(e) => return Err(format!("sending proof: {e}")),
                },
            }
        }
    }
}

/// A nonblocking socket with a connect in progress to `addr`.
pub(crate) fn start_connect(addr: SocketAddr, cfg: &TcpConfig) -> io::Result<Socket> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_nonblocking(true)?;
    sock.set_tcp_nodelay(true)?;
    set_buffers(&sock, cfg);
    set_congestion(&sock, cfg);
    match sock.connect(&SockAddr::from(addr)) {
        Ok(()) => Ok(sock),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) || would_block(&e) => Ok(sock),
        Err(e) => Err(e),
    }
}

// An accepted socket in its handshake: reading the hello, writing the ack, and (if the
// ack accepts) reading the connector's proof.
pub(crate) struct Inbound {
    pub(crate) sock: Socket,
    pub(crate) from: Option<SocketAddr>,
    deadline: Instant,
    phase: InPhase,
}

pub(crate) enum InPhase {
    ReadHello {
        buf: [u8; HELLO_LEN],
        got: usize,
    },
    /// The ack being written and how much of it is; `accept`: the hello and our nonce
    /// when the ack accepts (a proof follows).
    WriteAck {
        ack: [u8; ACK_LEN],
        sent: usize,
        accept: Option<(Hello, [u8; NONCE_LEN])>,
    },
    ReadProof {
        buf: [u8; PROOF_LEN],
        got: usize,
        hello: Hello,
        nonce: [u8; NONCE_LEN],
    },
}

pub(crate) enum InState {
    Pending,
    /// Not one of this job's connectors, or not accepted (debug log).
    Drop(String),
    /// A connector that claimed to be a rank of this job but did not prove it knows the
    /// secret (warning).
    Refused(String),
    /// A connector that claimed to be a rank of this job and closed before its proof:
    /// at init a warning; on demand also what the real rank does with a dial it gives up
    /// (debug there).
    Abandoned(String),
    Accepted(u32),
}

pub(crate) struct Acceptor<'a> {
    pub(crate) my_rank: u32,
    pub(crate) size: u32,
    pub(crate) job_hash: u64,
    pub(crate) secret: &'a [u8],
    /// The connectors admitted at init (unused by connections on demand).
    pub(crate) expect: &'a [u32],
}

/// The acceptor's decisions that depend on its connection state: at init
/// ([`AtInit`]) or on demand (`ondemand.rs`).
pub(crate) trait Admit {
    /// The status to answer a decoded `hello` with.
    fn judge(&mut self, hello: &Hello) -> AckStatus;
    /// After a valid proof from `connector`: `Err(why)` if the connection is not wanted
    /// after all (a duplicate that completed meanwhile).
    fn confirm(&mut self, connector: u32) -> Result<(), String>;
}

/// [`Admit`] for setup at init: the expected connectors, one live connection each.
struct AtInit<'a, 'b> {
    acc: &'a Acceptor<'b>,
    accepted: &'a mut BTreeMap<u32, Socket>,
}

impl Admit for AtInit<'_, '_> {
    fn judge(&mut self, hello: &Hello) -> AckStatus {
        self.acc.judge(hello, self.accepted)
    }

    fn confirm(&mut self, connector: u32) -> Result<(), String> {
        match self.accepted.get(&connector) {
            Some(old) if is_alive(old) => Err(format!("rank {connector} is connected already")),
            _ => Ok(()),
        }
    }
}

impl Inbound {
    /// An accepted socket about to read a hello; the handshake must end by
    /// `deadline`.
    pub(crate) fn new(sock: Socket, from: Option<SocketAddr>, deadline: Instant) -> Inbound {
        Inbound {
            sock,
            from,
            deadline,
            phase: InPhase::ReadHello {
                buf: [0; HELLO_LEN],
                got: 0,
            },
        }
    }

    /// Whether the handshake waits to write (the ack) rather than to read.
    pub(crate) fn wants_write(&self) -> bool {
        matches!(self.phase, InPhase::WriteAck { .. })
    }

    /// The rank this connector claims to be, once its hello was answered with an
    /// accepting ack (its proof is still to come); `None` before or after.
    pub(crate) fn claimed_accepted(&self) -> Option<u32> {
        match &self.phase {
            InPhase::WriteAck {
                accept: Some((hello, _)),
                ..
            }
            | InPhase::ReadProof { hello, .. } => Some(hello.connector),
            _ => None,
        }
    }

    /// Advance without blocking (module doc).
    pub(crate) fn progress(
        &mut self,
        acc: &Acceptor<'_>,
        admit: &mut dyn Admit,
        now: Instant,
    ) -> InState {
        loop {
            match &mut self.phase {
                InPhase::ReadHello { buf, got } => {
                    match (&self.sock).read(&mut buf[*got..]) {
                        Ok(0) => return InState::Drop("closed before a full hello".into()),
                        Ok(n) => *got += n,
                        Err(e) if would_block(&e) => break,
                        Err(e) => return InState::Drop(format!("reading hello: {e}")),
                    }
                    if *got < HELLO_LEN {
                        continue;
                    }
                    let Some(hello) = Hello::decode(buf) else {
                        return InState::Drop(
                            "bad hello magic (not a rankwire TCP connector)".into(),
                        );
                    };
                    let status = match acc.check(&hello) {
                        Some(bad) => bad,
                        None => admit.judge(&hello),
                    };
                    let nonce = nonce();
                    let ack = Ack {
                        version: PROTOCOL_VERSION,
                        status: status as u32,
                        acceptor: acc.my_rank,
                        world_size: acc.size,
                        job_hash: acc.job_hash,
                        nonce,
                        mac: ack_mac(acc.secret, &hello, status as u32, acc.my_rank, &nonce),
                    };
                    if status != AckStatus::Accepted {
                        debug!(
                            "tcp: rank {} rejects hello {hello:?} from {:?}: {status:?}",
                            acc.my_rank, self.from
                        );
                    }
                    self.phase = InPhase::WriteAck {
                        ack: ack.encode(),
                        sent: 0,
                        accept: (status == AckStatus::Accepted).then_some((hello, nonce)),
                    };
                }
                InPhase::WriteAck { ack, sent, accept } => {
                    if *sent == ACK_LEN {
                        let Some((hello, nonce)) = accept.take() else {
                            return InState::Drop("rejected (ack sent)".into());
                        };
                        self.phase = InPhase::ReadProof {
                            buf: [0; PROOF_LEN],
                            got: 0,
                            hello,
                            nonce,
                        };
                        continue;
                    }
                    match (&self.sock).write(&ack[*sent..]) {
                        Ok(n) => *sent += n,
                        Err(e) if would_block(&e) => break,
                        Err(e) => return InState::Drop(format!("writing ack: {e}")),
                    }
                }
                InPhase::ReadProof {
                    buf,
                    got,
                    hello,
                    nonce,
                } => {
                    match (&self.sock).read(&mut buf[*got..]) {
                        Ok(0) => {
                            return InState::Abandoned(format!(
                                "it claimed to be rank {} but closed before proving it knows the job secret",
                                hello.connector
                            ));
                        }
                        Ok(n) => *got += n,
                        Err(e) if would_block(&e) => break,
                        Err(e) => return InState::Drop(format!("reading proof: {e}")),
                    }
                    if *got < PROOF_LEN {
                        continue;
                    }
                    if !check_proof(acc.secret, hello, nonce, buf) {
                        return InState::Refused(format!(
                            "it claimed to be rank {} but its proof of the job secret is wrong (not a rank of this job, or a replayed handshake)",
                            hello.connector
                        ));
                    }
                    // The duplicate check again: a valid rank may have completed meanwhile.
                    if let Err(why) = admit.confirm(hello.connector) {
                        return InState::Drop(why);
                    }
                    return InState::Accepted(hello.connector);
                }
            }
        }
        if now >= self.deadline {
            return match &self.phase {
                InPhase::ReadProof { hello, .. } => InState::Refused(format!(
                    "it claimed to be rank {} but sent no proof of the job secret in time",
                    hello.connector
                )),
                _ => InState::Drop("handshake timed out".into()),
            };
        }
        InState::Pending
    }
}

impl Acceptor<'_> {
    /// The checks that do not depend on connection state: `Some(status)` rejects.
    pub(crate) fn check(&self, h: &Hello) -> Option<AckStatus> {
        if h.version != PROTOCOL_VERSION {
            return Some(AckStatus::BadVersion);
        }
        if h.job_hash != self.job_hash {
            return Some(AckStatus::WrongJob);
        }
        if h.world_size != self.size {
            return Some(AckStatus::WrongSize);
        }
        if h.acceptor != self.my_rank {
            return Some(AckStatus::WrongRank);
        }
        None
    }

    fn judge(&self, h: &Hello, accepted: &mut BTreeMap<u32, Socket>) -> AckStatus {
        if let Some(bad) = self.check(h) {
            return bad;
        }
        if !self.expect.contains(&h.connector) {
            return AckStatus::UnexpectedConnector;
        }
        if let Some(old) = accepted.get(&h.connector) {
            // The connector gives up an attempt (timeout) before trying its next address,
            // closing the socket; if the old connection is gone, this one replaces it.
            if is_alive(old) {
                return AckStatus::Duplicate;
            }
            accepted.remove(&h.connector);
        }
        AckStatus::Accepted
    }
}

/// Log an `accept(2)` failure other than would-block: running out of descriptors
/// (`EMFILE`, `ENFILE`) as a warning, once per `warned`, since peers then cannot connect
/// until a descriptor is free; anything else (`ECONNABORTED`: a connector gave up) at
/// debug level.
pub(crate) fn log_accept_error(my_rank: u32, e: &io::Error, warned: &mut bool) {
    match e.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE) if !*warned => {
            *warned = true;
            tracing::warn!(
                "tcp: rank {my_rank} cannot accept connections: {e} (RLIMIT_NOFILE: raise `ulimit -n`); peers connecting to it wait until a descriptor is free"
            );
        }
        _ => debug!("tcp: rank {my_rank}: accept: {e}"),
    }
}

/// A connection is alive unless a nonblocking peek sees end of stream or an error.
pub(crate) fn is_alive(sock: &Socket) -> bool {
    let mut b = [MaybeUninit::<u8>::uninit(); 1];
    match sock.peek(&mut b) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => would_block(&e),
    }
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

pub(crate) fn dial_error(d: &Dial, cfg: &TcpConfig, what: &str) -> TransportError {
    let tried = if d.tried.is_empty() {
        "none (the peer published no address: check its interface selection)".to_string()
    } else {
        d.tried.join("; ")
    };
    TransportError::Connect {
        transport: "tcp",
        peer: d.peer,
        reason: format!(
            "{what}; tried {} of {} addresses: {tried}; {}",
            d.tried.len(),
            d.addrs.len(),
            cfg.selection_hint()
        ),
    }
}

fn deadline_error(
    dials: &[Dial],
    expect: &[u32],
    accepted: &BTreeMap<u32, Socket>,
    cfg: &TcpConfig,
    my_addrs: &[SocketAddr],
    my_rank: u32,
) -> TransportError {
    if let Some(d) = dials.first() {
        return dial_error(
            d,
            cfg,
            &format!(
                "no connection within {:?} ({} still in progress)",
                cfg.connect_timeout,
                d.addrs
                    .get(d.next.wrapping_sub(1))
                    .map_or("none".into(), |a| a.to_string())
            ),
        );
    }
    let missing: Vec<u32> = expect
        .iter()
        .copied()
        .filter(|r| !accepted.contains_key(r))
        .collect();
    let list: Vec<String> = my_addrs.iter().map(|a| a.to_string()).collect();
    TransportError::Connect {
        transport: "tcp",
        peer: missing.first().copied().unwrap_or(my_rank),
        reason: format!(
            "rank(s) {missing:?} did not connect to rank {my_rank} within {:?}; rank {my_rank} \
             listens on [{}] (did they fail, or can they not reach these addresses?); {}",
            cfg.connect_timeout,
            list.join(", "),
            cfg.selection_hint()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"the job secret, 32 bytes long...";

    /// A connected pair of sockets over 127.0.0.1.
    fn pair() -> (Socket, Socket) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        b.set_nonblocking(true).unwrap();
        (Socket::from(a), Socket::from(b))
    }

    /// A connected pair made as the transport makes them (listener and connector
    /// configured by `cfg`): (connector, accepted).
    fn configured_pair(cfg: &TcpConfig) -> (Socket, Socket) {
        // 127.0.0.1 also reaches a dual-stack listener, and every host has it.
        let (l, _) = bind_listener(cfg, 4).unwrap();
        let port = l.local_addr().unwrap().as_socket().unwrap().port();
        let c = start_connect(SocketAddr::from(([127, 0, 0, 1], port)), cfg).unwrap();
        let t0 = std::time::Instant::now();
        loop {
            match l.accept() {
                Ok((a, _)) => return (c, a),
                Err(e) if would_block(&e) && t0.elapsed().as_secs() < 10 => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                Err(e) => panic!("accept: {e}"),
            }
        }
    }

    #[test]
    fn connections_get_the_configured_congestion_control() {
        use crate::tcp::Congestion;
        // The name as the kernel returns it, without the NUL padding of its buffer.
        let name = |s: &Socket| {
            let mut v = s.tcp_congestion().unwrap();
            v.retain(|&b| b != 0);
            String::from_utf8(v).unwrap()
        };
        let fresh = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        let system = name(&fresh);
        // Named: reno, which every process may set (tcp(7)).
        let cfg = TcpConfig {
            congestion: Congestion::Named("reno".into()),
            ..TcpConfig::default()
        };
        let (c, a) = configured_pair(&cfg);
        assert_eq!((name(&c).as_str(), name(&a).as_str()), ("reno", "reno"));
        // System: untouched.
        let cfg = TcpConfig {
            congestion: Congestion::System,
            ..TcpConfig::default()
        };
        let (c, a) = configured_pair(&cfg);
        assert_eq!((name(&c), name(&a)), (system.clone(), system.clone()));
        // Auto: never BBR; the kernel's default where that is not BBR.
        let (c, a) = configured_pair(&TcpConfig::default());
        for s in [&c, &a] {
            let got = name(s);
            if system.starts_with("bbr") {
                assert!(got == "cubic" || got == "reno", "auto under BBR gave {got}");
            } else {
                assert_eq!(got, system);
            }
        }
        eprintln!("kernel default {system}; auto gave {}", name(&c));
    }

    #[test]
    fn acceptor_judges_hellos() {
        let acc = Acceptor {
            my_rank: 0,
            size: 3,
            job_hash: 5,
            secret: SECRET,
            expect: &[1, 2],
        };
        let good = Hello {
            version: PROTOCOL_VERSION,
            connector: 1,
            acceptor: 0,
            world_size: 3,
            job_hash: 5,
            nonce: [0; NONCE_LEN],
        };
        let mut accepted = BTreeMap::new();
        let judge = |h: Hello, acc_map: &mut BTreeMap<u32, Socket>| acc.judge(&h, acc_map);
        assert_eq!(judge(good, &mut accepted), AckStatus::Accepted);
        assert_eq!(
            judge(Hello { version: 9, ..good }, &mut accepted),
            AckStatus::BadVersion
        );
        assert_eq!(
            judge(
                Hello {
                    job_hash: 6,
                    ..good
                },
                &mut accepted
            ),
            AckStatus::WrongJob
        );
        assert_eq!(
            judge(
                Hello {
                    world_size: 4,
                    ..good
                },
                &mut accepted
            ),
            AckStatus::WrongSize
        );
        assert_eq!(
            judge(
                Hello {
                    acceptor: 2,
                    ..good
                },
                &mut accepted
            ),
            AckStatus::WrongRank
        );
        for connector in [0, 3, 99] {
            assert_eq!(
                judge(Hello { connector, ..good }, &mut accepted),
                AckStatus::UnexpectedConnector
            );
        }
        // A live connection from rank 1 makes a second one a duplicate...
        let (remote, local) = pair();
        accepted.insert(1, local);
        assert_eq!(judge(good, &mut accepted), AckStatus::Duplicate);
        // ...but once the connector has closed it (it gave up on that attempt), the new
        // hello replaces it.
        drop(remote);
        let end = Instant::now() + Duration::from_secs(5);
        while is_alive(&accepted[&1]) {
            assert!(Instant::now() < end);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(judge(good, &mut accepted), AckStatus::Accepted);
        assert!(accepted.is_empty());
    }

    /// Drive an acceptor's handshake on `sock` until it ends; the peer side is a thread.
    fn accept_one(sock: Socket, accepted: &mut BTreeMap<u32, Socket>) -> InState {
        let acc = Acceptor {
            my_rank: 0,
            size: 2,
            job_hash: 5,
            secret: SECRET,
            expect: &[1],
        };
        let mut ib = Inbound {
            sock,
            from: None,
            deadline: Instant::now() + Duration::from_secs(10),
            phase: InPhase::ReadHello {
                buf: [0; HELLO_LEN],
                got: 0,
            },
        };
        loop {
            let mut admit = AtInit {
                acc: &acc,
                accepted: &mut *accepted,
            };
            match ib.progress(&acc, &mut admit, Instant::now()) {
                InState::Pending => std::thread::sleep(Duration::from_millis(1)),
                done => return done,
            }
        }
    }

    /// What a connector does, by hand: hello, read the ack, answer with `proof(ack)`.
    /// Returns the bytes it sent.
    fn connector(
        mut sock: Socket,
        hello: Hello,
        proof: impl Fn(&[u8; ACK_LEN]) -> [u8; PROOF_LEN],
    ) -> Vec<u8> {
        sock.write_all(&hello.encode()).unwrap();
        let mut ack = [0u8; ACK_LEN];
        sock.read_exact(&mut ack).unwrap();
        let p = proof(&ack);
        sock.write_all(&p).unwrap();
        // Keep the socket open until the acceptor decided.
        let mut b = [0u8; 1];
        let _ = sock.read(&mut b);
        let mut sent = hello.encode().to_vec();
        sent.extend_from_slice(&p);
        sent
    }

    /// Issue 21: a process that knows the job id (the job hash) and a rank's address but
    /// not the secret is refused; so is a recorded genuine handshake played again; the
    /// genuine one is accepted.
    #[test]
    fn only_a_connector_that_knows_the_secret_is_accepted_and_a_replay_is_refused() {
        let hello = Hello {
            version: PROTOCOL_VERSION,
            connector: 1,
            acceptor: 0,
            world_size: 2,
            job_hash: 5,
            nonce: nonce(),
        };
        let mut accepted = BTreeMap::new();
        // Without the secret: any proof is wrong.
        let (c, a) = pair();
        let t = std::thread::spawn(move || connector(c, hello, |_| [0x42; PROOF_LEN]));
        match accept_one(a, &mut accepted) {
            InState::Refused(why) => {
                assert!(why.contains("proof of the job secret is wrong"), "{why}")
            }
            _ => panic!("a connector without the secret was not refused"),
        }
        drop(t.join());
        // Claiming a rank and closing before the proof: refused as well.
        let (mut c, a) = pair();
        let t = std::thread::spawn(move || {
            c.write_all(&hello.encode()).unwrap();
            let mut ack = [0u8; ACK_LEN];
            c.read_exact(&mut ack).unwrap();
        });
        assert!(matches!(
            accept_one(a, &mut accepted),
            InState::Abandoned(_)
        ));
        t.join().unwrap();
        assert!(accepted.is_empty());
        // The genuine connector: the ack's MAC checks out and its proof is accepted.
        let (c, a) = pair();
        let t = std::thread::spawn(move || {
            connector(c, hello, |ack| {
                let AckOk::Accepted(na) = check_ack(ack, &hello, 0, SECRET).unwrap() else {
                    panic!("the acceptor yielded")
                };
                proof_mac(SECRET, &hello, &na)
            })
        });
        let recorded = match accept_one(a, &mut accepted) {
            InState::Accepted(1) => t.join().unwrap(),
            _ => panic!("the genuine connector was not accepted"),
        };
        // Replaying those exact bytes meets a fresh acceptor nonce.
        let mut fresh = BTreeMap::new();
        let (mut c, a) = pair();
        let t = std::thread::spawn(move || {
            c.write_all(&recorded[..HELLO_LEN]).unwrap();
            let mut ack = [0u8; ACK_LEN];
            c.read_exact(&mut ack).unwrap();
            c.write_all(&recorded[HELLO_LEN..]).unwrap();
            let mut b = [0u8; 1];
            let _ = c.read(&mut b);
        });
        match accept_one(a, &mut fresh) {
            InState::Refused(why) => assert!(why.contains("replayed"), "{why}"),
            _ => panic!("a replayed handshake was not refused"),
        }
        drop(t.join());
    }
}
