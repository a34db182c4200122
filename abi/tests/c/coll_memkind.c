/* rankwire-test: ranks=2,3 */
/* The memory-kind agreement of the five collectives with device paths (abi/src/memkind.rs)
 * on host buffers: MPI 4.1's assertion mpi_assert_memory_alloc_kinds set by
 * MPI_Comm_set_info and MPI_Comm_dup_with_info and reported by MPI_Comm_get_info (the
 * assertion is per process: ranks asserting different kinds, an empty list), and bcast,
 * allgather, allreduce (also in
 * place and nonblocking), reduce and reduce_scatter_block with right results on
 * communicators with and without the assertion, interleaved with point-to-point
 * messages. tests/abi.rs runs it also with RANKWIRE_ABI_MEMORY_AGREEMENT=on, where
 * each of these blocking calls first runs the agreement. The hint checks apply to
 * rankwire only (tests/abi.rs also runs this program on MPICH's library, which ignores
 * the key, as MPI allows); the collectives are checked everywhere. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks = 0, fails = 0, rank = 0, size = 0;
#define CHECK(c, ...)                                                          \
    do {                                                                       \
        checks++;                                                              \
        if (!(c)) {                                                            \
            fails++;                                                           \
            fprintf(stderr, "coll_memkind rank %d line %d: ", rank, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

/* The hint `key` of comm's info (empty string when absent). */
static void hint(MPI_Comm c, char *out, int len) {
    MPI_Info used;
    int flag = 0, vlen = len;
    out[0] = 0;
    OK(MPI_Comm_get_info(c, &used));
    OK(MPI_Info_get_string(used, "mpi_assert_memory_alloc_kinds", &vlen, out, &flag));
    if (!flag) out[0] = 0;
    OK(MPI_Info_free(&used));
}

/* Every collective with a device path, on host buffers of comm c; checks the results. */
static void collectives(MPI_Comm c, int round) {
    int p, r;
    MPI_Comm_size(c, &p);
    MPI_Comm_rank(c, &r);
    enum { N = 1000 };
    double *a = malloc(sizeof(double) * N * p), *b = malloc(sizeof(double) * N * p);
    for (int i = 0; i < N; i++) a[i] = r + i + round;
    OK(MPI_Allreduce(a, b, N, MPI_DOUBLE, MPI_SUM, c));
    for (int i = 0; i < N; i += 97)
        CHECK(b[i] == p * (double)(i + round) + p * (p - 1) / 2.0, "allreduce[%d] = %g", i, b[i]);
    memcpy(b, a, sizeof(double) * N);
    OK(MPI_Allreduce(MPI_IN_PLACE, b, N, MPI_DOUBLE, MPI_MAX, c));
    CHECK(b[5] == p - 1 + 5 + round, "allreduce in place max = %g", b[5]);
    MPI_Request q;
    OK(MPI_Iallreduce(a, b, N, MPI_DOUBLE, MPI_MIN, c, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK(b[7] == 7 + round, "iallreduce min = %g", b[7]);
    int root = round % p;
    OK(MPI_Reduce(a, b, N, MPI_DOUBLE, MPI_SUM, root, c));
    if (r == root) CHECK(b[3] == p * (3.0 + round) + p * (p - 1) / 2.0, "reduce = %g", b[3]);
    for (int i = 0; i < N * p; i++) a[i] = i + r;
    OK(MPI_Reduce_scatter_block(a, b, N, MPI_DOUBLE, MPI_SUM, c));
    CHECK(b[2] == p * (double)(r * N + 2) + p * (p - 1) / 2.0, "reduce_scatter_block = %g", b[2]);
    int v[4] = {r == root ? 40 + round : -1, 1, 2, 3};
    OK(MPI_Bcast(v, 4, MPI_INT, root, c));
    CHECK(v[0] == 40 + round, "bcast = %d", v[0]);
    int mine[2] = {r, 10 * r}, *all = malloc(sizeof(int) * 2 * p);
    OK(MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, c));
    for (int j = 0; j < p; j++) CHECK(all[2 * j + 1] == 10 * j, "allgather[%d] = %d", j, all[2 * j + 1]);
    /* A point-to-point ring between the collectives. */
    int token = r, got = -1;
    OK(MPI_Sendrecv(&token, 1, MPI_INT, (r + 1) % p, 7, &got, 1, MPI_INT, (r + p - 1) % p, 7, c,
                    MPI_STATUS_IGNORE));
    CHECK(got == (r + p - 1) % p, "ring got %d", got);
    free(a);
    free(b);
    free(all);
}

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    char v[256], version[MPI_MAX_LIBRARY_VERSION_STRING];
    int vlen = 0;
    OK(MPI_Get_library_version(version, &vlen));
    /* Whether this library honours the memory-kind assertion (rankwire does). */
    int ours = strstr(version, "rankwire") != NULL;

    collectives(MPI_COMM_WORLD, 0);
    hint(MPI_COMM_WORLD, v, sizeof v);
    if (ours) CHECK(v[0] == 0, "world has a memory-kind hint %s before any was set", v);

    /* One-path assertion by MPI_Comm_dup_with_info. */
    MPI_Info info;
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "mpi_assert_memory_alloc_kinds", "system,mpi"));
    MPI_Comm host_only;
    OK(MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &host_only));
    hint(host_only, v, sizeof v);
    if (ours) CHECK(strcmp(v, "system,mpi") == 0, "dup_with_info hint = '%s'", v);
    collectives(host_only, 1);

    /* MPI_Comm_dup does not carry the assertion; MPI_Comm_set_info sets it. */
    MPI_Comm d;
    OK(MPI_Comm_dup(host_only, &d));
    hint(d, v, sizeof v);
    if (ours) CHECK(v[0] == 0, "a dup carries the hint '%s'", v);
    OK(MPI_Info_set(info, "mpi_assert_memory_alloc_kinds", "system,cuda:device"));
    OK(MPI_Comm_set_info(d, info));
    hint(d, v, sizeof v);
    if (ours) CHECK(strcmp(v, "system,cuda:device") == 0, "set_info hint = '%s'", v);
    collectives(d, 2);

    /* The assertion is per process: rank 0 asserts device memory, the others host
     * memory (so the ranks still agree per call); then an empty list on every rank. */
    OK(MPI_Info_set(info, "mpi_assert_memory_alloc_kinds", rank == 0 ? "cuda:device" : "system"));
    OK(MPI_Comm_set_info(d, info));
    hint(d, v, sizeof v);
    if (ours) CHECK(strcmp(v, rank == 0 ? "cuda:device" : "system") == 0, "per-rank hint = '%s'", v);
    collectives(d, 3);
    OK(MPI_Info_set(info, "mpi_assert_memory_alloc_kinds", " , "));
    OK(MPI_Comm_set_info(d, info));
    hint(d, v, sizeof v);
    if (ours) CHECK(strcmp(v, " , ") == 0, "empty-list hint = '%s'", v);
    collectives(d, 5);

    /* A freed handle's hint does not reach a new communicator that reuses it. */
    OK(MPI_Comm_free(&host_only));
    MPI_Comm e;
    OK(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &e));
    hint(e, v, sizeof v);
    if (ours) CHECK(v[0] == 0, "a new communicator has the hint '%s'", v);
    collectives(e, 4);

    OK(MPI_Info_free(&info));
    OK(MPI_Comm_free(&d));
    OK(MPI_Comm_free(&e));
    int tf = 0;
    MPI_Allreduce(&fails, &tf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (tf == 0) printf("coll_memkind: ok, %d checks\n", checks);
        else printf("coll_memkind: %d failures\n", tf);
    }
    MPI_Finalize();
    return tf != 0;
}
