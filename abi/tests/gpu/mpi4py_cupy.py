"""mpi4py with cupy device arrays on rankwire's libmpi_abi.so.1 (issue 20, GPU machine).

Run under rwrun at 2+ ranks: `rwrun -n 2 python3 mpi4py_cupy.py`. Every rank checks its
results against values computed on the host and prints one `mpi4py_cupy: ok, N checks`
line (rank 0) or the failures, then the median time of Allreduce on device arrays per
size. Exits 1 on any failure. mpi4py passes the arrays' device pointers (CUDA array
interface) straight to the library; cupy works on the legacy default stream, which the
library waits for once per call (the rule for CUDA IPC and GPU collectives in README).
"""

import sys
import time

import cupy as cp
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
checks = fails = 0


def check(ok, what):
    global checks, fails
    checks += 1
    if not ok:
        fails += 1
        print(f"mpi4py_cupy rank {rank}: FAILED {what}", file=sys.stderr, flush=True)


lib = MPI.Get_library_version().splitlines()[0]
if rank == 0:
    print(f"# {lib}; {size} ranks; cupy {cp.__version__}", flush=True)

# Point-to-point: ring exchange of float32 and int8 device arrays.
for dt, n in [(cp.float32, 1), (cp.float32, 1 << 20), (cp.int8, 4097), (cp.float64, 3 << 16)]:
    send = cp.arange(n, dtype=dt) + rank
    recv = cp.full(n, -1, dtype=dt)
    comm.Sendrecv(send, (rank + 1) % size, 5, recv, (rank - 1) % size, 5)
    want = cp.arange(n, dtype=dt) + (rank - 1) % size
    check(bool(cp.all(recv == want)), f"sendrecv {cp.dtype(dt).name} n={n}")
    if rank == 0:
        comm.Send(send, dest=size - 1, tag=9)
    elif rank == size - 1:
        got = cp.empty(n, dtype=dt)
        st = MPI.Status()
        comm.Recv(got, source=0, tag=9, status=st)
        check(bool(cp.all(got == cp.arange(n, dtype=dt))), f"send/recv {cp.dtype(dt).name} n={n}")
        check(st.Get_count(MPI._typedict[cp.dtype(dt).char]) == n, "recv status count")

# Collectives on device arrays, the reductions by GPU kernels.
for dt, n in [(cp.float32, 1), (cp.float32, 4096), (cp.float32, (1 << 22) + 3), (cp.int32, 1000),
              (cp.int8, 1 << 16), (cp.float64, 1 << 18)]:
    x = (cp.arange(n) % 7 + rank).astype(dt)
    out = cp.zeros(n, dtype=dt)
    comm.Allreduce(x, out, op=MPI.SUM)
    host = sum((np.arange(n) % 7 + r).astype(dt) for r in range(size)).astype(dt)
    check(bool(np.array_equal(cp.asnumpy(out), host)), f"allreduce sum {cp.dtype(dt).name} n={n}")
    inplace = x.copy()
    comm.Allreduce(MPI.IN_PLACE, inplace, op=MPI.MAX)
    check(bool(np.all(cp.asnumpy(inplace) == (np.arange(n) % 7 + size - 1).astype(dt))),
          f"allreduce max in place {cp.dtype(dt).name} n={n}")
b = cp.arange(1000, dtype=cp.float64) * (rank == 0)
comm.Bcast(b, root=0)
check(bool(cp.all(b == cp.arange(1000, dtype=cp.float64))), "bcast")
g = cp.empty(size * 100, dtype=cp.int32)
comm.Allgather(cp.full(100, rank, dtype=cp.int32), g)
check(bool(cp.all(g.reshape(size, 100) == cp.arange(size, dtype=cp.int32)[:, None])), "allgather")
r = cp.zeros(10, dtype=cp.float32) if rank == 0 else None
comm.Reduce(cp.ones(10, dtype=cp.float32) * (rank + 1), r, op=MPI.SUM, root=0)
if rank == 0:
    check(bool(cp.all(r == size * (size + 1) / 2)), "reduce")
# A nonblocking allreduce overlapped with a kernel on another array.
x = cp.ones(1 << 20, dtype=cp.float32)
y = cp.empty_like(x)
req = comm.Iallreduce(x, y, op=MPI.SUM)
z = cp.sin(cp.arange(1 << 20, dtype=cp.float32))
req.Wait()
check(bool(cp.all(y == size)), "iallreduce")
del z

comm.Barrier()
nfail = comm.allreduce(fails, op=MPI.SUM)
nchk = comm.allreduce(checks, op=MPI.SUM)
if rank == 0:
    print(f"mpi4py_cupy: {'ok' if nfail == 0 else 'FAILED'}, {nchk} checks, {nfail} failures", flush=True)

# Timing: median of Allreduce(SUM, float32) on device arrays, per size (µs).
for n in [2, 256, 1 << 16, 1 << 20, 1 << 24]:
    x = cp.ones(n, dtype=cp.float32)
    y = cp.empty_like(x)
    ts = []
    for it in range(60):
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Allreduce(x, y, op=MPI.SUM)
        cp.cuda.runtime.deviceSynchronize()
        ts.append(time.perf_counter() - t0)
    ts = sorted(ts[10:])
    if rank == 0:
        print(f"allreduce_f32 bytes={4 * n} median_us={1e6 * ts[len(ts) // 2]:.1f} min_us={1e6 * ts[0]:.1f}",
              flush=True)
sys.exit(1 if nfail else 0)
