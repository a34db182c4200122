//! Streams, events and asynchronous copies.
//!
//! The runtime does its GPU copies on its own non-blocking stream per device
//! ([`Stream::runtime`], created on first use and kept for the process lifetime), so
//! they never serialize with the application's legacy default stream. Completion is
//! observed with an [`Event`] recorded after the copy and polled from the progress
//! engine ([`Event::query`]), never by blocking the stream.
//!
//! Copies between two devices ([`memcpy_peer_async`]) go direct when the devices can
//! access each other (`cuDeviceCanAccessPeer`; peer access is enabled once per pair)
//! and otherwise through pinned host memory ([`memcpy_staged`]), so a machine without
//! peer access falls back instead of failing (B012).
//!
//! Every copy of zero bytes returns at once without a driver call (B002).
//!
//! Standard: CUDA driver API `cuMemcpy*Async`, `cuMemcpyPeerAsync`,
//! `cuDeviceCanAccessPeer`, `cuCtxEnablePeerAccess`, `cuStreamCreate`, `cuEvent*`.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::buffer::PinnedBuffer;
use crate::error::GpuError;
use crate::release::{Release, release};
use crate::result::{self, RawEvent, RawGraph, RawStream};

/// A non-blocking CUDA stream of one device (`CU_STREAM_NON_BLOCKING`).
#[derive(Debug)]
pub struct Stream {
    raw: RawStream,
    device: i32,
    owned: bool,
    /// What keeps a borrowed stream alive ([`Stream::from_cudarc`]'s `CudaStream`).
    _keep: Option<KeepAlive>,
    /// The driver's unique id of the stream, read at first use ([`Stream::id`]).
    id: std::sync::OnceLock<u64>,
}

/// An owner held only so that a borrowed stream outlives the [`Stream`] made from it.
struct KeepAlive(#[allow(dead_code)] std::sync::Arc<dyn std::any::Any + Send + Sync>);

impl std::fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeepAlive")
    }
}

// SAFETY: a CUstream is a process-wide handle; the driver allows enqueueing work and
// synchronizing on it from any thread.
unsafe impl Send for Stream {}
// SAFETY: as above; every method takes &self and only passes the handle to the driver.
unsafe impl Sync for Stream {}

// The runtime's stream per device. Leaked on purpose: it lives as long as the process,
// like the primary context it belongs to. Mirrors process-global state, hence a static.
static RUNTIME_STREAMS: Mutex<Vec<(i32, &'static Stream)>> = Mutex::new(Vec::new());

/// Waits until the work queued on `device`'s *legacy default stream* has finished: the
/// NULL stream of the driver and runtime APIs (`cudaMemcpy`, `cudaMemset`, kernels
/// launched without a stream, unless the program was built with per-thread default
/// streams). The MPI standard ABI calls it before it reads or writes a user's device
/// buffer, because a C program expects `cudaMemcpy(dev, host, ...)` followed by
/// `MPI_Send(dev, ...)` to send the new data, and a pageable host-to-device
/// `cudaMemcpy` may return before its copy has reached device memory (CUDA Runtime API,
/// "API synchronization behavior"), while the runtime's own streams are non-blocking.
///
/// # Errors
/// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], or [`GpuError::Driver`]
/// (`cuDevicePrimaryCtxRetain`, `cuCtxSetCurrent`, `cuStreamSynchronize`).
pub fn synchronize_legacy_stream(device: i32) -> Result<(), GpuError> {
    result::bind_device(device)?;
    // SAFETY: the NULL stream is the legacy default stream of the current context. A
    // query first: an idle stream (the common case) costs no wait.
    unsafe {
        if result::stream_query(std::ptr::null_mut())? {
            return Ok(());
        }
        result::stream_synchronize(std::ptr::null_mut())
    }
}

impl Stream {
    /// A new non-blocking stream on `device`, destroyed on drop.
    ///
    /// # Errors
    /// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], or [`GpuError::Driver`]
    /// (`cuDevicePrimaryCtxRetain`, `cuCtxSetCurrent`, `cuStreamCreate`).
    pub fn new(device: i32) -> Result<Stream, GpuError> {
        result::bind_device(device)?;
        let raw = result::stream_create()?;
        Ok(Stream {
            raw,
            device,
            owned: true,
            _keep: None,
            id: std::sync::OnceLock::new(),
        })
    }

    /// The runtime's own stream on `device`, created on first use.
    ///
    /// # Errors
    /// As [`Stream::new`] on first use.
    pub fn runtime(device: i32) -> Result<&'static Stream, GpuError> {
        // A poisoned lock only means a panic elsewhere; the list is append-only.
        let mut streams = RUNTIME_STREAMS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, s)) = streams.iter().find(|(d, _)| *d == device) {
            return Ok(s);
        }
        let mut s = Stream::new(device)?;
        s.owned = false;
        let s: &'static Stream = Box::leak(Box::new(s));
        streams.push((device, s));
        Ok(s)
    }

    /// A stream created elsewhere (a cudarc `CudaStream`'s `cu_stream()`, a PyTorch or
    /// CuPy stream's handle, or a null pointer for the legacy default stream) of the
    /// primary context of `device`. Not destroyed on drop.
    ///
    /// # Safety
    /// `raw` must be a stream of the primary context of `device` (the context cudarc's
    /// `CudaContext`, the CUDA runtime and rankwire share) and must stay live as long as
    /// the returned value and any work enqueued through it.
    pub unsafe fn from_raw(raw: *mut std::ffi::c_void, device: i32) -> Stream {
        Stream {
            raw: raw.cast(),
            device,
            owned: false,
            _keep: None,
            id: std::sync::OnceLock::new(),
        }
    }

    /// The stream of a cudarc `CudaStream` (safe form of [`Stream::from_raw`]): the
    /// returned value holds a reference to `stream`, so the stream lives at least as long
    /// as the returned `Stream` (keep that, or the `CudaStream`, until the work enqueued
    /// on it has completed: rankwire's stream-ordered calls keep only the raw handle);
    /// the device is the stream's context's ordinal.
    ///
    /// # Errors
    /// [`GpuError::Unsupported`] ([`crate::Unsupported::NonPrimaryContext`]) when the
    /// stream's context is not its device's primary context (rankwire's device work
    /// runs in the primary context, as the CUDA runtime's and cudarc's
    /// `CudaContext::new` do).
    #[cfg(feature = "cuda")]
    pub fn from_cudarc(
        stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    ) -> Result<Stream, GpuError> {
        let ctx = stream.context();
        if !ctx.is_primary() {
            return Err(crate::Unsupported::NonPrimaryContext.into());
        }
        Ok(Stream {
            raw: stream.cu_stream().cast(),
            device: ctx.ordinal() as i32,
            owned: false,
            _keep: Some(KeepAlive(stream.clone())),
            id: std::sync::OnceLock::new(),
        })
    }

    /// The raw `CUstream` handle.
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        self.raw.cast()
    }

    /// Make work enqueued on this stream after this call wait for `event`
    /// (`cuStreamWaitEvent`), without blocking the host.
    ///
    /// # Errors
    /// [`GpuError::Driver`].
    pub fn wait_event(&self, event: &Event) -> Result<(), GpuError> {
        self.bind()?;
        // SAFETY: both handles are live (the event is borrowed, the stream owned or
        // guaranteed live by from_raw's contract).
        unsafe { result::stream_wait_event(self.raw, event.raw) }
    }

    /// Make work enqueued on this stream after this call wait until the 32-bit word at
    /// device address `addr` is at least `value` (`cuStreamWaitValue32`, `GEQ`:
    /// `(int32)(*addr - value) >= 0`, so a counter may wrap), without blocking the host.
    ///
    /// # Safety
    /// `addr` must be 4 live bytes the device can read (device memory, or a
    /// [`MappedFlags`] slot's [`MappedFlags::device_addr`]) until the wait has passed,
    /// and something must eventually write a value that passes it, or the stream
    /// never proceeds.
    ///
    /// # Errors
    /// [`GpuError::Driver`] (e.g. a device without stream memory operations).
    pub unsafe fn wait_value_geq(&self, addr: u64, value: u32) -> Result<(), GpuError> {
        self.bind()?;
        // SAFETY: the stream is live; `addr` is the caller's contract.
        unsafe { result::stream_wait_value32_geq(self.raw, addr, value) }
    }

    /// Whether work enqueued on this stream now would be captured into a CUDA graph
    /// (`cuStreamIsCapturing`).
    ///
    /// # Errors
    /// [`GpuError::Driver`].
    pub fn is_capturing(&self) -> Result<bool, GpuError> {
        self.bind()?;
        // SAFETY: the stream is live.
        unsafe { result::stream_is_capturing(self.raw) }
    }

    /// Start capturing the work enqueued on this stream into a CUDA graph
    /// (`cuStreamBeginCapture`, relaxed mode); nothing runs until the graph is launched.
    ///
    /// # Errors
    /// [`GpuError::Driver`].
    pub fn begin_capture(&self) -> Result<(), GpuError> {
        self.bind()?;
        // SAFETY: the stream is live.
        unsafe { result::stream_begin_capture(self.raw) }
    }

    /// End the capture begun by [`Stream::begin_capture`] and instantiate the graph.
    ///
    /// # Errors
    /// [`GpuError::Driver`] (`cuStreamEndCapture`: e.g. an operation that cannot be
    /// captured was enqueued; `cuGraphInstantiateWithFlags`).
    pub fn end_capture(&self) -> Result<Graph, GpuError> {
        self.bind()?;
        // SAFETY: the stream is live and capturing (or the driver says it is not).
        let raw = unsafe { result::stream_end_capture(self.raw) }?;
        Ok(Graph { raw })
    }

    /// The device ordinal this stream belongs to.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// Block until all work queued on the stream has completed (`cuStreamSynchronize`).
    ///
    /// # Errors
    /// [`GpuError::Driver`], including errors of earlier asynchronous work.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        // SAFETY: self.raw is a live stream (destroyed only in Drop).
        unsafe { result::stream_synchronize(self.raw) }
    }

    /// Whether all queued work has completed (`cuStreamQuery`), without blocking.
    ///
    /// # Errors
    /// [`GpuError::Driver`], including errors of earlier asynchronous work.
    pub fn is_idle(&self) -> Result<bool, GpuError> {
        // SAFETY: self.raw is a live stream.
        unsafe { result::stream_query(self.raw) }
    }

    pub(crate) fn raw(&self) -> RawStream {
        self.raw
    }

    /// An identity of the stream that the driver never gives to another stream of the
    /// context (`cuStreamGetId`, CUDA 12.0), unlike the handle ([`Stream::as_raw`]),
    /// which a stream created after this one was destroyed may reuse. Asked with the
    /// stream's device bound, and kept once known. `None` where the driver cannot say
    /// (no driver, a driver before CUDA 12.0, or, per CCCL's documentation, a stream
    /// being captured into a graph): callers then must not take two streams for one.
    pub fn id(&self) -> Option<u64> {
        if let Some(v) = self.id.get() {
            return Some(*v);
        }
        self.bind().ok()?;
        // SAFETY: self.raw is a live stream (or a default stream of the bound context).
        let v = unsafe { result::stream_id(self.raw) }.ok()?;
        Some(*self.id.get_or_init(|| v))
    }

    // Bind the stream's device so calls that use the current context agree with it.
    pub(crate) fn bind(&self) -> Result<(), GpuError> {
        result::bind_device(self.device)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: the stream is live and owned; it is destroyed exactly once here.
            // Drop cannot report an error; the driver frees the stream at exit anyway.
            let _destroyed = unsafe { result::stream_destroy(self.raw) };
        }
    }
}

/// An instantiated CUDA graph (`CUgraphExec`) captured from a stream; destroyed on
/// drop (drop it only when no launch of it is pending).
#[derive(Debug)]
pub struct Graph {
    raw: RawGraph,
}

// SAFETY: graph handles are process-wide; launching from any thread is allowed.
unsafe impl Send for Graph {}

impl Graph {
    /// Enqueue one run of the graph on `stream` (`cuGraphLaunch`).
    ///
    /// # Errors
    /// [`GpuError::Driver`].
    pub fn launch(&self, stream: &Stream) -> Result<(), GpuError> {
        stream.bind()?;
        // SAFETY: the graph is live (destroyed only in Drop); the stream is live.
        unsafe { result::graph_launch(self.raw, stream.raw) }
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: destroyed once; the owner waits for its launches before dropping.
        unsafe { result::graph_destroy(self.raw) }
    }
}

/// A CUDA event, for completion polling and timing.
#[derive(Debug)]
pub struct Event {
    raw: RawEvent,
    device: i32,
}

// SAFETY: a CUevent is a process-wide handle usable from any thread.
unsafe impl Send for Event {}
// SAFETY: as above; methods only pass the handle to the driver.
unsafe impl Sync for Event {}

impl Event {
    /// An event on `device` for completion polling (`CU_EVENT_DISABLE_TIMING`).
    ///
    /// # Errors
    /// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`] (`cuEventCreate`).
    pub fn new(device: i32) -> Result<Event, GpuError> {
        Self::create(device, false)
    }

    /// An event on `device` that can be timed with [`Event::elapsed_ms`].
    ///
    /// # Errors
    /// As [`Event::new`].
    pub fn new_timing(device: i32) -> Result<Event, GpuError> {
        Self::create(device, true)
    }

    fn create(device: i32, timing: bool) -> Result<Event, GpuError> {
        result::bind_device(device)?;
        let raw = result::event_create(timing)?;
        Ok(Event { raw, device })
    }

    /// Record the event after the work queued so far on `stream` (`cuEventRecord`).
    ///
    /// # Errors
    /// [`GpuError::Driver`]; the stream must belong to the event's device.
    pub fn record(&self, stream: &Stream) -> Result<(), GpuError> {
        stream.bind()?;
        // SAFETY: both handles are live (destroyed only in their Drop).
        unsafe { result::event_record(self.raw, stream.raw()) }
    }

    /// Whether the recorded work has completed (`cuEventQuery`), without blocking.
    ///
    /// # Errors
    /// [`GpuError::Driver`], including errors of the recorded work.
    pub fn query(&self) -> Result<bool, GpuError> {
        // SAFETY: self.raw is live.
        unsafe { result::event_query(self.raw) }
    }

    /// Block until the recorded work has completed (`cuEventSynchronize`).
    ///
    /// # Errors
    /// [`GpuError::Driver`], including errors of the recorded work.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        // SAFETY: self.raw is live.
        unsafe { result::event_synchronize(self.raw) }
    }

    /// Milliseconds between `start` and this event (`cuEventElapsedTime_v2`); both must
    /// be timing events that have completed.
    ///
    /// # Errors
    /// [`GpuError::Driver`] (`CUDA_ERROR_INVALID_HANDLE` for non-timing events,
    /// `CUDA_ERROR_NOT_READY` if one has not completed).
    pub fn elapsed_ms(&self, start: &Event) -> Result<f32, GpuError> {
        // SAFETY: both handles are live.
        unsafe { result::event_elapsed_ms(start.raw, self.raw) }
    }

    /// The device ordinal this event belongs to.
    pub fn device(&self) -> i32 {
        self.device
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the event is live and destroyed exactly once here. Drop cannot report
        // an error; the driver frees events at exit anyway.
        let _destroyed = unsafe { result::event_destroy(self.raw) };
    }
}

/// Queue a device-to-device copy of `len` bytes on `stream` (`cuMemcpyDtoDAsync_v2`).
/// Both addresses may be device or managed memory of any device visible through UVA.
///
/// # Safety
/// `[src, src + len)` and `[dst, dst + len)` must be live device-accessible memory until
/// the copy completes (synchronize the stream or an event recorded after it), and must
/// not overlap.
///
/// # Errors
/// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`].
pub unsafe fn memcpy_dtod_async(
    dst: u64,
    src: u64,
    len: usize,
    stream: &Stream,
) -> Result<(), GpuError> {
    if len == 0 {
        return Ok(());
    }
    stream.bind()?;
    // SAFETY: ranges guaranteed by the caller; the stream is live.
    unsafe { result::memcpy_dtod_async(dst, src, len, stream.raw()) }
}

/// Queue a host-to-device copy of `len` bytes on `stream` (`cuMemcpyHtoDAsync_v2`).
/// From pageable host memory the driver stages the copy; from pinned memory
/// ([`PinnedBuffer`]) it is truly asynchronous.
///
/// # Safety
/// `src` must stay readable for `len` bytes, and `[dst, dst + len)` live device memory,
/// until the copy completes.
///
/// # Errors
/// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`].
pub unsafe fn memcpy_htod_async(
    dst: u64,
    src: *const u8,
    len: usize,
    stream: &Stream,
) -> Result<(), GpuError> {
    if len == 0 {
        return Ok(());
    }
    stream.bind()?;
    // SAFETY: ranges guaranteed by the caller; the stream is live.
    unsafe { result::memcpy_htod_async(dst, src, len, stream.raw()) }
}

/// Queue a device-to-host copy of `len` bytes on `stream` (`cuMemcpyDtoHAsync_v2`).
///
/// # Safety
/// `dst` must stay writable (and otherwise untouched) for `len` bytes, and
/// `[src, src + len)` live device memory, until the copy completes.
///
/// # Errors
/// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`].
pub unsafe fn memcpy_dtoh_async(
    dst: *mut u8,
    src: u64,
    len: usize,
    stream: &Stream,
) -> Result<(), GpuError> {
    if len == 0 {
        return Ok(());
    }
    stream.bind()?;
    // SAFETY: ranges guaranteed by the caller; the stream is live.
    unsafe { result::memcpy_dtoh_async(dst, src, len, stream.raw()) }
}

/// How [`memcpy_peer_async`] moved the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyPath {
    /// Nothing to copy (zero bytes).
    Empty,
    /// Same device: one device-to-device copy, queued.
    SameDevice,
    /// Different devices with peer access: `cuMemcpyPeerAsync`, queued.
    Peer,
    /// No peer access: staged through pinned host memory; already complete.
    Staged,
}

/// Copy `len` bytes from device `src_device` to device `dst_device`.
///
/// Same device: a queued device-to-device copy. Different devices with peer access
/// both ways: peer access is enabled once per pair, then a queued `cuMemcpyPeerAsync`.
/// Otherwise: [`memcpy_staged`], which blocks until done. The returned [`CopyPath`]
/// says which happened (the caller logs it once per pair, B012).
///
/// # Safety
/// As [`memcpy_dtod_async`]; `src` must be memory of `src_device` and `dst` of
/// `dst_device`.
///
/// # Errors
/// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`].
pub unsafe fn memcpy_peer_async(
    dst: u64,
    dst_device: i32,
    src: u64,
    src_device: i32,
    len: usize,
    stream: &Stream,
) -> Result<CopyPath, GpuError> {
    if len == 0 {
        return Ok(CopyPath::Empty);
    }
    if dst_device == src_device {
        // SAFETY: forwarded caller guarantees.
        unsafe { memcpy_dtod_async(dst, src, len, stream) }?;
        return Ok(CopyPath::SameDevice);
    }
    if peer_access(dst_device, src_device)? {
        stream.bind()?;
        // SAFETY: forwarded caller guarantees; contexts are the devices' primary ones.
        unsafe { result::memcpy_peer_async(dst, dst_device, src, src_device, len, stream.raw()) }?;
        return Ok(CopyPath::Peer);
    }
    // SAFETY: forwarded caller guarantees.
    unsafe { memcpy_staged(dst, dst_device, src, src_device, len, stream) }?;
    Ok(CopyPath::Staged)
}

/// Copy `len` bytes between two device buffers through pinned host memory, in chunks,
/// device-to-host on `src_device`'s runtime stream and host-to-device on
/// `dst_device`'s, with two staging buffers so the two directions overlap.
///
/// Blocking: first waits for the work already queued on `stream` (so data written there
/// is copied), returns when the data is in place. Works between any two devices (or one
/// device with itself), with or without peer access.
///
/// # Safety
/// `[src, src + len)` must be live memory of `src_device` and `[dst, dst + len)` of
/// `dst_device` for the duration of the call; they must not overlap.
///
/// # Errors
/// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`].
pub unsafe fn memcpy_staged(
    dst: u64,
    dst_device: i32,
    src: u64,
    src_device: i32,
    len: usize,
    stream: &Stream,
) -> Result<(), GpuError> {
    if len == 0 {
        return Ok(());
    }
    stream.synchronize()?;
    let src_stream = Stream::runtime(src_device)?;
    let dst_stream = Stream::runtime(dst_device)?;
    let mut staging = take_staging()?;
    let res = (|| -> Result<(), GpuError> {
        let done = [Event::new(dst_device)?, Event::new(dst_device)?];
        let mut used = [false, false];
        let mut off = 0usize;
        let mut i = 0usize;
        while off < len {
            let n = STAGING_CHUNK.min(len - off);
            let b = i % 2;
            if used[b] {
                // The host-to-device copy that last read this buffer must be done.
                done[b].synchronize()?;
            }
            let buf = &mut staging[b];
            // SAFETY: buf holds STAGING_CHUNK >= n bytes, is not read by any pending
            // copy (checked above), and stays alive until the final synchronize below;
            // the device ranges are guaranteed by the caller.
            unsafe {
                memcpy_dtoh_async(buf.as_mut_ptr(), src + off as u64, n, src_stream)?;
            }
            src_stream.synchronize()?;
            // SAFETY: as above; the staging data is complete (src stream synchronized).
            unsafe {
                memcpy_htod_async(dst + off as u64, buf.as_ptr(), n, dst_stream)?;
            }
            done[b].record(dst_stream)?;
            used[b] = true;
            off += n;
            i += 1;
        }
        dst_stream.synchronize()
    })();
    match res {
        Ok(()) => {
            give_back_staging(staging);
            Ok(())
        }
        Err(e) => {
            // A copy may still be queued on the staging buffers: wait for both streams
            // before the buffers are freed. Their own errors add nothing to `e`, which
            // is returned.
            let _src_idle = src_stream.synchronize();
            let _dst_idle = dst_stream.synchronize();
            drop(staging);
            Err(e)
        }
    }
}

/// Whether `device` can access memory of `peer` directly (`cuDeviceCanAccessPeer`).
///
/// # Errors
/// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`].
pub fn can_access_peer(device: i32, peer: i32) -> Result<bool, GpuError> {
    result::device_can_access_peer(device, peer)
}

// Peer-access decisions per ordered device pair: Some(true) once access was enabled both
// ways, Some(false) when not possible. Decided once per pair (B012: no per-message
// queries or log spam). Mirrors process-global driver state (peer access is a property
// of the two primary contexts), hence a module-level static.
static PEER_TABLE: Mutex<Option<HashMap<(i32, i32), bool>>> = Mutex::new(None);

// Whether direct copies between the two devices work, enabling access once per pair.
fn peer_access(a: i32, b: i32) -> Result<bool, GpuError> {
    let key = (a.min(b), a.max(b));
    let mut table = PEER_TABLE.lock().unwrap_or_else(|p| p.into_inner());
    let table = table.get_or_insert_with(HashMap::new);
    if let Some(&ok) = table.get(&key) {
        return Ok(ok);
    }
    let ok = can_access_peer(a, b)? && can_access_peer(b, a)?;
    if ok {
        result::enable_peer_access(a, b)?;
        result::enable_peer_access(b, a)?;
    }
    table.insert(key, ok);
    Ok(ok)
}

const STAGING_CHUNK: usize = 4 << 20;

// Pinned staging buffers, reused across staged copies (cuMemHostAlloc costs ms).
static STAGING: Mutex<Vec<PinnedBuffer>> = Mutex::new(Vec::new());

fn take_staging() -> Result<[PinnedBuffer; 2], GpuError> {
    let mut pool = STAGING.lock().unwrap_or_else(|p| p.into_inner());
    let a = match pool.pop() {
        Some(b) => b,
        None => PinnedBuffer::new(STAGING_CHUNK)?,
    };
    let b = match pool.pop() {
        Some(b) => b,
        None => PinnedBuffer::new(STAGING_CHUNK)?,
    };
    Ok([a, b])
}

fn give_back_staging(bufs: [PinnedBuffer; 2]) {
    let mut pool = STAGING.lock().unwrap_or_else(|p| p.into_inner());
    pool.extend(bufs);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu_or_skip(what: &str) -> bool {
        match crate::init() {
            Ok(()) => true,
            Err(e) if e.is_no_gpu() => {
                println!("skipped: {what}: {e}");
                false
            }
            Err(e) => panic!("{what}: CUDA init failed: {e}"),
        }
    }

    #[test]
    fn zero_length_copies_touch_nothing() {
        // Without a stream we cannot call them; with a GPU check the zero-length path.
        if !gpu_or_skip("zero-length copies") {
            return;
        }
        let s = Stream::runtime(0).unwrap();
        // SAFETY: zero-length copies never dereference their (dangling) pointers.
        unsafe {
            memcpy_dtod_async(0, 0, 0, s).unwrap();
            memcpy_htod_async(0, std::ptr::null(), 0, s).unwrap();
            memcpy_dtoh_async(std::ptr::null_mut(), 0, 0, s).unwrap();
            assert_eq!(
                memcpy_peer_async(0, 0, 0, 1, 0, s).unwrap(),
                CopyPath::Empty
            );
            memcpy_staged(0, 0, 0, 0, 0, s).unwrap();
        }
    }

    #[test]
    fn stream_and_event_without_gpu_report_why() {
        match Stream::new(0) {
            Ok(s) => {
                let e = Event::new(0).unwrap();
                e.record(&s).unwrap();
                e.synchronize().unwrap();
                assert!(e.query().unwrap());
                assert!(s.is_idle().unwrap());
            }
            Err(e) if e.is_no_gpu() => println!("skipped: stream/event: {e}"),
            Err(e) => panic!("stream: {e}"),
        }
    }
}

/// An array of 32-bit words in pinned host memory mapped into the device address space
/// (`cuMemHostAlloc` with `CU_MEMHOSTALLOC_DEVICEMAP`): the host writes a word and a
/// stream waiting on it ([`Stream::wait_value_geq`]) proceeds. Zeroed; freed on drop,
/// which must come after every wait on it has passed.
#[derive(Debug)]
pub struct MappedFlags {
    host: *mut u32,
    device: u64,
    len: usize,
}

// SAFETY: the words are only accessed through atomic volatile-like stores and loads
// (`set`, `get`), which are sound from any thread.
unsafe impl Send for MappedFlags {}
// SAFETY: as above.
unsafe impl Sync for MappedFlags {}

impl MappedFlags {
    /// `len` zeroed words (`len` ≥ 1). Makes device 0's primary context current if the
    /// thread has none.
    ///
    /// # Errors
    /// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`]
    /// (`cuMemHostAlloc`, `cuMemHostGetDevicePointer`).
    pub fn new(len: usize) -> Result<MappedFlags, GpuError> {
        result::ensure_init()?;
        result::ensure_some_context()?;
        let len = len.max(1);
        let p = result::mem_host_alloc(len * 4)?;
        // SAFETY: a fresh mapped allocation of len * 4 bytes.
        let device = match unsafe { result::mem_host_device_pointer(p) } {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: allocated above, freed once.
                let _ = unsafe { release(Release::PinnedHost(p as usize)) };
                return Err(e);
            }
        };
        // SAFETY: p is valid for len * 4 writable bytes.
        unsafe { std::ptr::write_bytes(p, 0, len * 4) };
        Ok(MappedFlags {
            host: p.cast(),
            device,
            len,
        })
    }

    /// Number of words.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (there is at least one word).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The device address of word `i` (panics if `i >= len`).
    pub fn device_addr(&self, i: usize) -> u64 {
        assert!(i < self.len, "flag {i} of {}", self.len);
        self.device + 4 * i as u64
    }

    fn word(&self, i: usize) -> &std::sync::atomic::AtomicU32 {
        assert!(i < self.len, "flag {i} of {}", self.len);
        // SAFETY: `host` is valid, 4-aligned memory of len words for self's lifetime;
        // AtomicU32 has u32's layout.
        unsafe { &*self.host.add(i).cast::<std::sync::atomic::AtomicU32>() }
    }

    /// Write `v` to word `i` (release order: what the host wrote before is visible to
    /// whoever sees the value).
    pub fn set(&self, i: usize, v: u32) {
        self.word(i).store(v, std::sync::atomic::Ordering::Release);
    }

    /// Read word `i`.
    pub fn get(&self, i: usize) -> u32 {
        self.word(i).load(std::sync::atomic::Ordering::Acquire)
    }
}

impl Drop for MappedFlags {
    fn drop(&mut self) {
        // SAFETY: allocated by mem_host_alloc in new, freed once here; on the release
        // thread once stream-ordered operations are in use (crate::release).
        let _ = unsafe { release(Release::PinnedHost(self.host as usize)) };
    }
}
