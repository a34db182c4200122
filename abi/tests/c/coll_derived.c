/* rankwire-test: ranks=2,4 */
/* Collectives on a derived datatype: MPI_Type_vector(3, 1, 2, MPI_INT) (ints 0, 2, 4
 * of a 5-int extent) against contiguous MPI_INT on the other side, in place forms,
 * user reductions on the vector type (the user function sees the vector's layout),
 * nonblocking forms. Gaps of the vector must stay untouched. */
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
            fprintf(stderr, "coll_derived rank %d line %d: ", rank, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

/* On the vector type: element k covers ints [5k, 5k+5); data at 0, 2, 4. */
static void vmax(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    int *a = in, *b = inout;
    for (int k = 0; k < *len; k++)
        for (int j = 0; j < 5; j += 2)
            if (a[5 * k + j] > b[5 * k + j]) b[5 * k + j] = a[5 * k + j];
}

static void vsum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    int *a = in, *b = inout;
    for (int k = 0; k < *len; k++)
        for (int j = 0; j < 5; j += 2) b[5 * k + j] += a[5 * k + j];
}

#define GAP (-777)

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int p = size, r = rank;
    MPI_Datatype vt;
    OK(MPI_Type_vector(3, 1, 2, MPI_INT, &vt));
    OK(MPI_Type_commit(&vt));

    /* Bcast of two vectors: the gaps keep their values. */
    {
        int b[10];
        for (int i = 0; i < 10; i++) b[i] = (r == 0 && i % 5 % 2 == 0) ? 40 + i : GAP;
        OK(MPI_Bcast(b, 2, vt, 0, MPI_COMM_WORLD));
        for (int i = 0; i < 10; i++)
            if (i % 5 == 1 || i % 5 == 3) CHECK(b[i] == GAP, "bcast gap %d = %d", i, b[i]);
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 5; j += 2) CHECK(b[5 * k + j] == 40 + 5 * k + j, "bcast data");
    }

    /* Gather: one vector from each rank into contiguous ints on the root. */
    {
        int s[5] = {r * 10, GAP, r * 10 + 1, GAP, r * 10 + 2};
        int *g = malloc(sizeof(int) * 3 * p);
        OK(MPI_Gather(s, 1, vt, g, 3, MPI_INT, 0, MPI_COMM_WORLD));
        if (r == 0)
            for (int j = 0; j < p; j++)
                for (int i = 0; i < 3; i++) CHECK(g[3 * j + i] == 10 * j + i, "gather vector->int");
        /* Scatter the ints back into vectors. */
        int back[5] = {GAP, GAP, GAP, GAP, GAP};
        OK(MPI_Scatter(g, 3, MPI_INT, back, 1, vt, 0, MPI_COMM_WORLD));
        CHECK(back[0] == 10 * r && back[2] == 10 * r + 1 && back[4] == 10 * r + 2, "scatter int->vector");
        CHECK(back[1] == GAP && back[3] == GAP, "scatter gaps");
        free(g);
    }

    /* Allgather in place on vectors: element j at ints [5j, 5j+5). */
    {
        int *a = malloc(sizeof(int) * 5 * p);
        for (int i = 0; i < 5 * p; i++) a[i] = (i / 5 == r && i % 5 % 2 == 0) ? 100 * r + i % 5 : GAP;
        OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a, 1, vt, MPI_COMM_WORLD));
        for (int j = 0; j < p; j++)
            for (int i = 0; i < 5; i++) {
                int want = (i % 2 == 0) ? 100 * j + i : GAP;
                CHECK(a[5 * j + i] == want, "allgather in place vector [%d][%d] = %d", j, i, a[5 * j + i]);
            }
        free(a);
    }

    /* Alltoallv: vectors sent, ints received. */
    {
        int *s = malloc(sizeof(int) * 5 * p), *d = malloc(sizeof(int) * 3 * p);
        int *sc = malloc(sizeof(int) * p), *sd = malloc(sizeof(int) * p);
        int *rc = malloc(sizeof(int) * p), *rd = malloc(sizeof(int) * p);
        for (int j = 0; j < p; j++) {
            sc[j] = 1; sd[j] = j; rc[j] = 3; rd[j] = 3 * j;
            for (int i = 0; i < 5; i++) s[5 * j + i] = (i % 2 == 0) ? 1000 * r + 10 * j + i / 2 : GAP;
        }
        OK(MPI_Alltoallv(s, sc, sd, vt, d, rc, rd, MPI_INT, MPI_COMM_WORLD));
        for (int j = 0; j < p; j++)
            for (int i = 0; i < 3; i++) CHECK(d[3 * j + i] == 1000 * j + 10 * r + i, "alltoallv vector->int");
        free(s); free(d); free(sc); free(sd); free(rc); free(rd);
    }

    /* Reductions on the vector type, with user operations (MPI 4.1 §6.9.2 defines the
     * predefined operations on predefined types only). */
    {
        MPI_Op op, sum;
        OK(MPI_Op_create(vmax, 1, &op));
        OK(MPI_Op_create(vsum, 1, &sum));
        int v[5] = {r, GAP, 2 * r, GAP, 3 * r}, o[5] = {GAP, GAP, GAP, GAP, GAP};
        int t = p * (p - 1) / 2;
        OK(MPI_Allreduce(v, o, 1, vt, sum, MPI_COMM_WORLD));
        CHECK(o[0] == t && o[2] == 2 * t && o[4] == 3 * t, "allreduce sum vector");
        CHECK(o[1] == GAP && o[3] == GAP, "allreduce vector gaps");
        OK(MPI_Allreduce(MPI_IN_PLACE, v, 1, vt, op, MPI_COMM_WORLD));
        CHECK(v[0] == p - 1 && v[2] == 2 * (p - 1) && v[4] == 3 * (p - 1), "allreduce in place vector");
        CHECK(v[1] == GAP && v[3] == GAP, "allreduce in place gaps");
        int u[5] = {-r, GAP, r, GAP, 5}, uo[5] = {GAP, GAP, GAP, GAP, GAP};
        OK(MPI_Reduce(u, uo, 1, vt, op, p - 1, MPI_COMM_WORLD));
        if (r == p - 1) {
            CHECK(uo[0] == 0 && uo[2] == p - 1 && uo[4] == 5, "reduce user op on vector");
            CHECK(uo[1] == GAP && uo[3] == GAP, "reduce user op gaps");
        }
        int sv[5] = {1, GAP, r, GAP, 2}, so[5] = {GAP, GAP, GAP, GAP, GAP};
        MPI_Request q;
        OK(MPI_Iscan(sv, so, 1, vt, sum, MPI_COMM_WORLD, &q));
        OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        CHECK(so[0] == r + 1 && so[2] == r * (r + 1) / 2 && so[4] == 2 * (r + 1), "iscan vector");
        CHECK(so[1] == GAP && so[3] == GAP, "iscan gaps");
        OK(MPI_Op_free(&op));
        OK(MPI_Op_free(&sum));
    }

    OK(MPI_Type_free(&vt));
    OK(MPI_Finalize());
    if (rank == 0 && fails == 0) printf("coll_derived: ok, %d checks\n", checks);
    return fails ? 1 : 0;
}
