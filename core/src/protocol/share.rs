//! Pull-mode rendezvous: the receiver copies the sender's buffer itself (cross-memory
//! attach, CUDA IPC, RDMA READ), and the sender may take a share of a large host copy.
//!
//! # Chunks and the sender's share
//! A host buffer offered by cross-memory attach ([`RemoteMem::HostCma`]) is pulled in
//! chunks of [`PULL_CHUNK_BYTES`], so that frames are looked at between two chunks.
//! Meanwhile the sender, once it waits for the send (it calls [`Protocol::help`], which
//! sends `Help`), can do half of what is left: the receiver answers `Help` with `Push`
//! (offset, length, and its own buffer's address), keeps pulling the lower part, and
//! the sender writes the upper part straight into the receiver's buffer
//! (`process_vm_writev(2)`), then answers `Pushed`. The receive completes, and `Fin`
//! goes to the sender, once both parts are copied. Two cores copy at once: a single
//! copy between processes is bound by one core (measured on the 2-core CI VM: 6.2 GB/s
//! alone, 9.4 GB/s shared, 4 MiB messages into fresh buffers).
//!
//! Only a sender that waits for the send offers help, so a receiver never waits for a
//! sender that is busy elsewhere: the sender stays in its wait until `Fin`, which comes
//! only after `Pushed`. A failed write (`Pushed` with `ok = false`) hands the share back
//! to the receiver, which pulls it itself and asks that sender no more. A failed pull
//! falls back to `Cts` + `Data` for the whole message (a share being written meanwhile
//! writes the same bytes, and its `Pushed` is ignored).

use super::*;

/// Bytes of one chunk of a cross-memory-attach pull.
pub const PULL_CHUNK_BYTES: usize = 128 << 10;
/// Pulls with at least this many bytes left are shared with a sender that helps.
pub const SHARE_MIN_BYTES: usize = 128 << 10;

/// Where a pull-mode receive stands.
#[derive(Debug, Clone, Copy)]
pub(super) struct PullCopy {
    /// The sender's buffer.
    pub(super) mem: RemoteMem,
    /// Bytes `[0, pulled)` are copied; `[pulled, end)` is this rank's to copy.
    pub(super) pulled: usize,
    pub(super) end: usize,
    /// Bytes of the chunk being copied now (0: none).
    pub(super) inflight: usize,
    /// The sender waits for the send (`Help` came): it may take a share.
    pub(super) helped: bool,
    /// The sender writes `[end, accept)` and has not said `Pushed` yet.
    pub(super) pushing: bool,
}

/// A write the engine must do for the sender's share of a pull: `src` (part of the
/// send buffer) into `mem` (the receiver's memory), then report
/// [`Protocol::push_done`] with this request.
#[derive(Debug, Clone, Copy)]
pub struct PushReq {
    /// The send request.
    pub sreq: ReqId,
    /// The receiver's request id (for `Pushed`).
    pub rreq: u64,
    /// World rank of the receiver.
    pub peer: u32,
    /// The bytes to write: part of the send buffer.
    pub src: RawBuf,
    /// Where to write them.
    pub mem: RemoteMem,
}

impl Protocol {
    /// The sender of send request `sreq` is waiting for it: if it is a host rendezvous
    /// the receiver pulls by cross-memory attach, offer to copy a share (once).
    #[inline]
    pub fn help(&mut self, sreq: ReqId) {
        let Some(s) = self.reqs.send_mut(sreq) else {
            return;
        };
        // A send being cancelled asks for no help: its Rts may be gone from the
        // receiver already, which would keep the Help for a match that never comes.
        if s.helped
            || s.cancel_asked
            || !matches!(s.state, SendState::AwaitCts)
            || s.buf.len() < SHARE_MIN_BYTES + PULL_CHUNK_BYTES
            || !s.buf.is_host()
            || !self.push_to.contains(&s.dst)
        {
            return;
        }
        s.helped = true;
        let dst = s.dst;
        self.out.push_back(OutFrame {
            peer: dst,
            header: Frame::Help { sreq }.header(0),
            payload: Payload::Empty,
            on_sent: OnSent::Nothing,
        });
    }

    /// Next write the engine must do for a sender's share ([`PushReq`]).
    pub fn pop_push(&mut self) -> Option<PushReq> {
        self.pushes.pop_front()
    }

    /// The engine wrote (or failed to write) the share `p`: tell the receiver. After a
    /// failure this rank offers no more help to that peer.
    pub fn push_done(&mut self, p: &PushReq, result: Result<(), String>) {
        let ok = result.is_ok();
        // A send that fell back to Data (its receiver could not pull) and sent all of it
        // meanwhile completes now that nothing reads its buffer any more.
        let finished = match self.reqs.send_mut(p.sreq) {
            Some(s) => {
                s.pushing = s.pushing.saturating_sub(1);
                s.pushing == 0
                    && matches!(s.state, SendState::Data { sent, end, .. } if sent >= end)
            }
            None => false,
        };
        if finished && let Some(s) = self.reqs.take_send(p.sreq) {
            self.complete_send(p.sreq, &s);
        }
        if let Err(why) = result {
            tracing::info!(
                "writing a share of a message into rank {} failed ({why}); it copies the rest itself, and no more shares go to it",
                p.peer
            );
            self.push_to.remove(&p.peer);
        }
        self.out.push_back(OutFrame {
            peer: p.peer,
            header: Frame::Pushed { rreq: p.rreq, ok }.header(0),
            payload: Payload::Empty,
            on_sent: OnSent::Nothing,
        });
    }

    /// Start pulling `accept` bytes of the message `mem` into receive `rreq`.
    pub(super) fn start_pull(&mut self, rreq: ReqId, src: u32, sreq: u64, mem: RemoteMem) {
        let helped = matches!(mem, RemoteMem::HostCma { .. })
            && !self.early_help.is_empty()
            && self.early_help.remove(&(src, sreq));
        if let Some(RecvReq {
            state: RecvState::Pulling { copy, .. },
            ..
        }) = self.reqs.recv_mut(rreq)
        {
            copy.helped = helped;
        }
        self.next_pull(rreq);
    }

    /// Queue the next chunk of receive `rreq`'s pull (sharing the rest with a helping
    /// sender first), or finish it when everything is copied.
    fn next_pull(&mut self, rreq: ReqId) {
        let pid = self.pid;
        let Some(r) = self.reqs.recv_mut(rreq) else {
            return;
        };
        let buf = r.buf;
        let RecvState::Pulling {
            src,
            tag,
            msg_len,
            sreq,
            accept,
            ref mut copy,
        } = r.state
        else {
            return;
        };
        if copy.inflight > 0 {
            return;
        }
        if let RemoteMem::HostCma { pid: spid, addr } = copy.mem {
            if copy.helped
                && !copy.pushing
                && copy.end - copy.pulled >= SHARE_MIN_BYTES
                && self.share_with.contains(&src)
            {
                // Half of what is left, on a page boundary, goes to the sender.
                let k = copy.pulled + (((copy.end - copy.pulled) / 2) & !4095);
                let (offset, len) = (k, copy.end - k);
                copy.end = k;
                copy.pushing = true;
                self.out.push_back(OutFrame {
                    peer: src,
                    header: Frame::Push {
                        sreq,
                        rreq,
                        offset: offset as u64,
                        len: len as u64,
                        mem: RemoteMem::HostCma {
                            pid,
                            addr: buf.ptr as u64 + offset as u64,
                        },
                    }
                    .header(0),
                    payload: Payload::Empty,
                    on_sent: OnSent::Nothing,
                });
            }
            if copy.pulled < copy.end {
                let n = (copy.end - copy.pulled).min(PULL_CHUNK_BYTES);
                copy.inflight = n;
                self.pulls.push_back(PullReq {
                    rreq,
                    peer: src,
                    mem: RemoteMem::HostCma {
                        pid: spid,
                        addr: addr + copy.pulled as u64,
                    },
                    dst: RawBuf {
                        ptr: buf.ptr.wrapping_add(copy.pulled),
                        len: n,
                        kind: buf.kind,
                    },
                });
                return;
            }
        } else if copy.pulled < copy.end {
            // Device and RDMA pulls go in one piece.
            copy.inflight = copy.end - copy.pulled;
            self.pulls.push_back(PullReq {
                rreq,
                peer: src,
                mem: copy.mem,
                dst: RawBuf {
                    ptr: buf.ptr,
                    len: accept,
                    kind: buf.kind,
                },
            });
            return;
        }
        if copy.pushing {
            return; // the sender's share is still being written
        }
        // Everything is here.
        self.out.push_back(OutFrame {
            peer: src,
            header: Frame::Fin { sreq }.header(0),
            payload: Payload::Empty,
            on_sent: OnSent::Nothing,
        });
        self.reqs.take_recv(rreq);
        self.reqs
            .complete(rreq, recv_result(src, tag, msg_len, buf.len()));
    }

    /// The engine finished (or failed) a copy of a pull for `rreq`. On success the
    /// pull goes on (or the receive completes and `Fin` goes to the sender); on failure
    /// this rank stops pulling from that peer and falls back to `Cts` + `Data` for the
    /// message.
    pub fn pull_done(&mut self, rreq: ReqId, result: Result<(), String>) {
        let Some(r) = self.reqs.recv_mut(rreq) else {
            return;
        };
        let RecvState::Pulling {
            src,
            tag,
            msg_len,
            sreq,
            accept,
            ref mut copy,
        } = r.state
        else {
            return;
        };
        let device_region = matches!(copy.mem, RemoteMem::Rdma { .. }) && !r.buf.is_host();
        match result {
            Ok(()) => {
                if device_region {
                    self.gdr_failures.remove(&src);
                }
                copy.pulled += copy.inflight;
                copy.inflight = 0;
                self.next_pull(rreq);
            }
            Err(why) => {
                if device_region {
                    // A device region (GPUDirect RDMA): this message goes by staged Data
                    // frames; reads into device memory from this peer stop only after
                    // GDR_MAX_FAILURES failures in a row (one buffer the NIC refuses
                    // should not cost the others); host buffers are still read.
                    let n = self.gdr_failures.entry(src).or_insert(0);
                    *n += 1;
                    if *n >= GDR_MAX_FAILURES {
                        self.gdr_from.remove(&src);
                        tracing::warn!(
                            "GPUDirect RDMA read from rank {src} failed {n} times in a row \
                             ({why}); device buffers from it are staged through host memory \
                             from now on",
                            n = *n
                        );
                    } else {
                        tracing::info!(
                            "GPUDirect RDMA read from rank {src} failed ({why}); this message \
                             is staged through host memory"
                        );
                    }
                } else {
                    tracing::info!(
                        "single-copy pull from rank {src} failed ({why}); using copy through the transport from now on"
                    );
                    self.pull_from.remove(&src);
                    self.ipc_from.remove(&src);
                }
                let pushing = copy.pushing;
                r.state = RecvState::Data {
                    src,
                    tag,
                    msg_len,
                    accept,
                    got: 0,
                    pushing,
                    staging: 0,
                    failed: None,
                };
                let header = Frame::Cts {
                    sreq,
                    rreq,
                    accept_len: accept as u64,
                    mem: RemoteMem::None,
                }
                .header(0);
                self.out.push_back(OutFrame {
                    peer: src,
                    header,
                    payload: Payload::Empty,
                    on_sent: OnSent::Nothing,
                });
            }
        }
    }

    /// `Help` arrived from `peer` for its send `sreq`.
    pub(super) fn on_help(&mut self, peer: u32, sreq: u64) {
        let found = self.reqs.recvs().find_map(|(id, r)| match r.state {
            RecvState::Pulling { src, sreq: s, .. } if src == peer && s == sreq => Some(id),
            _ => None,
        });
        match found {
            Some(id) => {
                if let Some(RecvReq {
                    state: RecvState::Pulling { copy, .. },
                    ..
                }) = self.reqs.recv_mut(id)
                {
                    copy.helped = true;
                }
                // Between two chunks (none in flight): share now.
                self.next_pull(id);
            }
            // Not matched yet (an unexpected Rts): remember it for the match.
            None => {
                self.early_help.insert((peer, sreq));
            }
        }
    }

    /// `Push` arrived from `peer`: validate it and queue the write.
    pub(super) fn on_push(
        &mut self,
        peer: u32,
        sreq: u64,
        rreq: u64,
        offset: u64,
        len: u64,
        mem: RemoteMem,
    ) -> Result<(), String> {
        let Some(s) = self.reqs.send_mut(sreq) else {
            return Err(format!("Push for unknown send request {sreq}"));
        };
        let end = offset.checked_add(len);
        if s.dst != peer
            || !matches!(s.state, SendState::AwaitCts)
            || !s.helped
            || !matches!(mem, RemoteMem::HostCma { .. })
            || end.is_none_or(|e| e > s.buf.len() as u64)
        {
            return Err(format!(
                "unexpected Push for send request {sreq} (bytes {offset} + {len} of {}, {mem:?})",
                s.buf.len()
            ));
        }
        let src = RawBuf {
            ptr: s.buf.ptr.wrapping_add(offset as usize),
            len: len as usize,
            kind: s.buf.kind,
        };
        s.pushing += 1;
        self.pushes.push_back(PushReq {
            sreq,
            rreq,
            peer,
            src,
            mem,
        });
        Ok(())
    }

    /// `Pushed` arrived from `peer` for receive `rreq`.
    pub(super) fn on_pushed(&mut self, peer: u32, rreq: u64, ok: bool) -> Result<(), String> {
        let Some(r) = self.reqs.recv_mut(rreq) else {
            return Err(format!("Pushed for unknown receive request {rreq}"));
        };
        match &mut r.state {
            RecvState::Pulling {
                src, accept, copy, ..
            } if *src == peer && copy.pushing => {
                copy.pushing = false;
                if !ok {
                    // The share comes back to us; ask this sender no more.
                    copy.end = *accept;
                    copy.helped = false;
                    self.share_with.remove(&peer);
                }
            }
            // Fell back to Cts + Data meanwhile: the Data frames bring every byte (the
            // share, if written, holds the same ones); now nothing else writes here.
            RecvState::Data {
                src,
                accept,
                got,
                pushing,
                ..
            } if *src == peer && *pushing => {
                *pushing = false;
                if *got >= *accept {
                    self.finish_rndv_recv(rreq);
                }
                return Ok(());
            }
            _ => return Err(format!("unexpected Pushed for receive request {rreq}")),
        }
        self.next_pull(rreq);
        Ok(())
    }
}
