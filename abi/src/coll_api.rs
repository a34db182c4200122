//! The exported collective entry points (MPI 4.1 chapter 6): for each collective its
//! blocking, nonblocking (`MPI_I…`, §6.12) and persistent (`…_init`, §6.13) forms, in
//! the `int` and the large-count `_c` variants, generated from the implementations in
//! `coll.rs` and `coll_red.rs` (see `coll.rs` for paths, `MPI_IN_PLACE` and errors).

use crate::coll::*;
use crate::comm::lookup;
use crate::consts::*;
use crate::error::{R, err, guard, put};
use crate::request::StartFn;
use std::ffi::{c_int, c_void};

/// Arguments of a persistent collective, kept for its starts (raw pointers: the C
/// caller keeps them valid while the request exists, MPI 4.1 §6.13).
struct Kept<T>(T);

// SAFETY: plain values and addresses (see the type doc).
unsafe impl<T> Send for Kept<T> {}
// SAFETY: as above; only copied out.
unsafe impl<T> Sync for Kept<T> {}

impl<T: Copy> Kept<T> {
    fn get(&self) -> T {
        self.0
    }
}

/// Arguments of a persistent collective as kept for its starts: the count,
/// displacement and datatype arrays (`*const` int / count / address / handle) are
/// copied at `…_init` (as MPICH does: programs such as mpi4py pass temporary arrays),
/// with one entry per rank of the communicator; buffers and scalars are kept as given.
trait Snapshot: Copy {
    /// The value to keep; copies go into `store`, which lives as long as the request.
    fn snapshot(self, n: usize, store: &mut Vec<Box<dyn std::any::Any + Send + Sync>>) -> Self;
}

macro_rules! keep_as_is {
    ($($t:ty),*) => {$(
        impl Snapshot for $t {
            fn snapshot(self, _n: usize, _store: &mut Vec<Box<dyn std::any::Any + Send + Sync>>) -> Self {
                self
            }
        }
    )*};
}
keep_as_is!(c_int, i64, usize, *const c_void, *mut c_void);

macro_rules! copy_array {
    ($($t:ty),*) => {$(
        impl Snapshot for *const $t {
            fn snapshot(self, n: usize, store: &mut Vec<Box<dyn std::any::Any + Send + Sync>>) -> Self {
                if self.is_null() || n == 0 {
                    return self;
                }
                // SAFETY: an array argument of a collective has one entry per rank (the
                // C caller's contract; null arrays, allowed where not significant, are
                // kept as they are).
                let copy: Box<[$t]> = unsafe { std::slice::from_raw_parts(self, n) }.into();
                let p = copy.as_ptr();
                store.push(Box::new(copy));
                p
            }
        }
    )*};
}
copy_array!(c_int, i64, isize, usize);

fn null_request() -> crate::error::MpiErr {
    err(
        MPI_ERR_ARG,
        "collective: the request pointer is null; fix: pass the address of an MPI_Request",
    )
}

fn not_started() -> crate::error::MpiErr {
    err(
        MPI_ERR_INTERN,
        "collective: a nonblocking start returned no operation (a bug in rankwire, please report it)",
    )
}

/// Starts a nonblocking collective and stores its request.
fn nonblocking(comm: MPI_Comm, request: *mut MPI_Request, f: impl FnOnce() -> R<Out>) -> R {
    if request.is_null() {
        return Err(null_request());
    }
    let s = f()?.ok_or_else(not_started)?;
    // SAFETY: checked non-null; the caller's variable.
    unsafe { put(request, crate::request::insert(comm, s), "request") }
}

/// Creates a persistent collective request whose starts run `f`.
fn persistent(
    comm: MPI_Comm,
    request: *mut MPI_Request,
    f: impl Fn() -> R<Out> + Send + Sync + 'static,
) -> R {
    if request.is_null() {
        return Err(null_request());
    }
    lookup(comm)?;
    let start: StartFn = Box::new(move || f()?.ok_or_else(not_started));
    // SAFETY: checked non-null; the caller's variable.
    unsafe {
        put(
            request,
            crate::request::insert_persistent(comm, start),
            "request",
        )
    }
}

// The blocking, nonblocking and persistent entry points of one collective, from its
// implementation `$imp(comm, mode, args...)`.
macro_rules! coll_entries {
    ($imp:ident; $b:ident, $i:ident, $p:ident; ($($a:ident: $t:ty),*)) => {
        #[doc = concat!("`", stringify!($b), "` (MPI 4.1 chapter 6; see the module doc for paths, `MPI_IN_PLACE` and errors).")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $b($($a: $t,)* comm: MPI_Comm) -> c_int {
            // SAFETY: the C caller's arguments.
            guard(comm, || unsafe { $imp(comm, Mode::Block, $($a),*) }.map(|_| ()))
        }

        #[doc = concat!("`", stringify!($i), "`: the nonblocking form (MPI 4.1 §6.12); complete it with `MPI_Wait`/`MPI_Test`.")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $i($($a: $t,)* comm: MPI_Comm, request: *mut MPI_Request) -> c_int {
            // SAFETY: the C caller's arguments.
            guard(comm, || nonblocking(comm, request, || unsafe { $imp(comm, Mode::Start, $($a),*) }))
        }

        #[doc = concat!("`", stringify!($p), "`: the persistent form (MPI 4.1 §6.13); `MPI_Start` runs the nonblocking form with the arguments given here (count, displacement and type arrays copied at this call; `info` is not used).")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $p($($a: $t,)* comm: MPI_Comm, _info: MPI_Info, request: *mut MPI_Request) -> c_int {
            guard(comm, || {
            #[allow(unused_variables)]
            let n = lookup(comm)?.size();
            #[allow(unused_mut)]
            let mut store: Vec<Box<dyn std::any::Any + Send + Sync>> = Vec::new();
            $(let $a = Snapshot::snapshot($a, n, &mut store);)*
            let kept = Kept(($($a,)*));
            persistent(comm, request, move || {
                let _keep = &store;
                #[allow(unused_parens, clippy::unused_unit)]
                let ($($a,)*) = kept.get();
                // SAFETY: the C caller keeps the buffers valid while the request lives;
                // the arrays are this request's copies.
                unsafe { $imp(comm, Mode::Start, $($a),*) }
            })
            })
        }
    };
}

coll_entries!(barrier; MPI_Barrier, MPI_Ibarrier, MPI_Barrier_init; ());

coll_entries!(bcast; MPI_Bcast, MPI_Ibcast, MPI_Bcast_init;
    (buffer: *mut c_void, count: c_int, datatype: MPI_Datatype, root: c_int));
coll_entries!(bcast; MPI_Bcast_c, MPI_Ibcast_c, MPI_Bcast_init_c;
    (buffer: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, root: c_int));

coll_entries!(gather; MPI_Gather, MPI_Igather, MPI_Gather_init;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype,
     recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int));
coll_entries!(gather; MPI_Gather_c, MPI_Igather_c, MPI_Gather_init_c;
    (sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype,
     recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, root: c_int));

coll_entries!(gatherv; MPI_Gatherv, MPI_Igatherv, MPI_Gatherv_init;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype,
     recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int,
     recvtype: MPI_Datatype, root: c_int));
coll_entries!(gatherv; MPI_Gatherv_c, MPI_Igatherv_c, MPI_Gatherv_init_c;
    (sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype,
     recvbuf: *mut c_void, recvcounts: *const MPI_Count, displs: *const MPI_Aint,
     recvtype: MPI_Datatype, root: c_int));

coll_entries!(scatter; MPI_Scatter, MPI_Iscatter, MPI_Scatter_init;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype,
     recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int));
coll_entries!(scatter; MPI_Scatter_c, MPI_Iscatter_c, MPI_Scatter_init_c;
    (sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype,
     recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, root: c_int));

coll_entries!(scatterv; MPI_Scatterv, MPI_Iscatterv, MPI_Scatterv_init;
    (sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int,
     sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int,
     recvtype: MPI_Datatype, root: c_int));
coll_entries!(scatterv; MPI_Scatterv_c, MPI_Iscatterv_c, MPI_Scatterv_init_c;
    (sendbuf: *const c_void, sendcounts: *const MPI_Count, displs: *const MPI_Aint,
     sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count,
     recvtype: MPI_Datatype, root: c_int));

coll_entries!(allgather; MPI_Allgather, MPI_Iallgather, MPI_Allgather_init;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype,
     recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype));
coll_entries!(allgather; MPI_Allgather_c, MPI_Iallgather_c, MPI_Allgather_init_c;
    (sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype,
     recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype));

coll_entries!(allgatherv; MPI_Allgatherv, MPI_Iallgatherv, MPI_Allgatherv_init;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype,
     recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int,
     recvtype: MPI_Datatype));
coll_entries!(allgatherv; MPI_Allgatherv_c, MPI_Iallgatherv_c, MPI_Allgatherv_init_c;
    (sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype,
     recvbuf: *mut c_void, recvcounts: *const MPI_Count, displs: *const MPI_Aint,
     recvtype: MPI_Datatype));

coll_entries!(alltoall; MPI_Alltoall, MPI_Ialltoall, MPI_Alltoall_init;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype,
     recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype));
coll_entries!(alltoall; MPI_Alltoall_c, MPI_Ialltoall_c, MPI_Alltoall_init_c;
    (sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype,
     recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype));

coll_entries!(alltoallv; MPI_Alltoallv, MPI_Ialltoallv, MPI_Alltoallv_init;
    (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int,
     sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int,
     rdispls: *const c_int, recvtype: MPI_Datatype));
coll_entries!(alltoallv; MPI_Alltoallv_c, MPI_Ialltoallv_c, MPI_Alltoallv_init_c;
    (sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint,
     sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count,
     rdispls: *const MPI_Aint, recvtype: MPI_Datatype));

coll_entries!(alltoallw; MPI_Alltoallw, MPI_Ialltoallw, MPI_Alltoallw_init;
    (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int,
     sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int,
     rdispls: *const c_int, recvtypes: *const MPI_Datatype));
coll_entries!(alltoallw; MPI_Alltoallw_c, MPI_Ialltoallw_c, MPI_Alltoallw_init_c;
    (sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint,
     sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count,
     rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype));

coll_entries!(reduce; MPI_Reduce, MPI_Ireduce, MPI_Reduce_init;
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype,
     op: MPI_Op, root: c_int));
coll_entries!(reduce; MPI_Reduce_c, MPI_Ireduce_c, MPI_Reduce_init_c;
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype,
     op: MPI_Op, root: c_int));

coll_entries!(allreduce; MPI_Allreduce, MPI_Iallreduce, MPI_Allreduce_init;
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype,
     op: MPI_Op));
coll_entries!(allreduce; MPI_Allreduce_c, MPI_Iallreduce_c, MPI_Allreduce_init_c;
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype,
     op: MPI_Op));

coll_entries!(reduce_scatter_block; MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block,
    MPI_Reduce_scatter_block_init;
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: MPI_Datatype,
     op: MPI_Op));
coll_entries!(reduce_scatter_block; MPI_Reduce_scatter_block_c, MPI_Ireduce_scatter_block_c,
    MPI_Reduce_scatter_block_init_c;
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: MPI_Count, datatype: MPI_Datatype,
     op: MPI_Op));

coll_entries!(reduce_scatter; MPI_Reduce_scatter, MPI_Ireduce_scatter, MPI_Reduce_scatter_init;
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int,
     datatype: MPI_Datatype, op: MPI_Op));
coll_entries!(reduce_scatter; MPI_Reduce_scatter_c, MPI_Ireduce_scatter_c,
    MPI_Reduce_scatter_init_c;
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const MPI_Count,
     datatype: MPI_Datatype, op: MPI_Op));

coll_entries!(scan; MPI_Scan, MPI_Iscan, MPI_Scan_init;
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype,
     op: MPI_Op));
coll_entries!(scan; MPI_Scan_c, MPI_Iscan_c, MPI_Scan_init_c;
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype,
     op: MPI_Op));

coll_entries!(exscan; MPI_Exscan, MPI_Iexscan, MPI_Exscan_init;
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype,
     op: MPI_Op));
coll_entries!(exscan; MPI_Exscan_c, MPI_Iexscan_c, MPI_Exscan_init_c;
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype,
     op: MPI_Op));
