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
//! - An offer of host memory registers it through the RDMA transport's registration
//!   cache ([`rankwire_transports::rdma::Registry`]), held until the release.

use rankwire_transports::MemoryKind;
use rankwire_transports::rdma::{Held, Registry};
use rustc_hash::FxHashMap as HashMap;

use crate::protocol::{MemAction, OfferKind, Protocol, RawBuf, ReqId};
use crate::wire::RemoteMem;
use rankwire_gpu::Stream;

/// Executes the protocol's memory actions: device staging when a GPU is usable, RDMA
/// registration when an RDMA transport serves some peers.
#[derive(Default)]
pub(crate) struct MemActions {
    gpu: Option<GpuStaging>,
    rdma: Option<RdmaOffer>,
}

impl MemActions {
    /// Stage and offer device buffers with `g` (also tells `proto` to accept them).
    pub(crate) fn set_gpu(&mut self, g: GpuStaging, proto: &mut Protocol) {
        self.gpu = Some(g);
        proto.enable_device();
    }

    /// Register host send buffers to `peers` for RDMA READ with `r`.
    pub(crate) fn set_rdma(&mut self, r: RdmaOffer, peers: &[u32], proto: &mut Protocol) {
        self.rdma = Some(r);
        proto.offer_rdma(peers);
    }

    /// Execute every action `proto` has queued and feed each answer back. Returns
    /// whether any ran (answers may have queued frames or completed requests).
    pub(crate) fn run(&mut self, proto: &mut Protocol) -> bool {
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
                        OfferKind::CudaIpc => self.gpu.as_mut().and_then(|g| g.offer(sreq, buf)),
                        // The one registration call: with the Transport trait's
                        // `register(LocalBuf)` this becomes `rdma.register(..)`.
                        OfferKind::Rdma => self.rdma.as_mut().and_then(|n| n.offer(sreq, buf)),
                    };
                    proto.offered(sreq, mem);
                }
                MemAction::Release { sreq, to } => match to {
                    OfferKind::CudaIpc => {
                        if let Some(g) = self.gpu.as_mut() {
                            g.done_with(sreq);
                        }
                    }
                    OfferKind::Rdma => {
                        if let Some(n) = self.rdma.as_mut() {
                            n.release(sreq);
                        }
                    }
                },
            }
        }
        any
    }
}

const NO_GPU: &str = "no GPU support in this process";

/// Stages device buffers with synchronous copies on the runtime stream.
pub(crate) struct GpuStaging {
    /// (send request, staging buffer address) of sends whose pool memory was copied
    /// into an IPC-capable staging buffer.
    staged: Vec<(ReqId, u64)>,
    /// Offer memory legacy IPC cannot export through a staging buffer
    /// (`RANKWIRE_GPU_IPC_STAGING`, default on).
    ipc_staging: bool,
}

impl GpuStaging {
    pub(crate) fn new() -> Self {
        GpuStaging {
            staged: Vec::new(),
            ipc_staging: crate::bootstrap::node::env_switch("RANKWIRE_GPU_IPC_STAGING")
                != Some(false),
        }
    }

    /// Copy `buf` (device memory legacy IPC cannot export) into a cached `cuMemAlloc`
    /// buffer and export that; `None` if any step fails (the caller stages via host).
    fn offer_staged(&mut self, sreq: ReqId, buf: RawBuf) -> Option<RemoteMem> {
        let device = device_of(&buf).ok()?;
        let stage = crate::coll::device::dev_tmp_take(device, buf.len()).ok()?;
        let stream = Stream::runtime(device).ok();
        let copied = stream.is_some_and(|stream| {
            // SAFETY: the send is pending, so `buf` is live device memory of len bytes;
            // `stage` is a cached allocation of at least len bytes, lent to this send.
            unsafe {
                rankwire_gpu::memcpy_dtod_async(stage, buf.as_mut_ptr() as u64, buf.len(), stream)
            }
            .and_then(|()| stream.synchronize())
            .is_ok()
        });
        let export = if copied {
            rankwire_gpu::ipc_export(stage, buf.len()).ok()
        } else {
            None
        };
        let Some(e) = export else {
            crate::coll::device::dev_tmp_give(stage);
            return None;
        };
        tracing::debug!(
            "device buffer of {} bytes is not IPC-capable; offered through a staging buffer",
            buf.len()
        );
        self.staged.push((sreq, stage));
        Some(crate::gpu_path::ipc_remote(&e))
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

    /// A descriptor a same-node peer can use to pull `buf`, the buffer of send request
    /// `sreq`, directly (CUDA IPC, `cuIpcGetMemHandle`; memory legacy IPC cannot export
    /// is offered through a staging copy), or `None` when it cannot be offered.
    pub(crate) fn offer(&mut self, sreq: ReqId, buf: RawBuf) -> Option<RemoteMem> {
        match rankwire_gpu::ipc_export(buf.as_mut_ptr() as u64, buf.len()) {
            Ok(e) => Some(crate::gpu_path::ipc_remote(&e)),
            Err(rankwire_gpu::GpuError::Unsupported(rankwire_gpu::Unsupported::NotIpcCapable))
                if self.ipc_staging =>
            {
                self.offer_staged(sreq, buf)
            }
            Err(e) => {
                tracing::debug!("device buffer not offered by CUDA IPC ({e}); staging it");
                None
            }
        }
    }

    /// Send request `sreq` has ended: its staging buffer (if any) goes back to the cache.
    pub(crate) fn done_with(&mut self, sreq: ReqId) {
        if let Some(i) = self.staged.iter().position(|&(id, _)| id == sreq) {
            let (_, stage) = self.staged.swap_remove(i);
            crate::coll::device::dev_tmp_give(stage);
        }
    }
}

/// Registers host send buffers for RDMA pull-mode rendezvous through the RDMA
/// transport's registration cache, holding each registration until its send finishes.
pub(crate) struct RdmaOffer {
    registry: Registry,
    held: HashMap<ReqId, Held>,
}

impl RdmaOffer {
    pub(crate) fn new(registry: Registry) -> Self {
        RdmaOffer {
            registry,
            held: Default::default(),
        }
    }

    /// Register `buf` for the rendezvous send `sreq` (`ibv_reg_mr` through the cache)
    /// and describe it for the peer ([`RemoteMem::Rdma`]), or `None` if it cannot be
    /// registered (the receiver is then asked to take `Data` frames instead).
    fn offer(&mut self, sreq: ReqId, buf: RawBuf) -> Option<RemoteMem> {
        let addr = buf.as_mut_ptr() as u64;
        match self.registry.acquire_host(addr, buf.len() as u64) {
            Ok(h) => {
                let rkey = h.rkey;
                self.held.insert(sreq, h);
                Some(RemoteMem::Rdma {
                    addr,
                    len: buf.len() as u64,
                    rkey,
                })
            }
            Err(e) => {
                tracing::debug!(
                    "rdma: cannot register a send buffer ({e}); sending it as Data frames"
                );
                None
            }
        }
    }

    /// The send `sreq` finished (completed or failed): its registration may go.
    fn release(&mut self, sreq: ReqId) {
        if let Some(h) = self.held.remove(&sreq) {
            self.registry.release(h);
        }
    }
}
