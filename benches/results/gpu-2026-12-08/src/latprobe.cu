// Issue 18, the small device message: how fast can the host learn that one small
// device operation is done? (the ~10 us "host-synchronized floor" of
// ../shared/notes/device.md was measured with cudaStreamSynchronize only).
//
// Each case: N calls, each one operation of 8 bytes on a non-blocking stream, then a
// way of waiting for it; prints the median and the 10th percentile in microseconds.
// Waits: sync = cuStreamSynchronize; query = spin on cuStreamQuery; flag = the stream
// then writes a counter into host-mapped pinned memory (cuStreamWriteValue32) and the
// host spins on it; kflag = a kernel does the copy and writes the flag itself
// (__threadfence_system); no flag-free variant of a kernel is timed.
// "ipc" cases: a second process (forked before CUDA starts) owns the buffer and the
// first pulls from it through a CUDA IPC mapping (as rankwire's rendezvous get).
// Usage: latprobe [spin|yield|blocking] (the primary context's scheduling flag).
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <algorithm>
#include <vector>
#define CK(x) do { cudaError_t r_ = (x); if (r_ != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(r_)); exit(1);} } while (0)
#define CD(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s_ = "?"; cuGetErrorName(r_, &s_); fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); exit(1);} } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
static volatile unsigned* hflag; static CUdeviceptr dflag; static unsigned epoch;
static cudaStream_t s;

__global__ void kcopy(unsigned long long* dst, const unsigned long long* src, unsigned* flag, unsigned e) {
  *dst = *src; __threadfence_system(); *(volatile unsigned*)flag = e;
}

enum Wait { SYNC, QUERY, FLAG };
static void wait_for(Wait w) {
  if (w == SYNC) { CK(cudaStreamSynchronize(s)); return; }
  if (w == QUERY) { while (cudaStreamQuery(s) == cudaErrorNotReady) {} return; }
  ++epoch; CD(cuStreamWriteValue32((CUstream)s, dflag, epoch, 0));
  while (*hflag != epoch) {}
}
template <class F> static void time_case(const char* name, F op, int n = 2000) {
  std::vector<double> t; t.reserve(n);
  for (int i = 0; i < n + 100; i++) { double t0 = now(); op(); double d = now() - t0; if (i >= 100) t.push_back(d); }
  std::sort(t.begin(), t.end());
  printf("%-44s median %7.2f us  p10 %7.2f us\n", name, t[n / 2], t[n / 10]);
  fflush(stdout);
}

int main(int argc, char** argv) {
  const char* sched = argc > 1 ? argv[1] : "auto";
  // The IPC owner: a child that allocates, exports, and waits for the parent.
  int p2c[2], c2p[2]; if (pipe(p2c) || pipe(c2p)) return 1;
  pid_t child = fork();
  if (child == 0) {
    CK(cudaSetDevice(0)); void* b; CK(cudaMalloc(&b, 1 << 20)); CK(cudaMemset(b, 7, 1 << 20));
    cudaIpcMemHandle_t h; CK(cudaIpcGetMemHandle(&h, b));
    if (write(c2p[1], &h, sizeof h) != sizeof h) return 2;
    char c; if (read(p2c[0], &c, 1) != 1) return 3; return 0;
  }
  unsigned fl = !strcmp(sched, "spin") ? cudaDeviceScheduleSpin : !strcmp(sched, "yield") ? cudaDeviceScheduleYield : !strcmp(sched, "blocking") ? cudaDeviceScheduleBlockingSync : cudaDeviceScheduleAuto;
  CK(cudaSetDeviceFlags(fl | cudaDeviceMapHost));
  CK(cudaSetDevice(0)); CK(cudaFree(0));
  printf("latprobe: sched %s\n", sched);
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* hf; CK(cudaHostAlloc(&hf, 4096, cudaHostAllocMapped)); hflag = (volatile unsigned*)hf; *hflag = 0;
  void* df; CK(cudaHostGetDevicePointer(&df, hf, 0)); dflag = (CUdeviceptr)df;
  void *d1, *d2; CK(cudaMalloc(&d1, 1 << 20)); CK(cudaMalloc(&d2, 1 << 20));
  void* pin; CK(cudaHostAlloc(&pin, 1 << 20, cudaHostAllocMapped)); void* pindev; CK(cudaHostGetDevicePointer(&pindev, pin, 0));
  char* pageable = (char*)malloc(1 << 20); memset(pageable, 1, 1 << 20);
  cudaIpcMemHandle_t h; if (read(c2p[0], &h, sizeof h) != sizeof h) return 4;
  void* peer; CK(cudaIpcOpenMemHandle(&peer, h, cudaIpcMemLazyEnablePeerAccess));
  const Wait ws[3] = {SYNC, QUERY, FLAG}; const char* wn[3] = {"sync", "query", "flag"};
  char name[96];
  for (int k = 0; k < 3; k++) {
    Wait w = ws[k];
    snprintf(name, sizeof name, "D2D 8 B, %s", wn[k]);
    time_case(name, [&] { CK(cudaMemcpyAsync(d1, d2, 8, cudaMemcpyDeviceToDevice, s)); wait_for(w); });
    snprintf(name, sizeof name, "D2D 8 B from IPC mapping, %s", wn[k]);
    time_case(name, [&] { CK(cudaMemcpyAsync(d1, peer, 8, cudaMemcpyDeviceToDevice, s)); wait_for(w); });
    snprintf(name, sizeof name, "D2H 8 B into pinned, %s", wn[k]);
    time_case(name, [&] { CK(cudaMemcpyAsync(pin, d1, 8, cudaMemcpyDeviceToHost, s)); wait_for(w); });
    snprintf(name, sizeof name, "H2D 8 B from pinned, %s", wn[k]);
    time_case(name, [&] { CK(cudaMemcpyAsync(d1, pin, 8, cudaMemcpyHostToDevice, s)); wait_for(w); });
    snprintf(name, sizeof name, "H2D 8 B from pageable (async call), %s", wn[k]);
    time_case(name, [&] { CK(cudaMemcpyAsync(d1, pageable, 8, cudaMemcpyHostToDevice, s)); wait_for(w); });
    snprintf(name, sizeof name, "writeValue64 into device, %s", wn[k]);
    time_case(name, [&] { CD(cuStreamWriteValue64((CUstream)s, (CUdeviceptr)d1, 42, 0)); wait_for(w); });
    snprintf(name, sizeof name, "kernel copy 8 B (no flag), %s", wn[k]);
    time_case(name, [&] { kcopy<<<1, 1, 0, s>>>((unsigned long long*)d1, (const unsigned long long*)d2, (unsigned*)d2 + 64, 0); wait_for(w); });
  }
  time_case("D2H 8 B cudaMemcpy (sync, pageable)", [&] { CK(cudaMemcpy(pageable, d1, 8, cudaMemcpyDeviceToHost)); });
  time_case("H2D 8 B cudaMemcpy (sync, pageable)", [&] { CK(cudaMemcpy(d1, pageable, 8, cudaMemcpyHostToDevice)); });
  time_case("kernel copy 8 B from IPC mapping, kflag", [&] { ++epoch; kcopy<<<1, 1, 0, s>>>((unsigned long long*)d1, (const unsigned long long*)peer, (unsigned*)df, epoch); while (*hflag != epoch) {} });
  time_case("kernel copy 8 B host-mapped->device, kflag", [&] { ++epoch; kcopy<<<1, 1, 0, s>>>((unsigned long long*)d1, (const unsigned long long*)pindev, (unsigned*)df, epoch); while (*hflag != epoch) {} });
  time_case("kernel copy 8 B device->host-mapped, kflag", [&] { ++epoch; kcopy<<<1, 1, 0, s>>>((unsigned long long*)pindev, (const unsigned long long*)d1, (unsigned*)df, epoch); while (*hflag != epoch) {} });
  time_case("D2D 64 KiB from IPC mapping, flag", [&] { CK(cudaMemcpyAsync(d1, peer, 65536, cudaMemcpyDeviceToDevice, s)); wait_for(FLAG); });
  time_case("D2D 64 KiB from IPC mapping, sync", [&] { CK(cudaMemcpyAsync(d1, peer, 65536, cudaMemcpyDeviceToDevice, s)); wait_for(SYNC); });
  CK(cudaIpcCloseMemHandle(peer));
  char c = 'q'; if (write(p2c[1], &c, 1) != 1) return 5; waitpid(child, 0, 0);
  return 0;
}
