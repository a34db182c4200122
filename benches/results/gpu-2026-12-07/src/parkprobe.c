// Stream proxy hang diagnosis (gpu-2026-12-06k): what waits for a stream parked on
// cuStreamWaitValue32 (a host flag that only a host thread writes)?
// Two processes on one GPU (forked before cuInit), as two ranks.
//  A: with K streams of each process parked on a flag, does a device-to-device copy
//     out of the peer's IPC-mapped buffer on another non-blocking stream (the
//     runtime stream of rankwire's CUDA IPC get) complete? (order 0: copy stream made
//     first; 1: made last; E extra idle streams made before it)
//  B: while rank 0 has a stream parked, rank 1 frees a buffer rank 0 has IPC-mapped
//     (imported=1) or not (imported=0); does its cuMemFree return, and do cuMemAlloc /
//     a copy on another stream return meanwhile?
//  C: rank 0 alone: a thread blocked in cuMemFree (own stream parked); do other driver
//     calls of other threads return meanwhile (a lock held by the blocked free)?
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <sys/wait.h>
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s_ = "?"; cuGetErrorName(r_, &s_); fprintf(stderr, "rank %d: %s:%d %s: %s\n", me, __FILE__, __LINE__, #x, s_); exit(1);} } while (0)
static int me, tx, rx;
static CUcontext ctx;
static volatile unsigned* flags; static CUdeviceptr dflags; static unsigned epoch;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void sendb(const void* p, size_t n) { if (write(tx, p, n) != (ssize_t)n) exit(2); }
static void recvb(void* p, size_t n) { size_t g = 0; while (g < n) { ssize_t r = read(rx, (char*)p + g, n - g); if (r <= 0) exit(3); g += r; } }
static void barrier(void) { char c = 'b'; sendb(&c, 1); recvb(&c, 1); }

typedef struct { const char* name; int which; CUdeviceptr a, b; CUstream s; CUipcMemHandle h; volatile int done; CUresult r; double t; pthread_t th; } call;
static void* call_run(void* v) {
  call* c = v; cuCtxSetCurrent(ctx); double t0 = now(); CUresult r = CUDA_SUCCESS; CUdeviceptr d; CUevent ev;
  switch (c->which) {
    case 0: r = cuMemFree(c->a); break;
    case 1: r = cuMemAlloc(&d, 1 << 20); break;
    case 2: { char buf[64] = {0}; r = cuMemcpyHtoDAsync(c->a, buf, 64, c->s); if (!r) r = cuStreamSynchronize(c->s); break; }
    case 3: r = cuMemcpyDtoDAsync(c->a, c->b, 1 << 20, c->s); if (!r) r = cuStreamSynchronize(c->s); break;
    case 4: r = cuIpcOpenMemHandle(&d, c->h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS); break;
    case 5: { CUipcMemHandle h; r = cuIpcGetMemHandle(&h, c->a); break; }
    case 6: r = cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING); if (!r) r = cuEventRecord(ev, c->s); if (!r) r = cuEventSynchronize(ev); break;
    case 7: { unsigned long long id; r = cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, c->a); break; }
    case 8: { void* h; r = cuMemHostAlloc(&h, 1 << 20, CU_MEMHOSTALLOC_PORTABLE); break; }
  }
  c->r = r; c->t = now() - t0; c->done = 1; return 0;
}
static void start(call* c) { pthread_create(&c->th, 0, call_run, c); }
static void report(const char* test, call* c, double limit) {
  double t0 = now(); while (!c->done && now() - t0 < limit) usleep(1000);
  printf("rank %d: %s: %-44s %s\n", me, test, c->name, c->done ? "returns" : "BLOCKED (past the limit)"); fflush(stdout);
}
static void finish(call* c) { pthread_join(c->th, 0); }

static void testA(int K, int order, int extra, size_t bytes) {
  CUstream R, S[3], X[8];
  if (order == 0) CK(cuStreamCreate(&R, CU_STREAM_NON_BLOCKING));
  for (int k = 0; k < 3; ++k) CK(cuStreamCreate(&S[k], CU_STREAM_NON_BLOCKING));
  for (int k = 0; k < extra; ++k) CK(cuStreamCreate(&X[k], CU_STREAM_NON_BLOCKING));
  if (order == 1) CK(cuStreamCreate(&R, CU_STREAM_NON_BLOCKING));
  CUdeviceptr src, dst, m; CUipcMemHandle h, ph;
  CK(cuMemAlloc(&src, bytes)); CK(cuMemAlloc(&dst, bytes)); CK(cuMemsetD8(src, 7, bytes));
  CK(cuIpcGetMemHandle(&h, src)); sendb(&h, sizeof h); recvb(&ph, sizeof ph);
  CK(cuIpcOpenMemHandle(&m, ph, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  ++epoch; barrier();
  for (int k = 0; k < K; ++k) CK(cuStreamWaitValue32(S[k], dflags + 4 * k, epoch, CU_STREAM_WAIT_VALUE_GEQ));
  usleep(20000); barrier();
  CUevent ev; CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  double t0 = now();
  CK(cuMemcpyDtoDAsync(dst, m, bytes, R)); CK(cuEventRecord(ev, R));
  CUresult q; while ((q = cuEventQuery(ev)) == CUDA_ERROR_NOT_READY && now() - t0 < 3.0) usleep(100);
  double t = now() - t0;
  printf("rank %d: A parked=%d order=%d extra=%d bytes=%zu: IPC copy on another stream %s (%.3f ms)\n", me, K, order, extra, bytes,
         q == CUDA_SUCCESS ? "completes" : "STALLED (3 s)", t * 1e3); fflush(stdout);
  barrier();
  for (int k = 0; k < K; ++k) flags[k] = epoch;
  __sync_synchronize();
  for (int k = 0; k < 3; ++k) CK(cuStreamSynchronize(S[k]));
  CK(cuStreamSynchronize(R));
  if (q != CUDA_SUCCESS) printf("rank %d: A: after the flags were written the copy completed in %.3f ms\n", me, (now() - t0) * 1e3);
  barrier();
  CK(cuIpcCloseMemHandle(m)); CK(cuMemFree(src)); CK(cuMemFree(dst)); CK(cuEventDestroy(ev));
  for (int k = 0; k < 3; ++k) CK(cuStreamDestroy(S[k]));
  for (int k = 0; k < extra; ++k) CK(cuStreamDestroy(X[k]));
  CK(cuStreamDestroy(R));
  barrier();
}

static void testB(int imported) {
  CUstream S, R; CK(cuStreamCreate(&S, CU_STREAM_NON_BLOCKING)); CK(cuStreamCreate(&R, CU_STREAM_NON_BLOCKING));
  CUdeviceptr b = 0, m = 0, loc; CUipcMemHandle h; CK(cuMemAlloc(&loc, 1 << 20));
  if (me == 1) { CK(cuMemAlloc(&b, 1 << 20)); CK(cuIpcGetMemHandle(&h, b)); sendb(&h, sizeof h); }
  else { recvb(&h, sizeof h); if (imported) { CK(cuIpcOpenMemHandle(&m, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)); CK(cuMemcpyDtoD(loc, m, 8)); } }
  ++epoch; barrier();
  if (me == 0) CK(cuStreamWaitValue32(S, dflags, epoch, CU_STREAM_WAIT_VALUE_GEQ));
  usleep(20000); barrier();
  call f = {"cuMemFree of the exported buffer", 0, b}, a = {"cuMemAlloc 1 MiB (free in flight)", 1}, c = {"cuMemcpyHtoDAsync + sync, another stream", 2, loc, 0, R};
  char test[64]; snprintf(test, sizeof test, "B imported=%d (rank 0 parked)", imported);
  if (me == 1) { start(&f); usleep(200000); start(&a); start(&c); report(test, &f, 3); report(test, &a, 1); report(test, &c, 1); }
  barrier();
  if (me == 0) { flags[0] = epoch; __sync_synchronize(); CK(cuStreamSynchronize(S)); if (m) CK(cuIpcCloseMemHandle(m)); }
  barrier();
  if (me == 1) { finish(&f); finish(&a); finish(&c); }
  CK(cuMemFree(loc)); CK(cuStreamDestroy(S)); CK(cuStreamDestroy(R));
  barrier();
}

static void testC(void) {
  CUstream S, R; CK(cuStreamCreate(&S, CU_STREAM_NON_BLOCKING)); CK(cuStreamCreate(&R, CU_STREAM_NON_BLOCKING));
  CUdeviceptr x, loc, exp_, m; CUipcMemHandle h;
  CK(cuMemAlloc(&x, 1 << 20)); CK(cuMemAlloc(&loc, 1 << 20)); CK(cuMemAlloc(&exp_, 1 << 20));
  if (me == 1) { CK(cuIpcGetMemHandle(&h, exp_)); sendb(&h, sizeof h); } else recvb(&h, sizeof h);
  ++epoch; barrier();
  if (me == 0) {
    CK(cuIpcOpenMemHandle(&m, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CK(cuStreamWaitValue32(S, dflags, epoch, CU_STREAM_WAIT_VALUE_GEQ)); usleep(20000);
    call f = {"cuMemFree (own stream parked)", 0, x};
    call cs[] = {
      {"cuMemAlloc 1 MiB", 1}, {"cuMemcpyHtoDAsync + sync, another stream", 2, loc, 0, R},
      {"cuMemcpyDtoDAsync from an IPC mapping + sync", 3, loc, m, R}, {"cuIpcGetMemHandle", 5, loc},
      {"cuEventRecord + cuEventSynchronize, another stream", 6, 0, 0, R}, {"cuPointerGetAttribute", 7, loc},
      {"cuMemHostAlloc 1 MiB", 8},
    };
    int n = sizeof cs / sizeof cs[0];
    start(&f); usleep(200000); report("C", &f, 0.01);
    for (int i = 0; i < n; ++i) { start(&cs[i]); report("C while a cuMemFree waits", &cs[i], 1); }
    flags[0] = epoch; __sync_synchronize(); CK(cuStreamSynchronize(S));
    finish(&f); for (int i = 0; i < n; ++i) finish(&cs[i]);
    CK(cuIpcCloseMemHandle(m));
  }
  barrier();
  CK(cuMemFree(loc)); CK(cuMemFree(exp_)); CK(cuStreamDestroy(S)); CK(cuStreamDestroy(R));
  barrier();
}

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "ABC";
  int pc[2], cp[2]; if (pipe(pc) || pipe(cp)) return 1;
  pid_t child = fork();
  me = child == 0; tx = me ? cp[1] : pc[1]; rx = me ? pc[0] : cp[0];
  CUdevice dev; CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CK(cuMemHostAlloc((void**)&flags, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CK(cuMemHostGetDevicePointer(&dflags, (void*)flags, 0)); memset((void*)flags, 0, 4096);
  barrier();
  if (strchr(what, 'A')) {
    size_t sizes[] = {8, 8 << 20};
    for (int si = 0; si < 2; ++si) for (int K = 0; K <= 3; ++K) for (int order = 0; order <= 1; ++order) testA(K, order, 0, sizes[si]);
    testA(2, 0, 6, 8 << 20); testA(2, 1, 6, 8 << 20); testA(1, 1, 6, 8 << 20);
  }
  if (strchr(what, 'B')) { testB(0); testB(1); }
  if (strchr(what, 'C')) testC();
  printf("rank %d: done\n", me); fflush(stdout);
  if (!me) waitpid(child, 0, 0);
  return 0;
}
