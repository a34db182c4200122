//! The engine's side of the protocol's memory actions ([`MemAction`]): staging device
//! buffers through host memory, offering device buffers by CUDA IPC and host buffers by
//! RDMA registration, and releasing those offers. The protocol (sans-IO) only asks;
//! [`MemActions::run`], called from the engine's progress round, executes and answers.
//!
//! # Semantics
//! - Copies are synchronous: each runs on the runtime's non-blocking stream of the
//!   buffer's device ([`rankwire_gpu::Stream::runtime`]) and is synchronized before it
//!   is answered, so a completed receive's data is visible to work on any stream of
//!   that device, and a send buffer is no longer read once its frame is queued.
//! - An offer of device memory exports a CUDA IPC handle of the allocation; memory
//!   legacy IPC cannot export (stream-ordered pool memory, VMM memory) is copied on
//!   the device into a runtime-owned `cuMemAlloc` staging buffer that is offered
//!   instead and goes back to the cache on [`MemAction::Release`].
//! - An offer of host memory registers it through the engine's RDMA transport
//!   ([`Transport::register`], backed by its registration cache), held per send
//!   request until the release ([`Transport::deregister`]).

use rankwire_transports::{LocalBuf, MemoryKind, Registration, Transport};
use rustc_hash::FxHashMap as HashMap;

use crate::protocol::{MemAction, OfferKind, Protocol, RawBuf, ReqId};
use rankwire_gpu::Stream;

/// Executes the protocol's memory actions: device staging when a GPU is usable, RDMA
/// registration when an RDMA transport serves some peers.
#[derive(Default)]
pub(crate) struct MemActions {
    gpu: Option<GpuStaging>,
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
        let mut any = false;
        while let Some(a) = proto.pop_action() {
            any = true;
            match a {
                MemAction::StageOut { sreq, src } => {
                    let r = match self.gpu.as_mut() {
                        Some(g) => g.copy_from_device(src),
                        None => Err(NO_GPU.into()),
                    };
                    proto.staged_out(sreq, r);
                }
                MemAction::StageIn { rreq, dst, data } => {
                    let r = match self.gpu.as_mut() {
                        Some(g) => g.copy_to_device(dst, 0, &data),
                        None => Err(NO_GPU.into()),
                    };
                    proto.staged_in(rreq, r);
                }
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

/// The transport-level view of a protocol buffer.
fn local_buf(buf: RawBuf) -> LocalBuf {
    LocalBuf {
        addr: buf.as_mut_ptr() as u64,
        len_bytes: buf.len(),
        kind: buf.kind(),
    }
}

/// Stages device buffers with synchronous copies on the runtime stream.
pub(crate) struct GpuStaging;

impl GpuStaging {
    pub(crate) fn new() -> Self {
        GpuStaging
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
