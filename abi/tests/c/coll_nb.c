/* rankwire-test: ranks=2,4 */
/* Nonblocking (MPI_I...) and persistent (..._init + MPI_Start) collectives: several
 * in flight at once and completed by MPI_Waitall / MPI_Test loops, in place forms,
 * non-contiguous predefined types, and persistent requests started several times
 * with new data in their buffers between starts. */
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
            fprintf(stderr, "coll_nb rank %d line %d: ", rank, __LINE__);      \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

typedef struct { double v; int i; } dint;

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int p = size, r = rank;

    /* Many nonblocking collectives in flight, completed together. */
    {
        MPI_Request q[12];
        int n = 0;
        OK(MPI_Ibarrier(MPI_COMM_WORLD, &q[n++]));
        int b[4] = {r, r, r, r};
        OK(MPI_Ibcast(b, 4, MPI_INT, p - 1, MPI_COMM_WORLD, &q[n++]));
        double s = r + 1.0, sum = 0;
        OK(MPI_Iallreduce(&s, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &q[n++]));
        int mx = r;
        OK(MPI_Iallreduce(MPI_IN_PLACE, &mx, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &q[n++]));
        int *g = malloc(sizeof(int) * p), gv = 10 * r;
        OK(MPI_Igather(&gv, 1, MPI_INT, g, 1, MPI_INT, 0, MPI_COMM_WORLD, &q[n++]));
        int *ag = malloc(sizeof(int) * p);
        ag[r] = 7 * r;
        OK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_INT, ag, 1, MPI_INT, MPI_COMM_WORLD, &q[n++]));
        int *a2 = malloc(sizeof(int) * p), *a2r = malloc(sizeof(int) * p);
        for (int j = 0; j < p; j++) a2[j] = 100 * r + j;
        OK(MPI_Ialltoall(a2, 1, MPI_INT, a2r, 1, MPI_INT, MPI_COMM_WORLD, &q[n++]));
        int sc = r + 1, so = 0, eo = -5;
        OK(MPI_Iscan(&sc, &so, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[n++]));
        OK(MPI_Iexscan(&sc, &eo, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[n++]));
        int red = r, redo = -1;
        OK(MPI_Ireduce(&red, &redo, 1, MPI_INT, MPI_SUM, p - 1, MPI_COMM_WORLD, &q[n++]));
        dint d = {r * 1.5, r}, *dg = malloc(sizeof(dint) * p);
        OK(MPI_Iallgather(&d, 1, MPI_DOUBLE_INT, dg, 1, MPI_DOUBLE_INT, MPI_COMM_WORLD, &q[n++]));
        int *rsb = malloc(sizeof(int) * p), rsbo = 0;
        for (int j = 0; j < p; j++) rsb[j] = j + r;
        OK(MPI_Ireduce_scatter_block(rsb, &rsbo, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[n++]));
        OK(MPI_Waitall(n, q, MPI_STATUSES_IGNORE));
        for (int i = 0; i < n; i++) CHECK(q[i] == MPI_REQUEST_NULL, "request %d freed", i);
        for (int i = 0; i < 4; i++) CHECK(b[i] == p - 1, "ibcast");
        CHECK(sum == p * (p + 1) / 2.0, "iallreduce");
        CHECK(mx == p - 1, "iallreduce in place");
        if (r == 0) for (int j = 0; j < p; j++) CHECK(g[j] == 10 * j, "igather");
        for (int j = 0; j < p; j++) CHECK(ag[j] == 7 * j, "iallgather in place");
        for (int j = 0; j < p; j++) CHECK(a2r[j] == 100 * j + r, "ialltoall");
        CHECK(so == (r + 1) * (r + 2) / 2, "iscan");
        if (r > 0) CHECK(eo == r * (r + 1) / 2, "iexscan");
        if (r == p - 1) CHECK(redo == p * (p - 1) / 2, "ireduce");
        for (int j = 0; j < p; j++) CHECK(dg[j].v == j * 1.5 && dg[j].i == j, "iallgather double_int");
        CHECK(rsbo == p * r + p * (p - 1) / 2, "ireduce_scatter_block");
        free(g); free(ag); free(a2); free(a2r); free(dg); free(rsb);
    }

    /* v-forms nonblocking, completed with MPI_Test loops. */
    {
        int *counts = malloc(sizeof(int) * p), *displs = malloc(sizeof(int) * p), tot = 0;
        for (int j = 0; j < p; j++) { counts[j] = j + 1; displs[j] = tot; tot += j + 1; }
        int *sv = malloc(sizeof(int) * tot), got[8];
        for (int i = 0; i < tot; i++) sv[i] = 3 * i;
        MPI_Request q;
        OK(MPI_Iscatterv(sv, counts, displs, MPI_INT, got, r + 1, MPI_INT, 0, MPI_COMM_WORLD, &q));
        int flag = 0;
        while (!flag)
            if (MPI_Test(&q, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) { CHECK(0, "MPI_Test failed"); break; }
        for (int i = 0; i < r + 1; i++) CHECK(got[i] == 3 * (displs[r] + i), "iscatterv");
        int *all = malloc(sizeof(int) * tot);
        OK(MPI_Iallgatherv(got, r + 1, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD, &q));
        flag = 0;
        while (!flag)
            if (MPI_Test(&q, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) { CHECK(0, "MPI_Test failed"); break; }
        for (int i = 0; i < tot; i++) CHECK(all[i] == 3 * i, "iallgatherv");
        int *rso = malloc(sizeof(int) * tot);
        OK(MPI_Ireduce_scatter(all, rso, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q));
        OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        for (int i = 0; i < r + 1; i++) CHECK(rso[i] == p * 3 * (displs[r] + i), "ireduce_scatter");
        int *gv = malloc(sizeof(int) * tot);
        OK(MPI_Igatherv(got, r + 1, MPI_INT, gv, counts, displs, MPI_INT, p - 1, MPI_COMM_WORLD, &q));
        OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        if (r == p - 1) for (int i = 0; i < tot; i++) CHECK(gv[i] == 3 * i, "igatherv");
        int *sc = malloc(sizeof(int) * p), *sd = malloc(sizeof(int) * p), *rdj = malloc(sizeof(int) * p);
        for (int j = 0; j < p; j++) { sc[j] = 1; sd[j] = p - 1 - j; rdj[j] = j; }
        int *src = malloc(sizeof(int) * p), *dst = malloc(sizeof(int) * p);
        for (int j = 0; j < p; j++) src[j] = 10 * r + j;
        OK(MPI_Ialltoallv(src, sc, sd, MPI_INT, dst, sc, rdj, MPI_INT, MPI_COMM_WORLD, &q));
        OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        /* block for rank j sits at sd[j] = p-1-j and holds 10r + p-1-j; received at j. */
        for (int j = 0; j < p; j++) CHECK(dst[j] == 10 * j + (p - 1 - r), "ialltoallv %d", j);
        MPI_Datatype *ts = malloc(sizeof(MPI_Datatype) * p);
        int *bd = malloc(sizeof(int) * p);
        for (int j = 0; j < p; j++) { ts[j] = MPI_INT; bd[j] = 4 * j; }
        OK(MPI_Ialltoallw(src, sc, bd, ts, dst, sc, bd, ts, MPI_COMM_WORLD, &q));
        OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        for (int j = 0; j < p; j++) CHECK(dst[j] == 10 * j + r, "ialltoallw");
        free(counts); free(displs); free(sv); free(all); free(rso); free(gv);
        free(sc); free(sd); free(rdj); free(src); free(dst); free(ts); free(bd);
    }

    /* Persistent collectives started several times with new data. */
    {
        double x = 0, y = 0;
        MPI_Request ar, bc, ga, bar, a2a;
        OK(MPI_Allreduce_init(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &ar));
        int bb[3];
        OK(MPI_Bcast_init(bb, 3, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &bc));
        int gi = 0, *gg = malloc(sizeof(int) * p);
        OK(MPI_Allgather_init(&gi, 1, MPI_INT, gg, 1, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &ga));
        OK(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &bar));
        int *as = malloc(sizeof(int) * p), *ad = malloc(sizeof(int) * p);
        OK(MPI_Alltoall_init(as, 1, MPI_INT, ad, 1, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &a2a));
        for (int it = 0; it < 4; it++) {
            x = r + it;
            for (int i = 0; i < 3; i++) bb[i] = (r == 0) ? it * 10 + i : -1;
            gi = r * it;
            for (int j = 0; j < p; j++) as[j] = 1000 * it + 10 * r + j;
            MPI_Request all[5] = {ar, bc, ga, bar, a2a};
            OK(MPI_Startall(5, all));
            OK(MPI_Waitall(5, all, MPI_STATUSES_IGNORE));
            CHECK(all[0] == ar, "persistent requests stay allocated");
            CHECK(y == p * (p - 1) / 2.0 + p * it, "allreduce_init start %d", it);
            for (int i = 0; i < 3; i++) CHECK(bb[i] == it * 10 + i, "bcast_init start %d", it);
            for (int j = 0; j < p; j++) CHECK(gg[j] == j * it, "allgather_init start %d", it);
            for (int j = 0; j < p; j++) CHECK(ad[j] == 1000 * it + 10 * j + r, "alltoall_init start %d", it);
        }
        int sv = r, so = 0;
        MPI_Request sr;
        OK(MPI_Scan_init(&sv, &so, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &sr));
        for (int it = 1; it <= 2; it++) {
            sv = r * it;
            OK(MPI_Start(&sr));
            OK(MPI_Wait(&sr, MPI_STATUS_IGNORE));
            CHECK(so == it * r * (r + 1) / 2, "scan_init start %d", it);
        }
        OK(MPI_Request_free(&ar));
        OK(MPI_Request_free(&bc));
        OK(MPI_Request_free(&ga));
        OK(MPI_Request_free(&bar));
        OK(MPI_Request_free(&a2a));
        OK(MPI_Request_free(&sr));
        free(gg); free(as); free(ad);
    }

    /* Large-count nonblocking and persistent forms. */
    {
        MPI_Count n = 3;
        long v[3] = {r, 2 * r, 3 * r}, o[3];
        MPI_Request q;
        OK(MPI_Iallreduce_c(v, o, n, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &q));
        OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        long t = p * (p - 1) / 2;
        CHECK(o[0] == t && o[1] == 2 * t && o[2] == 3 * t, "iallreduce_c");
        OK(MPI_Reduce_init_c(v, o, n, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &q));
        OK(MPI_Start(&q));
        OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        if (r == 0) CHECK(o[0] == p - 1 && o[2] == 3 * (p - 1), "reduce_init_c");
        OK(MPI_Request_free(&q));
    }

    OK(MPI_Finalize());
    if (rank == 0 && fails == 0) printf("coll_nb: ok, %d checks\n", checks);
    return fails ? 1 : 0;
}
