//! The wire descriptor of a CUDA IPC export ([`RemoteMem::CudaIpc`]) and its conversion
//! to and from `rankwire-gpu`'s [`IpcExport`].

use rankwire_gpu::{IpcExport, IpcHandle};

use crate::RemoteMem;

/// The descriptor a peer names in a `get` for the export `e` (the exporter sends it in
/// its `Rts`).
pub fn remote_of(e: &IpcExport) -> RemoteMem {
    RemoteMem::CudaIpc {
        handle: e.handle.0,
        offset: e.offset,
        buffer_id: e.buffer_id,
        device: e.device,
        base: e.base,
        alloc_len: e.alloc_len as u64,
    }
}

/// Why a descriptor cannot be read as a CUDA IPC export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DescError {
    /// Not [`RemoteMem::CudaIpc`].
    NotCudaIpc,
    /// `offset + offset_bytes + len_bytes` runs past the allocation (or overflows): a
    /// malformed descriptor, or a read longer than the peer exported.
    OutOfBounds,
}

/// The export the importer rebuilds from the peer's descriptor `src`, for a read of
/// `len_bytes` bytes starting `offset_bytes` into the described buffer.
pub(crate) fn export_of(
    src: &RemoteMem,
    offset_bytes: u64,
    len_bytes: usize,
) -> Result<IpcExport, DescError> {
    let &RemoteMem::CudaIpc {
        handle,
        offset,
        buffer_id,
        device,
        base,
        alloc_len,
    } = src
    else {
        return Err(DescError::NotCudaIpc);
    };
    let offset = offset
        .checked_add(offset_bytes)
        .ok_or(DescError::OutOfBounds)?;
    let e = IpcExport {
        handle: IpcHandle(handle),
        device,
        base,
        alloc_len: usize::try_from(alloc_len).map_err(|_| DescError::OutOfBounds)?,
        buffer_id,
        offset,
        len: len_bytes,
    };
    if e.is_consistent() {
        Ok(e)
    } else {
        Err(DescError::OutOfBounds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export() -> IpcExport {
        IpcExport {
            handle: IpcHandle([7u8; 64]),
            device: 3,
            base: 0x7f00_0000_0000,
            alloc_len: 1 << 20,
            buffer_id: 42,
            offset: 4096,
            len: 1000,
        }
    }

    #[test]
    fn a_descriptor_round_trips_to_the_export() {
        let e = export();
        let r = remote_of(&e);
        let RemoteMem::CudaIpc {
            offset, alloc_len, ..
        } = r
        else {
            panic!("not a CUDA IPC descriptor: {r:?}");
        };
        assert_eq!((offset, alloc_len), (4096, 1 << 20));
        assert_eq!(export_of(&r, 0, 1000), Ok(e));
    }

    #[test]
    fn the_read_offset_adds_to_the_buffer_offset() {
        let r = remote_of(&export());
        let e = export_of(&r, 100, 900).unwrap();
        assert_eq!((e.offset, e.len), (4196, 900));
    }

    #[test]
    fn reads_past_the_allocation_and_other_descriptors_are_refused() {
        let r = remote_of(&export());
        // Ends exactly at the allocation's end: fine.
        assert!(export_of(&r, 0, (1 << 20) - 4096).is_ok());
        assert_eq!(
            export_of(&r, 0, (1 << 20) - 4095),
            Err(DescError::OutOfBounds)
        );
        assert_eq!(export_of(&r, u64::MAX, 1), Err(DescError::OutOfBounds));
        assert_eq!(
            export_of(&RemoteMem::None, 0, 1),
            Err(DescError::NotCudaIpc)
        );
        assert_eq!(
            export_of(&RemoteMem::HostCma { pid: 1, addr: 2 }, 0, 1),
            Err(DescError::NotCudaIpc)
        );
    }
}
