//! The CUDA IPC transport on a real device (feature `cuda`; each test prints
//! "no CUDA device: skipped" and passes where there is none).
//!
//! `cuIpcOpenMemHandle` refuses handles exported by the calling process, so the data
//! path runs across two processes: the test registers buffers and starts this test
//! binary again as the reader (`reader_child`, which does nothing unless
//! `CUDA_IPC_TEST_DESC` is set), which gets them into device and host memory and
//! checks every byte.
//!
//! Run: `cargo nextest run -p rankwire-transports --features cuda --test cuda_ipc`.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use rankwire_gpu::{DeviceBuffer, TmpPool};
use rankwire_transports::{
    CudaIpcConfig, CudaIpcTransport, Event, LocalBuf, MemoryKind, OpStart, RemoteMem, Transport,
    TransportError,
};

const LEN: usize = 1 << 20;
const ENV: &str = "CUDA_IPC_TEST_DESC";

fn device_present() -> bool {
    let ok = rankwire_gpu::available()
        && rankwire_gpu::init().is_ok()
        && rankwire_gpu::device_count().is_ok_and(|n| n > 0);
    if !ok {
        eprintln!("no CUDA device: skipped");
    }
    ok
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..LEN)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn transport() -> CudaIpcTransport {
    CudaIpcTransport::new(Arc::new(TmpPool::new(1 << 30)), CudaIpcConfig::default())
}

fn encode(r: &RemoteMem) -> String {
    let RemoteMem::CudaIpc {
        handle,
        offset,
        buffer_id,
        device,
        base,
        alloc_len,
    } = r
    else {
        panic!("not a CUDA IPC descriptor: {r:?}");
    };
    let hex: String = handle.iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}:{offset}:{buffer_id}:{device}:{base}:{alloc_len}")
}

fn decode(s: &str) -> RemoteMem {
    let f: Vec<&str> = s.split(':').collect();
    let mut handle = [0u8; 64];
    for (i, b) in handle.iter_mut().enumerate() {
        *b = u8::from_str_radix(&f[0][2 * i..2 * i + 2], 16).unwrap();
    }
    RemoteMem::CudaIpc {
        handle,
        offset: f[1].parse().unwrap(),
        buffer_id: f[2].parse().unwrap(),
        device: f[3].parse().unwrap(),
        base: f[4].parse().unwrap(),
        alloc_len: f[5].parse().unwrap(),
    }
}

/// Run one get to completion; the OpDone's result.
fn get_wait(
    t: &mut CudaIpcTransport,
    op: u64,
    dst: LocalBuf,
    src: &RemoteMem,
    offset: u64,
) -> Result<(), TransportError> {
    // SAFETY: `dst` is a live buffer of len_bytes that nothing else touches until the
    // OpDone below.
    match unsafe { t.get(0, op, dst, src, offset) }? {
        OpStart::Done => return Ok(()),
        OpStart::Pending => {}
    }
    let mut ev = Vec::new();
    loop {
        t.poll(&mut ev);
        if let Some(Event::OpDone {
            peer,
            op: got,
            result,
        }) = ev.pop()
        {
            assert_eq!((peer, got), (0, op));
            return result;
        }
        std::thread::yield_now();
    }
}

#[test]
fn registration_exports_device_memory_and_stages_pool_memory() {
    if !device_present() {
        return;
    }
    let mut t = transport();
    let buf = DeviceBuffer::alloc(0, LEN).unwrap();
    let reg = t
        .register(LocalBuf {
            addr: buf.ptr(),
            len_bytes: LEN,
            kind: MemoryKind::Cuda { device: 0 },
        })
        .unwrap();
    assert_eq!(reg.handle, 0, "cuMemAlloc memory is exported directly");
    let RemoteMem::CudaIpc {
        offset, alloc_len, ..
    } = reg.remote
    else {
        panic!("not a CUDA IPC descriptor: {:?}", reg.remote);
    };
    assert_eq!(offset, 0);
    assert!(alloc_len >= LEN as u64);
    t.deregister(reg);

    let pooled = DeviceBuffer::alloc_pool(0, LEN).unwrap();
    let reg = t
        .register(LocalBuf {
            addr: pooled.ptr(),
            len_bytes: LEN,
            kind: MemoryKind::Cuda { device: 0 },
        })
        .unwrap();
    assert_ne!(reg.handle, 0, "pool memory goes through a staging buffer");
    assert_eq!(t.pool().stats().0.lent, 1);
    t.deregister(reg);
    let s = t.pool().stats().0;
    assert_eq!((s.lent, s.idle), (0, 1));
}

#[test]
fn a_peer_process_gets_device_memory_into_device_and_host_buffers() {
    if !device_present() {
        return;
    }
    let mut t = transport();
    let mut direct = DeviceBuffer::alloc(0, LEN).unwrap();
    direct.copy_from_host(0, &pattern(1)).unwrap();
    let mut pooled = DeviceBuffer::alloc_pool(0, LEN).unwrap();
    pooled.copy_from_host(0, &pattern(2)).unwrap();
    let mut regs = Vec::new();
    for b in [&direct, &pooled] {
        regs.push(
            t.register(LocalBuf {
                addr: b.ptr(),
                len_bytes: LEN,
                kind: MemoryKind::Cuda { device: 0 },
            })
            .unwrap(),
        );
    }
    let desc = format!("{},{}", encode(&regs[0].remote), encode(&regs[1].remote));
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["reader_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(ENV, desc)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "reader failed:\n{text}");
    assert!(
        text.contains("cuda_ipc reader: ok"),
        "reader output:\n{text}"
    );
    for r in regs {
        t.deregister(r);
    }
    assert_eq!(t.pool().stats().0.lent, 0);
}

/// The reading side of the test above (does nothing on its own).
#[test]
fn reader_child() {
    let Ok(desc) = std::env::var(ENV) else {
        return;
    };
    rankwire_gpu::init().unwrap();
    let descs: Vec<RemoteMem> = desc.split(',').map(decode).collect();
    let mut t = transport();
    for (i, (src, seed)) in descs.iter().zip([1u8, 2]).enumerate() {
        let want = pattern(seed);
        // Device destination, whole buffer.
        let dst = DeviceBuffer::alloc(0, LEN).unwrap();
        let local = LocalBuf {
            addr: dst.ptr(),
            len_bytes: LEN,
            kind: MemoryKind::Cuda { device: 0 },
        };
        get_wait(&mut t, 10 + i as u64, local, src, 0).unwrap();
        assert!(dst.to_vec().unwrap() == want, "device get {i}: wrong bytes");
        // Host destination, from an offset: a device-to-host copy.
        let mut host = vec![0u8; LEN / 2];
        let local = LocalBuf {
            addr: host.as_mut_ptr() as u64,
            len_bytes: host.len(),
            kind: MemoryKind::Host,
        };
        get_wait(&mut t, 20 + i as u64, local, src, (LEN / 4) as u64).unwrap();
        assert!(
            host[..] == want[LEN / 4..LEN / 4 + LEN / 2],
            "host get {i}: wrong bytes"
        );
        // Past the end: refused before any copy.
        // SAFETY: refused without touching `host`.
        let past = unsafe { t.get(0, 30, local, src, LEN as u64) };
        assert!(
            matches!(past, Err(TransportError::Malformed { .. })),
            "{past:?}"
        );
    }
    let s = t.stats().unwrap();
    println!("cuda_ipc reader: ok ({s:?})");
    assert!(t.is_flushed());
    t.close_all();
}
