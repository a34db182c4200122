//! Connections on demand ([`ConnectMode::OnDemand`], the default): a connection to a
//! peer is made at the first frame to it, by either side, while the listener stays open
//! for the whole job.
//!
//! # How
//! - [`TcpTransport::send`] to a listed peer with no connection reads the peer's address
//!   record (`tcp-addr-<rank>`: through the [`Lookup`] at the first use, or from the
//!   records read at init where no lookup was given), starts a nonblocking dial
//!   (`setup::Dial`: candidate addresses in order, `addr_timeout` each) and queues the
//!   frame. Frames queued meanwhile are written, in order, right after the handshake.
//! - The listener and every socket in its handshake are in the transport's epoll set
//!   (tokens [`LISTENER_TOKEN`] and [`HS_TOKEN_BASE`]` + n`, above every rank); `poll`
//!   steps whichever is ready. The handshake is the one of setup at init (hello, ack,
//!   proof: `handshake.rs`), so the job secret admits every connection alike.
//! - **Both ranks dialling each other at once** keep the lower rank's connection: an
//!   acceptor that is dialling the connector itself answers [`AckStatus::Yield`] when its
//!   rank is the lower one (the connector drops its attempt and waits for ours), and
//!   otherwise accepts and drops its own dial. The same rule at both ends leaves exactly
//!   one connection, with no extra round trip (a fixed tie-break by rank, so both ends
//!   decide alike without talking). A yield carries a MAC, so a process without the
//!   secret cannot make a rank wait.
//! - **A rank does not dial a peer whose connection to it is past an accepting ack**
//!   (its proof still to come): its first frame to that peer waits for that connection
//!   ([`How::Inbound`]) and dials only if it ends without a valid proof. Otherwise the two
//!   dials can cross: the lower rank answered the higher rank's hello while not dialling
//!   (accepted), then dialled; the higher rank, dialling, accepted that hello too; each
//!   dial then got its accepting ack and sent its proof, so each rank took its own dial
//!   as the connection and dropped the other's proof as a duplicate, and the first frame
//!   on either met a reset (found with 8 ranks making RDMA queue pairs on demand, where
//!   every pair wires up at once: `connection to rank 0 lost: Connection reset by
//!   peer`). A connection that claims a rank and never proves it delays our own dial to
//!   that rank by at most [`PROOF_WAIT`] (2 s).
//! - A hello proves nothing (anyone who knows the job id can send one), so answering it
//!   changes no state: the connector's slot is taken, and our own dial to it dropped,
//!   only when its proof is valid ([`Admit::confirm`]). Several hellos may claim one rank
//!   at once (a process without the secret besides the real rank): the first valid proof
//!   wins, and an unproven claim cannot keep us from dialling the real rank.
//! - A hello from a rank we are connected to already (our dial, which it has not taken
//!   in yet) is answered with a yield as well.
//! - **Bounds**: a peer none of whose addresses takes the TCP connection within
//!   `connect_timeout` of its first frame (or of a yield) fails with
//!   [`TransportError::Connect`] naming every address tried, as at init. A peer whose
//!   kernel took the connection but which has not answered the handshake is alive and
//!   not polling (computing between MPI calls, which a program may do for any time):
//!   that attempt is kept open past `addr_timeout` while the next address is tried, and
//!   past `connect_timeout` the dial keeps waiting with a warning, instead of failing a
//!   legal program. At most [`MAX_PENDING_ACCEPTS`] accepted
//!   sockets are in their handshake at once; more connections wait in the listen backlog
//!   (bounded by their dialers' `addr_timeout`), so a flood of connections cannot use up
//!   the descriptors.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use socket2::Socket;
use tracing::{debug, warn};

use super::config::{ConnectMode, TcpConfig};
use super::conn::{Conn, ENVELOPE_LEN, envelope};
use super::handshake::{AckStatus, Hello, NONCE_LEN, PROTOCOL_VERSION, decode_record};
use super::setup::{
    Acceptor, Admit, Dial, DialState, InState, Inbound, dial_error, log_accept_error,
};
use super::{NAME, Slot, TcpTransport, sys};
use crate::{Event, Lookup, TransportError};

/// The listener's epoll token (above every rank and handshake token).
pub(crate) const LISTENER_TOKEN: u64 = u64::MAX;
/// Tokens of sockets in their handshake start here (ranks are below 2^32).
pub(crate) const HS_TOKEN_BASE: u64 = 1 << 32;
/// Accepted sockets in their handshake at once; more connections wait in the listen
/// backlog (a flood of connections must not use up the descriptors).
pub const MAX_PENDING_ACCEPTS: usize = 1024;
/// How often the deadlines of handshakes and yields are checked while some exist.
const SWEEP_EVERY: Duration = Duration::from_millis(10);
/// How long a first frame waits for a peer's connection to us that is past its
/// accepting ack ([`How::Inbound`]) before we dial the peer ourselves (at most
/// `addr_timeout`). A real peer sends its proof at its next progress call after the ack,
/// well within this; a process that claims the rank and never proves it (it knows the
/// job id, not the secret) delays our dial by no more than this.
const PROOF_WAIT: Duration = Duration::from_secs(2);

/// State of connections on demand (owned by the transport).
pub(crate) struct OnDemand {
    pub(crate) listener: Socket,
    pub(crate) secret: Vec<u8>,
    pub(crate) job_hash: u64,
    pub(crate) size: u32,
    pub(crate) cfg: TcpConfig,
    /// Per world rank: may connect with us (a listed peer).
    pub(crate) listed: Vec<bool>,
    /// Our published addresses: a connection that arrives on another is dropped.
    pub(crate) mine: Vec<SocketAddr>,
    /// Address records read at init (no lookup) or at first use, by rank.
    pub(crate) addrs: Vec<Option<Vec<SocketAddr>>>,
    pub(crate) lookup: Option<Box<dyn Lookup>>,
    /// Sockets in their handshake, by token.
    hs: std::collections::BTreeMap<u64, Hs>,
    next_token: u64,
    accepts: usize,
    accept_warned: bool,
    next_sweep: Instant,
    /// Peers that yielded to us (their dial is awaited); entries whose slot moved on
    /// are dropped by the next sweep.
    yielded: Vec<u32>,
    /// Peers whose connection to us we wait for ([`How::Inbound`]); entries whose slot
    /// moved on are dropped by the next sweep.
    awaited: Vec<u32>,
}

/// A frame queue for a peer whose connection is being made.
pub(crate) struct Pending {
    /// Framed bytes (envelope, header, payload), in order.
    out: Vec<Vec<u8>>,
    bytes: usize,
    /// Deadline of the connection: first frame (or yield) + `connect_timeout`.
    deadline: Instant,
    how: How,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    /// Our dial, by handshake token.
    Dialing(u64),
    /// The peer answered our dial with a yield: it dials us.
    Yielded,
    /// A connection from the peer is in its handshake, its hello answered with an
    /// accepting ack: its proof makes it the peer's connection. Dialling now could
    /// cross it (module doc, "Both ranks dialling"), so we wait for it and dial only if
    /// it ends without a valid proof.
    Inbound,
}

struct Hs {
    kind: Kind,
    /// What the epoll set holds for this token: (attempt, wants write).
    reg: Option<(usize, bool)>,
    /// Whether the late-ack warning was logged (a dial past its deadline).
    warned: bool,
}

/// A dial on demand waits for a peer that took the connection but is busy (module doc).
fn patient(mut d: Dial) -> Dial {
    d.patient = true;
    d
}

enum Kind {
    Out(Dial),
    In(Inbound),
}

/// What a handshake step leaves to do.
enum After {
    Keep,
    Open(u32, Socket),
    Fail(u32, TransportError),
    /// The inbound connection we waited for ([`How::Inbound`]) ended without a valid
    /// proof: dial the peer ourselves.
    Dial(u32),
}

impl OnDemand {
    pub(crate) fn new(
        listener: Socket,
        secret: &[u8],
        job_hash: u64,
        size: u32,
        cfg: TcpConfig,
        listed: Vec<bool>,
        mine: Vec<SocketAddr>,
    ) -> OnDemand {
        debug_assert_eq!(cfg.connect, ConnectMode::OnDemand);
        OnDemand {
            listener,
            secret: secret.to_vec(),
            job_hash,
            size,
            cfg,
            addrs: vec![None; listed.len()],
            listed,
            mine,
            lookup: None,
            hs: std::collections::BTreeMap::new(),
            next_token: HS_TOKEN_BASE,
            accepts: 0,
            accept_warned: false,
            next_sweep: Instant::now(),
            yielded: Vec::new(),
            awaited: Vec::new(),
        }
    }

    /// Whether handshakes are in progress (they need `poll` to look at more than the
    /// connected peers).
    pub(crate) fn busy(&self) -> bool {
        !self.hs.is_empty()
    }

    /// Whether handshakes or awaited yields need `poll` to check their deadlines.
    fn waiting(&self) -> bool {
        !self.hs.is_empty() || !self.yielded.is_empty() || !self.awaited.is_empty()
    }

    /// Whether a connection claiming to be `peer` is in its handshake past an accepting
    /// ack (its proof, which would make it `peer`'s connection, is awaited).
    fn inbound_from(&self, peer: u32) -> bool {
        self.hs.values().any(|h| match &h.kind {
            Kind::In(ib) => ib.claimed_accepted() == Some(peer),
            Kind::Out(_) => false,
        })
    }

    fn token(&mut self) -> u64 {
        let t = self.next_token;
        self.next_token += 1;
        t
    }

    /// The candidate addresses of `peer` (read through the lookup at the first use).
    fn addrs_of(&mut self, peer: u32) -> Result<Vec<SocketAddr>, TransportError> {
        let connect_err = |reason: String| TransportError::Connect {
            transport: NAME,
            peer,
            reason,
        };
        if let Some(a) = &self.addrs[peer as usize] {
            return Ok(a.clone());
        }
        let Some(lookup) = self.lookup.as_mut() else {
            return Err(connect_err(
                "its address was not read at init and no bootstrap lookup is set".into(),
            ));
        };
        let raw = lookup
            .get(peer, &format!("tcp-addr-{peer}"))
            .map_err(|e| connect_err(format!("bootstrap get of its address failed: {e}")))?;
        let addrs = decode_record(&raw).map_err(connect_err)?;
        debug!("tcp: address of rank {peer}: {addrs:?}");
        self.addrs[peer as usize] = Some(addrs.clone());
        Ok(addrs)
    }
}

/// [`Admit`] on demand: a valid proof takes the connector's slot unless a connection to
/// it exists (module doc); a hello alone changes nothing.
struct OnDemandAdmit<'a> {
    my_rank: u32,
    peers: &'a [Slot],
    listed: &'a [bool],
    /// Our dial to drop: the connector's proven connection replaces it.
    cancel: Option<u64>,
}

impl Admit for OnDemandAdmit<'_> {
    /// Answer a hello without changing any state: a hello proves nothing (anyone who
    /// knows the job id can send one), so the slot is taken, and our own dial dropped,
    /// only in [`Admit::confirm`], after a valid proof.
    fn judge(&mut self, hello: &Hello) -> AckStatus {
        let c = hello.connector;
        if c == self.my_rank || !self.listed.get(c as usize).copied().unwrap_or(false) {
            return AckStatus::UnexpectedConnector;
        }
        match &self.peers[c as usize] {
            // Both dialling: the lower rank's dial is kept.
            Slot::Pending(p) if matches!(p.how, How::Dialing(_)) && self.my_rank < c => {
                AckStatus::Yield
            }
            Slot::NotConnected | Slot::Pending(_) => AckStatus::Accepted,
            // We are connected to it (our dial, which it has not taken in yet): it is to
            // use that one.
            Slot::Open(_) => AckStatus::Yield,
            Slot::Failed(_) | Slot::Closed => AckStatus::Failed,
        }
    }

    /// A valid proof from `c`: this connection becomes `c`'s (the caller opens it in
    /// the same step), replacing our dial (the higher rank drops its own) or a yield we
    /// were waiting on. The first valid proof wins: a later one finds the slot open.
    fn confirm(&mut self, c: u32) -> Result<(), String> {
        match &self.peers[c as usize] {
            Slot::NotConnected => Ok(()),
            Slot::Pending(p) => {
                if let How::Dialing(ours) = p.how {
                    self.cancel = Some(ours);
                }
                Ok(())
            }
            Slot::Open(_) | Slot::Failed(_) | Slot::Closed => {
                Err(format!("rank {c} is connected already"))
            }
        }
    }
}

impl TcpTransport {
    /// Queue a frame for `peer`, starting its connection if there is none yet
    /// ([`TcpTransport::send`] on demand).
    pub(crate) fn send_pending(
        &mut self,
        peer: u32,
        header: &[u8],
        payload: &[u8],
    ) -> Result<crate::SendOutcome, TransportError> {
        if matches!(self.peers[peer as usize], Slot::NotConnected) {
            self.start(peer)?;
        }
        let high_water = self.high_water;
        match &mut self.peers[peer as usize] {
            Slot::Pending(p) => {
                if p.bytes >= high_water {
                    return Ok(crate::SendOutcome::Busy);
                }
                let mut frame = Vec::with_capacity(ENVELOPE_LEN + header.len() + payload.len());
                frame.extend_from_slice(&envelope(header.len(), payload.len()));
                frame.extend_from_slice(header);
                frame.extend_from_slice(payload);
                p.bytes += frame.len();
                p.out.push(frame);
                Ok(crate::SendOutcome::Sent)
            }
            // The dial finished at once (or failed): send as usual.
            _ => self.send_now(peer, header, payload),
        }
    }

    /// Make `peer`'s connection (its slot is `NotConnected`): wait for its connection
    /// to us where one is in its handshake past an accepting ack, else dial it.
    fn start(&mut self, peer: u32) -> Result<(), TransportError> {
        let Some(od) = self.od.as_ref() else {
            return Err(TransportError::NoSuchPeer {
                transport: NAME,
                peer,
            });
        };
        if od.inbound_from(peer) {
            debug!(
                "tcp: rank {} waits for the connection rank {peer} is making to it",
                self.rank
            );
            self.peers[peer as usize] = Slot::Pending(Box::new(Pending {
                out: Vec::new(),
                bytes: 0,
                deadline: Instant::now() + PROOF_WAIT.min(od.cfg.addr_timeout),
                how: How::Inbound,
            }));
            if let Some(od) = self.od.as_mut() {
                od.awaited.push(peer);
            }
            return Ok(());
        }
        self.dial(peer)
    }

    /// Start dialling `peer` (its slot is `NotConnected`, or `Pending` with frames
    /// queued, which stay queued).
    fn dial(&mut self, peer: u32) -> Result<(), TransportError> {
        let Some(od) = self.od.as_mut() else {
            return Err(TransportError::NoSuchPeer {
                transport: NAME,
                peer,
            });
        };
        let addrs = od.addrs_of(peer)?;
        debug!("tcp: rank {} dials rank {peer} at {addrs:?}", self.rank);
        let token = od.token();
        od.hs.insert(
            token,
            Hs {
                kind: Kind::Out(patient(Dial::new(peer, addrs))),
                reg: None,
                warned: false,
            },
        );
        let now = Instant::now();
        let (out, bytes, deadline) =
            match std::mem::replace(&mut self.peers[peer as usize], Slot::NotConnected) {
                Slot::Pending(p) => (p.out, p.bytes, p.deadline.max(now + od.cfg.connect_timeout)),
                _ => (Vec::new(), 0, now + od.cfg.connect_timeout),
            };
        self.peers[peer as usize] = Slot::Pending(Box::new(Pending {
            out,
            bytes,
            deadline,
            how: How::Dialing(token),
        }));
        let mut sink = std::mem::take(&mut self.pending);
        self.step_hs(token, &mut sink);
        self.pending = sink;
        Ok(())
    }

    /// Accept every connection waiting at the listener.
    pub(crate) fn accept_all(&mut self, events: &mut Vec<Event>) {
        let Some(od) = self.od.as_mut() else {
            return;
        };
        let mut fresh = Vec::new();
        // At the bound, further connections wait in the listen backlog (their dialers'
        // `addr_timeout` bounds that) until handshakes in progress end.
        while od.accepts < MAX_PENDING_ACCEPTS {
            match od.listener.accept() {
                Ok((sock, from)) => {
                    if let Err(why) = super::setup::arrived_on_published(&sock, &od.mine) {
                        debug!(
                            "tcp: rank {} dropped a connection from {from:?}: {why}",
                            self.rank
                        );
                        continue;
                    }
                    if let Err(e) = sock.set_nonblocking(true) {
                        debug!("tcp: dropping accepted connection: set_nonblocking: {e}");
                        continue;
                    }
                    let deadline = Instant::now() + od.cfg.addr_timeout;
                    let token = od.token();
                    od.accepts += 1;
                    od.hs.insert(
                        token,
                        Hs {
                            kind: Kind::In(Inbound::new(sock, from.as_socket(), deadline)),
                            reg: None,
                            warned: false,
                        },
                    );
                    fresh.push(token);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log_accept_error(self.rank, &e, &mut od.accept_warned);
                    break;
                }
            }
        }
        for token in fresh {
            self.step_hs(token, events);
        }
    }

    /// Advance the handshake `token` as far as it goes without blocking and act on its
    /// end (module doc).
    pub(crate) fn step_hs(&mut self, token: u64, events: &mut Vec<Event>) {
        let after = self.advance(token);
        match after {
            After::Keep => {}
            After::Open(peer, sock) => self.open_peer(peer, sock, events),
            After::Fail(peer, err) => self.fail_pending(peer, err, events),
            After::Dial(peer) => {
                if let Err(err) = self.dial(peer) {
                    self.fail_pending(peer, err, events);
                }
            }
        }
        self.refresh_direct();
    }

    /// The part of [`TcpTransport::step_hs`] that needs the handshake borrowed.
    fn advance(&mut self, token: u64) -> After {
        let my_rank = self.rank;
        let Some(od) = self.od.as_mut() else {
            return After::Keep;
        };
        let Some(mut hs) = od.hs.remove(&token) else {
            return After::Keep;
        };
        let now = Instant::now();
        match &mut hs.kind {
            Kind::Out(dial) => {
                let peer = dial.peer;
                let me = Hello {
                    version: PROTOCOL_VERSION,
                    connector: my_rank,
                    acceptor: 0,
                    world_size: od.size,
                    job_hash: od.job_hash,
                    nonce: [0; NONCE_LEN],
                };
                let state = dial.progress(&me, &od.secret, &od.cfg, now);
                let deadline = match &self.peers[peer as usize] {
                    Slot::Pending(p) => p.deadline,
                    _ => now,
                };
                match state {
                    DialState::Pending if now < deadline => {
                        update_reg(&self.epoll, token, &mut hs);
                        od.hs.insert(token, hs);
                        After::Keep
                    }
                    // The peer's kernel took the connection, but the peer has not
                    // answered: it is alive (its listener is open) and not polling,
                    // e.g. computing. An MPI program may do that for any time: wait, and
                    // say so once.
                    DialState::Pending if dial.awaiting_ack() => {
                        if !hs.warned {
                            hs.warned = true;
                            warn!(
                                "tcp: rank {my_rank} has waited {:?} for rank {peer} to answer its connection (the connection is up; rank {peer} may be busy without calling rankwire); still waiting. Addresses tried: {}",
                                od.cfg.connect_timeout,
                                if dial.tried.is_empty() {
                                    "none failed".to_string()
                                } else {
                                    dial.tried.join("; ")
                                }
                            );
                        }
                        update_reg(&self.epoll, token, &mut hs);
                        od.hs.insert(token, hs);
                        After::Keep
                    }
                    DialState::Pending => After::Fail(
                        peer,
                        dial_error(
                            dial,
                            &od.cfg,
                            &format!(
                                "no connection within {:?} of the first message to it",
                                od.cfg.connect_timeout
                            ),
                        ),
                    ),
                    DialState::Exhausted => After::Fail(
                        peer,
                        dial_error(dial, &od.cfg, "every candidate address failed"),
                    ),
                    DialState::Yield => {
                        debug!("tcp: rank {peer} yields to rank {my_rank}: it dials us");
                        if let Slot::Pending(p) = &mut self.peers[peer as usize] {
                            p.how = How::Yielded;
                            p.deadline = p.deadline.max(now + od.cfg.connect_timeout);
                            if !od.yielded.contains(&peer) {
                                od.yielded.push(peer);
                            }
                        }
                        After::Keep
                    }
                    DialState::Connected(sock) => {
                        debug!("tcp: rank {my_rank} connected to rank {peer} on demand");
                        After::Open(peer, sock)
                    }
                }
            }
            Kind::In(ib) => {
                let acc = Acceptor {
                    my_rank,
                    size: od.size,
                    job_hash: od.job_hash,
                    secret: &od.secret,
                    expect: &[],
                };
                let mut admit = OnDemandAdmit {
                    my_rank,
                    peers: &self.peers,
                    listed: &od.listed,
                    cancel: None,
                };
                let claimed = ib.claimed_accepted();
                let state = ib.progress(&acc, &mut admit, now);
                if let Some(ours) = admit.cancel {
                    // Dropping our dial closes its socket (epoll forgets it with the close).
                    od.hs.remove(&ours);
                }
                match state {
                    InState::Pending => {
                        update_reg(&self.epoll, token, &mut hs);
                        od.hs.insert(token, hs);
                        After::Keep
                    }
                    InState::Accepted(peer) => {
                        od.accepts -= 1;
                        let Kind::In(ib) = hs.kind else {
                            unreachable!("an inbound handshake")
                        };
                        debug!(
                            "tcp: rank {my_rank} accepted rank {peer} from {:?} on demand",
                            ib.from
                        );
                        After::Open(peer, ib.sock)
                    }
                    state @ (InState::Drop(_) | InState::Refused(_) | InState::Abandoned(_)) => {
                        od.accepts -= 1;
                        let from = ib.from;
                        let (InState::Drop(why) | InState::Refused(why) | InState::Abandoned(why)) =
                            &state
                        else {
                            unreachable!()
                        };
                        if matches!(state, InState::Refused(_)) {
                            warn!("tcp: rank {my_rank} refused a connection from {from:?}: {why}");
                        } else if matches!(state, InState::Abandoned(_)) {
                            debug!(
                                "tcp: rank {my_rank} dropped a connection from {from:?}: {why} (or it was that rank's own dial, given up after a yield)"
                            );
                        } else {
                            debug!("tcp: rank {my_rank} dropped a connection from {from:?}: {why}");
                        }
                        // We waited for this connection to become the claimed rank's
                        // (How::Inbound): unless another of its connections is in its
                        // handshake, dial it ourselves.
                        match claimed {
                            Some(c)
                                if matches!(&self.peers[c as usize], Slot::Pending(p) if p.how == How::Inbound)
                                    && !od.inbound_from(c) =>
                            {
                                After::Dial(c)
                            }
                            _ => After::Keep,
                        }
                    }
                }
            }
        }
    }

    /// `peer`'s connection could not be made: it fails as at init (its queued frames
    /// are dropped; the core fails what waits for it).
    fn fail_pending(&mut self, peer: u32, error: TransportError, events: &mut Vec<Event>) {
        debug!("tcp: rank {}: {error}", self.rank);
        if let (Slot::Pending(p), Some(od)) = (&self.peers[peer as usize], self.od.as_mut())
            && let How::Dialing(ours) = p.how
        {
            od.hs.remove(&ours);
        }
        self.peers[peer as usize] = Slot::Failed(error.clone());
        events.push(Event::PeerFailed { peer, error });
    }

    /// A handshaken socket for `peer`: make it the peer's connection and write the
    /// frames queued for it.
    fn open_peer(&mut self, peer: u32, sock: Socket, events: &mut Vec<Event>) {
        let queued = match std::mem::replace(&mut self.peers[peer as usize], Slot::NotConnected) {
            Slot::Pending(p) => p.out,
            _ => Vec::new(),
        };
        let setup = (|| -> std::io::Result<std::net::TcpStream> {
            sock.set_nonblocking(true)?;
            sock.set_tcp_nodelay(true)?;
            let stream: std::net::TcpStream = sock.into();
            let fd = stream.as_raw_fd();
            // The socket is in the set under its handshake token: retoken it.
            match self.epoll.add(fd, u64::from(peer), sys::INTEREST_READ) {
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    self.epoll.modify(fd, u64::from(peer), sys::INTEREST_READ)?
                }
                other => other?,
            }
            Ok(stream)
        })();
        let stream = match setup {
            Ok(s) => s,
            Err(e) => {
                let err = TransportError::Connect {
                    transport: NAME,
                    peer,
                    reason: format!("setting up the connected socket failed: {e}"),
                };
                self.fail_pending(peer, err, events);
                return;
            }
        };
        let mut conn = Box::new(Conn::new(stream));
        conn.place = self.place;
        for frame in queued {
            conn.enqueue(frame);
        }
        self.peers[peer as usize] = Slot::Open(conn);
        if let Err(pos) = self.open.binary_search(&peer) {
            self.open.insert(pos, peer);
        }
        // Count the queue as a writer (write interest on) first, so that a failing
        // flush below is undone by `fail` like any other; then write what was queued.
        let counted = matches!(&self.peers[peer as usize], Slot::Open(c) if c.queued_bytes() > 0);
        let mut result = self.update_interest(peer, false);
        if result.is_ok()
            && let Slot::Open(conn) = &mut self.peers[peer as usize]
            && counted
        {
            result = conn
                .flush()
                .map(drop)
                .map_err(super::conn::ConnError::Write);
        }
        let result = result.and_then(|()| self.update_interest(peer, counted));
        if let Err(cause) = result {
            self.fail(peer, cause, events);
        }
    }

    /// Check the deadlines of handshakes and yields (at most every 10 ms).
    pub(crate) fn sweep(&mut self, events: &mut Vec<Event>) {
        let Some(od) = self.od.as_mut() else {
            return;
        };
        let now = Instant::now();
        if now < od.next_sweep {
            return;
        }
        od.next_sweep = now + SWEEP_EVERY;
        let tokens: Vec<u64> = od.hs.keys().copied().collect();
        for t in tokens {
            self.step_hs(t, events);
        }
        let Some(od) = self.od.as_mut() else {
            return;
        };
        let peers = &self.peers;
        let expired = take_due(&mut od.yielded, peers, How::Yielded, now);
        let late = take_due(&mut od.awaited, peers, How::Inbound, now);
        for peer in late {
            debug!(
                "tcp: rank {peer}'s connection to rank {} sent no proof within {PROOF_WAIT:?}; dialling it",
                self.rank
            );
            if let Err(err) = self.dial(peer) {
                self.fail_pending(peer, err, events);
            }
        }
        for peer in expired {
            let err = TransportError::Connect {
                transport: NAME,
                peer,
                reason: format!(
                    "rank {peer} answered that it connects to rank {} itself, but did not within {:?}; rank {} listens on [{}] (can rank {peer} reach these addresses?); {}",
                    self.rank,
                    self.od
                        .as_ref()
                        .map_or(Duration::ZERO, |o| o.cfg.connect_timeout),
                    self.rank,
                    self.local_addrs
                        .iter()
                        .map(|a| a.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    self.od
                        .as_ref()
                        .map(|o| o.cfg.selection_hint())
                        .unwrap_or_default()
                ),
            };
            self.fail_pending(peer, err, events);
        }
    }

    /// Whether some peer is waiting for its connection (yielded, or in a handshake): a
    /// check of two lengths, made by every `poll`.
    pub(crate) fn has_pending(&self) -> bool {
        self.od.as_ref().is_some_and(|o| o.waiting())
    }

    /// Whether frames wait for a connection being made.
    pub(crate) fn pending_frames(&self) -> bool {
        self.od.is_some()
            && self
                .peers
                .iter()
                .any(|s| matches!(s, Slot::Pending(p) if !p.out.is_empty()))
    }
}

/// Remove from `list` the peers whose slot is no longer `Pending` with `how` (they moved
/// on) and return those whose deadline has passed (also removed).
fn take_due(list: &mut Vec<u32>, peers: &[Slot], how: How, now: Instant) -> Vec<u32> {
    let mut due = Vec::new();
    list.retain(|&r| match &peers[r as usize] {
        Slot::Pending(p) if p.how == how => {
            if now >= p.deadline {
                due.push(r);
                false
            } else {
                true
            }
        }
        _ => false,
    });
    due
}

/// Keep the epoll registration of handshake `token` in line with its socket and phase.
fn update_reg(epoll: &sys::Epoll, token: u64, hs: &mut Hs) {
    let want = match &hs.kind {
        Kind::Out(d) => d
            .attempt
            .as_ref()
            .map(|a| (d.next, a.sock.as_raw_fd(), d.wants_write())),
        Kind::In(ib) => Some((0, ib.sock.as_raw_fd(), ib.wants_write())),
    };
    let Some((attempt, fd, write)) = want else {
        hs.reg = None;
        return;
    };
    let interest = if write {
        sys::INTEREST_READ_WRITE
    } else {
        sys::INTEREST_READ
    };
    let result = match hs.reg {
        Some((a, w)) if a == attempt && w == write => return,
        Some((a, _)) if a == attempt => epoll.modify(fd, token, interest),
        // A new attempt's socket (the last one's was closed, which left the set).
        _ => epoll.add(fd, token, interest),
    };
    match result {
        Ok(()) => hs.reg = Some((attempt, write)),
        Err(e) => debug!("tcp: epoll_ctl for a handshake: {e}"),
    }
}
