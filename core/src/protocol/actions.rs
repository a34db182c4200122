//! Memory actions: the work on device memory and on memory registration that the
//! protocol asks its caller to do (it never calls CUDA or verbs itself), and the
//! inputs that answer them.
//!
//! Each action names its request. The caller pops one with [`Protocol::pop_action`],
//! executes it and answers it (for the kinds that have an answer) before it feeds the
//! protocol the next input: the answer moves the request on (queues its frame, or
//! completes it). A request the protocol fails meanwhile ([`Protocol::fail_peer`])
//! takes its queued actions with it; an answer for a request that is gone is ignored,
//! except that an accepted offer is then released at once.

use super::*;

/// A piece of memory work the protocol asks the engine to do ([`Protocol::pop_action`]).
#[derive(Debug)]
pub enum MemAction {
    /// Copy the device bytes `src` (all of an eager send of request `sreq`, or one
    /// rendezvous chunk of it) into host memory. Answer: [`Protocol::staged_out`] with
    /// the same `offset` and the `src.len()` bytes, or an error (the send then fails
    /// with [`Error::Gpu`]). Several chunks of one send may be asked for before the
    /// first is answered ([`Protocol::set_device_staging`]); they may be answered in
    /// any order.
    StageOut {
        /// The send request.
        sreq: ReqId,
        /// Device memory to read, `src.len()` bytes, valid until the answer.
        src: RawBuf,
        /// Byte offset of `src` in the send buffer (0 for an eager send).
        offset: usize,
    },
    /// Copy `data` into the device memory `dst` (`dst.len() == data.len()` bytes, a part
    /// of receive `rreq`'s buffer). Answer: [`Protocol::staged_in`].
    StageIn {
        /// The receive request.
        rreq: ReqId,
        /// Device memory to write, valid until the answer.
        dst: RawBuf,
        /// The bytes that arrived for it.
        data: Vec<u8>,
    },
    /// Make the rendezvous send buffer `buf` of request `sreq` pullable by its receiver:
    /// a CUDA IPC export of device memory (through a staging copy where legacy IPC
    /// cannot export it), or an RDMA registration of host memory or (GPUDirect RDMA) of
    /// device memory. Answer:
    /// [`Protocol::offered`] with the descriptor for the `Rts`, or `None` to refuse.
    Offer {
        /// The send request.
        sreq: ReqId,
        /// The whole send buffer, valid until the send ends.
        buf: RawBuf,
        /// How the receiver would pull it.
        to: OfferKind,
    },
    /// The send `sreq`, whose [`MemAction::Offer`] was accepted, has ended (completed
    /// or failed): what the offer set up for it (staging buffer, memory registration)
    /// may go. No answer.
    Release {
        /// The send request.
        sreq: ReqId,
        /// The kind of the offer.
        to: OfferKind,
    },
}

/// How an offered send buffer is pulled ([`MemAction::Offer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OfferKind {
    /// Device memory, by a same-node peer through CUDA IPC ([`RemoteMem::CudaIpc`]).
    CudaIpc,
    /// Host memory, or device memory with GPUDirect RDMA ([`Protocol::allow_gdr`]), by
    /// RDMA READ ([`RemoteMem::Rdma`]).
    Rdma,
}

impl MemAction {
    /// The request the action is for.
    pub fn request(&self) -> ReqId {
        match self {
            MemAction::StageOut { sreq, .. }
            | MemAction::Offer { sreq, .. }
            | MemAction::Release { sreq, .. } => *sreq,
            MemAction::StageIn { rreq, .. } => *rreq,
        }
    }
}

impl Protocol {
    /// Next memory action to execute ([`MemAction`]), in the order produced.
    #[inline]
    pub fn pop_action(&mut self) -> Option<MemAction> {
        self.actions.pop_front()
    }

    /// Answer to [`MemAction::StageOut`] for send `sreq`: for the chunk at byte
    /// `offset`, the bytes read from device memory (exactly the `src.len()` asked for,
    /// as [`Payload::Owned`] or [`Payload::Lent`]), or why the copy failed. The eager
    /// or `Data` frame is queued for [`Protocol::pop_frame`]; on failure, or an answer
    /// that is not the chunk asked for, the send completes with [`Error::Gpu`].
    pub fn staged_out(&mut self, sreq: ReqId, offset: usize, result: Result<Payload, String>) {
        let Some(s) = self.reqs.send_mut(sreq) else {
            return;
        };
        let kind = s.buf.kind;
        let bytes = match result {
            Ok(p @ (Payload::Owned(_) | Payload::Lent(_))) => p,
            Ok(other) => {
                let e = Error::Gpu(format!(
                    "staging the {kind} send buffer answered {other:?}, not host bytes"
                ));
                self.fail_send(sreq, e);
                return;
            }
            Err(e) => {
                let e = Error::Gpu(format!("copy from the {kind} send buffer: {e}"));
                self.fail_send(sreq, e);
                return;
            }
        };
        // SAFETY: an Owned or Lent payload (checked above) borrows no user buffer.
        let n = unsafe { bytes.as_slice() }.len();
        let peer = s.dst;
        let depth = self.stage_depth;
        match &mut s.state {
            SendState::Staging { env } if offset == 0 && n == s.buf.len() => {
                let header = Frame::short_eager_header(env);
                s.state = SendState::Eager;
                self.out.push_back(OutFrame {
                    peer,
                    header,
                    payload: bytes,
                    on_sent: OnSent::CompleteSend(sreq),
                });
            }
            SendState::Data {
                rreq,
                queued,
                end,
                staging,
                ..
            } if let Some(i) = staging.iter().position(|&c| c == (offset, n)) => {
                // More chunks may be staged now, unless the send is already in line
                // (it is while fewer than `depth` were in flight).
                if *queued < *end && staging.len() == depth as usize {
                    self.data_ready.push_back(sreq);
                }
                staging.swap_remove(i);
                let header = Frame::Data {
                    rreq: *rreq,
                    offset: offset as u64,
                }
                .header(n as u64);
                self.out.push_back(OutFrame {
                    peer,
                    header,
                    payload: bytes,
                    on_sent: OnSent::DataSent { sreq, len: n },
                });
            }
            _ => {
                let e = Error::Gpu(format!(
                    "staging the {kind} send buffer returned {n} bytes at offset {offset}, \
                     not a chunk asked for"
                ));
                self.fail_send(sreq, e);
            }
        }
    }

    /// Answer to [`MemAction::StageIn`] for receive `rreq`: whether the bytes are in
    /// its device buffer. The receive completes once every copy is answered and all
    /// its bytes have arrived; a failure makes it complete with [`Error::Gpu`] (the
    /// rest of the message is still taken, so the sender is not left waiting).
    pub fn staged_in(&mut self, rreq: ReqId, result: Result<(), String>) {
        let Some(r) = self.reqs.recv_mut(rreq) else {
            return;
        };
        let kind = r.buf.kind;
        let gpu_err = |e: String| Error::Gpu(format!("copy into the {kind} receive buffer: {e}"));
        match &mut r.state {
            RecvState::Staging { .. } => {
                if let Some(RecvReq {
                    state: RecvState::Staging { result: done },
                    ..
                }) = self.reqs.take_recv(rreq)
                {
                    let res = match result {
                        Ok(()) => done,
                        Err(e) => Err(gpu_err(e)),
                    };
                    self.reqs.complete(rreq, res);
                }
            }
            RecvState::Data {
                staging,
                failed,
                got,
                accept,
                ..
            } => {
                *staging = staging.saturating_sub(1);
                if let Err(e) = result
                    && failed.is_none()
                {
                    *failed = Some(Box::new(gpu_err(e)));
                }
                if *got >= *accept {
                    self.finish_rndv_recv(rreq);
                }
            }
            _ => {}
        }
    }

    /// Answer to [`MemAction::Offer`] for send `sreq`: the descriptor the receiver pulls
    /// with ([`RemoteMem::CudaIpc`] or [`RemoteMem::Rdma`]), or `None` when the buffer
    /// cannot be offered (the receiver then answers `Cts` and takes `Data` frames).
    /// Queues the `Rts`. An accepted offer is released ([`MemAction::Release`]) when
    /// the send ends.
    pub fn offered(&mut self, sreq: ReqId, mem: Option<RemoteMem>) {
        let to = |m: &RemoteMem| match m {
            RemoteMem::Rdma { .. } => OfferKind::Rdma,
            _ => OfferKind::CudaIpc,
        };
        let Some(s) = self
            .reqs
            .send_mut(sreq)
            .filter(|s| matches!(s.state, SendState::Offering { .. }))
        else {
            if let Some(m) = &mem {
                self.actions
                    .push_back(MemAction::Release { sreq, to: to(m) });
            }
            return;
        };
        let SendState::Offering { env } = s.state else {
            return;
        };
        // Its context was revoked while the offer was made (`revoke.rs`): no receive
        // will take it there, so it fails instead of sending its Rts.
        let ctx = s.ctx;
        if let Some(e) = self.revoked_error(ctx) {
            if let Some(m) = &mem {
                self.actions
                    .push_back(MemAction::Release { sreq, to: to(m) });
            }
            self.fail_send(sreq, e);
            return;
        }
        let Some(s) = self.reqs.send_mut(sreq) else {
            return;
        };
        s.offered = mem.as_ref().map(to);
        s.state = SendState::AwaitCts;
        let header = Frame::Rts {
            env,
            msg_len: s.buf.len() as u64,
            sreq,
            mem: mem.unwrap_or(RemoteMem::None),
        }
        .header(0);
        let peer = s.dst;
        self.out.push_back(OutFrame {
            peer,
            header,
            payload: Payload::Empty,
            on_sent: OnSent::Nothing,
        });
    }

    /// Fail send `sreq` with `e` (its rendezvous data stops, its offer is released).
    pub(super) fn fail_send(&mut self, sreq: ReqId, e: Error) {
        if let Some(s) = self.reqs.take_send(sreq) {
            self.release_offer(sreq, &s);
        }
        self.data_ready.retain(|&x| x != sreq);
        self.reqs.complete(sreq, Err(e));
    }

    /// Drop queued actions of requests that are no longer pending (failed with a peer).
    pub(super) fn drop_dead_actions(&mut self) {
        if self.actions.is_empty() {
            return;
        }
        let reqs = &self.reqs;
        self.actions.retain(|a| match a {
            MemAction::Release { .. } => true,
            MemAction::StageIn { rreq, .. } => reqs.recv(*rreq).is_some(),
            MemAction::StageOut { sreq, .. } | MemAction::Offer { sreq, .. } => {
                reqs.send(*sreq).is_some()
            }
        });
    }

    /// Copy `data` into the device receive buffer `dst` of `rreq` (queue the action),
    /// or fail with [`Error::Gpu`] when device buffers are not usable here.
    pub(super) fn stage_in(
        &mut self,
        rreq: ReqId,
        dst: RawBuf,
        data: Vec<u8>,
    ) -> Result<(), Error> {
        if !self.gpu {
            return Err(no_gpu(dst.kind));
        }
        self.actions
            .push_back(MemAction::StageIn { rreq, dst, data });
        Ok(())
    }

    /// Receive `rreq` (its buffer `buf` is device memory) got the eager message whose
    /// first bytes are `data`: copy them in, then complete with `result`.
    pub(super) fn stage_in_eager(
        &mut self,
        rreq: ReqId,
        buf: RawBuf,
        data: Vec<u8>,
        result: Result<Status, Error>,
    ) {
        if data.is_empty() {
            self.reqs.take_recv(rreq);
            self.reqs.complete(rreq, result);
            return;
        }
        let dst = RawBuf {
            ptr: buf.ptr,
            len: data.len(),
            kind: buf.kind,
        };
        match self.stage_in(rreq, dst, data) {
            Ok(()) => {
                if let Some(r) = self.reqs.recv_mut(rreq) {
                    r.state = RecvState::Staging { result };
                }
            }
            Err(e) => {
                self.reqs.take_recv(rreq);
                self.reqs.complete(rreq, Err(e));
            }
        }
    }
}
