/* rankwire-test: ranks=2,3 */
/* shm_stress: end-to-end stress of the shared-memory ring format (32-byte slots, skip
 * slots, short and long envelopes, wrap-around) and of the short eager header, through
 * the MPI standard ABI. Every message i from src to dst has a size (concentrated around
 * the ring's thresholds: 0-100 B, 4071-4111 B, 8/16/32/64 KiB, up to 300 KiB), tag,
 * communicator and payload that are pure functions of (seed, src, dst, i); every
 * received byte, MPI_Get_count, the status source and tag, and guard bytes around each
 * receive buffer are checked. Phases: a windows of nonblocking sends/receives with
 * MPI_Waitall; b blocking ping-pong; c all-to-all at once; d MPI_ANY_SOURCE with
 * non-overtaking checks (also through probes and matched probes); e bursts against a
 * sleeping receiver (senders block on a full ring); s a flood of 1-40 B messages.
 * Without arguments (as the test suite runs it): a fixed seed at a small scale, the
 * smallest ring (16 KiB, so constant wrap-around) and cross-memory attach off (large
 * messages in chunks through the ring), unless RANKWIRE_SHM_RING_BYTES / RANKWIRE_CMA
 * are set. With arguments: stress SEED SCALE PHASES [SMALLCOUNT].
 * Written by a trial of session 53 that tried to break the ring format. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

static int rank, nprocs;
static uint64_t base_seed;
static long long nerr = 0, nmsgs = 0, nbytes = 0;
static uint32_t *sidx, *ridx; /* per-peer message counters (sent to / received from) */
static size_t ring_bytes = 1 << 20;
static const char *phase_name = "init";
static int cur_iter = 0;

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33; return x;
}
static uint64_t rank_seed(int r) { return mix64(base_seed * 1000003ULL + (uint64_t)r * 7919ULL + 1); }
static inline uint64_t msg_hash(int src, int dst, uint32_t idx, uint64_t salt) {
    return mix64(rank_seed(src) ^ ((uint64_t)dst << 40) ^ ((uint64_t)idx << 8) ^ (salt * 0x9E3779B97F4A7C15ULL));
}
/* shared (rank-independent) randomness for phase shapes */
static inline uint64_t shared_hash(uint64_t a, uint64_t b, uint64_t c) {
    return mix64(base_seed * 0x51ULL ^ (a << 32) ^ (b << 16) ^ c ^ 0xabcdef);
}

enum { CL_MIX = 0, CL_SMALL40 = 1, CL_BURST = 2, CL_MIDCAP = 3 };

static const size_t special[] = {0, 1, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 39, 40, 41,
    47, 48, 49, 55, 56, 57, 63, 64, 65, 72, 73, 88, 89, 4071, 4072, 4073, 4079, 4080, 4081,
    4087, 4088, 4089, 4095, 4096, 4097, 4103, 4104, 4105, 32767, 32768, 32769, 16383, 16384,
    16385, 8191, 8192, 8193};

static size_t msg_size(int src, int dst, uint32_t idx, int cls) {
    uint64_t h = msg_hash(src, dst, idx, 0x51);
    uint32_t r = (uint32_t)(h % 1000);
    uint64_t h2 = h >> 20;
    if (cls == CL_SMALL40) return 1 + h2 % 40;
    if (cls == CL_BURST) {
        if (r < 450) return 1 + h2 % 64;
        if (r < 650) return h2 % 101;
        if (r < 850) return 4080 + h2 % 32;
        if (r < 950) return 101 + h2 % 3980;
        return 8192 - 24 + h2 % 49; /* rendezvous while the ring is full */
    }
    size_t s;
    if (r < 300) s = 1 + h2 % 64;
    else if (r < 420) s = h2 % 101;
    else if (r < 560) s = 4080 + h2 % 32;
    else if (r < 620) s = 8192 - 24 + h2 % 49;
    else if (r < 680) s = 16384 - 24 + h2 % 49;
    else if (r < 710) s = 32768 - 24 + h2 % 49;
    else if (r < 760) s = 65536 - 24 + h2 % 49;
    else if (r < 790) s = h2 % (300 * 1024 + 1);
    else if (r < 900) s = special[h2 % (sizeof special / sizeof special[0])];
    else s = 101 + h2 % 3980;
    if (cls == CL_MIDCAP && s > 70000) s = 70000 - (h2 % 64);
    return s;
}
static int tag_ub = 32767;
static const int tag_map_small[4] = {0, 1, 2, 3};
static int tag_map[7];
static int tag_raw(int src, int dst, uint32_t idx, int ntags) {
    return (int)(msg_hash(src, dst, idx, 0x7a) % (uint64_t)ntags);
}
static int msg_tag(int src, int dst, uint32_t idx, int ntags) {
    (void)tag_map_small;
    return tag_map[tag_raw(src, dst, idx, ntags)];
}
/* communicators: WORLD and two duplicates; a message's communicator is a pure
 * function of (src, dst, idx) too */
static MPI_Comm comms[3];
static MPI_Comm msg_comm(int src, int dst, uint32_t idx) {
    return comms[msg_hash(src, dst, idx, 0x3c) % 3];
}
static inline uint8_t pat(uint32_t k, size_t off) {
    uint32_t v = k + (uint32_t)off * 2654435761u;
    return (uint8_t)((v >> 24) ^ (v >> 11));
}
static void fill(uint8_t *b, size_t n, int src, int dst, uint32_t idx) {
    uint32_t k = (uint32_t)msg_hash(src, dst, idx, 0x99);
    for (size_t i = 0; i < n; i++) b[i] = pat(k, i);
}

/* ---- buffers with guard bytes and a per-message alignment offset ---- */
#define GUARD 0x5A
typedef struct {
    uint8_t *raw, *buf;
    size_t cap, rawlen;
} Buf;

static void buf_alloc(Buf *b, size_t cap, unsigned align_off, int poison) {
    b->rawlen = cap + 256;
    b->raw = malloc(b->rawlen);
    if (!b->raw) { fprintf(stderr, "malloc failed\n"); MPI_Abort(MPI_COMM_WORLD, 3); }
    uintptr_t base = ((uintptr_t)b->raw + 64 + 63) & ~(uintptr_t)63;
    b->buf = (uint8_t *)base + (align_off & 63);
    b->cap = cap;
    if (poison) memset(b->raw, GUARD, b->rawlen);
}
static void buf_free(Buf *b) { free(b->raw); b->raw = b->buf = NULL; }

static void report(const char *what, int src, int dst, uint32_t idx, const char *fmt, long long a, long long b2) {
    nerr++;
    if (nerr <= 30) {
        char msg[256];
        snprintf(msg, sizeof msg, fmt, a, b2);
        fprintf(stderr, "ERROR rank %d phase %s iter %d: %s src %d dst %d idx %u (seed %llu): %s\n",
                rank, phase_name, cur_iter, what, src, dst, idx, (unsigned long long)base_seed, msg);
        fflush(stderr);
    }
}

/* Check a completed receive of message idx from src to me. tag<0: don't check tag. */
static void check_recv(Buf *b, MPI_Status *st, int src, uint32_t idx, int tag, size_t size) {
    int count = -1;
    MPI_Get_count(st, MPI_BYTE, &count);
    nmsgs++;
    nbytes += size;
#ifdef SELFTEST /* checker self-test: corrupt one byte and the guard once */
    if (nmsgs == 100 && size > 0) b->buf[size / 2] ^= 1;
    if (nmsgs == 101) b->buf[size] ^= 1;
#endif
    if (st->MPI_SOURCE != src) report("source", src, rank, idx, "got %lld expected %lld", st->MPI_SOURCE, src);
    if (tag >= 0 && st->MPI_TAG != tag) report("tag", src, rank, idx, "got %lld expected %lld", st->MPI_TAG, tag);
    if (count != (int)size) report("count", src, rank, idx, "got %lld expected %lld", count, (long long)size);
    uint32_t k = (uint32_t)msg_hash(src, rank, idx, 0x99);
    for (size_t i = 0; i < size; i++) {
        if (b->buf[i] != pat(k, i)) {
            size_t nbad = 0;
            for (size_t j = i; j < size; j++) nbad += b->buf[j] != pat(k, j);
            char m[200];
            snprintf(m, sizeof m, "size %zu first bad byte at %%lld (got 0x%02x want 0x%02x), %zu bad bytes; bufalign %u",
                     size, b->buf[i], pat(k, i), nbad, (unsigned)((uintptr_t)b->buf & 63));
            report("payload", src, rank, idx, m, (long long)i, 0);
            break;
        }
    }
    for (uint8_t *p = b->raw; p < b->buf; p++)
        if (*p != GUARD) { report("guard-before", src, rank, idx, "byte %lld before buffer overwritten (size %lld)", (long long)(b->buf - p), (long long)size); break; }
    for (uint8_t *p = b->buf + size; p < b->raw + b->rawlen; p++)
        if (*p != GUARD) { report("guard-after", src, rank, idx, "byte %lld past message end overwritten (size %lld)", (long long)(p - b->buf - size), (long long)size); break; }
}

static void make_send(Buf *b, int dst, uint32_t idx, size_t size) {
    buf_alloc(b, size, (unsigned)(msg_hash(rank, dst, idx, 0x33) & 63), 0);
    fill(b->buf, size, rank, dst, idx);
}
static void make_recv(Buf *b, int src, uint32_t idx, size_t size) {
    uint64_t h = msg_hash(src, rank, idx, 0x44);
    size_t extra = (h >> 8) % 4 == 0 ? 0 : (h >> 16) % 100;
    buf_alloc(b, size + extra, (unsigned)(h & 63), 1);
}

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static void phase_begin(const char *name) {
    phase_name = name;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) { fprintf(stderr, "[%.2f] phase %s\n", now(), name); fflush(stderr); }
}

/* ---------------- (a) windows of 1-128 nonblocking messages ---------------- */
static void phase_windows(int iters) {
    phase_begin("a-windows");
    for (int it = 0; it < iters; it++) {
        cur_iter = it;
        for (int s = 1; s < nprocs; s++) {
            int dst = (rank + s) % nprocs, src = (rank - s + nprocs) % nprocs;
            int w = 1 + (int)(shared_hash(1, it, s) % 128);
            int cls = (shared_hash(2, it, s) % 4 == 0) ? CL_MIX : CL_MIDCAP;
            if (shared_hash(3, it, s) % 3 == 0) cls = CL_SMALL40;
            MPI_Request *rq = malloc(sizeof(MPI_Request) * 2 * w);
            MPI_Status *st = malloc(sizeof(MPI_Status) * 2 * w);
            Buf *rb = malloc(sizeof(Buf) * w), *sb = malloc(sizeof(Buf) * w);
            int sends_first = shared_hash(4, it, s) & 1;
            uint32_t rbase = ridx[src], sbase = sidx[dst];
            int anytag_mode = (int)(shared_hash(5, it, s) % 3); /* 0 none, 1 some, 2 all */
            int nq = 0;
            for (int pass = 0; pass < 2; pass++) {
                if ((pass == 0) == (sends_first != 0)) {
                    for (int j = 0; j < w; j++) {
                        uint32_t idx = sbase + j;
                        size_t sz = msg_size(rank, dst, idx, cls);
                        make_send(&sb[j], dst, idx, sz);
                        if (msg_hash(rank, dst, idx, 0x77) % 8 == 0)
                            MPI_Issend(sb[j].buf, (int)sz, MPI_BYTE, dst, msg_tag(rank, dst, idx, 4), msg_comm(rank, dst, idx), &rq[nq++]);
                        else
                            MPI_Isend(sb[j].buf, (int)sz, MPI_BYTE, dst, msg_tag(rank, dst, idx, 4), msg_comm(rank, dst, idx), &rq[nq++]);
                    }
                } else {
                    for (int j = 0; j < w; j++) {
                        uint32_t idx = rbase + j;
                        size_t sz = msg_size(src, rank, idx, cls);
                        make_recv(&rb[j], src, idx, sz);
                        int tag = msg_tag(src, rank, idx, 4);
                        int any = anytag_mode == 2 || (anytag_mode == 1 && (msg_hash(src, rank, idx, 0x55) & 1));
                        MPI_Irecv(rb[j].buf, (int)rb[j].cap, MPI_BYTE, src, any ? MPI_ANY_TAG : tag, msg_comm(src, rank, idx), &rq[nq++]);
                    }
                }
            }
            MPI_Waitall(nq, rq, st);
            int roff = sends_first ? w : 0;
            for (int j = 0; j < w; j++) {
                uint32_t idx = rbase + j;
                check_recv(&rb[j], &st[roff + j], src, idx, msg_tag(src, rank, idx, 4), msg_size(src, rank, idx, cls));
                buf_free(&rb[j]);
                buf_free(&sb[j]);
            }
            ridx[src] += w;
            sidx[dst] += w;
            free(rq); free(st); free(rb); free(sb);
        }
    }
}

/* ---------------- (b) blocking ping-pong ---------------- */
static void phase_pingpong(int iters) {
    phase_begin("b-pingpong");
    for (int round = 0; round < nprocs; round++) {
        int p = (round - rank + 2 * nprocs) % nprocs;
        cur_iter = round;
        if (p == rank) continue;
        int m = iters;
        for (int i = 0; i < m; i++) {
            for (int turn = 0; turn < 2; turn++) {
                int i_send = (turn == 0) == (rank < p);
                if (i_send) {
                    uint32_t idx = sidx[p]++;
                    size_t sz = msg_size(rank, p, idx, CL_MIX);
                    Buf b;
                    make_send(&b, p, idx, sz);
                    int tag = msg_tag(rank, p, idx, 7);
                    if (msg_hash(rank, p, idx, 0x66) % 5 == 0)
                        MPI_Ssend(b.buf, (int)sz, MPI_BYTE, p, tag, MPI_COMM_WORLD);
                    else
                        MPI_Send(b.buf, (int)sz, MPI_BYTE, p, tag, MPI_COMM_WORLD);
                    buf_free(&b);
                } else {
                    uint32_t idx = ridx[p]++;
                    size_t sz = msg_size(p, rank, idx, CL_MIX);
                    Buf b;
                    make_recv(&b, p, idx, sz);
                    int tag = msg_tag(p, rank, idx, 7);
                    int any = msg_hash(p, rank, idx, 0x67) & 1;
                    MPI_Status st;
                    MPI_Recv(b.buf, (int)b.cap, MPI_BYTE, p, any ? MPI_ANY_TAG : tag, MPI_COMM_WORLD, &st);
                    check_recv(&b, &st, p, idx, tag, sz);
                    buf_free(&b);
                }
            }
        }
    }
}

/* ---------------- (c) all-to-all at once ---------------- */
static void phase_alltoall(int iters) {
    phase_begin("c-alltoall");
    int n = nprocs;
    for (int it = 0; it < iters; it++) {
        cur_iter = it;
        int k = 1 + (int)(shared_hash(10, it, 0) % 24);
        int cls = shared_hash(11, it, 0) % 3 == 0 ? CL_MIDCAP : CL_SMALL40;
        if (shared_hash(12, it, 0) % 4 == 0) cls = CL_BURST;
        int tot = k * (n - 1);
        MPI_Request *rq = malloc(sizeof(MPI_Request) * 2 * tot);
        MPI_Status *st = malloc(sizeof(MPI_Status) * 2 * tot);
        Buf *rb = malloc(sizeof(Buf) * tot), *sb = malloc(sizeof(Buf) * tot);
        int *rsrc = malloc(sizeof(int) * tot);
        uint32_t *ridxs = malloc(sizeof(uint32_t) * tot);
        int *rslot = malloc(sizeof(int) * tot); /* request index of each recv */
        int *sent = calloc(n, sizeof(int)), *recvd = calloc(n, sizeof(int));
        int nq = 0, nr = 0, ns = 0;
        uint64_t rs = mix64(rank_seed(rank) ^ (uint64_t)it * 77);
        while (ns < tot || nr < tot) {
            rs = mix64(rs + 1);
            int peer = (int)(rs % (uint64_t)n);
            if (peer == rank) continue;
            int do_send = (rs >> 20) & 1;
            if (do_send && sent[peer] < k) {
                uint32_t idx = sidx[peer]++;
                size_t sz = msg_size(rank, peer, idx, cls);
                make_send(&sb[ns], peer, idx, sz);
                MPI_Isend(sb[ns].buf, (int)sz, MPI_BYTE, peer, msg_tag(rank, peer, idx, 4), msg_comm(rank, peer, idx), &rq[nq++]);
                ns++; sent[peer]++;
            } else if (!do_send && recvd[peer] < k) {
                uint32_t idx = ridx[peer]++;
                size_t sz = msg_size(peer, rank, idx, cls);
                make_recv(&rb[nr], peer, idx, sz);
                rsrc[nr] = peer; ridxs[nr] = idx; rslot[nr] = nq;
                MPI_Irecv(rb[nr].buf, (int)rb[nr].cap, MPI_BYTE, peer, msg_tag(peer, rank, idx, 4), msg_comm(peer, rank, idx), &rq[nq++]);
                nr++; recvd[peer]++;
            }
        }
        if (it % 2) {
            MPI_Waitall(nq, rq, st);
        } else { /* complete in whatever order with Waitany */
            for (int d = 0; d < nq; d++) {
                int which; MPI_Status s1;
                MPI_Waitany(nq, rq, &which, &s1);
                st[which] = s1;
            }
        }
        for (int j = 0; j < nr; j++) {
            check_recv(&rb[j], &st[rslot[j]], rsrc[j], ridxs[j], msg_tag(rsrc[j], rank, ridxs[j], 4), msg_size(rsrc[j], rank, ridxs[j], cls));
            buf_free(&rb[j]);
        }
        for (int j = 0; j < ns; j++) buf_free(&sb[j]);
        free(rq); free(st); free(rb); free(sb); free(rsrc); free(ridxs); free(rslot); free(sent); free(recvd);
    }
}

/* ---------------- (d) ANY_SOURCE with per-source ordering ---------------- */
static void phase_anysource(int iters) {
    phase_begin("d-anysource");
    int n = nprocs;
    for (int it = 0; it < iters; it++) {
        cur_iter = it;
        int root = it % n;
        int K = 1 + (int)(shared_hash(20, it, 0) % 40);
        int cls = shared_hash(21, it, 0) % 2 ? CL_SMALL40 : CL_MIDCAP;
        int variant = (int)(shared_hash(22, it, 0) % 5);
        if (rank != root) {
            MPI_Request *rq = malloc(sizeof(MPI_Request) * K);
            Buf *sb = malloc(sizeof(Buf) * K);
            for (int j = 0; j < K; j++) {
                uint32_t idx = sidx[root]++;
                size_t sz = msg_size(rank, root, idx, cls);
                make_send(&sb[j], root, idx, sz);
                MPI_Isend(sb[j].buf, (int)sz, MPI_BYTE, root, msg_tag(rank, root, idx, 2), MPI_COMM_WORLD, &rq[j]);
            }
            MPI_Waitall(K, rq, MPI_STATUSES_IGNORE);
            for (int j = 0; j < K; j++) buf_free(&sb[j]);
            free(rq); free(sb);
        } else {
            int tot = K * (n - 1);
            size_t maxsz = 0;
            int ntag[2] = {0, 0};
            for (int s = 0; s < n; s++) {
                if (s == rank) continue;
                for (int j = 0; j < K; j++) {
                    uint32_t idx = ridx[s] + j;
                    size_t sz = msg_size(s, rank, idx, cls);
                    if (sz > maxsz) maxsz = sz;
                    ntag[tag_raw(s, rank, idx, 2)]++;
                }
            }
            /* next expected index per (source, tag) (variant 1) or per source */
            uint32_t *nxt = malloc(sizeof(uint32_t) * n * 2);
            uint32_t *end = malloc(sizeof(uint32_t) * n);
            for (int s = 0; s < n; s++) { nxt[2 * s] = nxt[2 * s + 1] = ridx[s]; end[s] = ridx[s] + K; }
            Buf *rb = malloc(sizeof(Buf) * tot);
            MPI_Status *st = malloc(sizeof(MPI_Status) * tot);
            MPI_Request *rq = malloc(sizeof(MPI_Request) * tot);
            int *rtag = malloc(sizeof(int) * tot);
            for (int j = 0; j < tot; j++) {
                buf_alloc(&rb[j], maxsz + (j % 7) * 3, (unsigned)(j * 13), 1);
                if (variant == 1) rtag[j] = j < ntag[1] ? tag_map[1] : tag_map[0];
                else rtag[j] = MPI_ANY_TAG;
            }
            if (variant >= 3) { /* probe (3) or matched probe (4), then receive */
                uint32_t *pn = malloc(sizeof(uint32_t) * n), *pend = malloc(sizeof(uint32_t) * n);
                for (int s = 0; s < n; s++) { pn[s] = ridx[s]; pend[s] = ridx[s] + K; }
                for (int j = 0; j < tot; j++) {
                    MPI_Status pst;
                    MPI_Message msg = MPI_MESSAGE_NULL;
                    if (variant == 3) {
                        MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &pst);
                    } else {
                        int flag = 0;
                        while (!flag) MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &msg, &pst);
                    }
                    int s = pst.MPI_SOURCE, pc = -1;
                    MPI_Get_count(&pst, MPI_BYTE, &pc);
                    if (s >= 0 && s < n && s != rank && pn[s] < pend[s]) {
                        uint32_t idx = pn[s]++;
                        if (pc != (int)msg_size(s, rank, idx, cls)) report("probe-count", s, rank, idx, "probe count %lld expected %lld", pc, (long long)msg_size(s, rank, idx, cls));
                        if (pst.MPI_TAG != msg_tag(s, rank, idx, 2)) report("probe-tag", s, rank, idx, "probe tag %lld expected %lld", pst.MPI_TAG, msg_tag(s, rank, idx, 2));
                    } else report("probe-source", s, rank, 0, "probe #%lld gave source %lld", j, s);
                    if (variant == 3)
                        MPI_Recv(rb[j].buf, (int)rb[j].cap, MPI_BYTE, s, pst.MPI_TAG, MPI_COMM_WORLD, &st[j]);
                    else
                        MPI_Mrecv(rb[j].buf, (int)rb[j].cap, MPI_BYTE, &msg, &st[j]);
                }
                free(pn); free(pend);
            } else if (variant == 2) {
                for (int j = 0; j < tot; j++)
                    MPI_Irecv(rb[j].buf, (int)rb[j].cap, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rq[j]);
                MPI_Waitall(tot, rq, st);
            } else {
                for (int j = 0; j < tot; j++)
                    MPI_Recv(rb[j].buf, (int)rb[j].cap, MPI_BYTE, MPI_ANY_SOURCE, rtag[j], MPI_COMM_WORLD, &st[j]);
            }
            for (int j = 0; j < tot; j++) {
                int s = st[j].MPI_SOURCE;
                if (s < 0 || s >= n || s == rank) {
                    report("anysource-source", s, rank, 0, "recv #%lld got bad source %lld", j, s);
                    continue;
                }
                uint32_t idx;
                if (variant == 1) {
                    int t = rtag[j] == tag_map[1];
                    uint32_t x = nxt[2 * s + t];
                    while (x < end[s] && tag_raw(s, rank, x, 2) != t) x++;
                    if (x >= end[s]) { report("anysource-extra", s, rank, x, "more tag-%lld messages than sent (recv #%lld)", t, j); continue; }
                    idx = x;
                    nxt[2 * s + t] = x + 1;
                } else {
                    idx = nxt[2 * s]++;
                    if (idx >= end[s]) { report("anysource-extra", s, rank, idx, "more messages than sent (recv #%lld) %lld", j, 0); continue; }
                }
                /* for ANY_TAG recvs the tag must still be the sent one: ordering check */
                check_recv(&rb[j], &st[j], s, idx, msg_tag(s, rank, idx, 2), msg_size(s, rank, idx, cls));
            }
            for (int j = 0; j < tot; j++) buf_free(&rb[j]);
            for (int s = 0; s < n; s++) if (s != rank) ridx[s] += K;
            free(nxt); free(end); free(rb); free(st); free(rq); free(rtag);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

/* ---------------- (e) bursts against a sleeping receiver ---------------- */
static int burst_count(int src, int dst, uint32_t base, size_t target) {
    size_t tot = 0; int c = 0;
    while (tot < target) { tot += msg_size(src, dst, base + c, CL_BURST) + 32; c++; }
    return c;
}
static void phase_burst(int iters) {
    phase_begin("e-burst");
    int n = nprocs;
    for (int it = 0; it < iters; it++) {
        cur_iter = it;
        int root = it % n;
        int variant = (int)(shared_hash(30, it, 0) % 4);
        size_t target = ring_bytes * 2 + ring_bytes / 2;
        if (target < (size_t)200 * 1024) target = 200 * 1024;
        if (rank != root) {
            int B = burst_count(rank, root, sidx[root], target);
            Buf b;
            if (variant & 1) { /* blocking sends: block on the full ring */
                for (int j = 0; j < B; j++) {
                    uint32_t idx = sidx[root]++;
                    size_t sz = msg_size(rank, root, idx, CL_BURST);
                    make_send(&b, root, idx, sz);
                    MPI_Send(b.buf, (int)sz, MPI_BYTE, root, msg_tag(rank, root, idx, 4), MPI_COMM_WORLD);
                    buf_free(&b);
                }
            } else {
                MPI_Request *rq = malloc(sizeof(MPI_Request) * B);
                Buf *sb = malloc(sizeof(Buf) * B);
                for (int j = 0; j < B; j++) {
                    uint32_t idx = sidx[root]++;
                    size_t sz = msg_size(rank, root, idx, CL_BURST);
                    make_send(&sb[j], root, idx, sz);
                    MPI_Isend(sb[j].buf, (int)sz, MPI_BYTE, root, msg_tag(rank, root, idx, 4), MPI_COMM_WORLD, &rq[j]);
                }
                MPI_Waitall(B, rq, MPI_STATUSES_IGNORE);
                for (int j = 0; j < B; j++) buf_free(&sb[j]);
                free(rq); free(sb);
            }
        } else {
            usleep(10000 + (useconds_t)(shared_hash(31, it, 0) % 40001));
            if (variant < 2) { /* per source in order, blocking, with a nap halfway */
                for (int s = 0; s < n; s++) {
                    if (s == rank) continue;
                    int B = burst_count(s, rank, ridx[s], target);
                    for (int j = 0; j < B; j++) {
                        if (j == B / 2) usleep(10000 + (useconds_t)(shared_hash(32, it, s) % 40001));
                        uint32_t idx = ridx[s]++;
                        size_t sz = msg_size(s, rank, idx, CL_BURST);
                        Buf b; MPI_Status st;
                        make_recv(&b, s, idx, sz);
                        int tag = msg_tag(s, rank, idx, 4);
                        MPI_Recv(b.buf, (int)b.cap, MPI_BYTE, s, tag, MPI_COMM_WORLD, &st);
                        check_recv(&b, &st, s, idx, tag, sz);
                        buf_free(&b);
                    }
                }
            } else { /* everything at once, nonblocking */
                int tot = 0;
                int *Bs = malloc(sizeof(int) * n);
                for (int s = 0; s < n; s++) { Bs[s] = s == rank ? 0 : burst_count(s, rank, ridx[s], target); tot += Bs[s]; }
                MPI_Request *rq = malloc(sizeof(MPI_Request) * (tot + 1));
                MPI_Status *st = malloc(sizeof(MPI_Status) * (tot + 1));
                Buf *rb = malloc(sizeof(Buf) * tot);
                int *rs = malloc(sizeof(int) * tot); uint32_t *ri = malloc(sizeof(uint32_t) * tot);
                int q = 0;
                for (int s = 0; s < n; s++)
                    for (int j = 0; j < Bs[s]; j++) {
                        uint32_t idx = ridx[s]++;
                        size_t sz = msg_size(s, rank, idx, CL_BURST);
                        make_recv(&rb[q], s, idx, sz);
                        rs[q] = s; ri[q] = idx;
                        MPI_Irecv(rb[q].buf, (int)rb[q].cap, MPI_BYTE, s, msg_tag(s, rank, idx, 4), MPI_COMM_WORLD, &rq[q]);
                        q++;
                    }
                MPI_Waitall(tot, rq, st);
                for (int j = 0; j < tot; j++) {
                    check_recv(&rb[j], &st[j], rs[j], ri[j], msg_tag(rs[j], rank, ri[j], 4), msg_size(rs[j], rank, ri[j], CL_BURST));
                    buf_free(&rb[j]);
                }
                free(Bs); free(rq); free(st); free(rb); free(rs); free(ri);
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

/* ---------------- (s) millions of small messages between ranks 0 and 1 ---------------- */
static void phase_small(long long count) {
    phase_begin("s-small");
    if (rank > 1) return;
    int p = 1 - rank;
    long long done_s = 0, done_r = 0;
    MPI_Request rq[256];
    MPI_Status st[256];
    static uint8_t sbuf[128][128], rbuf[128][256];
    uint32_t ri[128];
    int it = 0;
    while (done_s < count || done_r < count) {
        cur_iter = it;
        /* window sizes are shared so both sides agree per direction */
        int ws = 1 + (int)(shared_hash(40, it, rank) % 128), wr = 1 + (int)(shared_hash(40, it, p) % 128);
        if (ws > count - done_s) ws = (int)(count - done_s);
        if (wr > count - done_r) wr = (int)(count - done_r);
        int nq = 0;
        int anytag = (int)(shared_hash(41, it, p) % 3 == 0);
        for (int j = 0; j < wr; j++) {
            uint32_t idx = ridx[p] + j;
            ri[j] = idx;
            size_t sz = msg_size(p, rank, idx, CL_SMALL40);
            memset(rbuf[j], GUARD, 256);
            MPI_Irecv(rbuf[j] + 64 + (idx & 63), (int)sz + (int)(idx % 3), MPI_BYTE, p,
                      anytag ? MPI_ANY_TAG : msg_tag(p, rank, idx, 4), msg_comm(p, rank, idx), &rq[nq++]);
        }
        for (int j = 0; j < ws; j++) {
            uint32_t idx = sidx[p] + j;
            size_t sz = msg_size(rank, p, idx, CL_SMALL40);
            uint8_t *b = sbuf[j] + (idx * 7 & 63);
            fill(b, sz, rank, p, idx);
            MPI_Isend(b, (int)sz, MPI_BYTE, p, msg_tag(rank, p, idx, 4), msg_comm(rank, p, idx), &rq[nq++]);
        }
        MPI_Waitall(nq, rq, st);
        for (int j = 0; j < wr; j++) {
            uint32_t idx = ri[j];
            size_t sz = msg_size(p, rank, idx, CL_SMALL40);
            Buf b = {rbuf[j], rbuf[j] + 64 + (idx & 63), 0, 256};
            check_recv(&b, &st[j], p, idx, msg_tag(p, rank, idx, 4), sz);
        }
        ridx[p] += wr; sidx[p] += ws;
        done_r += wr; done_s += ws;
        it++;
    }
}

int main(int argc, char **argv) {
    int defaults = argc < 4;
    if (defaults) {
        setenv("RANKWIRE_SHM_RING_BYTES", "16384", 0);
        setenv("RANKWIRE_CMA", "0", 0);
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    base_seed = defaults ? 20261207 : strtoull(argv[1], NULL, 0);
    int scale = defaults ? 12 : atoi(argv[2]);
    const char *phases = defaults ? "abcdes" : argv[3];
    long long smallcount = argc > 4 ? atoll(argv[4]) : defaults ? 500000 : 1000000;
    const char *rb = getenv("RANKWIRE_SHM_RING_BYTES");
    if (rb && *rb) {
        char *e; double v = strtod(rb, &e);
        if (*e == 'K' || *e == 'k') v *= 1024; else if (*e == 'M' || *e == 'm') v *= 1 << 20;
        ring_bytes = (size_t)v;
    }
    {
        int *ub, flag = 0;
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
        if (flag) tag_ub = *ub;
        int m[7] = {0, tag_ub, 1, 65535, 65536, tag_ub - 1, 0x7fff};
        memcpy(tag_map, m, sizeof m);
        comms[0] = MPI_COMM_WORLD;
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[1]);
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[2]);
        if (rank == 0) printf("tag_ub %d\n", tag_ub);
    }
    sidx = calloc(nprocs, sizeof(uint32_t));
    ridx = calloc(nprocs, sizeof(uint32_t));
    printf("rank %d/%d seed %llu rank_seed 0x%016llx\n", rank, nprocs, (unsigned long long)base_seed,
           (unsigned long long)rank_seed(rank));
    fflush(stdout);
    double t0 = now();
    for (const char *ph = phases; *ph; ph++) {
        switch (*ph) {
        case 'a': phase_windows(4 * scale); break;
        case 'b': phase_pingpong(40 * scale); break;
        case 'c': phase_alltoall(6 * scale); break;
        case 'd': phase_anysource(2 * nprocs * scale); break;
        case 'e': phase_burst(nprocs * scale); break;
        case 's': phase_small(smallcount); break;
        default: break;
        }
    }
    phase_begin("end");
    long long loc[3] = {nerr, nmsgs, nbytes}, glob[3];
    MPI_Reduce(loc, glob, 3, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: seed %llu ranks %d phases %s scale %d: %lld messages, %lld bytes checked, %lld errors, %.2f s\n",
               glob[0] ? "FAIL" : "PASS", (unsigned long long)base_seed, nprocs, phases, scale, glob[1], glob[2], glob[0], now() - t0);
    if (rank == 0 && glob[0] == 0) printf("shm_stress: ok\n");
    fflush(stdout);
    MPI_Comm_free(&comms[1]);
    MPI_Comm_free(&comms[2]);
    MPI_Finalize();
    return glob[0] && rank == 0 ? 1 : 0;
}
