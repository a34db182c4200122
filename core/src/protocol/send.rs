//! The send side of the protocol: eager sends (the engine's fast path included), the
//! start of a rendezvous (`Rts`), rendezvous data chunks, and what a transport taking a
//! frame completes.

use super::*;

impl Protocol {
    /// Start a send of `buf` to world rank `dst` on context `ctx` with `tag`. Messages
    /// of at most `eager_limit` bytes go eagerly unless `sync` (MPI_Ssend semantics:
    /// complete only once the receive has matched) is set.
    ///
    /// The caller has validated `dst` and `tag`.
    pub fn isend(
        &mut self,
        dst: u32,
        ctx: u32,
        tag: i32,
        buf: RawBuf,
        eager_limit: usize,
        sync: bool,
    ) -> ReqId {
        let id = self.alloc_id();
        if let Some(e) = self.dead.get(&dst) {
            self.reqs.complete(id, Err(e.clone()));
            return id;
        }
        if let Some(e) = self.revoked_error(ctx) {
            self.reqs.complete(id, Err(e));
            return id;
        }
        let env = self.next_env(dst, ctx, tag);
        if !sync && buf.len() <= eager_limit {
            let payload = if buf.is_empty() {
                Payload::Empty
            } else if buf.is_host() {
                Payload::User(buf)
            } else {
                // Device memory: staged to host first (the send buffer is ready at
                // isend); the frame goes out with the answer (staged_out).
                if !self.gpu {
                    self.reqs.complete(id, Err(no_gpu(buf.kind)));
                    return id;
                }
                self.reqs.set_send(
                    id,
                    SendReq::new(dst, ctx, tag, buf, SendState::Staging { env }),
                );
                self.actions.push_back(MemAction::StageOut {
                    sreq: id,
                    src: buf,
                    offset: 0,
                });
                return id;
            };
            self.out.push_back(OutFrame {
                peer: dst,
                header: Frame::short_eager_header(&env),
                payload,
                on_sent: OnSent::CompleteSend(id),
            });
            self.reqs
                .set_send(id, SendReq::new(dst, ctx, tag, buf, SendState::Eager));
        } else {
            let offer = if buf.is_empty() {
                None
            } else if !buf.is_host() {
                if !self.gpu {
                    None
                } else if self.ipc_to.contains(&dst) {
                    Some(OfferKind::CudaIpc)
                } else if self.gdr_to.contains(&dst) {
                    Some(OfferKind::Rdma)
                } else {
                    None
                }
            } else if !self.net_to.is_empty() && self.net_to.contains(&dst) {
                Some(OfferKind::Rdma)
            } else {
                None
            };
            if let Some(to) = offer {
                // The Rts goes out with the answer (offered).
                self.reqs.set_send(
                    id,
                    SendReq::new(dst, ctx, tag, buf, SendState::Offering { env }),
                );
                self.actions
                    .push_back(MemAction::Offer { sreq: id, buf, to });
                return id;
            }
            let mem = if !buf.is_empty() && buf.is_host() && self.offer_to.contains(&dst) {
                RemoteMem::HostCma {
                    pid: self.pid,
                    addr: buf.ptr as u64,
                }
            } else {
                RemoteMem::None
            };
            let header = Frame::Rts {
                env,
                msg_len: buf.len() as u64,
                sreq: id,
                mem,
            }
            .header(0);
            self.out.push_back(OutFrame {
                peer: dst,
                header,
                payload: Payload::Empty,
                on_sent: OnSent::Nothing,
            });
            self.reqs
                .set_send(id, SendReq::new(dst, ctx, tag, buf, SendState::AwaitCts));
        }
        id
    }

    /// Fast path of an eager send of host memory, for the engine: the bytes of the
    /// short eager header ([`Frame::short_eager_bytes`]) of a message to `dst` on context `ctx`
    /// with `tag` (any payload length), taking the
    /// message's sequence number; `None` when `dst` has failed or `ctx` is revoked
    /// (use [`Protocol::isend`], which reports that). The caller hands the frame to a
    /// transport at once; if the transport does not take it, it queues the frame with
    /// [`Protocol::queue_eager`] (the sequence number is spent either way). Frames
    /// queued for `dst` earlier must have gone out first ([`Protocol::has_frames_for`]),
    /// so that messages keep their order.
    #[inline(always)]
    pub fn eager_header(
        &mut self,
        dst: u32,
        ctx: u32,
        tag: i32,
    ) -> Option<[u8; crate::wire::SHORT_EAGER_BYTES]> {
        if (!self.dead.is_empty() && self.dead.contains_key(&dst)) || self.is_revoked(ctx) {
            return None;
        }
        let env = self.next_env(dst, ctx, tag);
        Some(Frame::short_eager_bytes(&env))
    }

    /// Queue the eager frame `header` (from [`Protocol::eager_header`]) carrying the
    /// host buffer `buf` to `dst` as a send request, completed when a transport takes
    /// it (as [`Protocol::isend`] does).
    pub fn queue_eager(
        &mut self,
        dst: u32,
        ctx: u32,
        tag: i32,
        buf: RawBuf,
        header: [u8; crate::wire::SHORT_EAGER_BYTES],
    ) -> ReqId {
        let id = self.alloc_id();
        self.out.push_back(OutFrame {
            peer: dst,
            header: HeaderBuf::from_short(header),
            payload: if buf.is_empty() {
                Payload::Empty
            } else {
                Payload::User(buf)
            },
            on_sent: OnSent::CompleteSend(id),
        });
        self.reqs
            .set_send(id, SendReq::new(dst, ctx, tag, buf, SendState::Eager));
        id
    }

    /// Record a send of `len_bytes` to `dst` with `tag` as completed now (a fast eager
    /// send a transport took at once; see [`Protocol::eager_header`]), so that
    /// [`Protocol::take_done`] reports it under the returned fresh request id.
    pub fn complete_now(&mut self, dst: u32, tag: i32, len_bytes: usize) -> ReqId {
        let id = self.alloc_id();
        self.reqs.complete(
            id,
            Ok(Status {
                source: dst as usize,
                tag,
                len_bytes,
            }),
        );
        id
    }

    /// Whether a posted receive of this rank accepts a message from `src` on `ctx`
    /// with `tag` (for the warning about a blocking send to self).
    pub fn has_posted_recv(&self, ctx: u32, src: u32, tag: i32) -> bool {
        self.matcher.has_posted(ctx, src, tag)
    }

    /// Whether a frame for `dst` is waiting in [`Protocol::pop_frame`]'s queue.
    #[inline]
    pub fn has_frames_for(&self, dst: u32) -> bool {
        !self.out.is_empty() && self.out.iter().any(|f| f.peer == dst)
    }

    /// The envelope of the next message to `dst` on `ctx` (takes its sequence number).
    #[inline]
    pub(super) fn next_env(&mut self, dst: u32, ctx: u32, tag: i32) -> Envelope {
        let seq = self.next_seq.entry((dst, ctx));
        let env = Envelope {
            ctx,
            src: self.rank,
            tag,
            seq: *seq,
        };
        *seq += 1;
        env
    }

    /// Next rendezvous data chunk. `room(peer)` gives the largest chunk the peer's
    /// transport takes now (`None`: peer backed up, skip it for now). A chunk of a
    /// device buffer is not returned: it is queued as [`MemAction::StageOut`] and its
    /// frame comes from [`Protocol::pop_frame`] once [`Protocol::staged_out`] answers.
    pub fn next_data(&mut self, mut room: impl FnMut(u32) -> Option<usize>) -> Option<OutFrame> {
        for _ in 0..self.data_ready.len() {
            let sreq = self.data_ready.pop_front()?;
            let Some(s) = self.reqs.send_mut(sreq) else {
                continue;
            };
            let SendState::Data {
                rreq,
                queued,
                end,
                staging,
                ..
            } = &mut s.state
            else {
                continue;
            };
            let Some(max) = room(s.dst) else {
                self.data_ready.push_back(sreq);
                continue;
            };
            let device = !s.buf.is_host();
            let max = if device && self.stage_chunk > 0 {
                max.min(self.stage_chunk)
            } else {
                max
            };
            let n = (*end - *queued).min(max.max(1));
            // queued + n <= end <= buf.len(), checked when the Cts arrived.
            let chunk = RawBuf {
                ptr: s.buf.ptr.wrapping_add(*queued),
                len: n,
                kind: s.buf.kind,
            };
            if device {
                if !self.gpu {
                    self.fail_send(sreq, no_gpu(chunk.kind));
                    continue;
                }
                // Up to stage_depth chunks are copied to host at once; staged_out
                // queues each chunk's frame and puts the send back in line.
                let offset = *queued;
                *queued += n;
                staging.push((offset, n));
                if *queued < *end && staging.len() < self.stage_depth as usize {
                    self.data_ready.push_back(sreq);
                }
                self.actions.push_back(MemAction::StageOut {
                    sreq,
                    src: chunk,
                    offset,
                });
                continue;
            }
            let header = Frame::Data {
                rreq: *rreq,
                offset: *queued as u64,
            }
            .header(n as u64);
            *queued += n;
            if *queued < *end {
                self.data_ready.push_back(sreq);
            }
            return Some(OutFrame {
                peer: s.dst,
                header,
                payload: Payload::User(chunk),
                on_sent: OnSent::DataSent { sreq, len: n },
            });
        }
        None
    }

    /// Whether rendezvous data is waiting to be pulled with [`Protocol::next_data`].
    pub fn has_data(&self) -> bool {
        !self.data_ready.is_empty()
    }

    /// A frame produced earlier was taken by a transport.
    pub fn on_sent(&mut self, what: OnSent) {
        match what {
            OnSent::Nothing => {}
            OnSent::CompleteSend(id) => {
                if let Some(s) = self.reqs.take_send(id) {
                    self.complete_send(id, &s);
                }
            }
            OnSent::DataSent { sreq, len } => {
                let finished = match self.reqs.send_mut(sreq) {
                    Some(SendReq {
                        state: SendState::Data { sent, end, .. },
                        pushing,
                        ..
                    }) => {
                        *sent += len;
                        // A share still to be written completes it instead (push_done).
                        *sent >= *end && *pushing == 0
                    }
                    _ => false,
                };
                if finished && let Some(s) = self.reqs.take_send(sreq) {
                    self.complete_send(sreq, &s);
                }
            }
        }
    }

    /// Let the side that offered the buffer of send `s` (request `sreq`) for a single
    /// copy release what it set up ([`MemAction::Release`]): CUDA IPC staging, or the
    /// RDMA registration of host or device memory.
    #[inline]
    pub(super) fn release_offer(&mut self, sreq: ReqId, s: &SendReq) {
        if let Some(to) = s.offered {
            self.actions.push_back(MemAction::Release { sreq, to });
        }
    }

    /// Cancel send `id` (MPI_Cancel, MPI 4.1 §3.8.4): a rendezvous send whose `Rts` has
    /// gone out and not been answered asks its receiver to withdraw it ([`Frame::Cancel`]);
    /// the answer ([`Frame::Cancelled`]) completes the send with
    /// [`MatchError::Cancelled`] if it was withdrawn, else (its receive matched, or its
    /// `Rts` is held there for ordering) the rendezvous goes on and the send completes
    /// as usual. Returns whether the question was sent; `false` for an eager send (it
    /// completes locally), a send answered by a `Cts`, one asked already, or an id that
    /// is no pending send.
    pub fn cancel_send(&mut self, id: ReqId) -> bool {
        let Some(s) = self.reqs.send_mut(id) else {
            return false;
        };
        if s.cancel_asked || !matches!(s.state, SendState::AwaitCts) {
            return false;
        }
        s.cancel_asked = true;
        let peer = s.dst;
        self.out.push_back(OutFrame {
            peer,
            header: Frame::Cancel { sreq: id }.header(0),
            payload: Payload::Empty,
            on_sent: OnSent::Nothing,
        });
        true
    }

    /// `Cancelled` arrived from `peer` for its send `sreq`: the answer to
    /// [`Protocol::cancel_send`]. A send that completed meanwhile is not looked for
    /// (the answer came after its `Fin`).
    ///
    /// # Errors
    /// A message for the transport error when the frame answers no question asked.
    pub(super) fn on_cancelled(&mut self, peer: u32, sreq: u64, ok: bool) -> Result<(), String> {
        let Some(s) = self.reqs.send(sreq) else {
            return Ok(());
        };
        if s.dst != peer || !s.cancel_asked {
            return Err(format!("Cancelled for send request {sreq}, never asked"));
        }
        if !ok {
            return Ok(());
        }
        // A withdrawn Rts left the send waiting for its Cts, and no share of it can be
        // under way (shares come after a match).
        if !matches!(s.state, SendState::AwaitCts) || s.pushing > 0 {
            return Err(format!(
                "Cancelled (withdrawn) for send request {sreq}, whose message is being \
                 received"
            ));
        }
        if let Some(s) = self.reqs.take_send(sreq) {
            self.release_offer(sreq, &s);
            // A send withdrawn because its context was revoked fails with that;
            // otherwise the user cancelled it (not through `From`: a cancel is no error
            // to note for abort reports).
            let err = self
                .revoked_error(s.ctx)
                .unwrap_or(Error::Matching(MatchError::Cancelled));
            self.reqs.complete(sreq, Err(err));
        }
        Ok(())
    }

    /// `Cancel` arrived from `peer` for its send `sreq`: withdraw that send's `Rts` if
    /// it is still unexpected, and answer.
    pub(super) fn on_cancel(&mut self, peer: u32, sreq: u64) {
        let withdrawn = self
            .matcher
            .withdraw_unexpected(|e, m| {
                e.src == peer && matches!(m, Unexpected::Rts { sreq: s, .. } if *s == sreq)
            })
            .is_some();
        if withdrawn {
            self.early_help.remove(&(peer, sreq));
        }
        self.out.push_back(OutFrame {
            peer,
            header: Frame::Cancelled {
                sreq,
                ok: withdrawn,
            }
            .header(0),
            payload: Payload::Empty,
            on_sent: OnSent::Nothing,
        });
    }

    pub(super) fn complete_send(&mut self, id: ReqId, s: &SendReq) {
        self.release_offer(id, s);
        self.reqs.complete(
            id,
            Ok(Status {
                source: s.dst as usize,
                tag: s.tag,
                len_bytes: s.buf.len(),
            }),
        );
    }
}
