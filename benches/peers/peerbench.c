/*
 * peerbench: small MPI micro-benchmark used to anchor rankwire against its
 * peers (Open MPI, MPICH) on the same machine and in the same run.
 * benches/peers/run.sh builds it against each installed MPI (mpicc.openmpi,
 * mpicc.mpich); rankwire runs the equivalent target/release/rankwire-bench
 * through benches/peers/rankwire-peerbench.sh, which takes these options.
 *
 * Written for this project; the output format only imitates the familiar
 * OSU-style columns so that numbers can be read side by side.
 *
 * Usage: peerbench MODE [options]
 *   MODE      latency | bw | allreduce | barrier | drain
 *   -m A:B    message sizes in bytes, powers of two from A to B
 *             (latency: 0 is always included when A is 0; default 0:4194304,
 *              bw default 1:4194304, allreduce default 4:4194304)
 *   -i N      timed iterations for small messages      (default 10000)
 *   -w N      warm-up iterations for small messages    (default 1000)
 *   -I N      timed iterations for large messages      (default 1000)
 *   -W N      warm-up iterations for large messages    (default 100)
 *   -L B      size (bytes) above which a message is "large" (default 8192)
 *   -S        allreduce: above -L bytes run iters * L / size iterations (at
 *             least 10) and warmup * L / size warm-up ones (at least 2, at
 *             most -w) instead of -I/-W, so every size moves about the same
 *             number of bytes: the rule rankwire-bench uses for collectives
 *             (coll_iters in benches/src/main.rs; keep the two in sync)
 *   -n N      bw window: sends in flight per iteration (default 64); one bw
 *             iteration moves a whole window, so bw runs iters/10 iterations
 *   -s        bw: all receives of a window share one buffer (as OSU does;
 *             formally overlapping receive buffers); default: one buffer
 *             per window slot
 *   -D US     drain: rank 1 sleeps US microseconds before posting its window
 *             (default 100), so that every message is there already
 *   -c        check payload contents once per size (latency, bw, allreduce)
 *   -h        help
 *
 * Units: latency in microseconds (one-way = round trip / 2 for latency
 * mode; per-call average for allreduce and barrier); bandwidth in MB/s with
 * MB = 1e6 bytes.  Collective numbers are averaged over all ranks (each
 * rank's per-call time), min and max over ranks are printed as well.
 */
#include <mpi.h>

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG_DATA 17
#define TAG_ACK 18

struct opts {
    const char *mode;
    size_t min_size, max_size;
    int min_given;
    long iters, warmup, iters_large, warmup_large;
    size_t large_threshold;
    int window;
    int check;
    int shared_rbuf;
    int scale_coll;
    long drain_sleep_us;
};

static int g_rank, g_size;

static void die(const char *msg)
{
    if (g_rank == 0)
        fprintf(stderr, "peerbench: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

static void usage(void)
{
    if (g_rank == 0)
        fprintf(stderr,
                "usage: peerbench latency|bw|allreduce|barrier|drain [-m min:max] "
                "[-i iters] [-w warmup] [-I iters_large] [-W warmup_large] "
                "[-L large_bytes] [-n window] [-D sleep_us] [-c] [-s] [-S]\n");
}

static void *alloc_buf(size_t bytes)
{
    void *p = NULL;
    size_t len = bytes ? bytes : 1;
    long pg = sysconf(_SC_PAGESIZE);
    if (posix_memalign(&p, pg > 0 ? (size_t)pg : 4096, len) != 0)
        die("out of memory");
    memset(p, 0, len); /* fault pages in before timing */
    return p;
}

static void iters_for(const struct opts *o, size_t size, long *iters, long *warm)
{
    if (size > o->large_threshold) {
        *iters = o->iters_large;
        *warm = o->warmup_large;
    } else {
        *iters = o->iters;
        *warm = o->warmup;
    }
}

/* iters_for of a windowed mode: each iteration moves a whole window, so a tenth
 * (at least 1) of the message counts */
static void window_iters_for(const struct opts *o, size_t size, long *iters, long *warm)
{
    iters_for(o, size, iters, warm);
    *iters = *iters / 10 > 0 ? *iters / 10 : 1;
    *warm = *warm / 10 > 0 ? *warm / 10 : 1;
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)((i * 31u + seed) & 0xff);
}

static int verify(const unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)((i * 31u + seed) & 0xff))
            return 0;
    return 1;
}

static void print_header(const struct opts *o, const char *cols)
{
    if (g_rank != 0)
        return;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    /* keep only the first line of the library string */
    for (int i = 0; i < len; i++)
        if (lib[i] == '\n' || lib[i] == '\r') {
            lib[i] = '\0';
            break;
        }
    printf("# peerbench %s, %d ranks\n", o->mode, g_size);
    printf("# library: %s\n", lib);
    if (o->scale_coll && !strcmp(o->mode, "allreduce"))
        printf("# iters %ld (warm-up %ld) up to %zu B, above scaled by %zu/size "
               "(at least 10)\n",
               o->iters, o->warmup, o->large_threshold, o->large_threshold);
    else
        printf("# iters %ld (warm-up %ld) up to %zu B, %ld (warm-up %ld) above\n",
               o->iters, o->warmup, o->large_threshold, o->iters_large,
               o->warmup_large);
    printf("%s\n", cols);
    fflush(stdout);
}

/* -S: iterations for a collective of `size` bytes, as rankwire-bench does */
static void coll_iters_for(const struct opts *o, size_t size, long *iters, long *warm)
{
    size_t base = o->large_threshold ? o->large_threshold : 1;
    size_t div = size > base ? size : base;
    long it = (long)((double)o->iters * (double)base / (double)div);
    long w = (long)((double)o->warmup * (double)base / (double)div);
    *iters = it < 10 ? 10 : it;
    w = w < 10 ? 10 : w;
    w = w > o->warmup ? o->warmup : w;
    *warm = w < 2 ? 2 : w;
}

/* next size: 0 -> 1 -> 2 -> 4 ... */
static size_t next_size(size_t s) { return s == 0 ? 1 : s * 2; }

static void run_latency(const struct opts *o)
{
    if (g_size < 2)
        die("latency needs at least 2 ranks");
    unsigned char *sbuf = alloc_buf(o->max_size);
    unsigned char *rbuf = alloc_buf(o->max_size);
    print_header(o, "# Size          Latency (us)");

    for (size_t size = o->min_size; size <= o->max_size; size = next_size(size)) {
        long iters, warm;
        iters_for(o, size, &iters, &warm);
        int bad = 0;

        if (o->check && g_rank < 2) {
            /* one checked exchange: rank 0 -> 1 -> 0 with distinct patterns */
            if (g_rank == 0) {
                fill(sbuf, size, 1);
                MPI_Send(sbuf, (int)size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD);
                MPI_Recv(rbuf, (int)size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                bad = !verify(rbuf, size, 2);
            } else {
                MPI_Recv(rbuf, (int)size, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                bad = !verify(rbuf, size, 1);
                fill(sbuf, size, 2);
                MPI_Send(sbuf, (int)size, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD);
            }
        }
        int anybad = 0;
        MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
        if (anybad)
            die("latency: payload check failed");

        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = 0.0;
        if (g_rank == 0) {
            for (long i = 0; i < warm + iters; i++) {
                if (i == warm)
                    t0 = MPI_Wtime();
                MPI_Send(sbuf, (int)size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD);
                MPI_Recv(rbuf, (int)size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            }
            double us = (MPI_Wtime() - t0) * 1e6 / (2.0 * (double)iters);
            printf("%-15zu %.2f\n", size, us);
            fflush(stdout);
        } else if (g_rank == 1) {
            for (long i = 0; i < warm + iters; i++) {
                MPI_Recv(rbuf, (int)size, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                MPI_Send(sbuf, (int)size, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD);
            }
        }
        if (size == 0 && o->max_size == 0)
            break;
    }
    free(sbuf);
    free(rbuf);
}

static void run_bw(const struct opts *o)
{
    if (g_size < 2)
        die("bw needs at least 2 ranks");
    int win = o->window;
    unsigned char *sbuf = alloc_buf(o->max_size);
    /* receiver gets one buffer per window slot so that every receive in
     * the window lands in distinct memory */
    size_t slots = o->shared_rbuf ? 1 : (size_t)win;
    size_t stride = 0; /* set per size below */
    unsigned char *rbuf = alloc_buf(o->max_size * slots);
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)win);
    if (!req)
        die("out of memory");
    char ack = 0;
    print_header(o, "# Size          Bandwidth (MB/s)");

    size_t start = o->min_size ? o->min_size : 1;
    for (size_t size = start; size <= o->max_size; size *= 2) {
        long iters, warm;
        window_iters_for(o, size, &iters, &warm);
        int bad = 0;
        stride = o->shared_rbuf ? 0 : size;

        if (o->check && g_rank < 2) {
            if (g_rank == 0) {
                fill(sbuf, size, 3);
                for (int w = 0; w < win; w++)
                    MPI_Isend(sbuf, (int)size, MPI_BYTE, 1, TAG_DATA,
                              MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(win, req, MPI_STATUSES_IGNORE);
                MPI_Recv(&ack, 1, MPI_CHAR, 1, TAG_ACK, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            } else {
                for (int w = 0; w < win; w++)
                    MPI_Irecv(rbuf + (size_t)w * stride, (int)size, MPI_BYTE, 0,
                              TAG_DATA, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(win, req, MPI_STATUSES_IGNORE);
                for (int w = 0; w < win; w++)
                    bad |= !verify(rbuf + (size_t)w * stride, size, 3);
                MPI_Send(&ack, 1, MPI_CHAR, 0, TAG_ACK, MPI_COMM_WORLD);
            }
        }
        int anybad = 0;
        MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
        if (anybad)
            die("bw: payload check failed");

        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = 0.0;
        if (g_rank == 0) {
            for (long i = 0; i < warm + iters; i++) {
                if (i == warm)
                    t0 = MPI_Wtime();
                for (int w = 0; w < win; w++)
                    MPI_Isend(sbuf, (int)size, MPI_BYTE, 1, TAG_DATA,
                              MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(win, req, MPI_STATUSES_IGNORE);
                MPI_Recv(&ack, 1, MPI_CHAR, 1, TAG_ACK, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            }
            double secs = MPI_Wtime() - t0;
            double mbps = (double)size * (double)win * (double)iters / secs / 1e6;
            printf("%-15zu %.2f\n", size, mbps);
            fflush(stdout);
        } else if (g_rank == 1) {
            for (long i = 0; i < warm + iters; i++) {
                for (int w = 0; w < win; w++)
                    MPI_Irecv(rbuf + (size_t)w * stride, (int)size, MPI_BYTE, 0,
                              TAG_DATA, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(win, req, MPI_STATUSES_IGNORE);
                MPI_Send(&ack, 1, MPI_CHAR, 0, TAG_ACK, MPI_COMM_WORLD);
            }
        }
    }
    free(req);
    free(sbuf);
    free(rbuf);
}

/* drain (issue 22): where a window of small messages costs each side, apart from
 * the other side's speed. Per iteration rank 1 sends a token, sleeps -D
 * microseconds (default 100; no MPI call, so no progress), then times posting a
 * window of receives and the MPI_Waitall that completes them: the messages are
 * already in shared memory, so the wait is the receiver's own work of taking them
 * (poll, match, copy, complete). Rank 0 waits for the token, then times posting the
 * window of sends and their MPI_Waitall. Row: size, then ns per message: send post,
 * send wait, receive post, receive wait (rank 1's figures sent to rank 0), then "ok",
 * or "waited" when posting and waiting for the sends took more than half the sleep
 * per window (they waited for the receiver: the messages were not all there).
 * Windows as bw (iters/10, at least 1); one receive buffer per slot (-s refused);
 * exactly 2 ranks take part. rankwire-bench's drain mode is the same loop. */
static void run_drain(const struct opts *o)
{
    if (g_size < 2)
        die("drain needs at least 2 ranks");
    if (o->shared_rbuf)
        die("drain posts one buffer per window slot: leave out -s");
    int win = o->window;
    unsigned char *sbuf = alloc_buf(o->max_size);
    unsigned char *rbuf = alloc_buf(o->max_size * (size_t)win);
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)win);
    if (!req)
        die("out of memory");
    char tok = 0;
    print_header(o, "# Size   send post  send wait  recv post  recv wait  check  (ns per message)");
    size_t start = o->min_size ? o->min_size : 1;
    for (size_t size = start; size <= o->max_size; size *= 2) {
        long iters, warm;
        window_iters_for(o, size, &iters, &warm);
        double post = 0.0, wait = 0.0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (long i = 0; i < warm + iters && g_rank < 2; i++) {
            double t0, t1, t2;
            if (g_rank == 0) {
                MPI_Recv(&tok, 1, MPI_CHAR, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                t0 = MPI_Wtime();
                for (int w = 0; w < win; w++)
                    MPI_Isend(sbuf, (int)size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD, &req[w]);
                t1 = MPI_Wtime();
                MPI_Waitall(win, req, MPI_STATUSES_IGNORE);
                t2 = MPI_Wtime();
            } else {
                MPI_Send(&tok, 1, MPI_CHAR, 0, TAG_ACK, MPI_COMM_WORLD);
                usleep((useconds_t)o->drain_sleep_us);
                t0 = MPI_Wtime();
                for (int w = 0; w < win; w++)
                    MPI_Irecv(rbuf + (size_t)w * size, (int)size, MPI_BYTE, 0, TAG_DATA,
                              MPI_COMM_WORLD, &req[w]);
                t1 = MPI_Wtime();
                MPI_Waitall(win, req, MPI_STATUSES_IGNORE);
                t2 = MPI_Wtime();
            }
            if (i >= warm) {
                post += t1 - t0;
                wait += t2 - t1;
            }
        }
        double per = 1e9 / ((double)iters * (double)win);
        double mine[2] = {post * per, wait * per}, theirs[2] = {0.0, 0.0};
        if (g_rank == 1)
            MPI_Send(mine, 2, MPI_DOUBLE, 0, TAG_ACK, MPI_COMM_WORLD);
        else if (g_rank == 0) {
            MPI_Recv(theirs, 2, MPI_DOUBLE, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            int waited = (mine[0] + mine[1]) * win > (double)o->drain_sleep_us * 500.0;
            printf("%-8zu %9.1f %10.1f %10.1f %10.1f  %s\n", size, mine[0], mine[1], theirs[0],
                   theirs[1], waited ? "waited" : "ok");
            fflush(stdout);
        }
    }
    free(req);
    free(sbuf);
    free(rbuf);
}

/* print avg/min/max over ranks of this rank's per-call time (us) */
static void report_coll(size_t size, int with_size, double my_us)
{
    double sum = 0, mn = 0, mx = 0;
    MPI_Reduce(&my_us, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&my_us, &mn, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&my_us, &mx, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (g_rank == 0) {
        if (with_size)
            printf("%-15zu %-15.2f %-15.2f %.2f\n", size, sum / g_size, mn, mx);
        else
            printf("%-15.2f %-15.2f %.2f\n", sum / g_size, mn, mx);
        fflush(stdout);
    }
}

static void run_allreduce(const struct opts *o)
{
    size_t maxn = o->max_size / sizeof(float);
    float *sbuf = alloc_buf(maxn * sizeof(float));
    float *rbuf = alloc_buf(maxn * sizeof(float));
    print_header(o, "# Size          Avg Latency(us) Min Latency(us) Max Latency(us)");

    size_t start = o->min_size < sizeof(float) ? sizeof(float) : o->min_size;
    for (size_t size = start; size <= o->max_size; size *= 2) {
        int count = (int)(size / sizeof(float));
        long iters, warm;
        if (o->scale_coll)
            coll_iters_for(o, size, &iters, &warm);
        else
            iters_for(o, size, &iters, &warm);

        /* small integers: float sums are exact, so the check is exact too */
        for (int k = 0; k < count; k++)
            sbuf[k] = (float)((g_rank + 1) * ((k % 7) + 1));
        if (o->check) {
            MPI_Allreduce(sbuf, rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            int bad = 0;
            float rsum = (float)(g_size * (g_size + 1) / 2);
            for (int k = 0; k < count; k++)
                if (rbuf[k] != rsum * (float)((k % 7) + 1)) {
                    bad = 1;
                    break;
                }
            int anybad = 0;
            MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
            if (anybad)
                die("allreduce: result check failed");
        }

        for (long i = 0; i < warm; i++)
            MPI_Allreduce(sbuf, rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < iters; i++)
            MPI_Allreduce(sbuf, rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double us = (MPI_Wtime() - t0) * 1e6 / (double)iters;
        MPI_Barrier(MPI_COMM_WORLD);
        report_coll(size, 1, us);
    }
    free(sbuf);
    free(rbuf);
}

static void run_barrier(const struct opts *o)
{
    print_header(o, "# Avg Latency(us) Min Latency(us) Max Latency(us)");
    for (long i = 0; i < o->warmup; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < o->iters; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    double us = (MPI_Wtime() - t0) * 1e6 / (double)o->iters;
    report_coll(0, 0, us);
}

static long parse_long(const char *s, const char *what)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (!s[0] || *end || v < 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "bad value for %s: '%s'", what, s);
        die(msg);
    }
    return v;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);

    struct opts o = {
        .mode = NULL, .min_size = 0, .max_size = 4u << 20, .min_given = 0,
        .iters = 10000, .warmup = 1000, .iters_large = 1000,
        .warmup_large = 100, .large_threshold = 8192, .window = 64,
        .check = 0, .shared_rbuf = 0, .scale_coll = 0, .drain_sleep_us = 100,
    };
    if (argc < 2 || argv[1][0] == '-') {
        usage();
        MPI_Finalize();
        return 2;
    }
    o.mode = argv[1];
    optind = 2;
    int c;
    while ((c = getopt(argc, argv, "m:i:w:I:W:L:n:D:cSsh")) != -1) {
        switch (c) {
        case 'm': {
            const char *colon = strchr(optarg, ':');
            if (colon) {
                char lo[64];
                size_t n = (size_t)(colon - optarg);
                if (n >= sizeof lo)
                    die("bad -m");
                memcpy(lo, optarg, n);
                lo[n] = '\0';
                o.min_size = (size_t)parse_long(lo, "-m min");
                o.max_size = (size_t)parse_long(colon + 1, "-m max");
                o.min_given = 1;
            } else {
                o.max_size = (size_t)parse_long(optarg, "-m max");
            }
            break;
        }
        case 'i': o.iters = parse_long(optarg, "-i"); break;
        case 'w': o.warmup = parse_long(optarg, "-w"); break;
        case 'I': o.iters_large = parse_long(optarg, "-I"); break;
        case 'W': o.warmup_large = parse_long(optarg, "-W"); break;
        case 'L': o.large_threshold = (size_t)parse_long(optarg, "-L"); break;
        case 'n': o.window = (int)parse_long(optarg, "-n"); break;
        case 'D': o.drain_sleep_us = parse_long(optarg, "-D"); break;
        case 'c': o.check = 1; break;
        case 's': o.shared_rbuf = 1; break;
        case 'S': o.scale_coll = 1; break;
        case 'h':
        default:
            usage();
            MPI_Finalize();
            return c == 'h' ? 0 : 2;
        }
    }
    if (o.iters < 1 || o.iters_large < 1 || o.window < 1)
        die("iterations and window must be >= 1");
    if (o.max_size > (size_t)1 << 30)
        die("max size above 1 GiB is not supported");
    if (o.min_size > o.max_size)
        die("min size above max size");

    if (!strcmp(o.mode, "latency")) {
        run_latency(&o);
    } else if (!strcmp(o.mode, "bw")) {
        if (!o.min_given)
            o.min_size = 1;
        run_bw(&o);
    } else if (!strcmp(o.mode, "allreduce")) {
        if (!o.min_given)
            o.min_size = 4;
        run_allreduce(&o);
    } else if (!strcmp(o.mode, "barrier")) {
        run_barrier(&o);
    } else if (!strcmp(o.mode, "drain")) {
        if (!o.min_given)
            o.min_size = 1;
        run_drain(&o);
    } else {
        usage();
        die("unknown mode");
    }
    MPI_Finalize();
    return 0;
}
