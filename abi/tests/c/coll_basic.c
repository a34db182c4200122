/* rankwire-test: ranks=2,4 */
/* Every blocking collective, out of place and in place, with contiguous and
 * non-contiguous predefined types (MPI_DOUBLE_INT: 12 bytes of data in a 16-byte
 * extent; MPI_SHORT_INT: two runs), types that differ between the two sides, and the
 * large-count _c forms. Each rank checks its own results. */
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
            fprintf(stderr, "coll_basic rank %d line %d: ", rank, __LINE__);   \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

typedef struct { double v; int i; } dint;
typedef struct { short v; int i; } sint;

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int p = size, r = rank;

    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* Bcast: ints from the last rank, MPI_DOUBLE_INT (packed) from 0. */
    {
        int b[5];
        for (int i = 0; i < 5; i++) b[i] = (r == p - 1) ? 100 + i : -1;
        OK(MPI_Bcast(b, 5, MPI_INT, p - 1, MPI_COMM_WORLD));
        for (int i = 0; i < 5; i++) CHECK(b[i] == 100 + i, "bcast int [%d]=%d", i, b[i]);
        dint d[3];
        memset(d, 0x5a, sizeof d);
        if (r == 0) for (int i = 0; i < 3; i++) { d[i].v = 1.5 * i; d[i].i = 7 * i; }
        OK(MPI_Bcast(d, 3, MPI_DOUBLE_INT, 0, MPI_COMM_WORLD));
        for (int i = 0; i < 3; i++)
            CHECK(d[i].v == 1.5 * i && d[i].i == 7 * i, "bcast double_int [%d]", i);
        sint s[2];
        if (r == 0) { s[0].v = 3; s[0].i = 70000; s[1].v = -4; s[1].i = -80000; }
        OK(MPI_Bcast(s, 2, MPI_SHORT_INT, 0, MPI_COMM_WORLD));
        CHECK(s[0].v == 3 && s[0].i == 70000 && s[1].v == -4 && s[1].i == -80000, "bcast short_int");
        long long c[2] = {0, 0};
        if (r == 1) { c[0] = 1LL << 40; c[1] = -5; }
        OK(MPI_Bcast_c(c, 2, MPI_LONG_LONG, 1, MPI_COMM_WORLD));
        CHECK(c[0] == (1LL << 40) && c[1] == -5, "bcast_c");
    }

    /* Gather / Gather in place / different types on the two sides. */
    {
        int root = 1 % p;
        int s[3], *g = malloc(sizeof(int) * 3 * p);
        for (int i = 0; i < 3; i++) s[i] = r * 10 + i;
        for (int i = 0; i < 3 * p; i++) g[i] = -1;
        OK(MPI_Gather(s, 3, MPI_INT, g, 3, MPI_INT, root, MPI_COMM_WORLD));
        if (r == root)
            for (int j = 0; j < p; j++)
                for (int i = 0; i < 3; i++) CHECK(g[j * 3 + i] == j * 10 + i, "gather");
        for (int i = 0; i < 3 * p; i++) g[i] = (r == root && i / 3 == root) ? root * 10 + i % 3 : -1;
        if (r == root)
            OK(MPI_Gather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g, 3, MPI_INT, root, MPI_COMM_WORLD));
        else
            OK(MPI_Gather(s, 3, MPI_INT, NULL, 0, MPI_DATATYPE_NULL, root, MPI_COMM_WORLD));
        if (r == root)
            for (int j = 0; j < p; j++)
                for (int i = 0; i < 3; i++) CHECK(g[j * 3 + i] == j * 10 + i, "gather in place");
        /* 2 MPI_INT sent, 1 MPI_2INT received per rank. */
        int two[2] = {r, -r}, *g2 = malloc(sizeof(int) * 2 * p);
        OK(MPI_Gather(two, 2, MPI_INT, g2, 1, MPI_2INT, 0, MPI_COMM_WORLD));
        if (r == 0)
            for (int j = 0; j < p; j++) CHECK(g2[2 * j] == j && g2[2 * j + 1] == -j, "gather 2int");
        /* MPI_DOUBLE_INT gathered (packed on both sides). */
        dint d = {r + 0.25, r * 3}, *gd = malloc(sizeof(dint) * p);
        OK(MPI_Gather(&d, 1, MPI_DOUBLE_INT, gd, 1, MPI_DOUBLE_INT, 0, MPI_COMM_WORLD));
        if (r == 0)
            for (int j = 0; j < p; j++) CHECK(gd[j].v == j + 0.25 && gd[j].i == 3 * j, "gather double_int");
        free(g); free(g2); free(gd);
    }

    /* Gatherv with gaps, in place, and the _c form. */
    {
        int root = 0;
        int *counts = malloc(sizeof(int) * p), *displs = malloc(sizeof(int) * p);
        int total = 0;
        for (int j = 0; j < p; j++) { counts[j] = j + 1; displs[j] = total + j; total += j + 1 + j; }
        int *g = malloc(sizeof(int) * (total + 1)), s[8];
        for (int i = 0; i < r + 1; i++) s[i] = 1000 * r + i;
        for (int i = 0; i <= total; i++) g[i] = -7;
        OK(MPI_Gatherv(s, r + 1, MPI_INT, g, counts, displs, MPI_INT, root, MPI_COMM_WORLD));
        if (r == root) {
            for (int j = 0; j < p; j++)
                for (int i = 0; i < j + 1; i++) CHECK(g[displs[j] + i] == 1000 * j + i, "gatherv");
            for (int j = 0; j < p; j++) if (j > 0) CHECK(g[displs[j] - 1] == -7, "gatherv gap");
        }
        for (int i = 0; i <= total; i++) g[i] = -7;
        if (r == root) {
            g[displs[root]] = 0;
            OK(MPI_Gatherv(MPI_IN_PLACE, 0, MPI_INT, g, counts, displs, MPI_INT, root, MPI_COMM_WORLD));
            for (int j = 0; j < p; j++)
                for (int i = 0; i < j + 1; i++) CHECK(g[displs[j] + i] == 1000 * j + i, "gatherv in place");
        } else {
            OK(MPI_Gatherv(s, r + 1, MPI_INT, NULL, NULL, NULL, MPI_INT, root, MPI_COMM_WORLD));
        }
        MPI_Count *cc = malloc(sizeof(MPI_Count) * p);
        MPI_Aint *cd = malloc(sizeof(MPI_Aint) * p);
        for (int j = 0; j < p; j++) { cc[j] = counts[j]; cd[j] = displs[j]; }
        for (int i = 0; i <= total; i++) g[i] = -7;
        OK(MPI_Gatherv_c(s, r + 1, MPI_INT, g, cc, cd, MPI_INT, root, MPI_COMM_WORLD));
        if (r == root)
            for (int j = 0; j < p; j++)
                for (int i = 0; i < j + 1; i++) CHECK(g[displs[j] + i] == 1000 * j + i, "gatherv_c");
        free(counts); free(displs); free(g); free(cc); free(cd);
    }

    /* Scatter / in place / Scatterv. */
    {
        int root = p - 1;
        int *s = malloc(sizeof(int) * 2 * p), rv[2] = {-1, -1};
        for (int i = 0; i < 2 * p; i++) s[i] = 50 + i;
        OK(MPI_Scatter(s, 2, MPI_INT, rv, 2, MPI_INT, root, MPI_COMM_WORLD));
        CHECK(rv[0] == 50 + 2 * r && rv[1] == 51 + 2 * r, "scatter");
        rv[0] = rv[1] = -1;
        if (r == root) {
            OK(MPI_Scatter(s, 2, MPI_INT, MPI_IN_PLACE, 0, MPI_INT, root, MPI_COMM_WORLD));
            CHECK(s[2 * root] == 50 + 2 * root, "scatter in place keeps the root's block");
        } else {
            OK(MPI_Scatter(NULL, 0, MPI_INT, rv, 2, MPI_INT, root, MPI_COMM_WORLD));
            CHECK(rv[0] == 50 + 2 * r && rv[1] == 51 + 2 * r, "scatter (root in place)");
        }
        int *counts = malloc(sizeof(int) * p), *displs = malloc(sizeof(int) * p);
        for (int j = 0; j < p; j++) { counts[j] = (j % 2) + 1; displs[j] = 2 * (p - 1 - j); }
        int got[2] = {-1, -1};
        OK(MPI_Scatterv(s, counts, displs, MPI_INT, got, (r % 2) + 1, MPI_INT, root, MPI_COMM_WORLD));
        for (int i = 0; i < (r % 2) + 1; i++) CHECK(got[i] == 50 + 2 * (p - 1 - r) + i, "scatterv");
        free(s); free(counts); free(displs);
    }

    /* Allgather / in place / Allgatherv / in place. */
    {
        int s[2] = {r, r * r}, *g = malloc(sizeof(int) * 2 * p);
        OK(MPI_Allgather(s, 2, MPI_INT, g, 2, MPI_INT, MPI_COMM_WORLD));
        for (int j = 0; j < p; j++) CHECK(g[2 * j] == j && g[2 * j + 1] == j * j, "allgather");
        for (int i = 0; i < 2 * p; i++) g[i] = (i / 2 == r) ? s[i % 2] : -1;
        OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g, 2, MPI_INT, MPI_COMM_WORLD));
        for (int j = 0; j < p; j++) CHECK(g[2 * j] == j && g[2 * j + 1] == j * j, "allgather in place");
        sint ss = {(short)(r - 3), 1000 * r}, *gs = malloc(sizeof(sint) * p);
        OK(MPI_Allgather(&ss, 1, MPI_SHORT_INT, gs, 1, MPI_SHORT_INT, MPI_COMM_WORLD));
        for (int j = 0; j < p; j++) CHECK(gs[j].v == j - 3 && gs[j].i == 1000 * j, "allgather short_int");
        int *counts = malloc(sizeof(int) * p), *displs = malloc(sizeof(int) * p), total = 0;
        for (int j = 0; j < p; j++) { counts[j] = p - j; displs[j] = total; total += p - j; }
        int *gv = malloc(sizeof(int) * total), sv[8];
        for (int i = 0; i < p - r; i++) sv[i] = 10 * r + i;
        OK(MPI_Allgatherv(sv, p - r, MPI_INT, gv, counts, displs, MPI_INT, MPI_COMM_WORLD));
        for (int j = 0; j < p; j++)
            for (int i = 0; i < p - j; i++) CHECK(gv[displs[j] + i] == 10 * j + i, "allgatherv");
        for (int i = 0; i < total; i++) gv[i] = -1;
        for (int i = 0; i < p - r; i++) gv[displs[r] + i] = 10 * r + i;
        OK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_INT, gv, counts, displs, MPI_INT, MPI_COMM_WORLD));
        for (int j = 0; j < p; j++)
            for (int i = 0; i < p - j; i++) CHECK(gv[displs[j] + i] == 10 * j + i, "allgatherv in place");
        free(g); free(gs); free(counts); free(displs); free(gv);
    }

    /* Alltoall / in place / Alltoallv / Alltoallw / Alltoallv_c. */
    {
        int *s = malloc(sizeof(int) * p), *g = malloc(sizeof(int) * p);
        for (int j = 0; j < p; j++) s[j] = 100 * r + j;
        OK(MPI_Alltoall(s, 1, MPI_INT, g, 1, MPI_INT, MPI_COMM_WORLD));
        for (int j = 0; j < p; j++) CHECK(g[j] == 100 * j + r, "alltoall");
        OK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_INT, s, 1, MPI_INT, MPI_COMM_WORLD));
        for (int j = 0; j < p; j++) CHECK(s[j] == 100 * j + r, "alltoall in place");
        /* v: rank r sends j+1 ints to rank j; receives r+1 from each. */
        int *sc = malloc(sizeof(int) * p), *sd = malloc(sizeof(int) * p);
        int *rc = malloc(sizeof(int) * p), *rd = malloc(sizeof(int) * p);
        int st = 0, rt = 0;
        for (int j = 0; j < p; j++) {
            sc[j] = j + 1; sd[j] = st; st += j + 1;
            rc[j] = r + 1; rd[j] = rt + 1; rt += r + 2;
        }
        int *sv = malloc(sizeof(int) * st), *gv = malloc(sizeof(int) * (rt + 1));
        for (int j = 0; j < p; j++)
            for (int i = 0; i < j + 1; i++) sv[sd[j] + i] = 1000 * r + 10 * j + i;
        for (int i = 0; i <= rt; i++) gv[i] = -3;
        OK(MPI_Alltoallv(sv, sc, sd, MPI_INT, gv, rc, rd, MPI_INT, MPI_COMM_WORLD));
        for (int j = 0; j < p; j++) {
            for (int i = 0; i < r + 1; i++) CHECK(gv[rd[j] + i] == 1000 * j + 10 * r + i, "alltoallv");
            CHECK(gv[rd[j] - 1] == -3, "alltoallv gap");
        }
        MPI_Count *csc = malloc(sizeof(MPI_Count) * p), *crc = malloc(sizeof(MPI_Count) * p);
        MPI_Aint *csd = malloc(sizeof(MPI_Aint) * p), *crd = malloc(sizeof(MPI_Aint) * p);
        for (int j = 0; j < p; j++) { csc[j] = sc[j]; csd[j] = sd[j]; crc[j] = rc[j]; crd[j] = rd[j]; }
        for (int i = 0; i <= rt; i++) gv[i] = -3;
        OK(MPI_Alltoallv_c(sv, csc, csd, MPI_INT, gv, crc, crd, MPI_INT, MPI_COMM_WORLD));
        for (int j = 0; j < p; j++)
            for (int i = 0; i < r + 1; i++) CHECK(gv[rd[j] + i] == 1000 * j + 10 * r + i, "alltoallv_c");
        /* w: to even ranks one double, to odd ranks two ints; byte displacements. */
        char *sw = malloc(16 * p), *gw = malloc(16 * p);
        int *wsc = malloc(sizeof(int) * p), *wsd = malloc(sizeof(int) * p), *wrc = malloc(sizeof(int) * p), *wrd = malloc(sizeof(int) * p);
        MPI_Datatype *wst = malloc(sizeof(MPI_Datatype) * p), *wrt = malloc(sizeof(MPI_Datatype) * p);
        for (int j = 0; j < p; j++) {
            wsd[j] = 16 * j; wrd[j] = 16 * (p - 1 - j);
            if (j % 2 == 0) { wsc[j] = 1; wst[j] = MPI_DOUBLE; double x = r + 0.5 * j; memcpy(sw + 16 * j, &x, 8); }
            else { wsc[j] = 2; wst[j] = MPI_INT; int y[2] = {r, j}; memcpy(sw + 16 * j, y, 8); }
            if (r % 2 == 0) { wrc[j] = 1; wrt[j] = MPI_DOUBLE; } else { wrc[j] = 2; wrt[j] = MPI_INT; }
        }
        OK(MPI_Alltoallw(sw, wsc, wsd, wst, gw, wrc, wrd, wrt, MPI_COMM_WORLD));
        for (int j = 0; j < p; j++) {
            char *at = gw + 16 * (p - 1 - j);
            if (r % 2 == 0) { double x; memcpy(&x, at, 8); CHECK(x == j + 0.5 * r, "alltoallw double"); }
            else { int y[2]; memcpy(y, at, 8); CHECK(y[0] == j && y[1] == r, "alltoallw int"); }
        }
        free(s); free(g); free(sc); free(sd); free(rc); free(rd); free(sv); free(gv);
        free(csc); free(crc); free(csd); free(crd); free(sw); free(gw);
        free(wsc); free(wsd); free(wrc); free(wrd); free(wst); free(wrt);
    }

    /* Reductions with built-in ops on host buffers. */
    {
        int v[4], out[4], want;
        for (int i = 0; i < 4; i++) v[i] = r + i;
        OK(MPI_Reduce(v, out, 4, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
        if (r == 0)
            for (int i = 0; i < 4; i++) CHECK(out[i] == p * (p - 1) / 2 + p * i, "reduce sum");
        int root = p - 1;
        int io[4];
        for (int i = 0; i < 4; i++) io[i] = r + i;
        if (r == root) OK(MPI_Reduce(MPI_IN_PLACE, io, 4, MPI_INT, MPI_MAX, root, MPI_COMM_WORLD));
        else OK(MPI_Reduce(io, NULL, 4, MPI_INT, MPI_MAX, root, MPI_COMM_WORLD));
        if (r == root) for (int i = 0; i < 4; i++) CHECK(io[i] == p - 1 + i, "reduce in place max");
        double d[3] = {r * 0.5, 1.0, -r}, dd[3];
        OK(MPI_Allreduce(d, dd, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        CHECK(dd[0] == 0.25 * p * (p - 1) && dd[1] == p && dd[2] == -(p * (p - 1) / 2.0), "allreduce sum double");
        OK(MPI_Allreduce(MPI_IN_PLACE, d, 3, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD));
        CHECK(d[0] == 0 && d[1] == 1 && d[2] == -(p - 1), "allreduce in place min");
        long long big = 1LL << (33 + r), bs;
        OK(MPI_Allreduce_c(&big, &bs, 1, MPI_LONG_LONG, MPI_BOR, MPI_COMM_WORLD));
        long long wb = 0;
        for (int j = 0; j < p; j++) wb |= 1LL << (33 + j);
        CHECK(bs == wb, "allreduce_c bor");
        /* Reduce_scatter_block: p blocks of 2. */
        int *rs = malloc(sizeof(int) * 2 * p), got[2];
        for (int i = 0; i < 2 * p; i++) rs[i] = r * i;
        OK(MPI_Reduce_scatter_block(rs, got, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        want = p * (p - 1) / 2;
        CHECK(got[0] == want * 2 * r && got[1] == want * (2 * r + 1), "reduce_scatter_block");
        OK(MPI_Reduce_scatter_block(MPI_IN_PLACE, rs, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        CHECK(rs[0] == want * 2 * r && rs[1] == want * (2 * r + 1), "reduce_scatter_block in place");
        /* Reduce_scatter with counts j+1. */
        int *counts = malloc(sizeof(int) * p), tot = 0;
        for (int j = 0; j < p; j++) { counts[j] = j + 1; tot += j + 1; }
        int *in = malloc(sizeof(int) * tot), *o = malloc(sizeof(int) * tot);
        for (int i = 0; i < tot; i++) in[i] = i + r;
        int first = r * (r + 1) / 2;
        OK(MPI_Reduce_scatter(in, o, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        for (int i = 0; i < r + 1; i++) CHECK(o[i] == p * (first + i) + p * (p - 1) / 2, "reduce_scatter");
        OK(MPI_Reduce_scatter(MPI_IN_PLACE, in, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        for (int i = 0; i < r + 1; i++) CHECK(in[i] == p * (first + i) + p * (p - 1) / 2, "reduce_scatter in place");
        /* Scan / Exscan, in place. */
        int sv = r + 1, so = -1;
        OK(MPI_Scan(&sv, &so, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        CHECK(so == (r + 1) * (r + 2) / 2, "scan");
        OK(MPI_Scan(MPI_IN_PLACE, &sv, 1, MPI_INT, MPI_PROD, MPI_COMM_WORLD));
        int fact = 1;
        for (int j = 1; j <= r + 1; j++) fact *= j;
        CHECK(sv == fact, "scan in place prod");
        int ev = r + 1, eo = -99;
        OK(MPI_Exscan(&ev, &eo, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        if (r > 0) CHECK(eo == r * (r + 1) / 2, "exscan"); else CHECK(eo == -99, "exscan rank 0 untouched");
        OK(MPI_Exscan(MPI_IN_PLACE, &ev, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
        if (r > 0) CHECK(ev == r, "exscan in place");
        free(rs); free(counts); free(in); free(o);
    }

    OK(MPI_Finalize());
    if (rank == 0 && fails == 0) printf("coll_basic: ok, %d checks\n", checks);
    return fails ? 1 : 0;
}
