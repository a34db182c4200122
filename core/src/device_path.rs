//! The engine's side of the protocol's memory actions ([`MemAction`]): staging device
//! buffers through host memory, offering device buffers by CUDA IPC and host buffers by
//! RDMA registration, and releasing those offers. The protocol (sans-IO) only asks;
//! [`MemActions::run`], called from the engine's progress round, executes and answers.
//!
//! # Semantics
//! - Copies run on the runtime's non-blocking stream of the buffer's device
//!   ([`rankwire_gpu::Stream::runtime`]) and are answered only once complete, so a
//!   completed receive's data is visible to work on any stream of that device, and a
//!   send buffer is no longer read once its last frame is queued.
//! - Copies up to [`SYNC_MAX_BYTES`] (eager messages at the default limits) are
//!   synchronous, through pageable memory: the lowest latency for small messages. A
//!   larger eager message (`RANKWIRE_GPU_EAGER_MAX` raised) takes the pipelined path in
//!   one piece.
//! - Rendezvous chunks are pipelined through pinned host buffers of the engine's
//!   [`TmpPool`]: a device-to-host copy is queued with an event and answered
//!   ([`Protocol::staged_out`], the frame's payload lent from the pinned buffer) in a
//!   later progress round once the event completes, while the protocol asks for the
//!   next chunks ([`Protocol::set_device_staging`]); on the receiving side a transport
//!   lands a `Data` payload in a pinned buffer ([`GpuStaging::take_landing`]) and the
//!   host-to-device copy is queued the same way ([`MemActions::stage_in_landed`]). The
//!   pinned bytes lent at once are bounded ([`PINNED_MAX_BYTES`]); past the bound, or
//!   where pinned memory cannot be had, a chunk takes the synchronous path. UCX
//!   pipelines CUDA staging the same way (`UCX_RNDV_FRAG_SIZE` fragments, default 512
//!   KiB for host, 4 MiB for CUDA, several in flight).
//! - An offer of device memory exports a CUDA IPC handle of the allocation; memory
//!   legacy IPC cannot export (stream-ordered pool memory, VMM memory) is copied on
//!   the device into a runtime-owned `cuMemAlloc` staging buffer that is offered
//!   instead and goes back to the cache on [`MemAction::Release`].
//! - An offer of host memory registers it through the engine's RDMA transport
//!   ([`Transport::register`], backed by its registration cache), held per send
//!   request until the release ([`Transport::deregister`]).

use rankwire_transports::{LocalBuf, MemoryKind, Registration, Transport};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::sync::Arc;

use crate::protocol::{MemAction, OfferKind, Payload, Protocol, RawBuf, ReqId};
use rankwire_gpu::{Event, Stream, TmpPool};

/// Device chunks up to this many bytes are copied synchronously (eager messages).
pub(crate) const SYNC_MAX_BYTES: usize = 64 << 10;

/// Pinned staging bytes lent at once by one process's pipelined copies and landed
/// payloads; past it chunks take the synchronous path.
pub(crate) const PINNED_MAX_BYTES: usize = 256 << 20;

/// Executes the protocol's memory actions: device staging when a GPU is usable, RDMA
/// registration when an RDMA transport serves some peers.
#[derive(Default)]
pub(crate) struct MemActions {
    gpu: Option<GpuStaging>,
    /// Device copies are host `memcpy`s: the GPUDirect RDMA test stand-in
    /// ([`crate::gdr_standin`]), with no GPU.
    standin: bool,
    /// CUDA IPC registrations (exports, or pooled staging buffers) of pending sends,
    /// made through the `cuda_ipc` transport and released with it.
    ipc_regs: HashMap<ReqId, Registration>,
    /// RDMA registrations (verbs memory regions, through the transport's cache) of
    /// pending sends, made through the rdma transport and released with it.
    rdma_regs: HashMap<ReqId, Registration>,
}

impl MemActions {
    /// Stage and offer device buffers with `g` (also tells `proto` to accept them).
    pub(crate) fn set_gpu(&mut self, g: GpuStaging, proto: &mut Protocol) {
        self.gpu = Some(g);
        proto.enable_device();
    }

    /// Treat device buffers as the stand-in's host memory ([`crate::gdr_standin`]):
    /// staging copies are `memcpy` (also tells `proto` to accept device buffers).
    pub(crate) fn set_standin(&mut self, proto: &mut Protocol) {
        self.standin = true;
        proto.enable_device();
    }

    /// Offer host send buffers to `peers` for RDMA READ (registered through the rdma
    /// transport [`MemActions::run`] is given).
    pub(crate) fn set_rdma(&mut self, peers: &[u32], proto: &mut Protocol) {
        proto.offer_rdma(peers);
    }

    /// Execute every action `proto` has queued and feed each answer back; device
    /// offers register through `ipc`, the engine's `cuda_ipc` transport, and host
    /// offers through `rdma`, its RDMA transport (`None` without one: nothing is
    /// offered, the data is staged or sent as `Data` frames). Returns whether any ran
    /// (answers may have queued frames or completed requests).
    pub(crate) fn run(
        &mut self,
        proto: &mut Protocol,
        mut ipc: Option<&mut dyn Transport>,
        mut rdma: Option<&mut dyn Transport>,
    ) -> bool {
        let mut any = match self.gpu.as_mut() {
            Some(g) if !g.flights.is_empty() => g.poll(proto),
            _ => false,
        };
        while let Some(a) = proto.pop_action() {
            any = true;
            match a {
                MemAction::StageOut { sreq, src, offset } => match self.gpu.as_mut() {
                    Some(g) => g.stage_out(proto, sreq, src, offset),
                    None if self.standin => {
                        // SAFETY: stand-in "device" memory is host memory, valid for
                        // `src.len()` bytes until the answer.
                        let v = unsafe { src.as_slice() }.to_vec();
                        proto.staged_out(sreq, offset, Ok(Payload::Owned(v)));
                    }
                    None => proto.staged_out(sreq, offset, Err(NO_GPU.into())),
                },
                MemAction::StageIn { rreq, dst, data } => match self.gpu.as_mut() {
                    Some(g) => g.stage_in(proto, rreq, dst, &data),
                    None if self.standin => {
                        // SAFETY: as above; `dst.len() == data.len()`, and the receive
                        // owns `dst` until the answer.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                data.as_ptr(),
                                dst.as_mut_ptr(),
                                data.len(),
                            )
                        };
                        proto.staged_in(rreq, Ok(()));
                    }
                    None => proto.staged_in(rreq, Err(NO_GPU.into())),
                },
                MemAction::Offer { sreq, buf, to } => {
                    let mem = match to {
                        OfferKind::CudaIpc => match (self.gpu.as_ref(), ipc.as_deref_mut()) {
                            (Some(_), Some(t)) => match t.register(local_buf(buf)) {
                                Ok(reg) => {
                                    self.ipc_regs.insert(sreq, reg);
                                    Some(reg.remote)
                                }
                                Err(e) => {
                                    tracing::debug!(
                                        "device buffer not offered by CUDA IPC ({e}); staging it"
                                    );
                                    None
                                }
                            },
                            _ => None,
                        },
                        OfferKind::Rdma => match rdma.as_deref_mut() {
                            Some(t) => match t.register(local_buf(buf)) {
                                Ok(reg) => {
                                    self.rdma_regs.insert(sreq, reg);
                                    Some(reg.remote)
                                }
                                Err(e) => {
                                    tracing::debug!(
                                        "rdma: cannot register a send buffer ({e}); sending \
                                         it as Data frames"
                                    );
                                    None
                                }
                            },
                            None => None,
                        },
                    };
                    proto.offered(sreq, mem);
                }
                MemAction::Release { sreq, to } => match to {
                    OfferKind::CudaIpc => {
                        if let (Some(reg), Some(t)) =
                            (self.ipc_regs.remove(&sreq), ipc.as_deref_mut())
                        {
                            t.deregister(reg);
                        }
                    }
                    OfferKind::Rdma => {
                        if let (Some(reg), Some(t)) =
                            (self.rdma_regs.remove(&sreq), rdma.as_deref_mut())
                        {
                            t.deregister(reg);
                        }
                    }
                },
            }
        }
        any
    }
}

const NO_GPU: &str = "no GPU support in this process";

impl MemActions {
    /// Whether pipelined device copies are in flight (progress must keep polling them
    /// rather than sleep on a transport).
    pub(crate) fn in_flight(&self) -> bool {
        self.gpu.as_ref().is_some_and(|g| !g.flights.is_empty())
    }

    /// Wait for copies whose request completed meanwhile ([`GpuStaging::settle_orphans`]);
    /// the engine calls it at the end of every progress round with copies in flight,
    /// before a caller can take a completion.
    pub(crate) fn settle_orphans(&mut self, proto: &Protocol) {
        if let Some(g) = self.gpu.as_mut()
            && !g.flights.is_empty()
        {
            g.settle_orphans(proto);
        }
    }

    /// A pinned buffer of `len` bytes into which a transport may land a `Data` payload
    /// for a device receive ([`Protocol::data_target`]); its address. `None` without a
    /// GPU, past [`PINNED_MAX_BYTES`], or where pinned memory cannot be had.
    pub(crate) fn take_landing(&mut self, len: usize) -> Option<u64> {
        self.gpu.as_mut()?.take_landing(len)
    }

    /// Give back a landing buffer that was not used ([`MemActions::take_landing`]).
    pub(crate) fn give_landing(&mut self, addr: u64) {
        if let Some(g) = self.gpu.as_mut() {
            g.give_pinned(addr);
        }
    }

    /// The payload landed in `addr` ([`MemActions::take_landing`]) belongs at `dst` of
    /// receive `rreq` ([`Protocol::on_frame_staged`]): queue the copy; it is answered
    /// with [`Protocol::staged_in`] once complete (or at once if it cannot start).
    pub(crate) fn stage_in_landed(
        &mut self,
        proto: &mut Protocol,
        rreq: ReqId,
        dst: RawBuf,
        addr: u64,
    ) {
        match self.gpu.as_mut() {
            Some(g) => g.stage_in_pinned(proto, rreq, dst, addr),
            None => proto.staged_in(rreq, Err(NO_GPU.into())),
        }
    }
}

/// The transport-level view of a protocol buffer.
fn local_buf(buf: RawBuf) -> LocalBuf {
    LocalBuf {
        addr: buf.as_mut_ptr() as u64,
        len_bytes: buf.len(),
        kind: buf.kind(),
    }
}

/// Stages device buffers through host memory on the runtime stream: synchronously
/// for small copies, pipelined through pinned buffers for rendezvous chunks (module
/// documentation).
pub(crate) struct GpuStaging {
    /// Where the pinned buffers come from.
    pool: Arc<TmpPool>,
    /// Copies in flight, oldest first.
    flights: VecDeque<Flight>,
    /// Idle completion events, by device.
    events: Vec<Event>,
    /// Pinned bytes lent now (flights, landed payloads, frames not yet taken).
    lent: Arc<std::sync::atomic::AtomicUsize>,
    /// Length of each landing buffer lent ([`GpuStaging::take_landing`]), by address.
    landing_len: HashMap<u64, usize>,
}

/// A queued copy and what answers it.
struct Flight {
    what: FlightKind,
    event: Event,
    /// The pinned buffer (address in `pool`).
    pinned: u64,
}

enum FlightKind {
    /// Device-to-host chunk of send `sreq` at byte `offset`, `len` bytes.
    Out {
        sreq: ReqId,
        offset: usize,
        len: usize,
    },
    /// Host-to-device copy into receive `rreq`.
    In { rreq: ReqId },
}

/// Record `event` after the copy just queued on `stream`; if that fails, wait for the
/// stream instead, so that the copy no longer touches its buffers when the caller gives
/// them back and answers with the error.
fn record_or_drain(event: &Event, stream: &Stream) -> Result<(), String> {
    event.record(stream).map_err(|e| {
        let _ = stream.synchronize();
        e.to_string()
    })
}

/// Pinned bytes lent to a frame ([`Payload::Lent`]); dropping gives them back.
struct PinnedChunk {
    pool: Arc<TmpPool>,
    lent: Arc<std::sync::atomic::AtomicUsize>,
    addr: u64,
    len: usize,
}

impl AsRef<[u8]> for PinnedChunk {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `addr` is a pinned buffer of at least `len` bytes lent to this chunk
        // by the pool until drop, and the copy that filled it has completed.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }
}

impl Drop for PinnedChunk {
    fn drop(&mut self) {
        self.pool.give_pinned(self.addr);
        self.lent
            .fetch_sub(self.len, std::sync::atomic::Ordering::Relaxed);
    }
}

impl GpuStaging {
    /// Staging with pinned buffers from `pool` (the engine's GPU temporaries).
    pub(crate) fn new(pool: Arc<TmpPool>) -> Self {
        GpuStaging {
            pool,
            flights: VecDeque::new(),
            events: Vec::new(),
            lent: Default::default(),
            landing_len: HashMap::default(),
        }
    }

    fn take_landing(&mut self, len: usize) -> Option<u64> {
        let a = self.take_pinned(len)?;
        self.landing_len.insert(a, len);
        Some(a)
    }

    fn take_pinned(&mut self, len: usize) -> Option<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        if len == 0 || self.lent.load(Relaxed) + len > PINNED_MAX_BYTES {
            return None;
        }
        match self.pool.take_pinned(len) {
            Ok(a) => {
                self.lent.fetch_add(len, Relaxed);
                Some(a)
            }
            Err(e) => {
                tracing::debug!(
                    "no pinned staging buffer of {len} bytes ({e}); copying synchronously"
                );
                None
            }
        }
    }

    /// Give back `addr` from [`GpuStaging::take_pinned`] (`len` as taken).
    fn give_pinned_len(&mut self, addr: u64, len: usize) {
        self.pool.give_pinned(addr);
        self.lent
            .fetch_sub(len, std::sync::atomic::Ordering::Relaxed);
    }

    fn give_pinned(&mut self, addr: u64) {
        // Landing buffers: the engine knows only the address; the length is recorded
        // with it.
        if let Some(len) = self.landing_len.remove(&addr) {
            self.give_pinned_len(addr, len);
        }
    }

    fn event(&mut self, device: i32) -> Result<Event, String> {
        match self.events.iter().position(|e| e.device() == device) {
            Some(i) => Ok(self.events.swap_remove(i)),
            None => Event::new(device).map_err(|e| e.to_string()),
        }
    }

    /// Copy send chunk `src` (at `offset` of send `sreq`) to host: queued through a
    /// pinned buffer for a rendezvous chunk, synchronous otherwise.
    fn stage_out(&mut self, proto: &mut Protocol, sreq: ReqId, src: RawBuf, offset: usize) {
        if src.len() > SYNC_MAX_BYTES
            && let Ok(device) = device_of(&src)
            && let Some(pinned) = self.take_pinned(src.len())
        {
            let len = src.len();
            let queued = (|| {
                let stream = Stream::runtime(device).map_err(|e| e.to_string())?;
                let event = self.event(device)?;
                // SAFETY: the send is pending, so `src` is live device memory; the
                // pinned buffer (len bytes) is ours until the flight is answered.
                unsafe {
                    rankwire_gpu::memcpy_dtoh_async(
                        pinned as *mut u8,
                        src.as_mut_ptr() as u64,
                        len,
                        stream,
                    )
                }
                .map_err(|e| e.to_string())?;
                record_or_drain(&event, stream)?;
                Ok::<Event, String>(event)
            })();
            match queued {
                Ok(event) => self.flights.push_back(Flight {
                    what: FlightKind::Out { sreq, offset, len },
                    event,
                    pinned,
                }),
                Err(e) => {
                    self.give_pinned_len(pinned, len);
                    proto.staged_out(sreq, offset, Err(e));
                }
            }
            return;
        }
        let r = self.copy_from_device(src).map(Payload::Owned);
        proto.staged_out(sreq, offset, r);
    }

    /// Copy arrived bytes `data` into `dst` of receive `rreq`: through a pinned buffer
    /// and queued for a large chunk, synchronous otherwise.
    fn stage_in(&mut self, proto: &mut Protocol, rreq: ReqId, dst: RawBuf, data: &[u8]) {
        if data.len() > SYNC_MAX_BYTES
            && let Some(pinned) = self.take_landing(data.len())
        {
            // SAFETY: the pinned buffer has at least data.len() bytes and is ours.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), pinned as *mut u8, data.len()) };
            self.stage_in_pinned(proto, rreq, dst, pinned);
            return;
        }
        let r = self.copy_to_device(dst, 0, data);
        proto.staged_in(rreq, r);
    }

    /// Queue the copy of the landed bytes at `pinned` into `dst` of receive `rreq`.
    fn stage_in_pinned(&mut self, proto: &mut Protocol, rreq: ReqId, dst: RawBuf, pinned: u64) {
        let queued = (|| {
            let device = device_of(&dst)?;
            let stream = Stream::runtime(device).map_err(|e| e.to_string())?;
            let event = self.event(device)?;
            // SAFETY: the receive is pending (it completes only once this flight is
            // answered), so `dst` is live device memory; the pinned buffer holds the
            // landed bytes and is ours until the flight is answered.
            unsafe {
                rankwire_gpu::memcpy_htod_async(
                    dst.as_mut_ptr() as u64,
                    pinned as *const u8,
                    dst.len(),
                    stream,
                )
            }
            .map_err(|e| e.to_string())?;
            record_or_drain(&event, stream)?;
            Ok::<Event, String>(event)
        })();
        match queued {
            Ok(event) => self.flights.push_back(Flight {
                what: FlightKind::In { rreq },
                event,
                pinned,
            }),
            Err(e) => {
                self.give_pinned(pinned);
                proto.staged_in(rreq, Err(e));
            }
        }
    }

    /// Wait for the copies of requests that are no longer pending (failed with their
    /// peer, or by another chunk's failed copy): a completed request's buffer may be
    /// freed by its owner at once, so no copy may still read or write it. The flights
    /// stay queued and are answered (and ignored) by the next [`GpuStaging::poll`].
    fn settle_orphans(&mut self, proto: &Protocol) {
        for f in &self.flights {
            let id = match f.what {
                FlightKind::Out { sreq, .. } => sreq,
                FlightKind::In { rreq } => rreq,
            };
            if !proto.is_pending(id) {
                let _ = f.event.synchronize();
            }
        }
    }

    /// Answer the flights whose copies completed; whether any did. All flights of
    /// one device are on its runtime stream, so they complete in order: after the
    /// first one still running, later ones of that device are not queried (one
    /// `cuEventQuery` per device and round while a copy runs; progress rounds come
    /// often while a transport reads a chunk).
    fn poll(&mut self, proto: &mut Protocol) -> bool {
        let mut any = false;
        let mut i = 0;
        let mut running: [i32; 4] = [i32::MIN; 4];
        let mut n_running = 0;
        while i < self.flights.len() {
            let dev = self.flights[i].event.device();
            if running[..n_running].contains(&dev) {
                i += 1;
                continue;
            }
            let done = match self.flights[i].event.query() {
                Ok(false) => {
                    if n_running == running.len() {
                        break;
                    }
                    running[n_running] = dev;
                    n_running += 1;
                    i += 1;
                    continue;
                }
                Ok(true) => Ok(()),
                Err(e) => Err(e.to_string()),
            };
            any = true;
            let Some(f) = self.flights.remove(i) else {
                break;
            };
            match f.what {
                FlightKind::Out { sreq, offset, len } => {
                    let r = done.map(|()| {
                        Payload::Lent(Box::new(PinnedChunk {
                            pool: self.pool.clone(),
                            lent: self.lent.clone(),
                            addr: f.pinned,
                            len,
                        }))
                    });
                    if r.is_err() {
                        self.give_pinned_len(f.pinned, len);
                    }
                    proto.staged_out(sreq, offset, r);
                }
                FlightKind::In { rreq } => {
                    self.give_pinned(f.pinned);
                    proto.staged_in(rreq, done);
                }
            }
            self.events.push(f.event);
        }
        any
    }
}

fn device_of(buf: &RawBuf) -> Result<i32, String> {
    match buf.kind() {
        MemoryKind::Cuda { device } => Ok(device),
        other => Err(format!("not device memory: {other}")),
    }
}

impl GpuStaging {
    /// Copy host bytes `src` to byte `offset` of device buffer `dst` (complete on
    /// return: `cuMemcpyHtoDAsync` on the runtime stream, then `cuStreamSynchronize`).
    ///
    /// # Errors
    /// The CUDA error, as text.
    pub(crate) fn copy_to_device(
        &mut self,
        dst: RawBuf,
        offset: usize,
        src: &[u8],
    ) -> Result<(), String> {
        let stream = Stream::runtime(device_of(&dst)?).map_err(|e| e.to_string())?;
        // SAFETY: the receive is pending, so `dst` is live device memory with
        // offset + src.len() <= dst.len() (checked by the protocol); `src` outlives the
        // synchronize below.
        unsafe {
            rankwire_gpu::memcpy_htod_async(
                dst.as_mut_ptr() as u64 + offset as u64,
                src.as_ptr(),
                src.len(),
                stream,
            )
        }
        .map_err(|e| e.to_string())?;
        stream.synchronize().map_err(|e| e.to_string())
    }

    /// Copy the whole device buffer `src` into a new host vector (complete on return:
    /// `cuMemcpyDtoHAsync`, then `cuStreamSynchronize`).
    ///
    /// # Errors
    /// The CUDA error, as text.
    pub(crate) fn copy_from_device(&mut self, src: RawBuf) -> Result<Vec<u8>, String> {
        let stream = Stream::runtime(device_of(&src)?).map_err(|e| e.to_string())?;
        let mut v = vec![0u8; src.len()];
        // SAFETY: the send is pending, so `src` is live device memory; `v` outlives the
        // synchronize below.
        unsafe {
            rankwire_gpu::memcpy_dtoh_async(
                v.as_mut_ptr(),
                src.as_mut_ptr() as u64,
                v.len(),
                stream,
            )
        }
        .map_err(|e| e.to_string())?;
        stream.synchronize().map_err(|e| e.to_string())?;
        Ok(v)
    }
}
