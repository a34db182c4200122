//! In-memory N-rank harness: moves frames between sans-IO protocol engines.

use super::*;
use crate::wire::FrameKind;
use rankwire_transports::MemoryKind;

struct Net {
    ranks: Vec<Protocol>,
    eager_limit: usize,
    chunk: usize,
    /// Writes of senders' shares fail (as `process_vm_writev` refused).
    fail_pushes: bool,
    /// Pulls after this many have succeeded fail (as a refused `process_vm_readv`).
    pull_budget: Option<usize>,
    /// Shares are written only once nothing else is left to do (a slow sender).
    pushes_last: bool,
    /// With `pushes_last`: `drive` returns with the shares still unwritten.
    hold_pushes: bool,
    /// Bytes moved by pulls and by senders' share writes.
    pulled: usize,
    pushed: usize,
    /// Frames moved, by kind.
    kinds: Vec<FrameKind>,
    /// Executes the ranks' memory actions.
    dev: FakeDevice,
    /// Data frames for device receives land in a host buffer and are copied in later
    /// (`Protocol::on_frame_staged`), as TCP with pinned landing buffers does.
    land_device: bool,
    /// Frames landed that way.
    landed: usize,
}

/// The harness's executor of [`MemAction`]s: "device" memory is ordinary memory
/// tagged as CUDA ([`RawBuf::with_kind`]), copied here when an action asks; offers
/// describe the buffer by its address (a CUDA IPC handle, an RDMA rkey), and pulls of
/// them are memcpy. Counts every action and can fail copies or refuse offers.
#[derive(Default)]
struct FakeDevice {
    stage_out: usize,
    stage_in: usize,
    /// Bytes staged each way.
    out_bytes: usize,
    in_bytes: usize,
    offers: Vec<OfferKind>,
    /// Sends whose accepted offer was not released yet.
    held: HashSet<ReqId>,
    releases: usize,
    accept_ipc: bool,
    accept_rdma: bool,
    /// Stage-outs fail (as a failed `cuMemcpyDtoH`).
    fail_out: bool,
    /// The stage-in with this index (0 = first) fails.
    fail_in_at: Option<usize>,
    /// Hold stage-outs until nothing else moves, then answer them newest first, as
    /// pipelined copies may complete (false: answer at once).
    hold_out: bool,
    /// Held stage-outs: rank, request, offset, bytes.
    held_out: Vec<(u32, ReqId, usize, Vec<u8>)>,
    /// Most stage-outs held at once.
    max_held_out: usize,
    /// Copies of landed payloads (`Net::land_device`) not answered yet: rank,
    /// request, destination, bytes.
    held_in: Vec<(u32, ReqId, RawBuf, Vec<u8>)>,
}

impl FakeDevice {
    /// Answer the held stage-outs (newest first; lent, as pinned chunks are) and the
    /// held copies of landed payloads. Whether there were any.
    fn answer_held(&mut self, ranks: &mut [Protocol]) -> bool {
        let any = !self.held_out.is_empty() || !self.held_in.is_empty();
        while let Some((r, sreq, offset, bytes)) = self.held_out.pop() {
            ranks[r as usize].staged_out(sreq, offset, Ok(Payload::Lent(Box::new(bytes))));
        }
        for (r, rreq, dst, data) in std::mem::take(&mut self.held_in) {
            self.in_bytes += data.len();
            // SAFETY: the receive is pending until this answer; bounds checked by
            // on_frame_staged.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst.as_mut_ptr(), data.len()) };
            ranks[r as usize].staged_in(rreq, Ok(()));
        }
        any
    }

    fn run(&mut self, p: &mut Protocol) -> bool {
        let mut any = false;
        while let Some(a) = p.pop_action() {
            any = true;
            match a {
                MemAction::StageOut { sreq, src, offset } => {
                    assert!(!src.is_host(), "host memory is never staged");
                    self.stage_out += 1;
                    if self.fail_out {
                        p.staged_out(sreq, offset, Err("CUDA_ERROR_ILLEGAL_ADDRESS".into()));
                        continue;
                    }
                    self.out_bytes += src.len();
                    // SAFETY: the send is pending: its buffer is alive.
                    let bytes = unsafe { src.as_slice() }.to_vec();
                    if self.hold_out {
                        self.held_out.push((p.rank(), sreq, offset, bytes));
                        self.max_held_out = self.max_held_out.max(self.held_out.len());
                    } else {
                        p.staged_out(sreq, offset, Ok(Payload::Owned(bytes)));
                    }
                }
                MemAction::StageIn { rreq, dst, data } => {
                    assert!(!dst.is_host(), "host memory is never staged");
                    assert_eq!(dst.len(), data.len());
                    let k = self.stage_in;
                    self.stage_in += 1;
                    let r = if self.fail_in_at == Some(k) {
                        Err("CUDA_ERROR_ILLEGAL_ADDRESS".to_string())
                    } else {
                        self.in_bytes += data.len();
                        // SAFETY: the receive is pending: its buffer is alive, and the
                        // protocol checked the bounds.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                data.as_ptr(),
                                dst.as_mut_ptr(),
                                data.len(),
                            )
                        };
                        Ok(())
                    };
                    p.staged_in(rreq, r);
                }
                MemAction::Offer { sreq, buf, to } => {
                    self.offers.push(to);
                    let addr = buf.as_mut_ptr() as u64;
                    let mem = match to {
                        OfferKind::CudaIpc if self.accept_ipc => {
                            assert!(!buf.is_host());
                            Some(RemoteMem::CudaIpc {
                                handle: [7; 64],
                                offset: 0,
                                buffer_id: 1,
                                device: 0,
                                base: addr,
                                alloc_len: buf.len() as u64,
                            })
                        }
                        OfferKind::Rdma if self.accept_rdma => Some(RemoteMem::Rdma {
                            addr,
                            len: buf.len() as u64,
                            rkey: 42,
                        }),
                        _ => None,
                    };
                    if mem.is_some() {
                        self.held.insert(sreq);
                    }
                    p.offered(sreq, mem);
                }
                MemAction::Release { sreq, .. } => {
                    assert!(self.held.remove(&sreq), "release of an offer not held");
                    self.releases += 1;
                }
            }
        }
        any
    }
}

impl Net {
    fn new(n: u32) -> Self {
        Net {
            ranks: (0..n).map(|r| Protocol::new(r, n)).collect(),
            eager_limit: 64,
            chunk: 100,
            fail_pushes: false,
            pull_budget: None,
            pushes_last: false,
            hold_pushes: false,
            pulled: 0,
            pushed: 0,
            kinds: Vec::new(),
            dev: FakeDevice::default(),
            land_device: false,
            landed: 0,
        }
    }

    /// Move every frame until nothing is left. Returns the number of frames moved.
    /// Pulls are done by memcpy (all ranks share this process), or fail when
    /// `fail_pulls` is set.
    fn drive(&mut self) -> usize {
        self.drive_with(false)
    }

    fn drive_with(&mut self, fail_pulls: bool) -> usize {
        let mut moved = 0;
        loop {
            let mut any = false;
            for r in 0..self.ranks.len() {
                any |= self.dev.run(&mut self.ranks[r]);
                // One pull per rank and round, as the engine does, so that frames (a
                // sender's Help) come in between the chunks of a large pull.
                if let Some(p) = self.ranks[r].pop_pull() {
                    any = true;
                    let over = self.pull_budget.is_some_and(|b| {
                        self.pull_budget = Some(b.saturating_sub(1));
                        b == 0
                    });
                    let res = if fail_pulls || over {
                        Err("EPERM".to_string())
                    } else {
                        let addr = match p.mem {
                            RemoteMem::HostCma { addr, .. } | RemoteMem::Rdma { addr, .. } => addr,
                            RemoteMem::CudaIpc { base, offset, .. } => base + offset,
                            _ => panic!("unexpected mem {:?}", p.mem),
                        };
                        // SAFETY: the sender's request is pending, its buffer alive.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                addr as *const u8,
                                p.dst.as_mut_ptr(),
                                p.dst.len(),
                            )
                        };
                        self.pulled += p.dst.len();
                        Ok(())
                    };
                    self.ranks[r].pull_done(p.rreq, res);
                }
                while !self.pushes_last
                    && let Some(p) = self.ranks[r].pop_push()
                {
                    any = true;
                    let res = if self.fail_pushes {
                        Err("EPERM".to_string())
                    } else {
                        let RemoteMem::HostCma { addr, .. } = p.mem else {
                            panic!("unexpected mem {:?}", p.mem)
                        };
                        // SAFETY: the receive is pending (it waits for Pushed), its buffer
                        // alive; the send buffer too.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                p.src.as_slice().as_ptr(),
                                addr as *mut u8,
                                p.src.len(),
                            )
                        };
                        self.pushed += p.src.len();
                        Ok(())
                    };
                    self.ranks[r].push_done(&p, res);
                }
                loop {
                    let chunk = self.chunk;
                    let f = match self.ranks[r].pop_frame() {
                        Some(f) => f,
                        None => match self.ranks[r].next_data(|_| Some(chunk)) {
                            Some(f) => f,
                            // Device chunks became stage-outs: their frames follow.
                            None if self.dev.run(&mut self.ranks[r]) => continue,
                            None => break,
                        },
                    };
                    // SAFETY: the owning request is pending until on_sent below.
                    let payload = unsafe { f.payload.as_slice() }.to_vec();
                    if let Ok(Some((fr, _, _))) = Frame::decode(&f.header) {
                        self.kinds.push(fr.kind());
                    } else if Frame::decode_short_eager(&f.header).is_some() {
                        self.kinds.push(FrameKind::Eager);
                    }
                    self.ranks[r].on_sent(f.on_sent);
                    let to = &mut self.ranks[f.peer as usize];
                    match to.data_target(r as u32, &f.header, payload.len()) {
                        // Landed in a host buffer, copied in later (held_in).
                        Some(b) if self.land_device && !b.is_host() => {
                            if let Some((rreq, dst)) = to
                                .on_frame_staged(r as u32, &f.header, payload.len())
                                .expect("valid frame")
                            {
                                self.landed += 1;
                                self.dev.held_in.push((f.peer, rreq, dst, payload));
                            }
                        }
                        _ => to
                            .on_frame(r as u32, &f.header, payload)
                            .expect("valid frame"),
                    }
                    any = true;
                    moved += 1;
                }
            }
            if !any {
                if self.pushes_last && !self.hold_pushes && self.run_one_push() {
                    continue;
                }
                // Held device copies complete when nothing else moves.
                if self.dev.answer_held(&mut self.ranks) {
                    continue;
                }
                return moved;
            }
        }
    }

    /// Write one queued share (the `pushes_last` mode). Returns whether there was one.
    fn run_one_push(&mut self) -> bool {
        for r in 0..self.ranks.len() {
            if let Some(p) = self.ranks[r].pop_push() {
                let res = if self.fail_pushes {
                    Err("EPERM".to_string())
                } else {
                    let RemoteMem::HostCma { addr, .. } = p.mem else {
                        panic!("unexpected mem {:?}", p.mem)
                    };
                    // SAFETY: the send has not completed (it waits for this write), the
                    // receive neither (it waits for Pushed): both buffers are alive.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            p.src.as_slice().as_ptr(),
                            addr as *mut u8,
                            p.src.len(),
                        )
                    };
                    self.pushed += p.src.len();
                    Ok(())
                };
                self.ranks[r].push_done(&p, res);
                return true;
            }
        }
        false
    }

    fn send(&mut self, from: u32, to: u32, tag: i32, buf: &[u8]) -> ReqId {
        let lim = self.eager_limit;
        self.ranks[from as usize].isend(to, 0, tag, RawBuf::from_slice(buf), lim, false)
    }

    fn ssend(&mut self, from: u32, to: u32, tag: i32, buf: &[u8]) -> ReqId {
        let lim = self.eager_limit;
        self.ranks[from as usize].isend(to, 0, tag, RawBuf::from_slice(buf), lim, true)
    }

    fn recv(&mut self, at: u32, src: Option<u32>, tag: Option<i32>, buf: &mut [u8]) -> ReqId {
        self.ranks[at as usize].irecv(
            Pattern { ctx: 0, src, tag },
            RawBuf::new(buf.as_mut_ptr(), buf.len()),
        )
    }

    fn done(&mut self, at: u32, id: ReqId) -> Result<Status, Error> {
        self.ranks[at as usize]
            .take_done(id)
            .unwrap_or_else(|| panic!("request {id} at rank {at} not complete"))
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn eager_and_rendezvous_deliver_exact_bytes_both_orders() {
    for len in [0usize, 1, 63, 64, 65, 99, 100, 101, 1000, 4097] {
        for recv_first in [false, true] {
            let mut net = Net::new(2);
            let data = pattern(len, 7);
            let mut out = vec![0xAAu8; len];
            let (s, r) = if recv_first {
                let r = net.recv(1, Some(0), Some(5), &mut out);
                net.drive();
                (net.send(0, 1, 5, &data), r)
            } else {
                let s = net.send(0, 1, 5, &data);
                net.drive();
                (s, net.recv(1, Some(0), Some(5), &mut out))
            };
            net.drive();
            let st = net.done(1, r).unwrap();
            assert_eq!((st.source, st.tag, st.len_bytes), (0, 5, len));
            assert!(net.done(0, s).is_ok());
            assert_eq!(out, data, "len {len} recv_first {recv_first}");
            assert_eq!(net.ranks[0].pending() + net.ranks[1].pending(), 0);
        }
    }
}

#[test]
fn truncation_b001_reports_sizes_keeps_sentinels_and_consumes_the_message() {
    for (first_len, slice_len) in [(100usize, 10usize), (4000, 1000)] {
        let mut net = Net::new(2);
        let big = pattern(first_len, 1);
        let small = pattern(4, 9);
        let mut buf = vec![0xEEu8; first_len];
        let s1 = net.send(0, 1, 7, &big);
        let s2 = net.send(0, 1, 7, &small);
        net.drive();
        let r1 = net.recv(1, Some(0), Some(7), &mut buf[..slice_len]);
        net.drive();
        let err = net.done(1, r1).unwrap_err();
        assert_eq!(
            err,
            Error::Matching(MatchError::Truncated {
                source_rank: 0,
                tag: 7,
                message_bytes: first_len as u64,
                buffer_bytes: slice_len as u64
            })
        );
        assert_eq!(&buf[..slice_len], &big[..slice_len]);
        assert!(
            buf[slice_len..].iter().all(|&b| b == 0xEE),
            "wrote past the slice"
        );
        let mut buf2 = [0u8; 4];
        let r2 = net.recv(1, Some(0), Some(7), &mut buf2);
        net.drive();
        assert_eq!(net.done(1, r2).unwrap().len_bytes, 4);
        assert_eq!(buf2.to_vec(), small);
        assert!(net.done(0, s1).is_ok());
        assert!(net.done(0, s2).is_ok());
    }
}

#[test]
fn self_send_zero_bytes_and_any_tag() {
    let mut net = Net::new(1);
    let s = net.send(0, 0, 3, &[]);
    let mut big = [0u8; 8];
    let r = net.recv(0, None, None, &mut big);
    net.drive();
    let st = net.done(0, r).unwrap();
    assert_eq!((st.source, st.tag, st.len_bytes), (0, 3, 0));
    assert!(net.done(0, s).is_ok());
}

#[test]
fn small_message_never_overtakes_earlier_large_one_b003() {
    let mut net = Net::new(2);
    let large = pattern(1000, 1);
    let small = pattern(8, 2);
    let s1 = net.send(0, 1, 1, &large);
    let s2 = net.send(0, 1, 2, &small);
    let mut a = vec![0u8; 1000];
    let mut b = vec![0u8; 1000];
    let ra = net.recv(1, None, None, &mut a);
    let rb = net.recv(1, None, None, &mut b);
    net.drive();
    let sa = net.done(1, ra).unwrap();
    let sb = net.done(1, rb).unwrap();
    assert_eq!((sa.tag, sa.len_bytes), (1, 1000));
    assert_eq!((sb.tag, sb.len_bytes), (2, 8));
    assert_eq!(a, large);
    assert_eq!(&b[..8], &small[..]);
    assert!(net.done(0, s1).is_ok() && net.done(0, s2).is_ok());
}

#[test]
fn ssend_completes_only_after_the_receive_matches() {
    let mut net = Net::new(2);
    let data = pattern(8, 3);
    let s = net.ssend(0, 1, 4, &data);
    net.drive();
    assert!(
        !net.ranks[0].is_done(s),
        "ssend completed before a receive was posted"
    );
    let mut out = [0u8; 8];
    let r = net.recv(1, Some(0), Some(4), &mut out);
    net.drive();
    assert!(net.done(0, s).is_ok());
    assert_eq!(net.done(1, r).unwrap().len_bytes, 8);
    assert_eq!(out.to_vec(), data);
}

#[test]
fn matched_probe_then_receive_in_reverse_order_b004() {
    for len in [63usize, 64, 65, 250, 8000] {
        let mut net = Net::new(2);
        let one = vec![1u8; len];
        let two = vec![2u8; len];
        net.send(0, 1, 5, &one);
        net.send(0, 1, 5, &two);
        net.drive();
        let pat = Pattern {
            ctx: 0,
            src: Some(0),
            tag: Some(5),
        };
        let h1 = net.ranks[1].improbe(&pat).unwrap();
        let h2 = net.ranks[1].improbe(&pat).unwrap();
        assert_eq!(h1.status().len_bytes, len);
        assert_eq!(h2.status().len_bytes, len);
        assert!(net.ranks[1].improbe(&pat).is_none());
        let mut b2 = vec![0u8; len];
        let mut b1 = vec![0u8; len];
        let r2 = net.ranks[1].mrecv(h2, RawBuf::new(b2.as_mut_ptr(), len));
        net.drive();
        let r1 = net.ranks[1].mrecv(h1, RawBuf::new(b1.as_mut_ptr(), len));
        net.drive();
        assert_eq!(net.done(1, r2).unwrap().len_bytes, len);
        assert_eq!(net.done(1, r1).unwrap().len_bytes, len);
        assert_eq!(b1, one);
        assert_eq!(b2, two);
    }
}

#[test]
fn probe_reports_the_message_the_next_receive_gets() {
    let mut net = Net::new(3);
    let (a, b) = (pattern(10, 0), pattern(20, 0));
    net.send(2, 0, 5, &a);
    net.send(1, 0, 5, &b);
    net.drive();
    let st = net.ranks[0]
        .iprobe(&Pattern {
            ctx: 0,
            src: None,
            tag: Some(5),
        })
        .unwrap();
    let mut buf = vec![0u8; st.len_bytes];
    let r = net.recv(0, Some(st.source as u32), Some(st.tag), &mut buf);
    net.drive();
    assert_eq!(net.done(0, r).unwrap(), st);
}

#[test]
fn failed_peer_fails_pending_and_later_requests() {
    let mut net = Net::new(3);
    let data = pattern(1000, 0);
    let s = net.send(0, 1, 1, &data); // rendezvous, awaits Cts
    let mut b = [0u8; 4];
    let r_specific = net.recv(0, Some(1), None, &mut b);
    let mut c = [0u8; 4];
    let r_other = net.recv(0, Some(2), None, &mut c);
    let mut d = [0u8; 4];
    let r_any = net.recv(0, None, None, &mut d);
    let err = Error::Connection {
        peer: 1,
        detail: "closed by peer".into(),
    };
    net.ranks[0].fail_peer(1, err.clone());
    assert_eq!(net.done(0, s).unwrap_err(), err);
    assert_eq!(net.done(0, r_specific).unwrap_err(), err);
    assert_eq!(net.done(0, r_any).unwrap_err(), err);
    assert!(!net.ranks[0].is_done(r_other));
    let later = net.send(0, 1, 1, &[1]);
    assert_eq!(net.done(0, later).unwrap_err(), err);
}

#[test]
fn malformed_and_inconsistent_frames_are_errors_not_panics() {
    let mut p = Protocol::new(0, 2);
    assert!(matches!(
        p.on_frame(1, b"garbage!", vec![]),
        Err(Error::Transport { peer: 1, .. })
    ));
    let mut p = Protocol::new(0, 2);
    let mut h = Vec::new();
    Frame::Data {
        rreq: 99,
        offset: 0,
    }
    .encode(3, &mut h);
    assert!(p.on_frame(1, &h, vec![1, 2, 3]).is_err());
    // Eager frame claiming another source.
    let mut p = Protocol::new(0, 3);
    let mut h = Vec::new();
    Frame::Eager {
        env: Envelope {
            ctx: 0,
            src: 2,
            tag: 0,
            seq: 0,
        },
    }
    .encode(0, &mut h);
    assert!(p.on_frame(1, &h, vec![]).is_err());
    // Payload length disagreeing with the header.
    let mut p = Protocol::new(0, 2);
    let mut h = Vec::new();
    Frame::Eager {
        env: Envelope {
            ctx: 0,
            src: 1,
            tag: 0,
            seq: 0,
        },
    }
    .encode(5, &mut h);
    assert!(p.on_frame(1, &h, vec![0; 4]).is_err());
}

#[test]
fn data_past_the_accepted_length_is_rejected() {
    let mut net = Net::new(2);
    let data = pattern(1000, 0);
    net.send(0, 1, 1, &data);
    let mut out = vec![0u8; 1000];
    let r = net.recv(1, Some(0), Some(1), &mut out);
    // Deliver Rts and Cts but not the data.
    let f = net.ranks[0].pop_frame().unwrap();
    net.ranks[1].on_frame(0, &f.header, vec![]).unwrap();
    let cts = net.ranks[1].pop_frame().unwrap();
    net.ranks[0].on_frame(1, &cts.header, vec![]).unwrap();
    let Frame::Cts { rreq, .. } = Frame::decode(&cts.header).unwrap().unwrap().0 else {
        panic!()
    };
    let mut h = Vec::new();
    Frame::Data { rreq, offset: 999 }.encode(2, &mut h);
    assert!(net.ranks[1].on_frame(0, &h, vec![1, 2]).is_err());
    assert!(net.done(1, r).is_err(), "the receive fails with the peer");
}

#[test]
fn pull_mode_rendezvous_single_copy_and_fallback() {
    for fail in [false, true] {
        for (len, cap) in [(1000usize, 1000usize), (1000, 300)] {
            let mut net = Net::new(2);
            net.ranks[0].offer_host_cma(1);
            net.ranks[1].allow_pull(0, true);
            let data = pattern(len, 5);
            let mut out = vec![0xEEu8; 1000];
            let s = net.send(0, 1, 9, &data);
            let r = net.recv(1, Some(0), Some(9), &mut out[..cap]);
            let moved = net.drive_with(fail);
            let res = net.done(1, r);
            if cap < len {
                assert!(matches!(
                    res,
                    Err(Error::Matching(MatchError::Truncated {
                        message_bytes: 1000,
                        buffer_bytes: 300,
                        ..
                    }))
                ));
                assert!(out[cap..].iter().all(|&b| b == 0xEE));
            } else {
                assert_eq!(res.unwrap().len_bytes, len);
            }
            assert_eq!(&out[..cap], &data[..cap]);
            assert!(net.done(0, s).is_ok());
            if !fail {
                assert_eq!(moved, 2, "Rts and Fin only: no data frames");
            }
            // After a failed pull the receiver stops pulling from that peer.
            let again = pattern(500, 1);
            let mut out2 = vec![0u8; 500];
            let s2 = net.send(0, 1, 9, &again);
            let r2 = net.recv(1, Some(0), Some(9), &mut out2);
            net.drive_with(fail);
            assert_eq!(net.done(1, r2).unwrap().len_bytes, 500);
            assert!(net.done(0, s2).is_ok());
            assert_eq!(out2, again);
        }
    }
}

#[test]
fn device_buffers_are_staged_by_actions_every_combination() {
    let dev = MemoryKind::Cuda { device: 0 };
    for len in [0usize, 1, 64, 65, 250, 1000] {
        for (send_dev, recv_dev) in [(true, true), (true, false), (false, true)] {
            for recv_first in [false, true] {
                let mut net = Net::new(2);
                for r in 0..2 {
                    net.ranks[r].enable_device();
                }
                let data = pattern(len, 3);
                let mut out = vec![0u8; len];
                let skind = if send_dev { dev } else { MemoryKind::Host };
                let rkind = if recv_dev { dev } else { MemoryKind::Host };
                let rbuf = RawBuf::with_kind(out.as_mut_ptr(), len, rkind);
                let pat = Pattern {
                    ctx: 0,
                    src: Some(0),
                    tag: Some(4),
                };
                let mut r = None;
                if recv_first {
                    r = Some(net.ranks[1].irecv(pat, rbuf));
                }
                let s = net.ranks[0].isend(
                    1,
                    0,
                    4,
                    RawBuf::with_kind(data.as_ptr() as *mut u8, len, skind),
                    64,
                    false,
                );
                if !recv_first {
                    net.drive();
                    r = Some(net.ranks[1].irecv(pat, rbuf));
                }
                net.drive();
                let what = format!(
                    "len {len} send_dev {send_dev} recv_dev {recv_dev} recv_first {recv_first}"
                );
                assert_eq!(net.done(1, r.unwrap()).unwrap().len_bytes, len, "{what}");
                assert!(net.done(0, s).is_ok(), "{what}");
                assert_eq!(out, data, "{what}");
                let d = &net.dev;
                // Eager: one stage each way; rendezvous: one per chunk of 100 bytes.
                let chunks = if len <= 64 { 1 } else { len.div_ceil(100) };
                let staged = if len == 0 { 0 } else { chunks };
                assert_eq!(d.stage_out, if send_dev { staged } else { 0 }, "{what}");
                assert_eq!(d.stage_in, if recv_dev { staged } else { 0 }, "{what}");
                assert_eq!(d.out_bytes, if send_dev { len } else { 0 }, "{what}");
                assert_eq!(d.in_bytes, if recv_dev { len } else { 0 }, "{what}");
                assert!(d.offers.is_empty(), "no IPC allowed: nothing offered");
                assert_eq!(net.ranks[0].pending() + net.ranks[1].pending(), 0);
            }
        }
    }
}

#[test]
fn host_messages_produce_no_memory_actions() {
    let mut net = Net::new(2);
    net.ranks[0].enable_device();
    net.ranks[1].enable_device();
    net.ranks[0].offer_host_cma(1);
    net.ranks[1].allow_pull(0, true);
    for len in [0usize, 10, 64, 1000] {
        let data = pattern(len, 1);
        let mut out = vec![0u8; len];
        let s = net.send(0, 1, 1, &data);
        let r = net.recv(1, Some(0), Some(1), &mut out);
        net.drive();
        assert_eq!(net.done(1, r).unwrap().len_bytes, len);
        assert!(net.done(0, s).is_ok());
        assert_eq!(out, data);
    }
    let d = &net.dev;
    assert_eq!((d.stage_out, d.stage_in, d.offers.len()), (0, 0, 0));
}

/// Rendezvous device send to a peer allowed CUDA IPC: the offer is asked for; when the
/// executor accepts it the receiver pulls (no Data frames, no staging) and the offer is
/// released when the send ends; when it refuses, the Rts carries nothing and the data
/// goes as staged Data frames.
#[test]
fn cuda_ipc_offer_accepted_pulls_and_refused_falls_back_to_data() {
    let dev = MemoryKind::Cuda { device: 0 };
    for accept in [true, false] {
        let mut net = Net::new(2);
        net.dev.accept_ipc = accept;
        for r in 0..2 {
            net.ranks[r].enable_device();
            net.ranks[r].allow_cuda_ipc(1 - r as u32);
        }
        let data = pattern(1000, 9);
        let mut out = vec![0u8; 1000];
        let r = net.ranks[1].irecv(
            Pattern {
                ctx: 0,
                src: Some(0),
                tag: Some(2),
            },
            RawBuf::with_kind(out.as_mut_ptr(), 1000, dev),
        );
        let s = net.ranks[0].isend(
            1,
            0,
            2,
            RawBuf::with_kind(data.as_ptr() as *mut u8, 1000, dev),
            64,
            false,
        );
        assert_eq!(
            net.ranks[0].pop_frame().map(|f| f.peer),
            None,
            "the Rts waits for the offer's answer"
        );
        net.drive();
        assert_eq!(net.done(1, r).unwrap().len_bytes, 1000);
        assert!(net.done(0, s).is_ok());
        assert_eq!(out, data);
        let d = &net.dev;
        assert_eq!(d.offers, vec![OfferKind::CudaIpc]);
        let data_frames = net.kinds.iter().filter(|k| **k == FrameKind::Data).count();
        if accept {
            assert_eq!(net.pulled, 1000);
            assert_eq!((d.stage_out, d.stage_in, data_frames), (0, 0, 0));
            assert_eq!(d.releases, 1, "the accepted offer is released");
            assert!(net.kinds.contains(&FrameKind::Fin));
        } else {
            assert_eq!(net.pulled, 0);
            assert_eq!((d.stage_out, d.stage_in, data_frames), (10, 10, 10));
            assert_eq!(d.releases, 0, "nothing held, nothing released");
        }
        assert!(d.held.is_empty());
        assert_eq!(net.ranks[0].pending() + net.ranks[1].pending(), 0);
    }
}

/// Device rendezvous to a peer with GPUDirect RDMA (`allow_gdr`): the device buffer is
/// offered as an RDMA region and read by the receiver into its device buffer (no
/// staging either side); a refused registration stages the send through host memory;
/// a failed read falls back to `Cts` and staged `Data` frames, and stops device reads
/// from that peer while host buffers are still read.
#[test]
fn gdr_offers_device_memory_and_falls_back_to_staging() {
    let dev = MemoryKind::Cuda { device: 0 };
    let pat = Pattern {
        ctx: 0,
        src: Some(0),
        tag: Some(2),
    };
    let run = |accept: bool, fail_pull: bool| {
        let mut net = Net::new(2);
        net.dev.accept_rdma = accept;
        for r in 0..2 {
            net.ranks[r].enable_device();
            net.ranks[r].offer_rdma(&[1 - r as u32]);
            net.ranks[r].allow_pull(1 - r as u32, true);
            net.ranks[r].allow_gdr(&[1 - r as u32]);
        }
        let data = pattern(900, 6);
        let mut out = vec![0u8; 900];
        let r = net.ranks[1].irecv(pat, RawBuf::with_kind(out.as_mut_ptr(), 900, dev));
        let s = net.ranks[0].isend(
            1,
            0,
            2,
            RawBuf::with_kind(data.as_ptr() as *mut u8, 900, dev),
            64,
            false,
        );
        net.drive_with(fail_pull);
        assert_eq!(net.done(1, r).unwrap().len_bytes, 900);
        assert!(net.done(0, s).is_ok());
        assert_eq!(out, data, "accept {accept} fail_pull {fail_pull}");
        assert_eq!(net.dev.offers, vec![OfferKind::Rdma]);
        assert!(net.dev.held.is_empty(), "every accepted offer released");
        let data_frames = net.kinds.iter().filter(|k| **k == FrameKind::Data).count();
        (net, data_frames)
    };
    // Accepted and read: one RDMA READ, no staging, no Data frames.
    let (net, data_frames) = run(true, false);
    assert_eq!((net.pulled, data_frames), (900, 0));
    assert_eq!(
        (net.dev.stage_out, net.dev.stage_in, net.dev.releases),
        (0, 0, 1)
    );
    // Refused at the sender: staged through host memory as Data frames.
    let (net, data_frames) = run(false, false);
    assert_eq!((net.pulled, data_frames, net.dev.releases), (0, 9, 0));
    assert_eq!((net.dev.stage_out, net.dev.stage_in), (9, 9));
    // The receiver's read fails: Cts, then staged Data frames; the offer is released.
    let (mut net, data_frames) = run(true, true);
    assert_eq!((net.pulled, data_frames, net.dev.releases), (0, 9, 1));
    assert_eq!((net.dev.stage_out, net.dev.stage_in), (9, 9));
    // One failure costs only that message: the next device receive is read again.
    // After GDR_MAX_FAILURES in a row, device receives from rank 0 take Data frames,
    // while host ones are still read.
    let data = pattern(700, 8);
    let one = |net: &mut Net, recv_kind: MemoryKind, fail: bool| {
        let (pulled, staged) = (net.pulled, net.dev.stage_in);
        let mut out = vec![0u8; 700];
        let r = net.ranks[1].irecv(pat, RawBuf::with_kind(out.as_mut_ptr(), 700, recv_kind));
        let s = net.ranks[0].isend(
            1,
            0,
            2,
            RawBuf::with_kind(data.as_ptr() as *mut u8, 700, MemoryKind::Host),
            64,
            false,
        );
        net.drive_with(fail);
        assert!(net.done(1, r).is_ok() && net.done(0, s).is_ok());
        assert_eq!(out, data);
        (net.pulled - pulled, net.dev.stage_in - staged)
    };
    assert_eq!(
        one(&mut net, dev, false),
        (700, 0),
        "read again after one failure"
    );
    for k in 0..GDR_MAX_FAILURES {
        assert_eq!(one(&mut net, dev, true), (0, 7), "failure {k}: staged");
    }
    assert_eq!(
        one(&mut net, dev, false),
        (0, 7),
        "device reads from rank 0 stopped"
    );
    assert_eq!(
        one(&mut net, MemoryKind::Host, false),
        (700, 0),
        "host reads go on"
    );
}

/// Host rendezvous to a peer served by RDMA: refused registrations fall back to Data
/// frames; accepted ones are pulled by the receiver and released when the send ends.
#[test]
fn rdma_offer_refused_falls_back_to_data_and_accepted_is_released() {
    for accept in [false, true] {
        let mut net = Net::new(2);
        net.dev.accept_rdma = accept;
        net.ranks[0].offer_rdma(&[1]);
        net.ranks[1].allow_pull(0, true);
        let data = pattern(700, 4);
        let mut out = vec![0u8; 700];
        let s = net.send(0, 1, 3, &data);
        let r = net.recv(1, Some(0), Some(3), &mut out);
        net.drive();
        assert_eq!(net.done(1, r).unwrap().len_bytes, 700);
        assert!(net.done(0, s).is_ok());
        assert_eq!(out, data);
        let d = &net.dev;
        assert_eq!(d.offers, vec![OfferKind::Rdma]);
        let data_frames = net.kinds.iter().filter(|k| **k == FrameKind::Data).count();
        if accept {
            assert_eq!((net.pulled, data_frames, d.releases), (700, 0, 1));
        } else {
            assert_eq!((net.pulled, data_frames, d.releases), (0, 7, 0));
        }
        assert!(d.held.is_empty());
        // Eager messages to that peer ask for nothing.
        let small = [5u8; 8];
        let mut out = [0u8; 8];
        let s = net.send(0, 1, 3, &small);
        let r = net.recv(1, Some(0), Some(3), &mut out);
        net.drive();
        assert!(net.done(1, r).is_ok() && net.done(0, s).is_ok());
        assert_eq!(net.dev.offers.len(), 1);
        assert_eq!(net.ranks[0].pending() + net.ranks[1].pending(), 0);
    }
}

/// A failed copy fails its request with Error::Gpu and leaves nothing behind: an eager
/// or rendezvous device send whose stage-out fails, and a device receive whose first
/// stage-in fails (the rest of the message is still taken, so the sender completes).
#[test]
fn failed_device_copies_fail_the_request_and_nothing_leaks() {
    let dev = MemoryKind::Cuda { device: 0 };
    for len in [10usize, 1000] {
        // Stage-out fails.
        let mut net = Net::new(2);
        net.ranks[0].enable_device();
        net.dev.fail_out = true;
        let data = pattern(len, 2);
        let mut out = vec![0u8; len];
        let r = net.recv(1, Some(0), Some(6), &mut out);
        let s = net.ranks[0].isend(
            1,
            0,
            6,
            RawBuf::with_kind(data.as_ptr() as *mut u8, len, dev),
            64,
            false,
        );
        net.drive();
        let e = net.done(0, s).unwrap_err();
        assert!(
            matches!(e, Error::Gpu(ref m) if m.contains("CUDA_ERROR_ILLEGAL_ADDRESS")),
            "{e}"
        );
        assert_eq!(net.ranks[0].pending(), 0, "len {len}");
        assert!(net.ranks[0].pop_action().is_none());
        assert!(!net.ranks[1].is_done(r), "nothing was sent");

        // Stage-in fails.
        for fail_at in [0usize, 3] {
            if len <= 64 && fail_at > 0 {
                continue;
            }
            let mut net = Net::new(2);
            net.ranks[1].enable_device();
            net.dev.fail_in_at = Some(fail_at);
            let mut out = vec![0u8; len];
            let r = net.ranks[1].irecv(
                Pattern {
                    ctx: 0,
                    src: Some(0),
                    tag: Some(6),
                },
                RawBuf::with_kind(out.as_mut_ptr(), len, dev),
            );
            let s = net.send(0, 1, 6, &data);
            net.drive();
            let e = net.done(1, r).unwrap_err();
            assert!(
                matches!(e, Error::Gpu(ref m) if m.contains("receive buffer")),
                "{e}"
            );
            assert!(net.done(0, s).is_ok(), "the sender is not left waiting");
            let chunks = if len <= 64 { 1 } else { len.div_ceil(100) };
            assert_eq!(
                net.dev.stage_in, chunks,
                "no stage after the failure but the queued"
            );
            assert_eq!(net.ranks[0].pending() + net.ranks[1].pending(), 0);
            // The pair still works afterwards.
            let mut again = vec![0u8; len];
            let r = net.ranks[1].irecv(
                Pattern {
                    ctx: 0,
                    src: Some(0),
                    tag: Some(7),
                },
                RawBuf::with_kind(again.as_mut_ptr(), len, dev),
            );
            let s = net.send(0, 1, 7, &data);
            net.drive();
            assert!(net.done(1, r).is_ok() && net.done(0, s).is_ok());
            assert_eq!(again, data);
        }
    }
}

/// A peer failing while a device send waits for its offer's answer drops the queued
/// action: nothing is executed for it and nothing is held.
#[test]
fn peer_failure_drops_queued_actions() {
    let dev = MemoryKind::Cuda { device: 0 };
    let mut net = Net::new(2);
    net.dev.accept_ipc = true;
    net.ranks[0].enable_device();
    net.ranks[0].allow_cuda_ipc(1);
    let data = pattern(1000, 1);
    let small = pattern(10, 1);
    let s = net.ranks[0].isend(
        1,
        0,
        1,
        RawBuf::with_kind(data.as_ptr() as *mut u8, 1000, dev),
        64,
        false,
    );
    let e = net.ranks[0].isend(
        1,
        0,
        1,
        RawBuf::with_kind(small.as_ptr() as *mut u8, 10, dev),
        64,
        false,
    );
    net.ranks[0].fail_peer(
        1,
        Error::Connection {
            peer: 1,
            detail: "gone".into(),
        },
    );
    assert!(net.ranks[0].pop_action().is_none());
    assert!(net.done(0, s).is_err() && net.done(0, e).is_err());
    assert_eq!(net.ranks[0].pending(), 0);
    // A late answer for a failed send releases what it accepted.
    net.ranks[0].offered(s, Some(RemoteMem::None));
    assert!(matches!(
        net.ranks[0].pop_action(),
        Some(MemAction::Release { sreq, .. }) if sreq == s
    ));
}

#[test]
fn device_buffer_without_gpu_support_is_a_clear_error_b009() {
    let mut net = Net::new(1);
    let data = [1u8; 8];
    let s = net.ranks[0].isend(
        0,
        0,
        1,
        RawBuf::with_kind(data.as_ptr() as *mut u8, 8, MemoryKind::Cuda { device: 0 }),
        64,
        false,
    );
    let e = net.done(0, s).unwrap_err();
    assert!(matches!(e, Error::Gpu(ref m) if m.contains("cuda")), "{e}");
}

#[test]
fn any_source_receive_after_a_peer_failure_fails_instead_of_hanging() {
    let mut net = Net::new(3);
    let err = Error::Connection {
        peer: 1,
        detail: "closed by peer".into(),
    };
    // A message from the live rank 2 is already waiting: it is still received.
    let msg = [9u8; 4];
    net.send(2, 0, 1, &msg);
    net.drive();
    net.ranks[0].fail_peer(1, err.clone());
    let mut a = [0u8; 4];
    let r = net.recv(0, None, None, &mut a);
    assert_eq!(net.done(0, r).unwrap().source, 2);
    let mut b = [0u8; 4];
    let r = net.recv(0, None, None, &mut b);
    assert_eq!(net.done(0, r).unwrap_err(), err);
}

/// The blocking-receive fast path (`quiet_for` + `take_eager`) takes exactly the frames
/// a posted receive would have matched, and leaves everything else alone.
#[test]
fn take_eager_takes_only_what_a_posted_receive_would_match() {
    let pat = |src: Option<u32>, tag: Option<i32>| Pattern { ctx: 0, src, tag };
    let eager = |p: &mut Protocol, dst: u32, tag: i32, _data: &[u8]| {
        let h = p.eager_header(dst, 0, tag).unwrap();
        h.as_slice().to_vec()
    };
    let mut tx = Protocol::new(0, 2);
    let mut rx = Protocol::new(1, 2);
    let mut buf = [0u8; 4];
    let raw = RawBuf::new(buf.as_mut_ptr(), buf.len());
    assert!(rx.quiet_for(&pat(Some(0), Some(5))));

    // Wrong tag: not taken, nothing changed; the general path then queues it.
    let h0 = eager(&mut tx, 1, 6, b"ab");
    let p0 = InPayload::owned(b"ab".to_vec());
    assert!(
        rx.take_eager(0, &h0, &p0, &pat(Some(0), Some(5)), raw)
            .is_none()
    );
    // A full header from another peer than the one it claims: not taken (a short
    // header claims no source: it is the peer's).
    let full = Frame::Eager {
        env: Envelope {
            ctx: 0,
            src: 0,
            tag: 6,
            seq: 0,
        },
    }
    .header(2);
    assert!(
        rx.take_eager(1, &full, &p0, &pat(None, None), raw)
            .is_none()
    );
    // Right tag, but seq 1 while seq 0 (h0) has not been matched: not taken.
    let h1 = eager(&mut tx, 1, 5, b"cdef");
    let p1 = InPayload::owned(b"cdef".to_vec());
    assert!(
        rx.take_eager(0, &h1, &p1, &pat(Some(0), Some(5)), raw)
            .is_none()
    );
    // The general path takes h0 into the unexpected queue; a receive for tag 6 is no
    // longer "quiet", one for tag 5 still is.
    rx.on_frame(0, &h0, b"ab".to_vec()).unwrap();
    assert!(!rx.quiet_for(&pat(Some(0), Some(6))));
    assert!(!rx.quiet_for(&pat(None, None)));
    assert!(rx.quiet_for(&pat(Some(0), Some(5))));
    // Now h1 is next in order and taken, truncated to the 4-byte buffer exactly.
    let r = rx.take_eager(0, &h1, &p1, &pat(Some(0), Some(5)), raw);
    assert_eq!(
        r.unwrap().unwrap(),
        Status {
            source: 0,
            tag: 5,
            len_bytes: 4
        }
    );
    assert_eq!(&buf, b"cdef");
    // A message longer than the buffer: the first bytes, and a truncation error.
    let mut small = [0u8; 2];
    let h2 = eager(&mut tx, 1, 5, b"xyz");
    let r = rx.take_eager(
        0,
        &h2,
        &InPayload::owned(b"xyz".to_vec()),
        &pat(Some(0), None),
        RawBuf::new(small.as_mut_ptr(), 2),
    );
    assert!(matches!(
        r,
        Some(Err(Error::Matching(MatchError::Truncated {
            message_bytes: 3,
            buffer_bytes: 2,
            ..
        })))
    ));
    assert_eq!(&small, b"xy");
    // A posted receive makes the fast path unavailable (it would be matched first).
    let mut other = [0u8; 2];
    let id = rx.irecv(pat(Some(0), Some(7)), RawBuf::new(other.as_mut_ptr(), 2));
    assert!(!rx.quiet_for(&pat(Some(0), Some(5))));
    assert!(rx.cancel_recv(id));
    assert!(rx.quiet_for(&pat(Some(0), Some(5))));
}

/// Short eager headers carry the sequence number modulo 2^32: frames that arrive out
/// of order (a pair on two transports) are still matched in send order, and a frame
/// ahead of its turn waits for the earlier one.
#[test]
fn short_eager_frames_out_of_order_match_in_send_order() {
    let mut tx = Protocol::new(0, 2);
    let mut rx = Protocol::new(1, 2);
    let headers: Vec<_> = (0..3)
        .map(|_| tx.eager_header(1, 0, 4).unwrap().as_slice().to_vec())
        .collect();
    let mut bufs = [[0u8; 1]; 3];
    let ids: Vec<_> = bufs
        .iter_mut()
        .map(|b| {
            rx.irecv(
                Pattern {
                    ctx: 0,
                    src: Some(0),
                    tag: Some(4),
                },
                RawBuf::new(b.as_mut_ptr(), 1),
            )
        })
        .collect();
    // Third, then first, then second.
    rx.on_frame(0, &headers[2], vec![b'c']).unwrap();
    assert!(
        rx.take_done(ids[0]).is_none(),
        "held back until the first arrives"
    );
    rx.on_frame(0, &headers[0], vec![b'a']).unwrap();
    rx.on_frame(0, &headers[1], vec![b'b']).unwrap();
    for id in ids {
        assert_eq!(rx.take_done(id).unwrap().unwrap().len_bytes, 1);
    }
    assert_eq!(bufs, [[b'a'], [b'b'], [b'c']]);
}

/// A sender that waits for a large pull-mode send writes a share itself (Help, Push,
/// Pushed); the bytes are exact either way, a failed write hands the share back and
/// ends the sharing with that peer, and a forged Push is refused.
#[test]
fn senders_share_large_pulls_and_failures_fall_back() {
    let len = SHARE_MIN_BYTES + 3 * PULL_CHUNK_BYTES + 123;
    for (help_first, fail_pushes, fail_pulls) in [
        (false, false, false),
        (true, false, false),
        (false, true, false),
        (false, false, true),
    ] {
        let what = format!(
            "help first {help_first}, failing writes {fail_pushes}, failing pulls {fail_pulls}"
        );
        let mut net = Net::new(2);
        net.fail_pushes = fail_pushes;
        net.ranks[0].offer_host_cma(1);
        net.ranks[1].allow_pull(0, true);
        let data = pattern(len, 3);
        let mut out = vec![0u8; len];
        let (s, r) = if help_first {
            // Help arrives before the receive is posted (the Rts waits unexpected).
            let s = net.send(0, 1, 4, &data);
            net.ranks[0].help(s);
            net.drive();
            (s, net.recv(1, Some(0), Some(4), &mut out))
        } else {
            let r = net.recv(1, Some(0), Some(4), &mut out);
            let s = net.send(0, 1, 4, &data);
            net.ranks[0].help(s);
            (s, r)
        };
        net.drive_with(fail_pulls);
        assert_eq!(net.done(1, r).unwrap().len_bytes, len, "{what}");
        assert!(out == data, "{what}: bytes");
        assert!(net.done(0, s).is_ok(), "{what}");
        let pushes = net.kinds.iter().filter(|k| **k == FrameKind::Push).count();
        if fail_pulls {
            assert!(
                net.kinds.contains(&FrameKind::Data),
                "{what}: fell back to Data"
            );
        } else {
            assert_eq!(pushes, 1, "{what}");
            assert_eq!(
                net.pulled + net.pushed,
                len,
                "{what}: each byte copied once"
            );
            if fail_pushes {
                assert_eq!(net.pushed, 0, "{what}");
            } else {
                assert!(
                    net.pushed >= SHARE_MIN_BYTES / 2,
                    "{what}: the sender's share"
                );
            }
        }
        // The next message: shared again unless a write (or a pull) failed before.
        net.kinds.clear();
        let mut out2 = vec![0u8; len];
        let r2 = net.recv(1, Some(0), Some(4), &mut out2);
        let s2 = net.send(0, 1, 4, &data);
        net.ranks[0].help(s2);
        net.drive_with(fail_pulls);
        assert!(
            net.done(1, r2).is_ok() && out2 == data,
            "{what}: second message"
        );
        assert!(net.done(0, s2).is_ok());
        let pushes = net.kinds.iter().filter(|k| **k == FrameKind::Push).count();
        assert_eq!(
            pushes,
            usize::from(!fail_pushes && !fail_pulls),
            "{what}: second Push"
        );
    }

    // Without help (a send nobody waits for yet) the receiver pulls everything.
    let mut net = Net::new(2);
    net.ranks[0].offer_host_cma(1);
    net.ranks[1].allow_pull(0, true);
    let data = pattern(len, 9);
    let mut out = vec![0u8; len];
    let r = net.recv(1, Some(0), Some(4), &mut out);
    let s = net.send(0, 1, 4, &data);
    net.drive();
    assert!(net.done(1, r).is_ok() && out == data && net.done(0, s).is_ok());
    assert_eq!((net.pulled, net.pushed), (len, 0));

    // A Push for bytes beyond the send buffer is a protocol error, not a write.
    let mut net = Net::new(2);
    net.ranks[0].offer_host_cma(1);
    let s = net.send(0, 1, 4, &data);
    net.ranks[0].help(s);
    while net.ranks[0].pop_frame().is_some() {}
    let forged = Frame::Push {
        sreq: s,
        rreq: 1,
        offset: len as u64 - 10,
        len: 11,
        mem: RemoteMem::HostCma { pid: 1, addr: 4096 },
    }
    .header(0);
    assert!(net.ranks[0].on_frame(1, &forged, vec![]).is_err());
    assert!(net.ranks[0].pop_push().is_none());
}

/// A receiver whose pulls start failing after it handed the sender a share falls back
/// to Cts + Data, and still completes only after the sender's Pushed (the sender may be
/// writing into the buffer until then): exact bytes, no protocol error, whether the
/// share's write works or fails.
#[test]
fn a_share_in_flight_when_pulls_fail_is_waited_for() {
    let len = SHARE_MIN_BYTES + 3 * PULL_CHUNK_BYTES + 5;
    for (fail_pushes, pushes_last) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut net = Net::new(2);
        net.fail_pushes = fail_pushes;
        // The first chunk succeeds (the share is asked for after it), the next fails;
        // with `pushes_last` the sender writes its share only after everything else
        // (its Data frames included) has moved.
        net.pull_budget = Some(1);
        net.pushes_last = pushes_last;
        net.ranks[0].offer_host_cma(1);
        net.ranks[1].allow_pull(0, true);
        net.ranks[1].allow_sharing(0, true);
        let data = pattern(len, 11);
        let mut out = vec![0u8; len];
        let r = net.recv(1, Some(0), Some(4), &mut out);
        let s = net.send(0, 1, 4, &data);
        net.ranks[0].help(s);
        if pushes_last {
            // Everything but the share's write has happened: neither side may be done,
            // the sender's buffer and the receiver's are still in use by the write.
            net.hold_pushes = true;
            net.drive();
            assert!(
                !net.ranks[0].is_done(s),
                "send completed before its share was written"
            );
            assert!(!net.ranks[1].is_done(r), "receive completed before Pushed");
            net.hold_pushes = false;
        }
        net.drive();
        assert!(
            net.kinds.contains(&FrameKind::Push),
            "a share was asked for"
        );
        assert!(
            net.kinds.contains(&FrameKind::Data),
            "then it fell back to Data"
        );
        let pushed_at = net.kinds.iter().position(|k| *k == FrameKind::Pushed);
        assert!(pushed_at.is_some(), "the sender answered the Push");
        let what = format!("pushes fail: {fail_pushes}, pushes last: {pushes_last}");
        assert_eq!(net.done(1, r).unwrap().len_bytes, len, "{what}");
        assert!(out == data, "{what}: bytes");
        assert!(net.done(0, s).is_ok(), "{what}");
        if pushes_last {
            // Both completed only after the share's write (the last thing that ran).
            assert_eq!(net.kinds.last(), Some(&FrameKind::Pushed), "{what}");
        }
    }
}

/// Issue 17 case 4: freeing a context forgets its sequence numbers on both sides, is
/// refused while a message waits on it, and a later communicator with the same id
/// starts matching from sequence 0 again.
#[test]
fn released_context_forgets_its_sequence_state_and_is_reused_cleanly() {
    let ctx = 5u32;
    let coll = ctx | crate::context_id::COLL_CTX_BIT;
    let mut net = Net::new(2);
    let lim = net.eager_limit;
    let round = |net: &mut Net, c: u32, v: u8| {
        let data = [v; 8];
        let mut got = [0u8; 8];
        let s = net.ranks[0].isend(1, c, 3, RawBuf::from_slice(&data), lim, false);
        let r = net.ranks[1].irecv(
            Pattern {
                ctx: c,
                src: Some(0),
                tag: Some(3),
            },
            RawBuf::new(got.as_mut_ptr(), got.len()),
        );
        net.drive();
        assert!(net.ranks[0].take_done(s).unwrap().is_ok());
        assert_eq!(net.done(1, r).unwrap().len_bytes, 8);
        assert_eq!(got, data);
    };
    for v in 0..3 {
        round(&mut net, ctx, v);
        round(&mut net, coll, v);
    }
    assert_eq!(
        net.ranks[0].seq_pairs(),
        2,
        "sender keeps (1, ctx), (1, coll)"
    );
    assert_eq!(
        net.ranks[1].seq_pairs(),
        2,
        "receiver keeps (0, ctx), (0, coll)"
    );
    // A message left unreceived on the collective context: rank 1 must keep the id.
    let data = [9u8; 4];
    let s = net.ranks[0].isend(1, coll, 7, RawBuf::from_slice(&data), lim, false);
    net.drive();
    assert!(net.ranks[0].take_done(s).unwrap().is_ok());
    assert!(!net.ranks[1].release_ctx(ctx, &[0, 1]));
    assert_eq!(
        net.ranks[1].seq_pairs(),
        2,
        "a refused release changes nothing"
    );
    let mut sink = [0u8; 4];
    let r = net.ranks[1].irecv(
        Pattern {
            ctx: coll,
            src: None,
            tag: None,
        },
        RawBuf::new(sink.as_mut_ptr(), sink.len()),
    );
    assert!(net.done(1, r).is_ok());
    // Now both sides are idle on the context: released, nothing kept.
    assert!(net.ranks[0].release_ctx(ctx, &[0, 1]));
    assert!(net.ranks[1].release_ctx(ctx, &[0, 1]));
    assert_eq!(net.ranks[0].seq_pairs(), 0);
    assert_eq!(net.ranks[1].seq_pairs(), 0);
    // A receive posted on the context also holds it.
    let mut buf = [0u8; 8];
    let r = net.ranks[1].irecv(
        Pattern {
            ctx,
            src: Some(0),
            tag: Some(3),
        },
        RawBuf::new(buf.as_mut_ptr(), buf.len()),
    );
    assert!(!net.ranks[1].release_ctx(ctx, &[0, 1]));
    assert!(net.ranks[1].cancel_recv(r));
    // The id reused: sequence numbers start again at 0 on both sides and match.
    for v in 10..13 {
        round(&mut net, ctx, v);
    }
}

/// A staged device message leaves after a host message sent later (its frame waits for
/// the stage-out), yet the receiver matches them in send order (sequence numbers).
#[test]
fn staged_device_message_is_not_overtaken_by_a_later_host_message() {
    let dev = MemoryKind::Cuda { device: 0 };
    let mut net = Net::new(2);
    net.ranks[0].enable_device();
    let first = pattern(40, 1);
    let second = pattern(30, 2);
    let s1 = net.ranks[0].isend(
        1,
        0,
        1,
        RawBuf::with_kind(first.as_ptr() as *mut u8, 40, dev),
        64,
        false,
    );
    let s2 = net.send(0, 1, 2, &second);
    let mut a = vec![0u8; 64];
    let mut b = vec![0u8; 64];
    let r1 = net.recv(1, Some(0), None, &mut a);
    let r2 = net.recv(1, Some(0), None, &mut b);
    net.drive();
    let (st1, st2) = (net.done(1, r1).unwrap(), net.done(1, r2).unwrap());
    assert_eq!(
        (st1.tag, st1.len_bytes, st2.tag, st2.len_bytes),
        (1, 40, 2, 30)
    );
    assert_eq!((&a[..40], &b[..30]), (&first[..], &second[..]));
    assert!(net.done(0, s1).is_ok() && net.done(0, s2).is_ok());
    let order: Vec<_> = net
        .kinds
        .iter()
        .filter(|k| **k == FrameKind::Eager)
        .collect();
    assert_eq!(order.len(), 2);
}

#[test]
fn device_chunks_are_staged_depth_at_a_time_answered_in_any_order_and_landed() {
    // A device rendezvous of 1000 bytes in chunks of 100: with a stage depth of d, d
    // stage-outs are in flight before the first is answered; answers come newest
    // first; Data frames for the device receive land in host buffers and are copied
    // in later. The bytes must arrive exact, and the receive must wait for its copies.
    let dev = MemoryKind::Cuda { device: 0 };
    for depth in [1u32, 2, 3, 8] {
        for land in [false, true] {
            let mut net = Net::new(2);
            for r in 0..2 {
                net.ranks[r].enable_device();
                net.ranks[r].set_device_staging(depth, 0);
            }
            net.dev.hold_out = true;
            net.land_device = land;
            let len = 1000;
            let data = pattern(len, 9);
            let mut out = vec![0u8; len];
            let pat = Pattern {
                ctx: 0,
                src: Some(0),
                tag: Some(1),
            };
            let r = net.ranks[1].irecv(pat, RawBuf::with_kind(out.as_mut_ptr(), len, dev));
            let s = net.ranks[0].isend(
                1,
                0,
                1,
                RawBuf::with_kind(data.as_ptr() as *mut u8, len, dev),
                64,
                false,
            );
            net.drive();
            let what = format!("depth {depth} land {land}");
            assert_eq!(net.done(1, r).unwrap().len_bytes, len, "{what}");
            assert!(net.done(0, s).is_ok(), "{what}");
            assert_eq!(out, data, "{what}");
            assert_eq!(net.dev.max_held_out, depth.min(10) as usize, "{what}");
            assert_eq!(net.dev.stage_out, 10, "{what}");
            assert_eq!(net.landed, if land { 10 } else { 0 }, "{what}");
            assert_eq!(net.dev.in_bytes, len, "{what}");
            assert_eq!(net.ranks[0].pending() + net.ranks[1].pending(), 0);
        }
    }
}

#[test]
fn staged_chunk_answers_that_were_not_asked_for_fail_the_send() {
    // An answer at an offset not staged, or of another length, is an error of the
    // executor: the send fails with a Gpu error instead of sending wrong bytes.
    let dev = MemoryKind::Cuda { device: 0 };
    for (off, n) in [(100usize, 100usize), (0, 99), (0, 0), (usize::MAX, 100)] {
        let mut p = Protocol::new(0, 2);
        p.enable_device();
        let data = pattern(1000, 1);
        let s = p.isend(
            1,
            0,
            1,
            RawBuf::with_kind(data.as_ptr() as *mut u8, 1000, dev),
            64,
            false,
        );
        // Rts out, Cts in.
        let rts = p.pop_frame().expect("rts");
        let Ok(Some((Frame::Rts { sreq, .. }, _, _))) = Frame::decode(&rts.header) else {
            panic!("not an Rts");
        };
        p.on_sent(rts.on_sent);
        let cts = Frame::Cts {
            sreq,
            rreq: 5,
            accept_len: 1000,
            mem: RemoteMem::None,
        }
        .header(0);
        p.on_frame(1, &cts, Vec::new()).unwrap();
        assert!(
            p.next_data(|_| Some(100)).is_none(),
            "device chunk is staged"
        );
        let Some(MemAction::StageOut { offset: 0, src, .. }) = p.pop_action() else {
            panic!("no stage-out of the first chunk");
        };
        assert_eq!(src.len(), 100);
        p.staged_out(s, off, Ok(Payload::Owned(vec![0; n])));
        let r = p
            .take_done(s)
            .unwrap_or_else(|| panic!("offset {off} len {n}: the send did not fail"));
        assert!(
            matches!(&r, Err(Error::Gpu(m)) if m.contains("not a chunk asked for")),
            "offset {off} len {n}: {r:?}"
        );
    }
}

#[test]
fn a_device_receive_with_copies_in_flight_fails_only_once_they_are_answered() {
    // The peer fails while a landed chunk is being copied into the device buffer: the
    // receive must not complete (the user could reuse the buffer) until the copy is
    // answered, and then completes with the peer's error.
    let dev = MemoryKind::Cuda { device: 0 };
    let mut net = Net::new(2);
    for r in 0..2 {
        net.ranks[r].enable_device();
    }
    net.land_device = true;
    net.dev.hold_out = false;
    let len = 1000;
    let data = pattern(len, 2);
    let mut out = vec![0u8; len];
    let pat = Pattern {
        ctx: 0,
        src: Some(0),
        tag: Some(1),
    };
    let r = net.ranks[1].irecv(pat, RawBuf::with_kind(out.as_mut_ptr(), len, dev));
    let _s = net.ranks[0].isend(
        1,
        0,
        1,
        RawBuf::with_kind(data.as_ptr() as *mut u8, len, dev),
        64,
        false,
    );
    // Move frames by hand until the first Data frame for rank 1 has landed.
    let mut landed = None;
    for _ in 0..100 {
        net.dev.run(&mut net.ranks[0]);
        let f = match net.ranks[0].pop_frame() {
            Some(f) => f,
            None => match net.ranks[0].next_data(|_| Some(100)) {
                Some(f) => f,
                None => continue,
            },
        };
        // SAFETY: the owning request is pending.
        let payload = unsafe { f.payload.as_slice() }.to_vec();
        net.ranks[0].on_sent(f.on_sent);
        if f.peer != 1 {
            continue;
        }
        let to = &mut net.ranks[1];
        if let Some(b) = to.data_target(0, &f.header, payload.len())
            && !b.is_host()
        {
            landed = to.on_frame_staged(0, &f.header, payload.len()).unwrap();
            break;
        }
        to.on_frame(0, &f.header, payload).unwrap();
        // Rank 1's Cts goes back to rank 0.
        while let Some(c) = net.ranks[1].pop_frame() {
            net.ranks[1].on_sent(c.on_sent);
            net.ranks[0].on_frame(1, &c.header, Vec::new()).unwrap();
        }
    }
    let (rreq, dst) = landed.expect("a Data frame landed");
    assert_eq!(rreq, r);
    assert_eq!(dst.len(), 100);
    net.ranks[1].fail_peer(
        0,
        Error::Connection {
            peer: 0,
            detail: "gone".into(),
        },
    );
    assert!(
        net.ranks[1].take_done(r).is_none(),
        "completed with a copy into its buffer in flight"
    );
    net.ranks[1].staged_in(r, Ok(()));
    let res = net.ranks[1]
        .take_done(r)
        .expect("completes once the copy is answered");
    assert!(matches!(res, Err(Error::Connection { .. })), "{res:?}");
    assert_eq!(net.ranks[1].pending(), 0);
}

#[test]
fn a_cancelled_rendezvous_send_is_withdrawn_from_the_unexpected_queue() {
    // MPI 4.1 §3.8.4: the send completes as cancelled without any receive posted, the
    // receiver forgets the message (a later receive gets the next one), and both sides
    // end with nothing pending.
    let mut net = Net::new(2);
    let big = pattern(1000, 3);
    let next = pattern(10, 4);
    let s = net.send(0, 1, 5, &big);
    net.drive();
    assert!(
        net.ranks[0].cancel_send(s),
        "an unanswered Rts can be cancelled"
    );
    assert!(!net.ranks[0].cancel_send(s), "asked once");
    net.drive();
    assert_eq!(
        net.done(0, s).unwrap_err(),
        Error::Matching(MatchError::Cancelled)
    );
    assert!(net.kinds.contains(&FrameKind::Cancel) && net.kinds.contains(&FrameKind::Cancelled));
    assert!(net.ranks[1].early_help.is_empty());
    let s2 = net.send(0, 1, 5, &next);
    let mut out = vec![0u8; 1000];
    let r = net.recv(1, Some(0), Some(5), &mut out);
    net.drive();
    assert_eq!(
        net.done(1, r).unwrap().len_bytes,
        10,
        "the withdrawn message is gone"
    );
    assert_eq!(&out[..10], &next[..]);
    assert!(net.done(0, s2).is_ok());
    assert_eq!(net.ranks[0].pending() + net.ranks[1].pending(), 0);
}

#[test]
fn a_send_cancelled_after_its_receive_matched_completes_normally() {
    // The receive is posted first, so the Rts matches on arrival; the Cancel crosses
    // the Cts (or comes after the Fin): the answer is "not withdrawn" and the data
    // arrives whole. Also with the Cancel sent before the Rts is even delivered but
    // after the receive was posted.
    for cancel_before_drive in [false, true] {
        let mut net = Net::new(2);
        let big = pattern(1000, 5);
        let mut out = vec![0u8; 1000];
        let r = net.recv(1, Some(0), Some(6), &mut out);
        net.drive();
        let s = net.send(0, 1, 6, &big);
        if cancel_before_drive {
            assert!(net.ranks[0].cancel_send(s));
        }
        net.drive();
        net.ranks[0].cancel_send(s);
        net.drive();
        assert!(
            net.done(0, s).is_ok(),
            "cancel_before_drive {cancel_before_drive}"
        );
        assert_eq!(net.done(1, r).unwrap().len_bytes, 1000);
        assert_eq!(out, big);
        assert_eq!(net.ranks[0].pending() + net.ranks[1].pending(), 0);
    }
}

#[test]
fn eager_sends_and_answers_nobody_asked_for() {
    // An eager send is not cancelled (it completed locally); a Cancelled frame for a
    // send that asked nothing is a transport error, one for a finished send is ignored.
    let mut net = Net::new(2);
    let small = pattern(10, 1);
    let s = net.send(0, 1, 7, &small);
    assert!(!net.ranks[0].cancel_send(s));
    net.drive();
    assert!(net.done(0, s).is_ok());
    let late = Frame::Cancelled { sreq: s, ok: true }.header(0);
    assert!(
        net.ranks[0].on_frame(1, &late, vec![]).is_ok(),
        "a finished send"
    );
    let big = pattern(1000, 2);
    let s2 = net.send(0, 1, 7, &big);
    net.drive();
    let forged = Frame::Cancelled { sreq: s2, ok: true }.header(0);
    assert!(
        net.ranks[0].on_frame(1, &forged, vec![]).is_err(),
        "never asked"
    );
    // A Cancel for a send the receiver does not hold is answered "not withdrawn".
    let q = Frame::Cancel { sreq: 12345 }.header(0);
    net.ranks[1].on_frame(0, &q, vec![]).unwrap();
    let a = net.ranks[1].pop_frame().expect("an answer");
    assert_eq!(
        Frame::decode(&a.header).unwrap().unwrap().0,
        Frame::Cancelled {
            sreq: 12345,
            ok: false
        }
    );
}

/// `revoke.rs`: a rank that found a mismatch on a collective context revokes it; on
/// every other rank the receives posted there fail, a rendezvous send there whose
/// receive has not matched is withdrawn and fails, and later sends and receives there
/// fail at once. Point-to-point on another context is untouched.
#[test]
fn a_revoked_collective_context_fails_pending_and_later_operations() {
    const C: u32 = crate::context_id::COLL_CTX_BIT | 4;
    let mut net = Net::new(3);
    for r in 0..3 {
        net.ranks[r].ctx_live(4, [0, 1, 2].into());
    }
    let coll = |src: u32| Pattern {
        ctx: C,
        src: Some(src),
        tag: Some(1),
    };
    // Rank 2 waits on the collective context for rank 1; rank 0 has a rendezvous send
    // to rank 1 on it that rank 1 never receives; a user receive on context 0 is posted
    // at rank 2.
    let mut cbuf = vec![0u8; 8];
    let posted = net.ranks[2].irecv(coll(1), RawBuf::new(cbuf.as_mut_ptr(), cbuf.len()));
    let big = pattern(1000, 9);
    let lim = net.eager_limit;
    let rdv = net.ranks[0].isend(1, C, 1, RawBuf::from_slice(&big), lim, false);
    let mut ubuf = vec![0u8; 4];
    let user = net.recv(2, Some(1), Some(7), &mut ubuf);
    net.drive();
    assert!(net.ranks[2].take_done(posted).is_none());
    // Rank 1 finds a mismatch and revokes C for the group {0, 1, 2}.
    net.ranks[1].revoke(C, &[0, 1, 2]);
    net.drive();
    assert!(net.kinds.contains(&FrameKind::Revoke));
    let e = net.done(2, posted).unwrap_err().to_string();
    assert!(e.contains("revoked") && e.contains("world rank 1"), "{e}");
    let e = net.done(0, rdv).unwrap_err().to_string();
    assert!(e.contains("revoked"), "the withdrawn send: {e}");
    // Later operations on C fail at once, on every rank, the revoker included.
    for r in 0..3u32 {
        let mut b = vec![0u8; 8];
        let id = net.ranks[r as usize].irecv(coll((r + 1) % 3), RawBuf::new(b.as_mut_ptr(), 8));
        assert!(net.done(r, id).is_err(), "a later receive at rank {r}");
        let id = net.ranks[r as usize].isend((r + 1) % 3, C, 1, RawBuf::from_slice(&b), lim, false);
        assert!(net.done(r, id).is_err(), "a later send at rank {r}");
        assert!(
            net.ranks[r as usize]
                .eager_header((r + 1) % 3, C, 1)
                .is_none(),
            "the engine's eager fast path is refused at rank {r}"
        );
    }
    // Point-to-point on context 0 still works.
    let s = net.send(1, 2, 7, &[1, 2, 3, 4]);
    net.drive();
    assert!(net.done(1, s).is_ok());
    assert_eq!(net.done(2, user).unwrap().len_bytes, 4);
    assert_eq!(ubuf, [1, 2, 3, 4]);
    for r in 0..3 {
        assert_eq!(net.ranks[r].pending(), 0, "rank {r}");
    }
}

#[test]
fn a_revoke_of_a_point_to_point_context_is_a_bad_frame() {
    let mut p = Protocol::new(0, 2);
    let h = Frame::Revoke { ctx: 3 }.header(0);
    assert!(p.on_frame(1, &h, Vec::new()).is_err());
    // And revoke() itself refuses it (nothing queued; a fresh engine, since the bad
    // frame above failed rank 1 as a peer).
    let mut p = Protocol::new(0, 2);
    p.revoke(3, &[0, 1]);
    assert!(p.pop_frame().is_none());
    let mut b = [0u8; 4];
    let id = p.irecv(
        Pattern {
            ctx: 3,
            src: Some(1),
            tag: Some(0),
        },
        RawBuf::new(b.as_mut_ptr(), 4),
    );
    let got = p.take_done(id);
    assert!(got.is_none(), "context 3 is not revoked: {got:?}");
}

/// A device send whose buffer offer is being made when its collective context is
/// revoked fails when the offer is answered (no Rts goes out) and its offer is
/// released; and a revoked context keeps its communicator's id held (`release_ctx`).
#[test]
fn a_send_offering_its_buffer_fails_on_a_revoked_context_and_the_id_is_held() {
    const C: u32 = crate::context_id::COLL_CTX_BIT | 6;
    let dev = MemoryKind::Cuda { device: 0 };
    let mut net = Net::new(2);
    net.dev.accept_ipc = true;
    for r in 0..2 {
        net.ranks[r].enable_device();
        net.ranks[r].allow_cuda_ipc(1 - r as u32);
        net.ranks[r].ctx_live(6, [0, 1].into());
    }
    let data = pattern(1000, 2);
    let s = net.ranks[0].isend(
        1,
        C,
        3,
        RawBuf::with_kind(data.as_ptr() as *mut u8, 1000, dev),
        64,
        false,
    );
    // Revoked before the offer is answered (the harness answers it in drive).
    net.ranks[0].revoke(C, &[0, 1]);
    net.drive();
    let e = net.done(0, s).unwrap_err().to_string();
    assert!(e.contains("revoked"), "{e}");
    assert!(
        !net.kinds.contains(&FrameKind::Rts),
        "no Rts for a revoked send"
    );
    assert_eq!(net.dev.releases, 1, "the offer made is released");
    assert!(net.dev.held.is_empty());
    for r in 0..2 {
        assert_eq!(net.ranks[r].pending(), 0, "rank {r}");
        assert!(
            !net.ranks[r].release_ctx(C & !crate::context_id::COLL_CTX_BIT, &[0, 1]),
            "rank {r} holds the id of a revoked communicator"
        );
    }
    // A context never revoked is released as before.
    assert!(net.ranks[0].release_ctx(9, &[0, 1]));
}

/// A `Revoke` counts only from a member of the communicator that has the id here: one
/// that arrives after this rank freed the revoked communicator and gave the id to a
/// communicator without the revoker is dropped; one that arrives before this rank made
/// the communicator waits for it and then applies (if its sender is a member).
#[test]
fn a_revoke_counts_only_from_a_member_of_the_communicator_with_that_id() {
    const C: u32 = crate::context_id::COLL_CTX_BIT | 5;
    let h = Frame::Revoke { ctx: C }.header(0);
    let recv = |p: &mut Protocol, src: u32, b: &mut [u8; 4]| {
        p.irecv(
            Pattern {
                ctx: C,
                src: Some(src),
                tag: Some(0),
            },
            RawBuf::new(b.as_mut_ptr(), 4),
        )
    };
    // Rank 0's communicator with id 5 is {0, 1}; a late Revoke from rank 2 (of an
    // earlier communicator {0, 1, 2} with that id) is dropped.
    let mut p = Protocol::new(0, 3);
    p.ctx_live(5, [0, 1].into());
    let mut b = [0u8; 4];
    let id = recv(&mut p, 1, &mut b);
    p.on_frame(2, &h, Vec::new()).unwrap();
    assert!(p.take_done(id).is_none(), "not revoked by a non-member");
    // From a member it revokes.
    p.on_frame(1, &h, Vec::new()).unwrap();
    assert!(p.take_done(id).unwrap().is_err());
    // Before the communicator exists here: kept, then applied if the sender is in it.
    for (group, applies) in [(vec![0u32, 2], true), (vec![0u32, 1], false)] {
        let mut p = Protocol::new(0, 3);
        p.on_frame(2, &h, Vec::new()).unwrap();
        p.ctx_live(5, group.clone().into());
        let mut b = [0u8; 4];
        let id = recv(&mut p, group[1], &mut b);
        assert_eq!(p.take_done(id).is_some(), applies, "group {group:?}");
    }
}
