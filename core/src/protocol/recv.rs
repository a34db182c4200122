//! The receive side of the protocol: posting receives (and the blocking receive's fast
//! path), probes, and every arriving frame: matching, eager delivery, rendezvous
//! `Cts`/`Data` (copied or placed by the transport), and the shared-copy frames
//! (`share.rs`).

use super::*;

impl Protocol {
    /// Whether a receive for `pat` may take its message straight from a transport with
    /// [`Protocol::take_eager`] (the fast path of a blocking receive): no request is
    /// pending, nothing is queued to send, no peer has failed, and no message is
    /// waiting that `pat` accepts or that arrived ahead of its turn. Then the next
    /// in-order message `pat` accepts is the receive's, as if it had been posted.
    #[inline]
    pub fn quiet_for(&self, pat: &Pattern) -> bool {
        self.reqs.live() == 0
            && self.out.is_empty()
            && self.actions.is_empty()
            && self.data_ready.is_empty()
            && self.pulls.is_empty()
            && self.pushes.is_empty()
            && self.dead.is_empty()
            && !self.is_revoked(pat.ctx)
            && self.matcher.quiet()
            && !self.matcher.has_unexpected(pat)
    }

    /// With [`Protocol::quiet_for`]`(pat)` true: if the frame `header` + `payload` from
    /// `peer` is the next in-order `Eager` message `pat` accepts, receive it into the
    /// host buffer `buf` (truncation as in MPI: the first `buf.len()` bytes, and
    /// [`MatchError::Truncated`]) and return the result. `None` for any other frame,
    /// and nothing changes (process it with [`Protocol::on_frame`] after posting the
    /// receive with [`Protocol::irecv`]).
    #[inline]
    pub fn take_eager(
        &mut self,
        peer: u32,
        header: &[u8],
        payload: &InPayload<'_>,
        pat: &Pattern,
        buf: RawBuf,
    ) -> Option<Result<Status, Error>> {
        let (env, plen) = match self.short_eager_env(peer, header) {
            Some(env) => (env, payload.len() as u64),
            None => Frame::decode_eager(header)?,
        };
        if plen != payload.len() as u64
            || env.src != peer
            || !buf.is_host()
            || !pat.accepts(&env)
            || !self.matcher.take_in_order(&env)
        {
            return None;
        }
        let cap = buf.len();
        Self::write_payload(buf, 0, payload, payload.len().min(cap));
        Some(recv_result(env.src, env.tag, plen, cap))
    }

    /// Post a receive into `buf` for messages accepted by `pat`.
    #[inline(always)]
    pub fn irecv(&mut self, pat: Pattern, buf: RawBuf) -> ReqId {
        if !self.dead.is_empty() || !self.revoked.is_empty() {
            return self.irecv_after_failure(pat, buf);
        }
        let id = self.reqs.insert_recv(pat, buf);
        if let Some(m) = self.matcher.post(pat, id) {
            self.deliver(m);
        }
        id
    }

    /// [`Protocol::irecv`] once a peer died or a context was revoked.
    #[inline(never)]
    fn irecv_after_failure(&mut self, pat: Pattern, buf: RawBuf) -> ReqId {
        if let Some(src) = pat.src
            && let Some(e) = self.dead.get(&src).cloned()
        {
            let id = self.alloc_id();
            self.reqs.complete(id, Err(e));
            return id;
        }
        if let Some(e) = self.revoked_error(pat.ctx) {
            let id = self.alloc_id();
            self.reqs.complete(id, Err(e));
            return id;
        }
        let id = self.reqs.insert_recv(pat, buf);
        if let Some(m) = self.matcher.post(pat, id) {
            self.deliver(m);
        } else if pat.src.is_none()
            && let Some(e) = self.dead.values().next().cloned()
        {
            // Nothing waiting matched, and a peer that might have been the sender is
            // gone: fail now rather than wait forever (compare MPI 4.1 fault tolerance
            // proposals, MPI_ERR_PROC_FAILED_PENDING).
            self.matcher.cancel(id);
            self.reqs.take_recv(id);
            self.reqs.complete(id, Err(e));
        }
        id
    }

    /// Receive a message removed by [`Protocol::improbe`] into `buf`.
    pub fn mrecv(&mut self, msg: ProbedMessage, buf: RawBuf) -> ReqId {
        let id = self.alloc_id();
        let pat = Pattern {
            ctx: msg.env.ctx,
            src: Some(msg.env.src),
            tag: Some(msg.env.tag),
        };
        if !msg.peer_ok
            && let Some(e) = self.dead.get(&msg.env.src)
        {
            self.reqs.complete(id, Err(e.clone()));
            return id;
        }
        self.reqs.set_recv(
            id,
            RecvReq {
                pat,
                buf,
                state: RecvState::Posted,
            },
        );
        self.deliver(Matched {
            recv: id,
            env: msg.env,
            msg: msg.body,
        });
        id
    }

    /// Status of the earliest unexpected message `pat` accepts (MPI_Iprobe).
    pub fn iprobe(&self, pat: &Pattern) -> Option<Status> {
        self.matcher.probe(pat).map(|(env, body)| Status {
            source: env.src as usize,
            tag: env.tag,
            len_bytes: body.len() as usize,
        })
    }

    /// Remove the earliest unexpected message `pat` accepts (MPI_Improbe).
    pub fn improbe(&mut self, pat: &Pattern) -> Option<ProbedMessage> {
        self.matcher.take(pat).map(|(env, body)| ProbedMessage {
            env,
            body,
            peer_ok: true,
        })
    }

    /// A frame arrived from `peer`: its header bytes and its payload, owned
    /// (`Vec<u8>`) or lent by the transport ([`InPayload`]; the payload is copied
    /// straight into a matching receive buffer, or into the unexpected message queue).
    ///
    /// # Errors
    /// [`Error::Transport`] when the frame is malformed or inconsistent with the
    /// protocol state (the peer is then treated as failed).
    #[inline]
    pub fn on_frame<'a>(
        &mut self,
        peer: u32,
        header: &[u8],
        payload: impl Into<InPayload<'a>>,
    ) -> Result<(), Error> {
        let payload = payload.into();
        // The common frame, a short eager message, inline in the caller's loop; every
        // other frame (a full `Eager` header too) in `on_frame_inner`.
        if let Some(env) = self.short_eager_env(peer, header) {
            self.arrive_eager(env, payload);
            return Ok(());
        }
        let r = self.on_frame_inner(peer, header, payload);
        if let Err(e) = &r {
            self.fail_peer(peer, e.clone());
        }
        r
    }

    /// Where the payload of the frame `header` (with `len_bytes` of payload) from
    /// `peer` may be written directly by a transport: for a `Data` frame of a host
    /// receive that expects it, that part of the receive buffer (valid until the frame
    /// is reported with [`Protocol::on_frame_placed`] or the peer fails); `None`
    /// otherwise (the frame then comes with its own payload to [`Protocol::on_frame`]).
    ///
    /// For a device receive (with device buffers enabled) the part of the device
    /// buffer is returned: a transport cannot write it, but the caller may land the
    /// payload in a host staging buffer, report it with [`Protocol::on_frame_staged`]
    /// and copy it in, answering with [`Protocol::staged_in`].
    pub fn data_target(&self, peer: u32, header: &[u8], len_bytes: usize) -> Option<RawBuf> {
        let Ok(Some((Frame::Data { rreq, offset }, hlen, plen))) = Frame::decode(header) else {
            return None;
        };
        if hlen != header.len() || plen != len_bytes as u64 {
            return None;
        }
        let r = self.reqs.recv(rreq)?;
        let RecvState::Data { src, accept, .. } = r.state else {
            return None;
        };
        let end = offset.checked_add(len_bytes as u64)?;
        if src != peer || end > accept as u64 || (!r.buf.is_host() && !self.gpu) {
            return None;
        }
        Some(RawBuf {
            ptr: r.buf.ptr.wrapping_add(offset as usize),
            len: len_bytes,
            kind: r.buf.kind,
        })
    }

    /// A frame arrived from `peer` whose payload (`len_bytes`) a transport wrote to the
    /// place [`Protocol::data_target`] gave for it.
    ///
    /// # Errors
    /// [`Error::Transport`] when the frame is not the `Data` frame that place was for
    /// (the peer is then treated as failed).
    pub fn on_frame_placed(
        &mut self,
        peer: u32,
        header: &[u8],
        len_bytes: usize,
    ) -> Result<(), Error> {
        let r = self.on_placed_inner(peer, header, len_bytes);
        if let Err(e) = &r {
            self.fail_peer(peer, e.clone());
        }
        r
    }

    /// A `Data` frame from `peer` whose payload (`len_bytes`) the caller landed in a
    /// host staging buffer because [`Protocol::data_target`] named device memory: the
    /// bytes count as arrived, and the receive completes only once the caller answers
    /// the copy into the device part `dst` (returned with its receive request) with
    /// [`Protocol::staged_in`]. `Ok(None)`: the receive does not want the bytes (an
    /// earlier copy failed); nothing to copy or answer.
    ///
    /// # Errors
    /// [`Error::Transport`] when the frame is not a `Data` frame of a device receive
    /// pending from `peer` that fits its accepted bytes (the peer is then failed).
    pub fn on_frame_staged(
        &mut self,
        peer: u32,
        header: &[u8],
        len_bytes: usize,
    ) -> Result<Option<(ReqId, RawBuf)>, Error> {
        let r = self.on_staged_inner(peer, header, len_bytes);
        if let Err(e) = &r {
            self.fail_peer(peer, e.clone());
        }
        r
    }

    fn on_staged_inner(
        &mut self,
        peer: u32,
        header: &[u8],
        len: usize,
    ) -> Result<Option<(ReqId, RawBuf)>, Error> {
        let bad = |detail: String| Error::Transport {
            transport: "wire",
            peer,
            detail,
        };
        let Ok(Some((Frame::Data { rreq, offset }, _, plen))) = Frame::decode(header) else {
            return Err(bad("a staged payload for a frame that is not Data".into()));
        };
        let Some(r) = self.reqs.recv_mut(rreq) else {
            return Err(bad(format!(
                "staged Data for unknown receive request {rreq}"
            )));
        };
        let buf = r.buf;
        let RecvState::Data {
            src,
            accept,
            got,
            staging,
            failed,
            ..
        } = &mut r.state
        else {
            return Err(bad(format!(
                "staged Data before Cts for receive request {rreq}"
            )));
        };
        let end = offset.checked_add(len as u64);
        if *src != peer
            || plen != len as u64
            || buf.is_host()
            || end.is_none_or(|e| e > *accept as u64)
        {
            return Err(bad(format!(
                "staged Data chunk at offset {offset} of {len} bytes outside the {accept} \
                 accepted bytes of a device receive"
            )));
        }
        *got += len;
        if failed.is_some() || len == 0 {
            if *got >= *accept {
                self.finish_rndv_recv(rreq);
            }
            return Ok(None);
        }
        *staging += 1;
        // offset + len <= accept <= buf.len(), checked above.
        let dst = RawBuf {
            ptr: buf.ptr.wrapping_add(offset as usize),
            len,
            kind: buf.kind,
        };
        Ok(Some((rreq, dst)))
    }

    pub(super) fn on_placed_inner(
        &mut self,
        peer: u32,
        header: &[u8],
        len: usize,
    ) -> Result<(), Error> {
        let bad = |detail: String| Error::Transport {
            transport: "wire",
            peer,
            detail,
        };
        let Ok(Some((Frame::Data { rreq, offset }, _, plen))) = Frame::decode(header) else {
            return Err(bad("a placed payload for a frame that is not Data".into()));
        };
        let Some(r) = self.reqs.recv_mut(rreq) else {
            return Err(bad(format!(
                "placed Data for unknown receive request {rreq}"
            )));
        };
        let host = r.buf.is_host();
        let RecvState::Data {
            src, accept, got, ..
        } = &mut r.state
        else {
            return Err(bad(format!(
                "placed Data before Cts for receive request {rreq}"
            )));
        };
        let end = offset.checked_add(len as u64);
        // A device receive's bytes are never placed (on_frame_staged reports those).
        if *src != peer || !host || plen != len as u64 || end.is_none_or(|e| e > *accept as u64) {
            return Err(bad(format!(
                "placed Data chunk at offset {offset} of {len} bytes outside the {accept} accepted bytes"
            )));
        }
        *got += len;
        if *got >= *accept {
            self.finish_rndv_recv(rreq);
        }
        Ok(())
    }

    /// Write the first `n` bytes of `payload` at `offset` of a pending receive's host
    /// buffer. Callers check `offset + n <= buf.len()`, `n <= payload.len()` and that
    /// `buf` is host memory (device buffers go through [`Protocol::stage_in`]).
    #[inline]
    pub(super) fn write_payload(buf: RawBuf, offset: usize, payload: &InPayload<'_>, n: usize) {
        if n == 0 {
            return;
        }
        debug_assert!(buf.is_host() && offset + n <= buf.len);
        // SAFETY: callers check the bounds; the receive is pending, so its buffer is
        // borrowed exclusively by it.
        let dst = unsafe { std::slice::from_raw_parts_mut(buf.ptr.add(offset), n) };
        payload.copy_to(dst);
    }

    /// An eager message arrived: straight into a posted receive when one matches in
    /// order (copied once, from wherever the transport holds it), else into the
    /// unexpected message queue.
    #[inline]
    pub(super) fn arrive_eager(&mut self, env: Envelope, payload: InPayload<'_>) {
        if let Some(recv) = self.matcher.arrive_matched(&env, &mut self.matched) {
            self.deliver_eager(recv, env, &payload);
        } else {
            self.matcher.arrive(
                env,
                Unexpected::Eager(payload.into_vec()),
                &mut self.matched,
            );
        }
        if !self.matched.is_empty() {
            let mut matched = std::mem::take(&mut self.matched);
            for m in matched.drain(..) {
                self.deliver(m);
            }
            self.matched = matched;
        }
    }

    /// Complete receive `recv` with the eager message `env` whose payload arrived
    /// just now (matched at once, never queued).
    #[inline]
    pub(super) fn deliver_eager(&mut self, recv: ReqId, env: Envelope, payload: &InPayload<'_>) {
        // A host receive (the common case): copy and complete in one look at its slot.
        let len = payload.len();
        let done = self
            .reqs
            .complete_host_recv(recv, env.src, env.tag, len as u64, |buf| {
                Self::write_payload(buf, 0, payload, len.min(buf.len()));
            });
        if done.is_some() {
            return;
        }
        // Not a host receive: a device one (staged in), or no receive at all.
        let Some(r) = self.reqs.recv_mut(recv) else {
            return;
        };
        let buf = r.buf;
        let cap = buf.len();
        let n = payload.len().min(cap);
        let res = recv_result(env.src, env.tag, payload.len() as u64, cap);
        let mut data = vec![0u8; n];
        payload.copy_to(&mut data);
        self.stage_in_eager(recv, buf, data, res);
    }

    /// The envelope of a short eager header ([`Frame::short_eager_header`]) from
    /// `peer`: the source is `peer`, the sequence number the one nearest the next
    /// expected ([`Frame::short_eager_seq`]). `None` for any other header.
    #[inline]
    fn short_eager_env(&mut self, peer: u32, header: &[u8]) -> Option<Envelope> {
        let (ctx, tag, seq_lo) = Frame::decode_short_eager(header)?;
        let next = self.matcher.next_seq(peer, ctx);
        Some(Envelope {
            ctx,
            src: peer,
            tag,
            seq: Frame::short_eager_seq(seq_lo, next),
        })
    }

    pub(super) fn on_frame_inner(
        &mut self,
        peer: u32,
        header: &[u8],
        payload: InPayload<'_>,
    ) -> Result<(), Error> {
        // A short eager frame was taken by `on_frame` before this. A full `Eager`
        // header, without building a `Frame`.
        if let Some((env, plen)) = Frame::decode_eager(header)
            && plen == payload.len() as u64
            && env.src == peer
        {
            self.arrive_eager(env, payload);
            return Ok(());
        }
        let bad = |detail: String| Error::Transport {
            transport: "wire",
            peer,
            detail,
        };
        let (frame, hlen, plen) = match Frame::decode(header) {
            Ok(Some(x)) => x,
            Ok(None) => {
                return Err(bad(format!(
                    "truncated frame header ({} bytes)",
                    header.len()
                )));
            }
            Err(e) => return Err(bad(format!("malformed frame: {e}"))),
        };
        if hlen != header.len() || plen != payload.len() as u64 {
            return Err(bad(format!(
                "frame lengths disagree: header {hlen} of {} bytes, payload {plen} of {} bytes",
                header.len(),
                payload.len()
            )));
        }
        match frame {
            Frame::Eager { env } | Frame::Rts { env, .. } if env.src != peer => Err(bad(format!(
                "frame claims source rank {} but came from rank {peer}",
                env.src
            ))),
            Frame::Eager { env } => {
                self.arrive_eager(env, payload);
                Ok(())
            }
            Frame::Revoke { ctx } => {
                if !payload.is_empty() {
                    return Err(bad("Revoke frame with a payload".into()));
                }
                self.on_revoke(peer, ctx)
            }
            Frame::Rts {
                env,
                msg_len,
                sreq,
                mem,
            } => {
                if !payload.is_empty() {
                    return Err(bad("Rts frame with a payload".into()));
                }
                self.arrive(env, Unexpected::Rts { msg_len, sreq, mem });
                Ok(())
            }
            Frame::Cts {
                sreq,
                rreq,
                accept_len,
                ..
            } => {
                let Some(s) = self.reqs.send_mut(sreq) else {
                    return Err(bad(format!("Cts for unknown send request {sreq}")));
                };
                if s.dst != peer || !matches!(s.state, SendState::AwaitCts) {
                    return Err(bad(format!("unexpected Cts for send request {sreq}")));
                }
                if accept_len > s.buf.len() as u64 {
                    return Err(bad(format!(
                        "Cts accepts {accept_len} bytes of a {}-byte message",
                        s.buf.len()
                    )));
                }
                let end = accept_len as usize;
                s.state = SendState::Data {
                    rreq,
                    queued: 0,
                    sent: 0,
                    end,
                    staging: Vec::new(),
                };
                if end == 0 {
                    if let Some(s) = self.reqs.take_send(sreq) {
                        self.complete_send(sreq, &s);
                    }
                } else {
                    self.data_ready.push_back(sreq);
                }
                Ok(())
            }
            Frame::Data { rreq, offset } => {
                let Some(r) = self.reqs.recv_mut(rreq) else {
                    return Err(bad(format!("Data for unknown receive request {rreq}")));
                };
                let RecvState::Data {
                    src,
                    accept,
                    got,
                    failed,
                    ..
                } = &mut r.state
                else {
                    return Err(bad(format!("Data before Cts for receive request {rreq}")));
                };
                let end = offset.checked_add(payload.len() as u64);
                if *src != peer || end.is_none_or(|e| e > *accept as u64) {
                    return Err(bad(format!(
                        "Data chunk at offset {offset} of {} bytes outside the {} accepted bytes",
                        payload.len(),
                        accept
                    )));
                }
                *got += payload.len();
                let finished = *got >= *accept;
                let buf = r.buf;
                // offset + len <= accept <= buf.len(), checked above; the receive is
                // pending so its buffer is still borrowed.
                if buf.is_host() {
                    Self::write_payload(buf, offset as usize, &payload, payload.len());
                } else if failed.is_none() && !payload.is_empty() {
                    let dst = RawBuf {
                        ptr: buf.ptr.wrapping_add(offset as usize),
                        len: payload.len(),
                        kind: buf.kind,
                    };
                    let r = self.stage_in(rreq, dst, payload.into_vec());
                    if let Some(RecvReq {
                        state:
                            RecvState::Data {
                                staging, failed, ..
                            },
                        ..
                    }) = self.reqs.recv_mut(rreq)
                    {
                        match r {
                            Ok(()) => *staging += 1,
                            Err(e) => *failed = Some(Box::new(e)),
                        }
                    }
                }
                if finished {
                    self.finish_rndv_recv(rreq);
                }
                Ok(())
            }
            Frame::Help { sreq } => {
                self.on_help(peer, sreq);
                Ok(())
            }
            Frame::Push {
                sreq,
                rreq,
                offset,
                len,
                mem,
            } => self
                .on_push(peer, sreq, rreq, offset, len, mem)
                .map_err(bad),
            Frame::Pushed { rreq, ok } => self.on_pushed(peer, rreq, ok).map_err(bad),
            Frame::Cancel { sreq } => {
                self.on_cancel(peer, sreq);
                Ok(())
            }
            Frame::Cancelled { sreq, ok } => self.on_cancelled(peer, sreq, ok).map_err(bad),
            Frame::Fin { sreq } => {
                match self.reqs.send(sreq) {
                    Some(s) if s.dst == peer && matches!(s.state, SendState::AwaitCts) => {}
                    _ => return Err(bad(format!("unexpected Fin for send request {sreq}"))),
                }
                if let Some(s) = self.reqs.take_send(sreq) {
                    self.complete_send(sreq, &s);
                }
                Ok(())
            }
        }
    }

    pub(super) fn arrive(&mut self, env: Envelope, body: Unexpected) {
        let mut matched = std::mem::take(&mut self.matched);
        self.matcher.arrive(env, body, &mut matched);
        for m in matched.drain(..) {
            self.deliver(m);
        }
        self.matched = matched;
    }

    pub(super) fn deliver(&mut self, m: Matched<ReqId, Unexpected>) {
        let Matched { recv, env, msg } = m;
        let Some(r) = self.reqs.recv_mut(recv) else {
            return;
        };
        let cap = r.buf.len();
        match msg {
            Unexpected::Eager(data) => {
                let n = data.len().min(cap);
                let buf = r.buf;
                let res = recv_result(env.src, env.tag, data.len() as u64, cap);
                if !buf.is_host() {
                    let mut data = data;
                    data.truncate(n);
                    self.stage_in_eager(recv, buf, data, res);
                    return;
                }
                self.reqs.take_recv(recv);
                if n > 0 {
                    // SAFETY: n <= cap; the receive was pending until now, its buffer
                    // borrowed.
                    unsafe { buf.write_at(0, &data[..n]) };
                }
                self.reqs.complete(recv, res);
            }
            Unexpected::Rts { msg_len, sreq, mem } => {
                let accept = (msg_len.min(cap as u64)) as usize;
                let pull = match mem {
                    RemoteMem::HostCma { .. } => {
                        r.buf.is_host() && self.pull_from.contains(&env.src)
                    }
                    RemoteMem::CudaIpc { .. } => self.gpu && self.ipc_from.contains(&env.src),
                    RemoteMem::Rdma { len, .. } => {
                        len >= msg_len
                            && if r.buf.is_host() {
                                self.pull_from.contains(&env.src)
                            } else {
                                self.gpu && self.gdr_from.contains(&env.src)
                            }
                    }
                    _ => false,
                };
                if accept > 0 && pull {
                    r.state = RecvState::Pulling {
                        src: env.src,
                        tag: env.tag,
                        msg_len,
                        sreq,
                        accept,
                        copy: Box::new(share::PullCopy {
                            mem,
                            pulled: 0,
                            end: accept,
                            inflight: 0,
                            helped: false,
                            pushing: false,
                        }),
                    };
                    self.start_pull(recv, env.src, sreq, mem);
                    return;
                }
                let header = Frame::Cts {
                    sreq,
                    rreq: recv,
                    accept_len: accept as u64,
                    mem: RemoteMem::None,
                }
                .header(0);
                self.out.push_back(OutFrame {
                    peer: env.src,
                    header,
                    payload: Payload::Empty,
                    on_sent: OnSent::Nothing,
                });
                r.state = RecvState::Data {
                    src: env.src,
                    tag: env.tag,
                    msg_len,
                    accept,
                    got: 0,
                    pushing: false,
                    staging: 0,
                    failed: None,
                };
                if accept == 0 {
                    self.finish_rndv_recv(recv);
                }
            }
        }
    }

    /// Complete rendezvous receive `id`, whose bytes are all here, unless a share the
    /// sender may still be writing is unanswered (then `Pushed` completes it) or copies
    /// into its device buffer are not answered yet (then `staged_in` completes it).
    pub(super) fn finish_rndv_recv(&mut self, id: ReqId) {
        if let Some(RecvReq {
            state: RecvState::Data {
                pushing, staging, ..
            },
            ..
        }) = self.reqs.recv(id)
            && (*pushing || *staging > 0)
        {
            return;
        }
        if let Some(RecvReq {
            buf,
            state:
                RecvState::Data {
                    src,
                    tag,
                    msg_len,
                    failed,
                    ..
                },
            ..
        }) = self.reqs.take_recv(id)
        {
            let res = match failed {
                Some(e) => Err(*e),
                None => recv_result(src, tag, msg_len, buf.len()),
            };
            self.reqs.complete(id, res);
        }
    }

    /// Try to withdraw a receive that has not matched yet (used when a request is
    /// dropped unfinished). Returns whether it was withdrawn.
    pub fn cancel_recv(&mut self, id: ReqId) -> bool {
        if self.matcher.cancel(id) {
            self.reqs.free(id);
            true
        } else {
            false
        }
    }

    /// Withdraw a receive that has not matched yet while its request may still be
    /// waited for: the request completes with [`MatchError::Cancelled`] (which a waiter
    /// takes as its outcome). Returns whether it was withdrawn; `false` for an id that
    /// matched, completed, or is no receive of this rank (ids are generation-checked).
    pub fn withdraw_recv(&mut self, id: ReqId) -> bool {
        if self.matcher.cancel(id) {
            // Not through `From`: a cancel is no error to note for abort reports.
            self.reqs
                .complete(id, Err(Error::Matching(MatchError::Cancelled)));
            true
        } else {
            false
        }
    }
}
