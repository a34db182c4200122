//! Buffers of the collectives as host bytes.
//!
//! rankwire's host collectives move contiguous host bytes. A C buffer
//! `(pointer, count, datatype)` becomes one through [`crate::buf`] (in place when the
//! type's data is contiguous, else packed), and then:
//! - device memory (detected per call) is *staged*: an input is copied to host memory
//!   at the call, an output is received into host memory and copied to the device by
//!   [`Dst::finish`] (the collectives with a device form in rankwire skip this, see
//!   `coll_red.rs` and `coll.rs`);
//! - a typed reduction whose slice is not aligned for its element type bounces
//!   through an aligned copy ([`Src::align`], [`Dst::align`]).
//!
//! The v- and w-forms use [`Blocks`]: one block per rank at its own address, either
//! addressed in place inside the user's buffer (every block contiguous host memory)
//! or gathered into one packed temporary.

use crate::buf::{RecvBuf, SendBuf, is_device, recv_buf, send_buf};
use crate::consts::*;
use crate::error::{R, err};

/// Owned bytes aligned to 16 (every element type's alignment).
pub struct Aligned {
    v: Vec<u128>,
    len: usize,
}

impl Aligned {
    /// `len` zero bytes.
    pub fn new(len: usize) -> Aligned {
        Aligned {
            v: vec![0u128; len.div_ceil(16)],
            len,
        }
    }

    /// First byte.
    pub fn ptr(&mut self) -> *mut u8 {
        self.v.as_mut_ptr() as *mut u8
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A byte range as `'static` slices for rankwire's calls (the C caller keeps the
/// memory alive until the operation completes, MPI 4.1 §3.7.2).
#[derive(Clone, Copy, Debug)]
pub struct Raw {
    /// First byte.
    pub p: *mut u8,
    /// Length in bytes.
    pub n: usize,
}

// SAFETY: a plain address; the memory's owner guarantees its life (see the type doc).
unsafe impl Send for Raw {}
// SAFETY: as above.
unsafe impl Sync for Raw {}

impl Raw {
    /// The bytes, read-only.
    ///
    /// # Safety
    /// The range is live and not written while the slice is used.
    pub unsafe fn s(self) -> &'static [u8] {
        if self.n == 0 {
            return &[];
        }
        // SAFETY: caller's contract.
        unsafe { std::slice::from_raw_parts(self.p, self.n) }
    }

    /// The bytes, writable.
    ///
    /// # Safety
    /// The range is live and not accessed otherwise while the slice is used.
    pub unsafe fn m(self) -> &'static mut [u8] {
        if self.n == 0 {
            return &mut [];
        }
        // SAFETY: caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.p, self.n) }
    }

    /// The range as `[T]` (aligned and a whole number of elements: see `align`).
    ///
    /// # Safety
    /// As [`Raw::m`]; `p` aligned for `T`, `n` a multiple of its size.
    pub unsafe fn t<T: rankwire::Pod>(self) -> &'static mut [T] {
        let sz = std::mem::size_of::<T>().max(1);
        if self.n < sz {
            return &mut [];
        }
        // SAFETY: caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.p as *mut T, self.n / sz) }
    }
}

/// Copies `len` bytes between host memory and device memory at `dev` (`to_device`:
/// host → device), synchronously on the runtime's stream of that device.
///
/// # Safety
/// Both ranges live for `len` bytes.
///
/// # Errors
/// `MPI_ERR_OTHER` naming the CUDA failure.
pub unsafe fn dev_copy(host: *mut u8, dev: u64, len: usize, to_device: bool) -> R {
    if len == 0 {
        return Ok(());
    }
    let gpu = |e: rankwire::gpu::GpuError| {
        err(
            MPI_ERR_OTHER,
            format!(
                "gpu: staging {len} bytes of a collective's device buffer through host memory: {e}"
            ),
        )
    };
    let ordinal = match rankwire::gpu::classify_addr(dev, len).map_err(gpu)?.kind {
        rankwire::gpu::PtrKind::Device { ordinal } => ordinal,
        _ => 0,
    };
    let s = rankwire::gpu::Stream::runtime(ordinal).map_err(gpu)?;
    // SAFETY: caller's contract.
    unsafe {
        if to_device {
            rankwire::gpu::memcpy_htod_async(dev, host, len, s).map_err(gpu)?;
        } else {
            rankwire::gpu::memcpy_dtoh_async(host, dev, len, s).map_err(gpu)?;
        }
    }
    s.synchronize().map_err(gpu)
}

/// Input of a collective: host bytes.
pub struct Src {
    /// First byte.
    pub ptr: *const u8,
    /// Length in bytes.
    pub len: usize,
    _sb: Option<SendBuf>,
    _own: Option<Aligned>,
}

// SAFETY: the pointers are the C caller's buffer or owned here.
unsafe impl Send for Src {}

/// An empty input.
pub fn empty_src() -> Src {
    Src {
        ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
        len: 0,
        _sb: None,
        _own: None,
    }
}

/// `n` elements of `dt` at `ptr` as host bytes: in place for contiguous host data,
/// packed for other types, copied to the host from device memory. `copy`: always an
/// owned copy (for an input that overlaps the call's output, as with `MPI_IN_PLACE`).
///
/// # Safety
/// The `n` elements at `ptr` are readable (host or device).
///
/// # Errors
/// As [`crate::buf::send_buf`]; `MPI_ERR_OTHER` when a device copy fails.
pub unsafe fn src(ptr: *const u8, n: usize, dt: MPI_Datatype, copy: bool) -> R<Src> {
    // SAFETY: caller's contract.
    unsafe { src_on(ptr, n, dt, copy, false) }
}

/// [`src`] where `host` says the caller already found the data to be host memory
/// (one pointer classification per buffer and call).
///
/// # Safety
/// As [`src`].
///
/// # Errors
/// As [`src`].
pub unsafe fn src_on(ptr: *const u8, n: usize, dt: MPI_Datatype, copy: bool, host: bool) -> R<Src> {
    let n64 =
        i64::try_from(n).map_err(|_| err(MPI_ERR_COUNT, format!("count {n} is too large")))?;
    // SAFETY: caller's contract.
    let sb = unsafe { send_buf(ptr, n64, dt)? };
    let (p, len) = (sb.ptr, sb.len);
    // A packed copy is host memory (buf.rs stages non-contiguous device data).
    if len > 0 && !host && sb.packed.is_none() && is_device(p, len) {
        let mut a = Aligned::new(len);
        // SAFETY: `a` has `len` bytes; the device range is the caller's.
        unsafe { dev_copy(a.ptr(), p as u64, len, false)? };
        return Ok(Src {
            ptr: a.ptr(),
            len,
            _sb: None,
            _own: Some(a),
        });
    }
    let mut s = Src {
        ptr: p,
        len,
        _sb: Some(sb),
        _own: None,
    };
    if copy && s._sb.as_ref().is_some_and(|b| b.packed.is_none()) {
        s = s.owned();
    }
    Ok(s)
}

impl Src {
    /// An owned, aligned copy.
    fn owned(self) -> Src {
        let mut a = Aligned::new(self.len);
        if self.len > 0 {
            // SAFETY: both ranges hold `len` bytes.
            unsafe { std::ptr::copy_nonoverlapping(self.ptr, a.ptr(), self.len) };
        }
        Src {
            ptr: a.ptr(),
            len: self.len,
            _sb: None,
            _own: Some(a),
        }
    }

    /// The same bytes at an address aligned to `al` (copied when they are not).
    pub fn align(self, al: usize) -> Src {
        if self.len == 0 || (self.ptr as usize).is_multiple_of(al) {
            self
        } else {
            self.owned()
        }
    }

    /// The range.
    pub fn raw(&self) -> Raw {
        Raw {
            p: self.ptr as *mut u8,
            n: self.len,
        }
    }

    /// The bytes.
    ///
    /// # Safety
    /// Used while `self` lives.
    pub unsafe fn bytes(&self) -> &'static [u8] {
        // SAFETY: caller's contract.
        unsafe { self.raw().s() }
    }
}

/// Output of a collective: host bytes that [`Dst::finish`] delivers to the user's
/// buffer (unpacking a derived type, copying to the device, or from an aligned
/// bounce buffer).
pub struct Dst {
    /// First byte the collective writes.
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
    rb: Option<RecvBuf>,
    /// Where the bytes go at `finish` when `stage` is used (`rb`'s range).
    target: *mut u8,
    target_device: bool,
    stage: Option<Aligned>,
}

// SAFETY: as Src.
unsafe impl Send for Dst {}

/// An output of no bytes.
pub fn empty_dst() -> Dst {
    let p = std::ptr::NonNull::<u8>::dangling().as_ptr();
    Dst {
        ptr: p,
        len: 0,
        rb: None,
        target: p,
        target_device: false,
        stage: None,
    }
}

/// An owned output of `len` bytes that goes nowhere (the root's ignored receive of
/// an in-place scatter).
pub fn scratch_dst(len: usize) -> Dst {
    let mut a = Aligned::new(len);
    Dst {
        ptr: a.ptr(),
        len,
        rb: None,
        target: a.ptr(),
        target_device: false,
        stage: Some(a),
    }
}

/// `n` elements of `dt` at `ptr` as host bytes to receive into; `inout`: they start
/// with the buffer's current contents (in-place forms).
///
/// # Safety
/// The `n` elements at `ptr` are writable (host or device) until `finish`.
///
/// # Errors
/// As [`crate::buf::recv_buf`]; `MPI_ERR_OTHER` when a device copy fails.
pub unsafe fn dst(ptr: *mut u8, n: usize, dt: MPI_Datatype, inout: bool) -> R<Dst> {
    // SAFETY: caller's contract.
    unsafe { dst_on(ptr, n, dt, inout, false) }
}

/// [`dst`] where `host` says the caller already found the buffer to be host memory.
///
/// # Safety
/// As [`dst`].
///
/// # Errors
/// As [`dst`].
pub unsafe fn dst_on(ptr: *mut u8, n: usize, dt: MPI_Datatype, inout: bool, host: bool) -> R<Dst> {
    let n64 =
        i64::try_from(n).map_err(|_| err(MPI_ERR_COUNT, format!("count {n} is too large")))?;
    // SAFETY: caller's contract.
    let rb = unsafe { recv_buf(ptr, n64, dt)? };
    let (p, len) = (rb.ptr, rb.len);
    // A non-contiguous type receives into a host temporary (buf.rs).
    let direct = !host && len > 0 && crate::datatype::for_comm(dt)?.contiguous_span(n).is_some();
    let device = direct && is_device(p, len);
    let mut d = Dst {
        ptr: p,
        len,
        rb: Some(rb),
        target: p,
        target_device: device,
        stage: None,
    };
    if device {
        let mut a = Aligned::new(len);
        d.ptr = a.ptr();
        d.stage = Some(a);
    }
    if inout && len > 0 {
        // SAFETY: caller's contract; `src` reads the same elements.
        let s = unsafe { src_on(ptr, n, dt, false, !device)? };
        if !std::ptr::eq(s.ptr, d.ptr) {
            // SAFETY: both hold `len` bytes (the packed size of the elements).
            unsafe { std::ptr::copy(s.ptr, d.ptr, len.min(s.len)) };
        }
    }
    Ok(d)
}

impl Dst {
    /// The range the collective writes.
    pub fn raw(&self) -> Raw {
        Raw {
            p: self.ptr,
            n: self.len,
        }
    }

    /// The bytes.
    ///
    /// # Safety
    /// Used while `self` lives, not otherwise accessed.
    pub unsafe fn bytes_mut(&mut self) -> &'static mut [u8] {
        // SAFETY: caller's contract.
        unsafe { self.raw().m() }
    }

    /// The same output at an address aligned to `al` (an aligned bounce buffer,
    /// holding the current contents, when it is not).
    pub fn align(mut self, al: usize) -> Dst {
        if self.len == 0 || (self.ptr as usize).is_multiple_of(al) {
            return self;
        }
        let mut a = Aligned::new(self.len);
        // SAFETY: both hold `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, a.ptr(), self.len) };
        self.ptr = a.ptr();
        self.stage = Some(a);
        self
    }

    /// Delivers the received bytes to the user's buffer.
    ///
    /// # Errors
    /// `MPI_ERR_OTHER` when a device copy fails.
    pub fn finish(mut self) -> R {
        if let Some(mut a) = self.stage.take()
            && self.target != a.ptr()
            && !a.is_empty()
        {
            if self.target_device {
                // SAFETY: the target is the caller's device range of `len` bytes.
                unsafe { dev_copy(a.ptr(), self.target as u64, a.len(), true)? };
            } else {
                // SAFETY: both hold `len` bytes.
                unsafe { std::ptr::copy_nonoverlapping(a.ptr(), self.target, a.len()) };
            }
        }
        match self.rb.take() {
            Some(rb) => {
                let n = rb.len;
                rb.finish(n)
            }
            None => Ok(()),
        }
    }
}

/// One block of a v- or w-form buffer: the address of its first element, its count
/// and datatype.
pub type Block = (*mut u8, usize, MPI_Datatype);

/// The blocks of a v- or w-form buffer as one host byte range with per-rank byte
/// counts and displacements (what rankwire's `*v` collectives take with `u8`
/// elements).
pub struct Blocks {
    /// First byte of the range.
    pub ptr: *mut u8,
    /// Length of the range in bytes.
    pub len: usize,
    /// Bytes of each block.
    pub counts: Vec<usize>,
    /// Offset of each block from `ptr`, bytes.
    pub displs: Vec<usize>,
    /// Packed form: the temporary and the user's blocks to unpack into.
    packed: Option<(Aligned, Vec<Block>)>,
}

// SAFETY: as Src.
unsafe impl Send for Blocks {}

/// Whether every block is a contiguous run of host memory; then its start and length.
fn direct_runs(blocks: &[Block]) -> R<Option<Vec<(isize, usize)>>> {
    let mut runs = Vec::with_capacity(blocks.len());
    for &(p, n, dt) in blocks {
        let t = crate::datatype::for_comm(dt)?;
        let Some((off, len)) = t.contiguous_span(n) else {
            return Ok(None);
        };
        let start = (p as isize).wrapping_add(off);
        if len > 0 && is_device(start as *const u8, len) {
            return Ok(None);
        }
        runs.push((start, len));
    }
    Ok(Some(runs))
}

fn direct(runs: Vec<(isize, usize)>) -> Blocks {
    let lo = runs
        .iter()
        .filter(|r| r.1 > 0)
        .map(|r| r.0)
        .min()
        .unwrap_or(0);
    let hi = runs
        .iter()
        .filter(|r| r.1 > 0)
        .map(|r| r.0 + r.1 as isize)
        .max()
        .unwrap_or(lo);
    Blocks {
        ptr: if hi > lo {
            lo as *mut u8
        } else {
            std::ptr::NonNull::<u8>::dangling().as_ptr()
        },
        len: (hi - lo) as usize,
        counts: runs.iter().map(|r| r.1).collect(),
        displs: runs
            .iter()
            .map(|r| if r.1 > 0 { (r.0 - lo) as usize } else { 0 })
            .collect(),
        packed: None,
    }
}

fn packed_layout(blocks: &[Block]) -> R<(Vec<usize>, Vec<usize>, usize)> {
    let mut counts = Vec::with_capacity(blocks.len());
    let mut displs = Vec::with_capacity(blocks.len());
    let mut at = 0usize;
    for &(_, n, dt) in blocks {
        let t = crate::datatype::for_comm(dt)?;
        let b = crate::buf::bytes_of(n, t.size)
            .ok_or_else(|| err(MPI_ERR_COUNT, crate::buf::COUNT_OVERFLOW))?;
        counts.push(b);
        displs.push(at);
        at += b;
    }
    Ok((counts, displs, at))
}

/// The input blocks (one per rank). `copy`: always a packed copy (the input overlaps
/// the output).
///
/// # Safety
/// Every block's elements are readable (host or device).
///
/// # Errors
/// `MPI_ERR_TYPE`, `MPI_ERR_COUNT`, `MPI_ERR_OTHER` (device copy).
pub unsafe fn vsrc(blocks: &[Block], copy: bool) -> R<Blocks> {
    if !copy && let Some(runs) = direct_runs(blocks)? {
        return Ok(direct(runs));
    }
    let (counts, displs, total) = packed_layout(blocks)?;
    let mut a = Aligned::new(total);
    for (i, &(p, n, dt)) in blocks.iter().enumerate() {
        if counts[i] == 0 {
            continue;
        }
        // SAFETY: caller's contract.
        let s = unsafe { src(p, n, dt, false)? };
        // SAFETY: the block's packed bytes fit at its displacement.
        unsafe { std::ptr::copy_nonoverlapping(s.ptr, a.ptr().add(displs[i]), counts[i]) };
    }
    Ok(Blocks {
        ptr: a.ptr(),
        len: total,
        counts,
        displs,
        packed: Some((a, Vec::new())),
    })
}

/// The output blocks (one per rank).
///
/// # Safety
/// Every block's elements are writable (host or device) until `finish`.
///
/// # Errors
/// As [`vsrc`].
pub unsafe fn vdst(blocks: &[Block]) -> R<Blocks> {
    if let Some(runs) = direct_runs(blocks)? {
        return Ok(direct(runs));
    }
    let (counts, displs, total) = packed_layout(blocks)?;
    let mut a = Aligned::new(total);
    Ok(Blocks {
        ptr: a.ptr(),
        len: total,
        counts,
        displs,
        packed: Some((a, blocks.to_vec())),
    })
}

impl Blocks {
    /// The range.
    pub fn raw(&self) -> Raw {
        Raw {
            p: self.ptr,
            n: self.len,
        }
    }

    /// Unpacks received blocks into the user's (no-op for the direct form).
    ///
    /// # Errors
    /// `MPI_ERR_OTHER` when a device copy fails.
    pub fn finish(self) -> R {
        let Some((mut a, user)) = self.packed else {
            return Ok(());
        };
        for (i, &(p, n, dt)) in user.iter().enumerate() {
            if self.counts[i] == 0 {
                continue;
            }
            // SAFETY: vdst's contract.
            let d = unsafe { dst(p, n, dt, false)? };
            // SAFETY: the block's packed bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(a.ptr().add(self.displs[i]), d.ptr, self.counts[i])
            };
            d.finish()?;
        }
        Ok(())
    }
}

/// Device memory of the C caller as rankwire's [`rankwire::DeviceMemory`].
pub struct DevRaw(pub u64, pub usize);

// SAFETY: the C caller's device range, live until the operation completes (MPI's
// contract for the buffers of a call).
unsafe impl rankwire::DeviceMemory for DevRaw {
    fn device_region(&self) -> rankwire::Result<(u64, usize)> {
        Ok((self.0, self.1))
    }
}

// SAFETY: as above; MPI forbids touching a receive buffer during the operation.
unsafe impl rankwire::DeviceMemoryMut for DevRaw {
    fn device_region_mut(&mut self) -> rankwire::Result<(u64, usize)> {
        Ok((self.0, self.1))
    }
}

/// A heap value with a stable address, freed when the request's keep list drops
/// (after the rankwire request that borrows it has completed).
pub struct Pinned<T>(*mut T);

// SAFETY: owned heap value of a Send type.
unsafe impl<T: Send> Send for Pinned<T> {}

impl<T> Pinned<T> {
    /// `v` on the heap.
    pub fn new(v: T) -> Pinned<T> {
        Pinned(Box::into_raw(Box::new(v)))
    }

    /// The value.
    ///
    /// # Safety
    /// Used only while `self` lives, and not aliased.
    pub unsafe fn get(&self) -> &'static mut T {
        // SAFETY: caller's contract; the pointer came from Box::into_raw.
        unsafe { &mut *self.0 }
    }
}

impl<T> Drop for Pinned<T> {
    fn drop(&mut self) {
        // SAFETY: from Box::into_raw, dropped once.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// Where the `n` elements of a buffer are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    /// One contiguous run of device memory: address and length in bytes.
    Device(u64, usize),
    /// Host memory (or no bytes).
    Host,
    /// Not one contiguous run (a derived type): `src`/`dst` find out.
    Unknown,
}

impl Span {
    /// Whether the buffer is known to be host memory.
    pub fn host(self) -> bool {
        self == Span::Host
    }
}

/// Where the `n` elements of type `t` at `p` are (one pointer classification).
pub fn span(p: *const u8, n: usize, t: &crate::datatype::TypeInfo) -> Span {
    match t.contiguous_span(n) {
        None => Span::Unknown,
        Some((_, 0)) => Span::Host,
        Some((off, len)) => {
            let start = (p as isize).wrapping_add(off) as *const u8;
            if is_device(start, len) {
                Span::Device(start as u64, len)
            } else {
                Span::Host
            }
        }
    }
}

/// The contiguous device range of `n` elements of type `t` at `p`, if they are one
/// (the device forms of rankwire's collectives take those).
pub fn device_span(p: *const u8, n: usize, t: &crate::datatype::TypeInfo) -> Option<(u64, usize)> {
    match span(p, n, t) {
        Span::Device(a, l) => Some((a, l)),
        _ => None,
    }
}
