# Two processes on one GPU (run under MPS): the access pattern of rankwire's two-shot
# peer allreduce through CUDA IPC mappings, and the same kernel on own memory only.
import multiprocessing as mp, sys
def worker(r, conn, mode, sizes):
    import cupy as cp
    k = cp.RawKernel(r'''
extern "C" __global__ void two(const float4* a, const float4* b, float4* c, float4* d, unsigned long long n) {
  for (unsigned long long i = blockIdx.x*(unsigned long long)blockDim.x+threadIdx.x; i < n; i += (unsigned long long)gridDim.x*blockDim.x) {
    float4 x = __ldcg(a + i), y = __ldcg(b + i); float4 z = make_float4(x.x+y.x, x.y+y.y, x.z+y.z, x.w+y.w); c[i] = z; d[i] = z; }
}''', 'two')
    for mib in sizes:
        n = mib << 20
        a = cp.ones(n // 4, cp.float32); o = cp.zeros(n // 4, cp.float32)
        if mode == "ipc":
            conn.send((cp.cuda.runtime.ipcGetMemHandle(a.data.ptr), cp.cuda.runtime.ipcGetMemHandle(o.data.ptr)))
            ha, ho = conn.recv()
            pa = cp.cuda.runtime.ipcOpenMemHandle(ha); po = cp.cuda.runtime.ipcOpenMemHandle(ho)
        else:
            a2 = cp.ones(n // 4, cp.float32); o2 = cp.zeros(n // 4, cp.float32)
            pa, po = a2.data.ptr, o2.data.ptr
        half = n // 2; nv = half // 16; off = r * half
        args = (cp.uint64(a.data.ptr + off), cp.uint64(pa + off), cp.uint64(o.data.ptr + off), cp.uint64(po + off), cp.uint64(nv))
        for _ in range(3): k((132,), (512,), args)
        cp.cuda.Device().synchronize(); conn.send("ready"); conn.recv()
        e0 = cp.cuda.Event(); e1 = cp.cuda.Event(); e0.record()
        for _ in range(10): k((132,), (512,), args)
        e1.record(); e1.synchronize()
        t = cp.cuda.get_elapsed_time(e0, e1) / 10 * 1e3
        conn.send(t); conn.recv()
        if mode == "ipc":
            cp.cuda.runtime.ipcCloseMemHandle(pa); cp.cuda.runtime.ipcCloseMemHandle(po)
        del a, o
if __name__ == "__main__":
    mp.set_start_method("spawn")
    mode = sys.argv[1]
    sizes = [int(x) for x in sys.argv[2].split(",")]
    c0, w0 = mp.Pipe(); c1, w1 = mp.Pipe()
    ps = [mp.Process(target=worker, args=(0, w0, mode, sizes)), mp.Process(target=worker, args=(1, w1, mode, sizes))]
    for p in ps: p.start()
    for mib in sizes:
        if mode == "ipc":
            h0 = c0.recv(); h1 = c1.recv(); c0.send(h1); c1.send(h0)
        c0.recv(); c1.recv(); c0.send(1); c1.send(1)
        t0 = c0.recv(); t1 = c1.recv()
        n = mib << 20
        print(f"{mode} {mib} MiB: rank0 {t0:.1f} us rank1 {t1:.1f} us; per rank 2 reads + 2 writes of {mib//2} MiB: {2*n/max(t0,t1)/1e3:.0f} GB/s each", flush=True)
        c0.send(1); c1.send(1)
    for p in ps: p.join()
