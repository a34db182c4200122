//! Data path: eager SENDs into pre-posted slots with credits, credit updates by RDMA
//! WRITE, one-sided RDMA READ/WRITE in chunks, and CQ polling.
//!
//! A slot frame is `[header_len: u32 LE][payload_len: u32 LE][header][payload]`.
//! Credits: the sender may post a frame while `sent - peer_consumed < slots`, where
//! `peer_consumed` is the word the receiver RDMA-writes into the sender's pool once at
//! least a quarter of the slots were consumed since its last report. A sender out of
//! credits means every slot is consumed or in flight at the receiver, which then
//! reports, so this cannot deadlock while the receiver makes progress.

#![allow(unsafe_code)]

use super::verbs::{self, IbvRecvWr, IbvSendWr, IbvSge, IbvWc};
use super::{
    Chunk, NAME, OneSided, RdmaTransport, WR_CREDIT, WR_ONESIDED, WR_RECV, WR_SEND, wr_id,
};
use crate::{Event, MAX_HEADER_BYTES, SendOutcome, TransportError};

/// Largest RDMA READ/WRITE work request, in bytes (larger transfers are chunked).
pub const ONESIDED_CHUNK_BYTES: usize = 1 << 20;

impl RdmaTransport {
    pub(super) fn post_recv(&mut self, c: usize, slot: u32) -> Result<(), String> {
        let mut sge = IbvSge {
            addr: self.slot_ptr(c, slot, false) as u64,
            length: self.slot_bytes as u32,
            lkey: self.conns[c].lkey,
        };
        let mut wr = IbvRecvWr {
            wr_id: wr_id(WR_RECV, c, slot),
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        // SAFETY: the slot is registered pool memory owned by this transport.
        let rc = unsafe { self.verbs.post_recv(self.conns[c].qp, &mut wr) };
        if rc != 0 {
            return Err(format!(
                "ibv_post_recv: {}",
                std::io::Error::from_raw_os_error(rc)
            ));
        }
        Ok(())
    }

    fn credits(&self, c: usize) -> u64 {
        // SAFETY: the credit word is in the pool; the NIC writes it, so read volatile.
        let peer_consumed = unsafe { std::ptr::read_volatile(self.credit_word(c, 0)) };
        let outstanding = self.conns[c].sent.saturating_sub(peer_consumed);
        (self.slots as u64).saturating_sub(outstanding)
    }

    pub(super) fn send_frame(
        &mut self,
        peer: u32,
        header: &[u8],
        payload: &[u8],
    ) -> Result<SendOutcome, TransportError> {
        let Some(&c) = self.by_peer.get(&peer) else {
            return Err(TransportError::NoSuchPeer {
                transport: NAME,
                peer,
            });
        };
        if self.conns[c].failed {
            return Err(self.failure(c));
        }
        if header.len() > MAX_HEADER_BYTES || payload.len() > super::FRAME_PAYLOAD_BYTES {
            return Err(TransportError::Unsupported {
                transport: NAME,
                what: "frames larger than an eager slot",
            });
        }
        match self.conns[c].link {
            super::Link::Ready if self.conns[c].queued.is_empty() => {}
            // Frames queued during the handshake go first, in order.
            super::Link::Ready => {
                self.post_queued(c)?;
                if !self.conns[c].queued.is_empty() {
                    return Ok(SendOutcome::Busy);
                }
            }
            // First frame to this peer: make the queue pair, ask the peer to connect,
            // and keep the frame until the queue pair is ready.
            super::Link::Idle => {
                self.start_link(c)?;
                return Ok(self.enqueue(c, header, payload));
            }
            super::Link::Requested | super::Link::Connected => {
                return Ok(self.enqueue(c, header, payload));
            }
        }
        if !self.has_room(c) {
            return Ok(SendOutcome::Busy);
        }
        let len = 8 + header.len() + payload.len();
        self.post_slot(c, len, |p| {
            // SAFETY: `p` is a free send slot of `slot_bytes` >= len bytes (post_slot).
            unsafe {
                std::ptr::copy_nonoverlapping((header.len() as u32).to_le_bytes().as_ptr(), p, 4);
                std::ptr::copy_nonoverlapping(
                    (payload.len() as u32).to_le_bytes().as_ptr(),
                    p.add(4),
                    4,
                );
                std::ptr::copy_nonoverlapping(header.as_ptr(), p.add(8), header.len());
                std::ptr::copy_nonoverlapping(
                    payload.as_ptr(),
                    p.add(8 + header.len()),
                    payload.len(),
                );
            }
        })?;
        Ok(SendOutcome::Sent)
    }

    // Whether connection `c` (ready) can take one more eager frame now: a credit, a free
    // send slot, and a send-queue entry beside the one kept for credit updates.
    fn has_room(&mut self, c: usize) -> bool {
        if self.credits(c) == 0 {
            self.stats.credit_stalls += 1;
            return false;
        }
        let conn = &self.conns[c];
        conn.send_busy < self.slots && conn.sq_outstanding + 2 <= self.sq_depth
    }

    // Post one frame of `len` bytes (slot image, written by `fill` into the free send
    // slot) to connection `c`, which has room (`has_room`).
    fn post_slot(
        &mut self,
        c: usize,
        len: usize,
        fill: impl FnOnce(*mut u8),
    ) -> Result<(), TransportError> {
        let slot = self.conns[c].send_next % self.slots;
        let p = self.slot_ptr(c, slot, true);
        debug_assert!(len <= self.slot_bytes);
        // The slot is ours: its previous send completed (send_busy < slots and slots
        // complete in order), and it holds `slot_bytes` >= any checked frame.
        fill(p);
        let mut sge = IbvSge {
            addr: p as u64,
            length: len as u32,
            lkey: self.conns[c].lkey,
        };
        let mut wr = IbvSendWr::new(wr_id(WR_SEND, c, slot), &mut sge, verbs::WR_SEND, true);
        // SAFETY: registered slot memory, stays untouched until the completion.
        let rc = unsafe { self.verbs.post_send(self.conns[c].qp, &mut wr) };
        if rc != 0 {
            return Err(self.fail(
                c,
                format!(
                    "ibv_post_send(SEND): {}",
                    std::io::Error::from_raw_os_error(rc)
                ),
            ));
        }
        let conn = &mut self.conns[c];
        conn.sent += 1;
        conn.send_busy += 1;
        conn.send_next = conn.send_next.wrapping_add(1);
        conn.sq_outstanding += 1;
        self.stats.sends += 1;
        Ok(())
    }

    // Keep a frame for connection `c`, whose queue pair is being set up: `Sent` (the
    // caller's buffer is free again), or `Busy` once `QUEUED_BYTES_WHILE_CONNECTING`
    // bytes wait (the core then keeps the frame, as for a peer out of credits).
    fn enqueue(&mut self, c: usize, header: &[u8], payload: &[u8]) -> SendOutcome {
        let len = 8 + header.len() + payload.len();
        let conn = &mut self.conns[c];
        if !conn.queued.is_empty() && conn.queued_bytes + len > super::QUEUED_BYTES_WHILE_CONNECTING
        {
            return SendOutcome::Busy;
        }
        let mut image = Vec::with_capacity(len);
        image.extend_from_slice(&(header.len() as u32).to_le_bytes());
        image.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        image.extend_from_slice(header);
        image.extend_from_slice(payload);
        if conn.queued.is_empty() {
            conn.queued_since = Some(std::time::Instant::now());
            self.waiting.push(c);
        }
        conn.queued_bytes += len;
        conn.queued.push_back(image);
        SendOutcome::Sent
    }

    // Post the queued frames of ready connection `c` while it has room; whether any
    // went out.
    fn post_queued(&mut self, c: usize) -> Result<bool, TransportError> {
        let mut any = false;
        while !self.conns[c].queued.is_empty() && self.has_room(c) {
            let image = self.conns[c].queued.pop_front().expect("not empty");
            self.conns[c].queued_bytes -= image.len();
            self.post_slot(c, image.len(), |p| {
                // SAFETY: a free send slot of slot_bytes >= image.len() (checked at
                // send_frame when the frame was queued).
                unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), p, image.len()) }
            })?;
            any = true;
        }
        Ok(any)
    }

    // Progress of the connections with queued frames: post them where the queue pair
    // became ready, drop them where it failed, warn once where the handshake has taken
    // longer than `connect_warn_after`; whether any frame went out.
    fn drain_waiting(&mut self, events: &mut Vec<Event>) -> bool {
        let mut any = false;
        let mut i = 0;
        while i < self.waiting.len() {
            let c = self.waiting[i];
            let conn = &self.conns[c];
            if conn.failed {
                // fail() emptied the queue; the failure itself is reported where found.
            } else if conn.link == super::Link::Ready {
                match self.post_queued(c) {
                    Ok(a) => any |= a,
                    Err(error) => {
                        if !self.quiesced {
                            events.push(Event::PeerFailed {
                                peer: self.conns[c].peer,
                                error,
                            });
                        }
                        any = true;
                    }
                }
            } else if !conn.warned
                && conn
                    .queued_since
                    .is_some_and(|t| t.elapsed() >= self.connect_warn_after)
            {
                let step = match conn.link {
                    super::Link::Requested => "our Request is not answered",
                    _ => "our Reply is not acknowledged",
                };
                tracing::warn!(
                    "rdma: rank {}: {} frame(s) to rank {} have waited {:.0?} for its queue \
                     pair ({step}); the peer has not called rankwire since (busy computing?) \
                     or is stuck. Waiting on: a lost peer still fails through its TCP \
                     connection; RANKWIRE_WATCHDOG bounds a job that no longer progresses",
                    self.rank,
                    conn.queued.len(),
                    conn.peer,
                    self.connect_warn_after
                );
                self.conns[c].warned = true;
            }
            if self.conns[c].queued.is_empty() {
                self.conns[c].queued_since = None;
                self.waiting.swap_remove(i);
            } else {
                i += 1;
            }
        }
        any
    }

    /// Get ready to sleep until the next completion: arm the completion queue
    /// (`ibv_req_notify_cq`), then look once more (a completion that came before the
    /// arming raises no event). Returns the completion channel's fd to wait on (readable
    /// once a completion came), or `None` when there is work now (anything found is
    /// kept for the next [`crate::Transport::poll`]) or no channel exists. Call
    /// [`RdmaTransport::finish_wait`] after the wait.
    pub fn prepare_wait(&mut self) -> Option<std::os::fd::RawFd> {
        if self.channel.is_null()
            || !self.pending.is_empty()
            || !self.done.is_empty()
            || !self.deferred.is_empty()
            || !self.wireup_out.is_empty()
            || !self.waiting.is_empty()
        {
            return None;
        }
        if !self.armed {
            // SAFETY: the CQ is live.
            let rc = unsafe { self.verbs.req_notify_cq(self.cq) };
            if rc != 0 {
                tracing::debug!(
                    "rdma: ibv_req_notify_cq: {}",
                    std::io::Error::from_raw_os_error(rc)
                );
                return None;
            }
            self.armed = true;
        }
        let mut found = Vec::new();
        let any = self.progress(&mut found);
        self.deferred = found;
        if any {
            return None;
        }
        self.stats.sleeps += 1;
        // SAFETY: a live channel.
        Some(unsafe { (*self.channel).fd })
    }

    /// After a wait on [`RdmaTransport::prepare_wait`]'s fd: take and acknowledge the
    /// completion events that came (the CQ is then disarmed until the next prepare).
    pub fn finish_wait(&mut self) {
        if self.channel.is_null() {
            return;
        }
        let mut n = 0u32;
        loop {
            let mut cq = std::ptr::null_mut();
            let mut ctx = std::ptr::null_mut();
            // SAFETY: a live, nonblocking channel; out-pointers valid.
            let rc = unsafe { (self.verbs.get_cq_event)(self.channel, &mut cq, &mut ctx) };
            if rc != 0 {
                break;
            }
            n += 1;
        }
        if n > 0 {
            // SAFETY: the events were taken from this CQ's channel above.
            unsafe { (self.verbs.ack_cq_events)(self.cq, n) };
            self.armed = false;
            self.stats.wakeups += 1;
        }
    }

    /// Read `len` bytes at `remote_addr` (rkey `rkey`) in `peer`'s memory into `local`
    /// with RDMA READ. Completion arrives later as [`Event::OpDone`] with `op`.
    ///
    /// # Safety
    /// `local` must stay valid, and not be touched by anyone else, until the
    /// [`Event::OpDone`] for `op` is returned by `poll`.
    ///
    /// # Errors
    /// Unknown or failed peer, or registration of `local` failed.
    pub unsafe fn get(
        &mut self,
        peer: u32,
        op: u64,
        local: *mut u8,
        len: usize,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), TransportError> {
        // SAFETY: the caller's contract.
        unsafe { self.onesided(peer, op, local, len, remote_addr, rkey, true, false) }
    }

    /// Write `len` bytes from `local` into `peer`'s memory at `remote_addr` (rkey
    /// `rkey`) with RDMA WRITE. Completion arrives later as [`Event::OpDone`].
    ///
    /// # Safety
    /// As [`RdmaTransport::get`].
    ///
    /// # Errors
    /// As [`RdmaTransport::get`].
    pub unsafe fn put(
        &mut self,
        peer: u32,
        op: u64,
        local: *const u8,
        len: usize,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), TransportError> {
        // SAFETY: the caller's contract.
        unsafe {
            self.onesided(
                peer,
                op,
                local as *mut u8,
                len,
                remote_addr,
                rkey,
                false,
                false,
            )
        }
    }

    /// A one-sided read (`read`) or write of `local`, which is device memory
    /// registered through the device cache (GPUDirect RDMA, flushed after the last read
    /// completes) where `device`, else host memory.
    ///
    /// # Safety
    /// As [`RdmaTransport::get`].
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn onesided(
        &mut self,
        peer: u32,
        op: u64,
        local: *mut u8,
        len: usize,
        remote_addr: u64,
        rkey: u32,
        read: bool,
        device: bool,
    ) -> Result<(), TransportError> {
        let Some(&c) = self.by_peer.get(&peer) else {
            return Err(TransportError::NoSuchPeer {
                transport: NAME,
                peer,
            });
        };
        if self.conns[c].failed {
            return Err(self.failure(c));
        }
        // One-sided operations need our QP at RTS (the peer's frame that named the
        // remote memory came over it, so it is); not before the handshake.
        if !matches!(
            self.conns[c].link,
            super::Link::Connected | super::Link::Ready
        ) {
            return Err(TransportError::Unsupported {
                transport: NAME,
                what: "one-sided operations before the queue pair is connected",
            });
        }
        let key = self.next_key;
        self.next_key = self.next_key.wrapping_add(1).max(1);
        if len == 0 {
            self.done.push(Event::OpDone {
                peer,
                op,
                result: Ok(()),
            });
            return Ok(());
        }
        let (held, flush) = match device {
            false => (self.registry.acquire_host(local as u64, len as u64), None),
            true => match self.registry.acquire_device(local as u64, len as u64) {
                // Only data written into GPU memory needs a flush.
                Ok((h, dev)) => (Ok(h), read.then_some(dev)),
                Err(e) => (Err(e), None),
            },
        };
        let held = held.map_err(|e| TransportError::Os {
            transport: NAME,
            call: if device {
                "device memory registration"
            } else {
                "memory registration"
            },
            reason: format!("device {}: {e}", self.dev.name),
        })?;
        let chunks = len.div_ceil(ONESIDED_CHUNK_BYTES);
        for i in 0..chunks {
            let off = i * ONESIDED_CHUNK_BYTES;
            let n = ONESIDED_CHUNK_BYTES.min(len - off);
            self.pending.push_back(Chunk {
                key,
                conn: c,
                local: local as u64 + off as u64,
                lkey: held.lkey,
                len: n as u32,
                remote: remote_addr + off as u64,
                rkey,
                read,
            });
        }
        self.onesided.insert(
            key,
            OneSided {
                peer,
                op,
                remaining: chunks as u32,
                held,
                error: None,
                flush,
            },
        );
        self.post_pending();
        Ok(())
    }

    // Post queued one-sided chunks while send queues have room (in order).
    fn post_pending(&mut self) -> bool {
        let mut any = false;
        while let Some(ch) = self.pending.front() {
            let c = ch.conn;
            if self.conns[c].failed {
                let ch = self.pending.pop_front().expect("front exists");
                self.chunk_done(ch.key, Some("the queue pair failed".into()));
                continue;
            }
            if self.conns[c].sq_outstanding + 2 > self.sq_depth {
                break;
            }
            let ch = self.pending.pop_front().expect("front exists");
            let mut sge = IbvSge {
                addr: ch.local,
                length: ch.len,
                lkey: ch.lkey,
            };
            let opcode = if ch.read {
                verbs::WR_RDMA_READ
            } else {
                verbs::WR_RDMA_WRITE
            };
            let mut wr = IbvSendWr::new(wr_id(WR_ONESIDED, c, ch.key), &mut sge, opcode, true);
            wr.remote_addr = ch.remote;
            wr.rkey = ch.rkey;
            // SAFETY: the local range is registered and kept alive by the caller of
            // get/put until OpDone.
            let rc = unsafe { self.verbs.post_send(self.conns[c].qp, &mut wr) };
            if rc != 0 {
                let what = format!(
                    "ibv_post_send({}): {}",
                    if ch.read { "RDMA_READ" } else { "RDMA_WRITE" },
                    std::io::Error::from_raw_os_error(rc)
                );
                self.chunk_done(ch.key, Some(what));
                continue;
            }
            self.conns[c].sq_outstanding += 1;
            any = true;
        }
        any
    }

    fn chunk_done(&mut self, key: u32, error: Option<String>) {
        let Some(o) = self.onesided.get_mut(&key) else {
            return;
        };
        o.remaining = o.remaining.saturating_sub(1);
        if o.error.is_none() {
            o.error = error;
        }
        if o.remaining > 0 {
            return;
        }
        let mut o = self.onesided.remove(&key).expect("present above");
        if let (Some(dev), None) = (o.flush, &o.error) {
            match self.registry.flush_device(dev) {
                Ok(ran) => self.stats.gdr_flushes += u64::from(ran),
                Err(e) => o.error = Some(format!("flush of GPUDirect RDMA writes: {e}")),
            }
        }
        self.registry.release(o.held);
        self.done.push(Event::OpDone {
            peer: o.peer,
            op: o.op,
            result: match o.error {
                None => Ok(()),
                Some(reason) => Err(TransportError::PeerLost {
                    transport: NAME,
                    peer: o.peer,
                    reason: format!("device {}: {reason}", self.dev.name),
                }),
            },
        });
    }

    // Report consumed slots to the peer once a quarter of them were consumed.
    fn report_credits(&mut self, c: usize) -> bool {
        let conn = &self.conns[c];
        let thresh = (self.slots as u64 / 4).max(1);
        if conn.failed
            || conn.consumed - conn.reported < thresh
            || conn.sq_outstanding + 1 > self.sq_depth
        {
            return false;
        }
        let src = self.credit_word(c, 1);
        // SAFETY: our own pool word; the NIC reads it after the post (a later overwrite
        // only sends a newer, larger count).
        unsafe { std::ptr::write_volatile(src, conn.consumed) };
        let mut sge = IbvSge {
            addr: src as u64,
            length: 8,
            lkey: self.conns[c].lkey,
        };
        let mut wr = IbvSendWr::new(wr_id(WR_CREDIT, c, 0), &mut sge, verbs::WR_RDMA_WRITE, true);
        wr.remote_addr = conn.remote_credit_addr;
        wr.rkey = conn.remote_credit_rkey;
        // SAFETY: registered pool word.
        let rc = unsafe { self.verbs.post_send(conn.qp, &mut wr) };
        if rc != 0 {
            let e = format!(
                "ibv_post_send(credit RDMA_WRITE): {}",
                std::io::Error::from_raw_os_error(rc)
            );
            let err = self.fail(c, e);
            self.done.push(Event::PeerFailed {
                peer: self.conns[c].peer,
                error: err,
            });
            return true;
        }
        let conn = &mut self.conns[c];
        conn.reported = conn.consumed;
        conn.sq_outstanding += 1;
        self.stats.credit_writes += 1;
        true
    }

    // Mark a connection failed (its queued frames are dropped); the error to report,
    // which later calls on the connection return too (`failure`).
    fn fail(&mut self, c: usize, reason: String) -> TransportError {
        let err = TransportError::PeerLost {
            transport: NAME,
            peer: self.conns[c].peer,
            reason: format!(
                "device {}, GID index {}: {reason}",
                self.dev.name, self.dev.gid_index
            ),
        };
        self.fail_with(c, err)
    }

    // Mark a connection failed by `err`, unless it failed already; the first failure.
    pub(super) fn fail_with(&mut self, c: usize, err: TransportError) -> TransportError {
        let conn = &mut self.conns[c];
        conn.failed = true;
        conn.queued.clear();
        conn.queued_bytes = 0;
        conn.error.get_or_insert(err).clone()
    }

    // The error of a failed connection: its first failure (a caller that dropped the
    // first report, as the core's eager fast path does, still gets the cause).
    pub(super) fn failure(&self, c: usize) -> TransportError {
        self.conns[c]
            .error
            .clone()
            .unwrap_or_else(|| TransportError::PeerLost {
                transport: NAME,
                peer: self.conns[c].peer,
                reason: "the queue pair failed earlier".into(),
            })
    }

    pub(super) fn progress(&mut self, events: &mut Vec<Event>) -> bool {
        // Found while arming for a wait: before anything newer.
        let mut any = !self.deferred.is_empty();
        events.append(&mut self.deferred);
        let mut wcs = [IbvWc::default(); 32];
        for _ in 0..64 {
            // SAFETY: the CQ is live.
            let n = unsafe { self.verbs.poll_cq(self.cq, &mut wcs) };
            if n < 0 {
                tracing::error!("rdma: ibv_poll_cq failed ({n})");
                break;
            }
            if n == 0 {
                break;
            }
            any = true;
            for wc in &wcs[..n as usize] {
                self.completion(wc, events);
            }
        }
        any |= self.post_pending();
        if !self.waiting.is_empty() {
            any |= self.drain_waiting(events);
        }
        for c in 0..self.conns.len() {
            any |= self.report_credits(c);
        }
        if !self.done.is_empty() {
            any = true;
            events.append(&mut self.done);
        }
        any
    }

    fn completion(&mut self, wc: &IbvWc, events: &mut Vec<Event>) {
        let kind = wc.wr_id >> 56;
        let c = ((wc.wr_id >> 32) & 0xff_ffff) as usize;
        let low = wc.wr_id as u32;
        if c >= self.conns.len() {
            tracing::error!("rdma: completion with unknown wr_id {:#x}", wc.wr_id);
            return;
        }
        if kind != WR_RECV {
            self.conns[c].sq_outstanding = self.conns[c].sq_outstanding.saturating_sub(1);
        }
        if wc.status != verbs::WC_SUCCESS {
            let what = match kind {
                WR_RECV => "receive",
                WR_SEND => "SEND",
                WR_CREDIT => "credit RDMA_WRITE",
                _ => "RDMA READ/WRITE",
            };
            let already = self.conns[c].failed;
            let reason = format!(
                "{what} completed with {} (vendor error {:#x})",
                self.verbs.status_str(wc.status),
                wc.vendor_err
            );
            if kind == WR_ONESIDED {
                self.chunk_done(low, Some(reason.clone()));
            }
            if kind == WR_SEND {
                self.conns[c].send_busy = self.conns[c].send_busy.saturating_sub(1);
            }
            let err = self.fail(c, reason);
            if !already && !self.quiesced {
                events.push(Event::PeerFailed {
                    peer: self.conns[c].peer,
                    error: err,
                });
            }
            return;
        }
        match kind {
            WR_SEND => {
                self.conns[c].send_busy = self.conns[c].send_busy.saturating_sub(1);
            }
            WR_CREDIT => {}
            WR_ONESIDED => {
                if wc.opcode == verbs::WC_RDMA_READ {
                    self.stats.reads += 1;
                } else {
                    self.stats.writes += 1;
                }
                self.chunk_done(low, None);
            }
            WR_RECV => {
                let p = self.slot_ptr(c, low, false);
                let peer = self.conns[c].peer;
                let n = wc.byte_len as usize;
                let mut lens = [0u8; 8];
                if n >= 8 {
                    // SAFETY: the NIC wrote n >= 8 bytes into this slot.
                    unsafe { std::ptr::copy_nonoverlapping(p, lens.as_mut_ptr(), 8) };
                }
                let hl = u32::from_le_bytes([lens[0], lens[1], lens[2], lens[3]]) as usize;
                let pl = u32::from_le_bytes([lens[4], lens[5], lens[6], lens[7]]) as usize;
                if n < 8 || hl > MAX_HEADER_BYTES || 8 + hl + pl != n {
                    let err = TransportError::Malformed {
                        transport: NAME,
                        peer,
                        reason: format!(
                            "eager slot of {n} bytes announces header {hl} + payload {pl}"
                        ),
                    };
                    self.conns[c].failed = true;
                    events.push(Event::PeerFailed { peer, error: err });
                    return;
                }
                // SAFETY: bounds checked against byte_len above.
                let (header, payload) = unsafe {
                    (
                        std::slice::from_raw_parts(p.add(8), hl).to_vec(),
                        std::slice::from_raw_parts(p.add(8 + hl), pl).to_vec(),
                    )
                };
                events.push(Event::Recv {
                    peer,
                    header,
                    payload,
                });
                if let Err(e) = self.post_recv(c, low) {
                    let err = self.fail(c, e);
                    events.push(Event::PeerFailed { peer, error: err });
                    return;
                }
                self.conns[c].consumed += 1;
                // The peer posted its receives before it sent anything (module doc of
                // `connect`): its frame proves it as its Ack would.
                if self.conns[c].link == super::Link::Connected {
                    self.set_ready(c);
                }
            }
            _ => tracing::error!("rdma: completion of unknown kind {kind}"),
        }
    }
}
