// A fake libcuda.so for exercising rankwire-gpu's FFI glue and the selftest's logic on a
// machine without a GPU. It is NOT the CUDA semantics (copies are synchronous, "device"
// memory is host memory, pool/managed/pinned are tagged anonymous mappings); it only
// checks argument passing, symbol resolution, attribute decoding and the IPC child
// protocol. cuMemAlloc uses memfd so a child process can "IPC-open" it through
// /proc/<pid>/fd/<fd>; freed ranges are handed back at the same address, like CUDA does.
//
//   gcc -O2 -shared -fPIC -o /tmp/mockcuda/libcuda.so gpu/tests/mock_libcuda.c
//   LD_LIBRARY_PATH=/tmp/mockcuda /work/target-gpu/release/examples/gpu_selftest
//   LD_LIBRARY_PATH=/tmp/mockcuda cargo test -p rankwire-gpu --features cuda
// MOCKCUDA_LOG=1 logs allocations and IPC opens to stderr.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <sys/mman.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef void *CUcontext, *CUstream, *CUevent;
typedef struct { char reserved[64]; } CUipcMemHandle;

enum { OK = 0, INVALID_VALUE = 1, INVALID_CONTEXT = 201, NOT_READY = 600 };
enum { K_DEV = 1, K_POOL, K_MANAGED, K_HOST, K_IMPORTED };

struct alloc { uintptr_t base; size_t size; int kind; unsigned long long id; int fd; };
static struct alloc tab[4096];
static int ntab;
static struct { uintptr_t base; size_t size; } freed[64];
static int nfreed;
static unsigned long long next_id = 100;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int ctx_dummy;
static __thread void *cur_ctx;
static int log_on = -1;

static void logf_(const char *fmt, unsigned long long a, unsigned long long b) {
    if (log_on < 0) log_on = getenv("MOCKCUDA_LOG") != NULL;
    if (log_on) { fprintf(stderr, "[mockcuda %d] ", getpid()); fprintf(stderr, fmt, a, b); fprintf(stderr, "\n"); }
}

static struct alloc *find(uintptr_t p) {
    for (int i = 0; i < ntab; i++)
        if (p >= tab[i].base && p < tab[i].base + tab[i].size) return &tab[i];
    return NULL;
}

static size_t roundup(size_t n) { size_t pg = 4096; return (n + pg - 1) / pg * pg; }

static void *hint_for(size_t size) {
    for (int i = nfreed - 1; i >= 0; i--)
        if (freed[i].size == size) { void *h = (void *)freed[i].base; freed[i] = freed[--nfreed]; return h; }
    return NULL;
}

static CUresult do_alloc(CUdeviceptr *out, size_t n, int kind) {
    if (n == 0) return INVALID_VALUE;
    if (kind != K_HOST && !cur_ctx) return INVALID_CONTEXT;
    size_t size = roundup(n);
    pthread_mutex_lock(&mu);
    void *hint = hint_for(size);
    int fd = -1;
    void *p;
    if (kind == K_DEV) {
        fd = memfd_create("mockcuda", 0);
        if (fd < 0 || ftruncate(fd, size) != 0) { pthread_mutex_unlock(&mu); return 2; }
        p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    } else {
        p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if (p == MAP_FAILED) { pthread_mutex_unlock(&mu); return 2; }
    tab[ntab++] = (struct alloc){ (uintptr_t)p, n, kind, next_id++, fd };
    pthread_mutex_unlock(&mu);
    *out = (uintptr_t)p;
    logf_("alloc %#llx id %llu", (uintptr_t)p, next_id - 1);
    return OK;
}

static CUresult do_free(uintptr_t p, int want_kind) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < ntab; i++) {
        if (tab[i].base == p && (tab[i].kind == want_kind || (want_kind == K_DEV && tab[i].kind == K_MANAGED) || (want_kind == K_POOL && tab[i].kind == K_POOL))) {
            size_t size = roundup(tab[i].size);
            munmap((void *)p, size);
            if (tab[i].fd >= 0) close(tab[i].fd);
            if (want_kind != K_IMPORTED && nfreed < 64) { freed[nfreed].base = p; freed[nfreed].size = size; nfreed++; }
            tab[i] = tab[--ntab];
            pthread_mutex_unlock(&mu);
            return OK;
        }
    }
    pthread_mutex_unlock(&mu);
    return INVALID_VALUE;
}

CUresult cuInit(unsigned f) { (void)f; return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
CUresult cuDeviceGet(CUdevice *d, int o) { if (o != 0) return 101; *d = 0; return OK; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) { (void)d; snprintf(name, len, "Mock GPU"); return OK; }
CUresult cuDeviceGetAttribute(int *v, int a, CUdevice d) { (void)a; (void)d; *v = 1; return OK; }
CUresult cuDeviceCanAccessPeer(int *c, CUdevice a, CUdevice b) { (void)a; (void)b; *c = 0; return OK; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = &ctx_dummy; return OK; }
CUresult cuCtxSetCurrent(CUcontext c) { cur_ctx = c; return OK; }
CUresult cuCtxGetCurrent(CUcontext *c) { *c = cur_ctx; return OK; }
CUresult cuCtxEnablePeerAccess(CUcontext c, unsigned f) { (void)c; (void)f; return OK; }

static int memtype(int kind) { return kind == K_HOST ? 1 : 2; }

CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr p) {
    pthread_mutex_lock(&mu);
    struct alloc *a = find(p);
    for (unsigned i = 0; i < n; i++) {
        switch (attrs[i]) {
        case 2: *(unsigned *)data[i] = a ? memtype(a->kind) : 0; break;
        case 7: *(unsigned long long *)data[i] = a ? a->id : 0; break;
        case 8: *(unsigned char *)data[i] = a && a->kind == K_MANAGED; break;  // 1 byte on purpose
        case 9: *(int *)data[i] = a ? 0 : -2; break;
        case 11: *(CUdeviceptr *)data[i] = a ? a->base : 0; break;
        case 12: *(size_t *)data[i] = a ? a->size : 0; break;
        default: pthread_mutex_unlock(&mu); return INVALID_VALUE;
        }
    }
    pthread_mutex_unlock(&mu);
    return OK;
}

CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) {
    pthread_mutex_lock(&mu);
    struct alloc *a = find(p);
    pthread_mutex_unlock(&mu);
    if (!a) return INVALID_VALUE;
    if (attr != 7) return INVALID_VALUE;
    *(unsigned long long *)data = a->id;
    return OK;
}

struct mockhandle { char magic[4]; int pid; int fd; int pad; unsigned long long size; unsigned long long id; };

CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
    if (!cur_ctx) return INVALID_CONTEXT;
    pthread_mutex_lock(&mu);
    struct alloc *a = find(p);
    pthread_mutex_unlock(&mu);
    if (!a || a->base != p || a->kind != K_DEV) return INVALID_VALUE;
    struct mockhandle m = { {'M', 'O', 'C', 'K'}, getpid(), a->fd, 0, a->size, a->id };
    memset(h, 0, sizeof *h);
    memcpy(h, &m, sizeof m);
    return OK;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *out, CUipcMemHandle h, unsigned flags) {
    if (!cur_ctx) return INVALID_CONTEXT;
    if (flags != 1) return INVALID_VALUE;
    struct mockhandle m;
    memcpy(&m, &h, sizeof m);
    if (memcmp(m.magic, "MOCK", 4) != 0) return INVALID_VALUE;
    if (m.pid == getpid()) return INVALID_CONTEXT;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", m.pid, m.fd);
    int fd = open(path, O_RDWR);
    if (fd < 0) return INVALID_VALUE;
    void *p = mmap(NULL, roundup(m.size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { close(fd); return 2; }
    pthread_mutex_lock(&mu);
    tab[ntab++] = (struct alloc){ (uintptr_t)p, m.size, K_IMPORTED, next_id++, fd };
    pthread_mutex_unlock(&mu);
    *out = (uintptr_t)p;
    logf_("ipc open -> %#llx (exporter id %llu)", (uintptr_t)p, m.id);
    return OK;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr p) { logf_("ipc close %#llx%.0llu", p, 0); return do_free(p, K_IMPORTED); }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return do_alloc(p, n, K_DEV); }
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { (void)s; return do_alloc(p, n, K_POOL); }
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned f) { if (f != 1) return INVALID_VALUE; return do_alloc(p, n, K_MANAGED); }
CUresult cuMemFree_v2(CUdeviceptr p) { return do_free(p, K_DEV); }
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { (void)s; return do_free(p, K_POOL); }
CUresult cuMemHostAlloc(void **pp, size_t n, unsigned f) {
    (void)f; if (!cur_ctx) return INVALID_CONTEXT;
    CUdeviceptr d; CUresult r = do_alloc(&d, n, K_HOST); *pp = (void *)(uintptr_t)d; return r;
}
CUresult cuMemFreeHost(void *p) { return do_free((uintptr_t)p, K_HOST); }

static int dev_ok(CUdeviceptr p, size_t n) {
    pthread_mutex_lock(&mu);
    struct alloc *a = find(p);
    int ok = a && a->kind != K_HOST && p + n <= a->base + a->size;
    pthread_mutex_unlock(&mu);
    return ok;
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { (void)s; if (!dev_ok(d, n)) return INVALID_VALUE; memset((void *)(uintptr_t)d, v, n); return OK; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { (void)st; if (!dev_ok(d, n) || !dev_ok(s, n)) return INVALID_VALUE; memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); return OK; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) { (void)st; if (!dev_ok(d, n)) return INVALID_VALUE; memcpy((void *)(uintptr_t)d, s, n); return OK; }
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) { (void)st; if (!dev_ok(s, n)) return INVALID_VALUE; memcpy(d, (void *)(uintptr_t)s, n); return OK; }
CUresult cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st) { (void)dc; (void)sc; return cuMemcpyDtoDAsync_v2(d, s, n, st); }

CUresult cuMemGetHandleForAddressRange(void *h, CUdeviceptr p, size_t n, int type, unsigned long long flags) {
    if (type != 1 || flags != 0) return INVALID_VALUE;
    if (p % 4096 || n % 4096) return INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct alloc *a = find(p);
    int ok = a && (a->kind == K_DEV || a->kind == K_POOL) && p + n <= a->base + roundup(a->size);
    pthread_mutex_unlock(&mu);
    if (!ok) return INVALID_VALUE;
    *(int *)h = memfd_create("mockdmabuf", 0);
    return OK;
}

struct ev { struct timespec t; };
CUresult cuStreamCreate(CUstream *s, unsigned f) { if (f != 1) return INVALID_VALUE; if (!cur_ctx) return INVALID_CONTEXT; *s = malloc(8); return OK; }
CUresult cuStreamDestroy_v2(CUstream s) { free(s); return OK; }
CUresult cuStreamSynchronize(CUstream s) { (void)s; return OK; }
CUresult cuStreamQuery(CUstream s) { (void)s; return OK; }
CUresult cuEventCreate(CUevent *e, unsigned f) { (void)f; if (!cur_ctx) return INVALID_CONTEXT; *e = calloc(1, sizeof(struct ev)); return OK; }
CUresult cuEventRecord(CUevent e, CUstream s) { (void)s; clock_gettime(CLOCK_MONOTONIC, &((struct ev *)e)->t); return OK; }
CUresult cuEventQuery(CUevent e) { (void)e; return OK; }
CUresult cuEventSynchronize(CUevent e) { (void)e; return OK; }
CUresult cuEventDestroy_v2(CUevent e) { free(e); return OK; }
CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) {
    struct timespec x = ((struct ev *)a)->t, y = ((struct ev *)b)->t;
    *ms = (float)((y.tv_sec - x.tv_sec) * 1e3 + (y.tv_nsec - x.tv_nsec) / 1e6);
    return OK;
}
