// Cost of cuIpcGetMemHandle and cuPointerGetAttributes by allocation size.
#include <cuda.h>
#include <stdio.h>
#include <time.h>
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main() {
  CUdevice dev; CUcontext ctx; cuInit(0); cuDeviceGet(&dev, 0); cuDevicePrimaryCtxRetain(&ctx, dev); cuCtxSetCurrent(ctx);
  size_t sizes[] = {1 << 20, 64 << 20, 256 << 20, 512 << 20, 1024ul << 20, 2048ul << 20};
  for (int i = 0; i < 6; ++i) {
    CUdeviceptr d; if (cuMemAlloc(&d, sizes[i])) { printf("alloc failed\n"); return 1; }
    CUipcMemHandle h; cuIpcGetMemHandle(&h, d);
    double t0 = now(); for (int k = 0; k < 10; ++k) cuIpcGetMemHandle(&h, d); double t1 = now();
    unsigned long long id; double t2 = now(); for (int k = 0; k < 10; ++k) cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, d); double t3 = now();
    printf("%5zu MiB: cuIpcGetMemHandle %.1f us, cuPointerGetAttribute %.2f us\n", sizes[i] >> 20, (t1 - t0) / 10 * 1e6, (t3 - t2) / 10 * 1e6);
    cuMemFree(d);
  }
  return 0;
}
