/*
 * memcpybench: single-thread memcpy bandwidth for a few buffer sizes, the
 * ceiling for any one-copy shared-memory transport on this machine.
 *
 * Usage: memcpybench [-t SECS] [-w N] [SIZE...]   sizes in bytes (suffix K, M, G)
 *        default: 4K 64K 1M 4M 64M
 * For each size the same source is copied into the same destination over
 * and over (so small sizes stay in cache: that is the point of showing
 * them), for about SECS (default 0.3) s per trial and 7 trials.  Reported: copied bytes per
 * second (GB/s, 1e9; each byte is read once and written once) for the best
 * and the median trial.  Pin it with taskset for a single-core figure.
 * With -w N the destination rotates over N buffers of SIZE, as the receive
 * slots of a bandwidth test with a window of N do (the destinations do not
 * stay in cache); those rows are printed with the size as SIZExN.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double g_trial_secs = 0.3;
static int g_window = 1;

#define TRIALS 7

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s)
{
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end || v == 0) {
        fprintf(stderr, "memcpybench: bad size '%s'\n", s);
        exit(2);
    }
    return (size_t)v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void bench(size_t size)
{
    unsigned char *src, *dsts[1024], *dst;
    if (posix_memalign((void **)&src, 4096, size)) {
        fprintf(stderr, "memcpybench: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < g_window; i++) {
        if (posix_memalign((void **)&dsts[i], 4096, size)) {
            fprintf(stderr, "memcpybench: out of memory\n");
            exit(1);
        }
        memset(dsts[i], 0, size);
    }
    memset(src, 0x5a, size);
    dst = dsts[0];
    long next = 0;

    /* calibrate: repetitions for ~g_trial_secs */
    long reps = 1;
    for (;;) {
        double t0 = now();
        for (long r = 0; r < reps; r++) {
            dst = dsts[next++ % g_window];
            memcpy(dst, src, size);
            __asm__ __volatile__("" : : "r"(dst) : "memory");
        }
        double dt = now() - t0;
        if (dt > 0.05 || (dt > 0.005 && dt > g_trial_secs / 4)) {
            reps = (long)((double)reps * g_trial_secs / dt) + 1;
            break;
        }
        reps *= 4;
    }

    double gbps[TRIALS];
    for (int t = 0; t < TRIALS; t++) {
        double t0 = now();
        for (long r = 0; r < reps; r++) {
            dst = dsts[next++ % g_window];
            memcpy(dst, src, size);
            __asm__ __volatile__("" : : "r"(dst) : "memory");
        }
        double dt = now() - t0;
        gbps[t] = (double)size * (double)reps / dt / 1e9;
    }
    if (dst[size - 1] != 0x5a) {
        fprintf(stderr, "memcpybench: copy check failed\n");
        exit(1);
    }
    qsort(gbps, TRIALS, sizeof gbps[0], cmp_double);
    if (g_window > 1) {
        char label[64];
        snprintf(label, sizeof label, "%zux%d", size, g_window);
        printf("%-15s %-15.2f %.2f\n", label, gbps[TRIALS - 1], gbps[TRIALS / 2]);
    } else {
        printf("%-15zu %-15.2f %.2f\n", size, gbps[TRIALS - 1], gbps[TRIALS / 2]);
    }
    fflush(stdout);
    free(src);
    for (int i = 0; i < g_window; i++)
        free(dsts[i]);
}

int main(int argc, char **argv)
{
    int first = 1;
    while (argc > first + 1 && argv[first][0] == '-') {
        char *end = NULL;
        if (strcmp(argv[first], "-t") == 0) {
            g_trial_secs = strtod(argv[first + 1], &end);
            if (*end || !(g_trial_secs > 0.0) || g_trial_secs > 60.0) {
                fprintf(stderr, "memcpybench: bad -t '%s'\n", argv[first + 1]);
                return 2;
            }
        } else if (strcmp(argv[first], "-w") == 0) {
            long w = strtol(argv[first + 1], &end, 10);
            if (*end || w < 1 || w > 1024) {
                fprintf(stderr, "memcpybench: bad -w '%s' (1 to 1024)\n", argv[first + 1]);
                return 2;
            }
            g_window = (int)w;
        } else {
            fprintf(stderr, "memcpybench: unknown option '%s'\n", argv[first]);
            return 2;
        }
        first += 2;
    }
    printf("# memcpybench: single thread, %d trials of ~%.3g s\n", TRIALS,
           g_trial_secs);
    printf("# Size          Best (GB/s)     Median (GB/s)\n");
    if (argc <= first) {
        const size_t def[] = {4u << 10, 64u << 10, 1u << 20, 4u << 20,
                              64u << 20};
        for (size_t i = 0; i < sizeof def / sizeof def[0]; i++)
            bench(def[i]);
    } else {
        for (int i = first; i < argc; i++)
            bench(parse_size(argv[i]));
    }
    return 0;
}
