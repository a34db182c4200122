// Notification latencies behind a stream-ordered operation (one process, one GPU):
// (a) the host writes a flag in mapped host memory; a stream waiting on it
//     (cuStreamWaitValue32) passes and records an event; the host polls the event.
// (b) the same with the flag in device memory, written by cuStreamWriteValue32 on a
//     second stream.
// (c) an event recorded on an idle stream, polled until complete.
#include <cuda.h>
#include <stdio.h>
#include <time.h>
#define CK(x) do { CUresult r_ = (x); if (r_) { const char* s; cuGetErrorString(r_, &s); printf("%s: %s\n", #x, s); return 1; } } while (0)
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main() {
  CUdevice dev; CUcontext ctx; CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CUstream s, s2; CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)); CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  volatile unsigned* hf; CUdeviceptr dhf, df; CK(cuMemHostAlloc((void**)&hf, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CK(cuMemHostGetDevicePointer(&dhf, (void*)hf, 0)); *hf = 0; CK(cuMemAlloc(&df, 4096)); CK(cuMemsetD32(df, 0, 1));
  CUevent ev; CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  const int N = 2000; double ta = 0, tb = 0, tc = 0, wa = 0;
  for (int i = 1; i <= N; ++i) {
    CK(cuStreamWaitValue32(s, dhf, i, CU_STREAM_WAIT_VALUE_GEQ)); CK(cuEventRecord(ev, s));
    double t0 = now(); while (now() - t0 < 20e-6) {} // let the wait settle
    double t1 = now(); *hf = i; __sync_synchronize();
    while (cuEventQuery(ev) == CUDA_ERROR_NOT_READY) {}
    ta += now() - t1;
  }
  for (int i = 1; i <= N; ++i) {
    CK(cuStreamWaitValue32(s, df, i, CU_STREAM_WAIT_VALUE_GEQ)); CK(cuEventRecord(ev, s));
    double t0 = now(); while (now() - t0 < 20e-6) {}
    double t1 = now(); CK(cuStreamWriteValue32(s2, df, i, 0));
    while (cuEventQuery(ev) == CUDA_ERROR_NOT_READY) {}
    tb += now() - t1;
  }
  for (int i = 1; i <= N; ++i) {
    double t1 = now(); CK(cuEventRecord(ev, s2));
    while (cuEventQuery(ev) == CUDA_ERROR_NOT_READY) {}
    tc += now() - t1;
  }
  // (d) host flag written, then the host waits for the GPU to see it by a second flag the stream writes back
  CUdeviceptr dback; volatile unsigned* back = hf + 64; CK(cuMemHostGetDevicePointer(&dback, (void*)back, 0)); *back = 0;
  for (int i = 1; i <= N; ++i) {
    CK(cuStreamWaitValue32(s, dhf, N + i, CU_STREAM_WAIT_VALUE_GEQ)); CK(cuStreamWriteValue32(s, dback, i, 0));
    double t0 = now(); while (now() - t0 < 20e-6) {}
    double t1 = now(); *hf = N + i; __sync_synchronize();
    while (*back != (unsigned)i) {}
    wa += now() - t1;
  }
  printf("(a) host flag -> stream wait passes -> event seen by the host: %.2f us\n", ta / N * 1e6);
  printf("(b) cuStreamWriteValue32 (device flag, 2nd stream) -> wait passes -> event seen: %.2f us\n", tb / N * 1e6);
  printf("(c) event record on an idle stream -> seen complete: %.2f us\n", tc / N * 1e6);
  printf("(d) host flag -> stream wait passes -> stream writes a host flag -> host sees it: %.2f us\n", wa / N * 1e6);
  return 0;
}
