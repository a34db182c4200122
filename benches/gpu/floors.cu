// Floors of one small device operation and of the ways a host learns it finished.
// Build: nvcc -O2 -o floors floors.cu -lcuda ; run: ./floors [iters]
// Prints one line per method: min and median microseconds per operation.
// Used to choose the completion detection of small device messages (issue 18: device
// p2p 8 B <= 8 us needs the host not to wait on a stream per message). Written on
// 2026-12-05 when no GPU machine was lent: not run yet; scripts/gpu-floors.sh runs it
// without and with MPS.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <algorithm>
#include <vector>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s; cuGetErrorString(r_, &s); \
  fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s); exit(1);} } while (0)

static double now_us() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }

__global__ void copy8(const uint64_t *src, uint64_t *dst, volatile uint32_t *flag, uint32_t v) {
  *dst = *src;
  if (flag) { __threadfence_system(); *flag = v; }
}
__global__ void put8(uint64_t val, uint64_t *dst) { *dst = val; }

static void report(const char *name, std::vector<double> &v) {
  std::sort(v.begin(), v.end());
  printf("%-58s min %7.2f  med %7.2f  p90 %7.2f us\n", name, v[0], v[v.size() / 2], v[v.size() * 9 / 10]);
  fflush(stdout);
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 2000;
  int sched = argc > 2 ? atoi(argv[2]) : 0; // 0 auto, 1 spin, 2 yield, 4 blocking
  CK(cuInit(0));
  CUdevice dev; CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  if (sched) { CK(cuDevicePrimaryCtxSetFlags(dev, sched)); }
  CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  int memops = 0; cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev);
  printf("sched flags %d, stream mem ops attr %d, iters %d\n", sched, memops, iters);
  CUstream s; CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a, b; CK(cuMemAlloc(&a, 1 << 20)); CK(cuMemAlloc(&b, 1 << 20));
  CK(cuMemsetD8(a, 1, 1 << 20));
  volatile uint32_t *flag; CK(cuMemHostAlloc((void **)&flag, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr dflag; CK(cuMemHostGetDevicePointer(&dflag, (void *)flag, 0));
  uint64_t *pinned; CK(cuMemHostAlloc((void **)&pinned, 4096, 0));
  uint64_t pageable[8] = {0};
  CUevent ev; CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  CUevent evb; CK(cuEventCreate(&evb, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC));
  std::vector<double> t(iters);
  *flag = 0;
  // warm-up
  for (int i = 0; i < 200; i++) { CK(cuMemcpyDtoDAsync(b, a, 8, s)); CK(cuStreamSynchronize(s)); }

#define LOOP(name, ...) do { for (int i = 0; i < iters; i++) { double t0 = now_us(); __VA_ARGS__; t[i] = now_us() - t0; } report(name, t); } while (0)
  LOOP("D2D 8B async + cuStreamSynchronize", { CK(cuMemcpyDtoDAsync(b, a, 8, s)); CK(cuStreamSynchronize(s)); });
  LOOP("D2D 8B async + spin cuStreamQuery", { CK(cuMemcpyDtoDAsync(b, a, 8, s)); while (cuStreamQuery(s) == CUDA_ERROR_NOT_READY) {} });
  LOOP("D2D 8B async + event record + spin cuEventQuery", { CK(cuMemcpyDtoDAsync(b, a, 8, s)); CK(cuEventRecord(ev, s)); while (cuEventQuery(ev) == CUDA_ERROR_NOT_READY) {} });
  LOOP("D2D 8B async + event record + cuEventSynchronize(blocking)", { CK(cuMemcpyDtoDAsync(b, a, 8, s)); CK(cuEventRecord(evb, s)); CK(cuEventSynchronize(evb)); });
  if (memops) {
    LOOP("D2D 8B async + cuStreamWriteValue32(host flag) + spin", { uint32_t v = i + 1; CK(cuMemcpyDtoDAsync(b, a, 8, s)); CK(cuStreamWriteValue32(s, dflag, v, 0)); while (*flag != v) {} });
  }
  *flag = 0;
  LOOP("kernel copy8 + host-mapped flag + spin", { uint32_t v = i + 1000000;
    copy8<<<1, 1, 0, (cudaStream_t)s>>>((const uint64_t *)a, (uint64_t *)b, (volatile uint32_t *)dflag, v); while (*flag != v) {} });
  LOOP("kernel copy8 + cuStreamSynchronize", { copy8<<<1, 1, 0, (cudaStream_t)s>>>((const uint64_t *)a, (uint64_t *)b, nullptr, 0); CK(cuStreamSynchronize(s)); });
  LOOP("kernel copy8 + spin cuStreamQuery", { copy8<<<1, 1, 0, (cudaStream_t)s>>>((const uint64_t *)a, (uint64_t *)b, nullptr, 0); while (cuStreamQuery(s) == CUDA_ERROR_NOT_READY) {} });
  LOOP("kernel put8(value arg) + spin cuStreamQuery", { put8<<<1, 1, 0, (cudaStream_t)s>>>(42, (uint64_t *)b); while (cuStreamQuery(s) == CUDA_ERROR_NOT_READY) {} });
  LOOP("cuMemcpyDtoD 8B (sync API)", { CK(cuMemcpyDtoD(b, a, 8)); });
  LOOP("cuMemcpyDtoH 8B to pinned (sync)", { CK(cuMemcpyDtoH(pinned, a, 8)); });
  LOOP("cuMemcpyDtoH 8B to pageable (sync)", { CK(cuMemcpyDtoH(pageable, a, 8)); });
  LOOP("cuMemcpyHtoD 8B from pageable (sync)", { CK(cuMemcpyHtoD(b, pageable, 8)); });
  LOOP("cuMemcpyDtoHAsync 8B pinned + spin cuStreamQuery", { CK(cuMemcpyDtoHAsync(pinned, a, 8, s)); while (cuStreamQuery(s) == CUDA_ERROR_NOT_READY) {} });
  LOOP("cuMemcpyHtoDAsync 8B pinned + spin cuStreamQuery", { CK(cuMemcpyHtoDAsync(b, pinned, 8, s)); while (cuStreamQuery(s) == CUDA_ERROR_NOT_READY) {} });
  LOOP("cuStreamQuery of an idle stream", { (void)cuStreamQuery(s); });
  LOOP("cuEventRecord + cuEventQuery on idle stream", { CK(cuEventRecord(ev, s)); (void)cuEventQuery(ev); });
  LOOP("cuMemcpyDtoDAsync 8B enqueue only", { CK(cuMemcpyDtoDAsync(b, a, 8, s)); });
  CK(cuStreamSynchronize(s));
  LOOP("kernel launch enqueue only", { copy8<<<1, 1, 0, (cudaStream_t)s>>>((const uint64_t *)a, (uint64_t *)b, nullptr, 0); });
  CK(cuStreamSynchronize(s));
  // Host-side driver calls a device send or receive makes (classification, IPC export).
  {
    CUpointer_attribute at[6] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_IS_MANAGED};
    unsigned int mt = 0; int ord = 0; CUdeviceptr base = 0; size_t sz = 0; unsigned long long bid = 0; unsigned int man = 0;
    void *vals[6] = {&mt, &ord, &base, &sz, &bid, &man};
    LOOP("cuPointerGetAttributes (6 attributes)", { CK(cuPointerGetAttributes(6, at, vals, a + 64)); });
    LOOP("cuPointerGetAttribute (buffer id)", { CK(cuPointerGetAttribute(&bid, CU_POINTER_ATTRIBUTE_BUFFER_ID, a + 64)); });
    CUipcMemHandle h;
    LOOP("cuIpcGetMemHandle", { CK(cuIpcGetMemHandle(&h, a)); });
    CUcontext cur;
    LOOP("cuCtxGetCurrent", { CK(cuCtxGetCurrent(&cur)); });
    LOOP("cuCtxSetCurrent (same context)", { CK(cuCtxSetCurrent(ctx)); });
    LOOP("cuEventRecord", { CK(cuEventRecord(ev, s)); });
    CK(cuStreamSynchronize(s));
  }
  return 0;
}
