"""Host-staged allreduce of device buffers through the installed (non-CUDA-aware)
Open MPI: what its users do today (cupy device -> host copy, MPI_Allreduce of host
memory with MPI_SUM on float32, host -> device copy). Run:
  mpirun -n P python3 host_staged_allreduce_ompi.py [MAX_BYTES]
Prints rows in the layout of `rankwire-bench allreduce -d cuda` (average over ranks of
each rank's per-call time, algbw = Size / time, busbw = algbw * 2(P-1)/P, GB/s = 1e9 B/s).
"""
import sys
import time

import cupy as cp
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, p = comm.Get_rank(), comm.Get_size()
max_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else (256 << 20)
if rank == 0:
    print(f"# host-staged Open MPI allreduce (cupy D2H, MPI.Allreduce f32 sum, H2D), {p} ranks")
    print("# Size       Avg Latency (us)  Min Latency (us)  Max Latency (us)  algbw (GB/s)  busbw (GB/s)")
size = 4
while size <= max_bytes:
    n = size // 4
    dsend = cp.ones(n, dtype=cp.float32)
    drecv = cp.zeros(n, dtype=cp.float32)
    hsend = np.empty(n, dtype=np.float32)
    hrecv = np.empty(n, dtype=np.float32)
    iters = max(10, min(1000, (8192 * 1000) // max(size, 8192)))
    for i in range(iters + 3):
        if i == 3:
            comm.Barrier()
            t = time.perf_counter()
        cp.asnumpy(dsend, out=hsend)
        comm.Allreduce(hsend, hrecv, op=MPI.SUM)
        drecv.set(hrecv)
        cp.cuda.runtime.deviceSynchronize()
    us = (time.perf_counter() - t) / iters * 1e6
    avg = comm.reduce(us, op=MPI.SUM, root=0)
    lo = comm.reduce(us, op=MPI.MIN, root=0)
    hi = comm.reduce(us, op=MPI.MAX, root=0)
    if rank == 0:
        avg /= p
        algbw = size / (avg * 1e-6) / 1e9
        busbw = algbw * 2 * (p - 1) / p
        print(f"{size:<11}{avg:>18.2f}{lo:>18.2f}{hi:>18.2f}{algbw:>14.3f}{busbw:>14.3f}")
    size *= 4
