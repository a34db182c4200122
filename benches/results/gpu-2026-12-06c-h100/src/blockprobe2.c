// Which CUDA driver calls wait for a stream that is blocked on cuStreamWaitValue32?
// Parent: a non-blocking stream waits on a host-mapped flag; then each probe runs on a
// thread; if it has not returned after 2 s the flag is released and the probe is
// reported as "blocks". Child (forked before CUDA init) exports device allocations.
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <sys/wait.h>
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s; cuGetErrorString(r_, &s); fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s); exit(1);} } while (0)
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static CUcontext ctx; static CUstream s, s2; static volatile unsigned *flag; static CUdeviceptr dflag;
static unsigned epoch = 0;
static CUipcMemHandle hs[16]; static CUdeviceptr mapped[16];
typedef struct { const char* name; int which; volatile int done; double t; CUresult r; } probe;
static CUdeviceptr scratch, scratch2; static void* hostp; static void* regp; static CUmodule mod; static CUfunction fn; static const char* cubin_path; static char cubin_img[1 << 20];
static void* run(void* a) {
  probe* p = a; cuCtxSetCurrent(ctx); double t0 = now(); CUresult r = CUDA_SUCCESS;
  CUdeviceptr d; void* h; CUevent ev;
  switch (p->which) {
    case 0: r = cuIpcCloseMemHandle(mapped[0]); break;
    case 1: r = cuMemAlloc(&d, 1 << 20); if (!r) scratch = d; break;
    case 2: r = cuMemFree(scratch); break;
    case 3: r = cuMemHostAlloc(&h, 1 << 20, 0); if (!r) hostp = h; break;
    case 4: r = cuMemFreeHost(hostp); break;
    case 5: r = cuIpcOpenMemHandle(&mapped[1], hs[1], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS); break;
    case 6: r = cuMemcpyDtoDAsync(scratch2, mapped[1], 8, s2); if (!r) r = cuStreamSynchronize(s2); break;
    case 7: r = cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING); if (!r) r = cuEventRecord(ev, s2); if (!r) r = cuEventSynchronize(ev); if (!r) r = cuEventDestroy(ev); break;
    case 8: r = cuIpcGetMemHandle(&hs[2], scratch2); break;
    case 9: { CUipcMemHandle hh; CUdeviceptr dd; r = cuMemAlloc(&dd, 1 << 20); if (!r) r = cuIpcGetMemHandle(&hh, dd); break; }
    case 10: r = cuIpcCloseMemHandle(mapped[1]); break;
    case 11: r = cuMemAlloc(&d, 256 << 20); if (!r) scratch = d; break;
    case 12: r = cuMemFree(scratch); break;
    case 13: r = cuMemHostRegister(malloc(1 << 20), 1 << 20, 0); break;
    case 14: { CUmodule m; r = cuModuleLoadData(&m, cubin_img); if (!r) { mod = m; r = cuModuleGetFunction(&fn, m, "k"); } break; }
    case 15: { CUstream x; r = cuStreamCreate(&x, CU_STREAM_NON_BLOCKING); if (!r) r = cuStreamDestroy(x); break; }
    case 16: { CUevent x; r = cuEventCreate(&x, 0); if (!r) r = cuEventDestroy(x); break; }
    case 17: { CUdeviceptr x; r = cuMemAllocAsync(&x, 1 << 20, s2); if (!r) r = cuMemFreeAsync(x, s2); if (!r) r = cuStreamSynchronize(s2); break; }
    case 18: r = cuMemsetD8(scratch2, 0, 1 << 20); break;
    case 19: { char b[8] = {0}; r = cuMemcpyHtoD(scratch2, b, 8); break; }
    case 20: r = cuMemHostUnregister(regp); break;
    case 21: { void* args[] = {&scratch2}; r = fn ? cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s2, args, 0) : CUDA_ERROR_NOT_FOUND; if (!r) r = cuStreamSynchronize(s2); break; }
    case 22: r = cuModuleUnload(mod); break;
  }
  p->r = r; p->t = now() - t0; p->done = 1; return 0;
}
int main(int argc, char** argv) {
  cubin_path = argc > 1 ? argv[1] : 0;
  if (cubin_path) { FILE* f = fopen(cubin_path, "rb"); if (f) { size_t n = fread(cubin_img, 1, sizeof cubin_img, f); (void)n; fclose(f); } }
  int pc[2], cp[2]; if (pipe(pc) || pipe(cp)) return 1;
  pid_t child = fork();
  CK(cuInit(0)); CUdevice dev; CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  if (child == 0) {
    CUipcMemHandle h[2]; CUdeviceptr d[2];
    for (int i = 0; i < 2; ++i) { CK(cuMemAlloc(&d[i], 4 << 20)); CK(cuIpcGetMemHandle(&h[i], d[i])); }
    if (write(cp[1], h, sizeof h) != sizeof h) return 1;
    char c; if (read(pc[0], &c, 1) != 1) return 1; return 0;
  }
  if (read(cp[0], hs, 2 * sizeof(CUipcMemHandle)) != 2 * sizeof(CUipcMemHandle)) return 1;
  CK(cuIpcOpenMemHandle(&mapped[0], hs[0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)); CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CK(cuMemHostAlloc((void**)&flag, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CK(cuMemHostGetDevicePointer(&dflag, (void*)flag, 0)); *flag = 0;
  CK(cuMemAlloc(&scratch2, 1 << 20));
  regp = malloc(1 << 20); CK(cuMemHostRegister(regp, 1 << 20, 0));
  const char* names[] = {"cuIpcCloseMemHandle (mapping opened before the wait)", "cuMemAlloc 1 MiB", "cuMemFree 1 MiB",
    "cuMemHostAlloc 1 MiB", "cuMemFreeHost", "cuIpcOpenMemHandle", "cuMemcpyDtoDAsync from the mapping on another stream + its sync",
    "cuEventRecord on another stream + cuEventSynchronize", "cuIpcGetMemHandle (allocation made before the wait)",
    "cuMemAlloc + cuIpcGetMemHandle (new allocation)", "cuIpcCloseMemHandle (mapping opened during the wait)", "cuMemAlloc 256 MiB", "cuMemFree 256 MiB",
    "cuMemHostRegister 1 MiB", "cuModuleLoadData (a cubin)", "cuStreamCreate + cuStreamDestroy", "cuEventCreate + cuEventDestroy",
    "cuMemAllocAsync + cuMemFreeAsync on another stream + its sync", "cuMemsetD8 (synchronous)", "cuMemcpyHtoD 8 B (synchronous)",
    "cuMemHostUnregister", "cuLaunchKernel on another stream + its sync", "cuModuleUnload"};
  for (int i = 0; i < 23; ++i) {
    ++epoch;
    CK(cuStreamWaitValue32(s, dflag, epoch, CU_STREAM_WAIT_VALUE_GEQ));
    usleep(20000);
    probe p = {names[i], i, 0, 0, 0}; pthread_t th; pthread_create(&th, 0, run, &p);
    double t0 = now(); while (!p.done && now() - t0 < 2.0) usleep(1000);
    int blocked = !p.done;
    *flag = epoch; __sync_synchronize();
    pthread_join(th, 0); CK(cuStreamSynchronize(s));
    printf("%-62s %s (%.3f ms, result %d)\n", names[i], blocked ? "BLOCKS until the stream's wait passes" : "returns", p.t * 1e3, (int)p.r);
    fflush(stdout);
  }
  if (write(pc[1], "x", 1) != 1) return 1; waitpid(child, 0, 0); return 0;
}
