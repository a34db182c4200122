"""Host-staged device-buffer transfer through the installed (non-CUDA-aware) Open MPI:
the path users of such an MPI take today (device -> host copy, MPI_Send of host memory,
host -> device copy). Run: mpirun -n 2 python3 host_staged_ompi.py
Prints '# Size  Bandwidth (GB/s)' rows for one-way transfers between ranks 0 and 1."""
import time

import cupy as cp
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
if rank == 0:
    print("# host-staged Open MPI (cupy D2H, MPI.Send, H2D), ranks 0->1")
    print("# Size  Bandwidth (GB/s)  Latency (us)")
for size in [8, 1 << 20, 64 << 20, 256 << 20]:
    dev = cp.ones(size, dtype=cp.uint8)
    host = np.empty(size, dtype=np.uint8)
    iters = 20 if size >= (64 << 20) else 200
    comm.Barrier()
    t = 0.0
    for i in range(iters + 2):
        if i == 2:
            comm.Barrier()
            t = time.perf_counter()
        if rank == 0:
            cp.asnumpy(dev, out=host)
            comm.Send(host, dest=1, tag=1)
        elif rank == 1:
            comm.Recv(host, source=0, tag=1)
            dev.set(host)
            cp.cuda.runtime.deviceSynchronize()
    comm.Barrier()
    dt = time.perf_counter() - t
    if rank == 0:
        print(f"{size:<12}{size * iters / dt / 1e9:>10.2f}{dt / iters * 1e6:>14.1f}")
