/* rankwire-test: ranks=2,4 */
/* Reduction operations: a non-commutative user operation (the order of the ranks is
 * checked) in every reduction collective, blocking and nonblocking; a user operation
 * on MPI_DOUBLE_INT (padded layout handed to the user function); MINLOC/MAXLOC on
 * every pair type; complex, long double, C bool and MPI_BYTE; MPI_Reduce_local on
 * every integer type with every integer op; MPI_Op_commutative and MPI_Op_free. */
#include <complex.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks = 0, fails = 0, rank = 0, size = 0;
#define CHECK(c, ...)                                                          \
    do {                                                                       \
        checks++;                                                              \
        if (!(c)) {                                                            \
            fails++;                                                           \
            fprintf(stderr, "coll_ops rank %d line %d: ", rank, __LINE__);     \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

/* Ranges (first, last): (a,b) o (c,d) = (a,d) if b+1 == c, else (-1,-1). Associative,
 * not commutative: any wrong order shows as -1. */
static int bad_type = 0;
static void concat(void *in, void *inout, int *len, MPI_Datatype *dt) {
    if (*dt != MPI_2INT) bad_type++;
    int *a = in, *b = inout;
    for (int i = 0; i < *len; i++) {
        int ok = a[2 * i + 1] + 1 == b[2 * i] && a[2 * i] >= 0 && b[2 * i + 1] >= 0;
        b[2 * i] = ok ? a[2 * i] : -1;
        b[2 * i + 1] = ok ? b[2 * i + 1] : -1;
    }
}

static void concat_c(void *in, void *inout, MPI_Count *len, MPI_Datatype *dt) {
    int l = (int)*len;
    concat(in, inout, &l, dt);
}

typedef struct { double v; int i; } dint;
/* On MPI_DOUBLE_INT: sum the values, keep the larger index. */
static void dint_op(void *in, void *inout, int *len, MPI_Datatype *dt) {
    dint *a = in, *b = inout;
    if (*dt != MPI_DOUBLE_INT) bad_type++;
    for (int i = 0; i < *len; i++) { b[i].v += a[i].v; if (a[i].i > b[i].i) b[i].i = a[i].i; }
}

static void check_range(const int *x, int n, int lo, int hi, const char *what) {
    for (int i = 0; i < n; i++)
        CHECK(x[2 * i] == lo && x[2 * i + 1] == hi, "%s [%d] = (%d,%d), want (%d,%d)", what, i,
              x[2 * i], x[2 * i + 1], lo, hi);
}

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int p = size, r = rank;

    MPI_Op cat, catc, dop;
    OK(MPI_Op_create(concat, 0, &cat));
    OK(MPI_Op_create_c(concat_c, 0, &catc));
    OK(MPI_Op_create(dint_op, 1, &dop));
    int commute = -1;
    OK(MPI_Op_commutative(cat, &commute));
    CHECK(commute == 0, "cat is not commutative");
    OK(MPI_Op_commutative(dop, &commute));
    CHECK(commute == 1, "dop is commutative");
    OK(MPI_Op_commutative(MPI_SUM, &commute));
    CHECK(commute == 1, "MPI_SUM is commutative");
    CHECK(MPI_Op_fromint(MPI_Op_toint(cat)) == cat, "op toint/fromint round trip");
    CHECK(MPI_Op_fromint(MPI_Op_toint(MPI_MAXLOC)) == MPI_MAXLOC, "predefined op toint/fromint");

    /* The non-commutative op in every reduction collective. */
    {
        int mine[6], out[6];
        for (int i = 0; i < 3; i++) { mine[2 * i] = r; mine[2 * i + 1] = r; }
        for (int root = 0; root < p; root++) {
            memset(out, 0, sizeof out);
            OK(MPI_Reduce(mine, out, 3, MPI_2INT, cat, root, MPI_COMM_WORLD));
            if (r == root) check_range(out, 3, 0, p - 1, "reduce user");
        }
        int io[6];
        memcpy(io, mine, sizeof io);
        if (r == 1) OK(MPI_Reduce(MPI_IN_PLACE, io, 3, MPI_2INT, cat, 1, MPI_COMM_WORLD));
        else OK(MPI_Reduce(io, NULL, 3, MPI_2INT, cat, 1, MPI_COMM_WORLD));
        if (r == 1) check_range(io, 3, 0, p - 1, "reduce user in place");
        OK(MPI_Allreduce(mine, out, 3, MPI_2INT, cat, MPI_COMM_WORLD));
        check_range(out, 3, 0, p - 1, "allreduce user");
        memcpy(io, mine, sizeof io);
        OK(MPI_Allreduce(MPI_IN_PLACE, io, 3, MPI_2INT, catc, MPI_COMM_WORLD));
        check_range(io, 3, 0, p - 1, "allreduce user_c in place");
        OK(MPI_Scan(mine, out, 3, MPI_2INT, cat, MPI_COMM_WORLD));
        check_range(out, 3, 0, r, "scan user");
        out[0] = 77;
        OK(MPI_Exscan(mine, out, 3, MPI_2INT, cat, MPI_COMM_WORLD));
        if (r > 0) check_range(out, 3, 0, r - 1, "exscan user");
        else CHECK(out[0] == 77, "exscan user rank 0 untouched");
        memcpy(io, mine, sizeof io);
        OK(MPI_Scan(MPI_IN_PLACE, io, 3, MPI_2INT, cat, MPI_COMM_WORLD));
        check_range(io, 3, 0, r, "scan user in place");
        /* Reduce_scatter_block: p blocks of 2 pairs. */
        int *rs = malloc(sizeof(int) * 4 * p), got[4];
        for (int i = 0; i < 2 * p; i++) { rs[2 * i] = r; rs[2 * i + 1] = r; }
        OK(MPI_Reduce_scatter_block(rs, got, 2, MPI_2INT, cat, MPI_COMM_WORLD));
        check_range(got, 2, 0, p - 1, "reduce_scatter_block user");
        int *counts = malloc(sizeof(int) * p), tot = 0;
        for (int j = 0; j < p; j++) { counts[j] = j + 1; tot += j + 1; }
        int *rv = malloc(sizeof(int) * 2 * tot), *ro = malloc(sizeof(int) * 2 * tot);
        for (int i = 0; i < tot; i++) { rv[2 * i] = r; rv[2 * i + 1] = r; }
        OK(MPI_Reduce_scatter(rv, ro, counts, MPI_2INT, cat, MPI_COMM_WORLD));
        check_range(ro, r + 1, 0, p - 1, "reduce_scatter user");
        OK(MPI_Reduce_scatter(MPI_IN_PLACE, rv, counts, MPI_2INT, cat, MPI_COMM_WORLD));
        check_range(rv, r + 1, 0, p - 1, "reduce_scatter user in place");
        /* Nonblocking and persistent with the user op. */
        MPI_Request q[2];
        int o1[6], o2[6];
        OK(MPI_Iallreduce(mine, o1, 3, MPI_2INT, cat, MPI_COMM_WORLD, &q[0]));
        OK(MPI_Iscan(mine, o2, 3, MPI_2INT, cat, MPI_COMM_WORLD, &q[1]));
        OK(MPI_Waitall(2, q, MPI_STATUSES_IGNORE));
        check_range(o1, 3, 0, p - 1, "iallreduce user");
        check_range(o2, 3, 0, r, "iscan user");
        MPI_Request pr;
        OK(MPI_Reduce_init(mine, o1, 3, MPI_2INT, cat, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &pr));
        for (int it = 0; it < 3; it++) {
            memset(o1, 0, sizeof o1);
            OK(MPI_Start(&pr));
            OK(MPI_Wait(&pr, MPI_STATUS_IGNORE));
            if (r == 0) check_range(o1, 3, 0, p - 1, "reduce_init user");
        }
        OK(MPI_Request_free(&pr));
        free(rs); free(counts); free(rv); free(ro);
    }
    CHECK(bad_type == 0, "the user function saw another datatype");

    /* A user op on MPI_DOUBLE_INT: the function sees the C struct layout. */
    {
        dint a[2] = {{r + 0.5, r}, {-r, 10 - r}}, b[2];
        OK(MPI_Allreduce(a, b, 2, MPI_DOUBLE_INT, dop, MPI_COMM_WORLD));
        double s = 0;
        for (int j = 0; j < p; j++) s += j + 0.5;
        CHECK(b[0].v == s && b[0].i == p - 1, "user op double_int [0]");
        CHECK(b[1].v == -(p * (p - 1) / 2.0) && b[1].i == 10, "user op double_int [1]");
        CHECK(bad_type == 0, "dint_op saw another datatype");
    }

    /* MINLOC / MAXLOC on the pair types. */
    {
        dint d[2] = {{(double)(r % 2), r}, {(double)r, r}}, dm[2];
        OK(MPI_Allreduce(d, dm, 2, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
        CHECK(dm[0].v == 0 && dm[0].i == 0, "double_int minloc tie -> smallest index");
        CHECK(dm[1].v == 0 && dm[1].i == 0, "double_int minloc");
        OK(MPI_Allreduce(d, dm, 2, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
        CHECK(dm[0].v == 1 && dm[0].i == 1, "double_int maxloc tie");
        CHECK(dm[1].v == p - 1 && dm[1].i == p - 1, "double_int maxloc");
        struct { float v; int i; } f = {(float)-r, r}, fm;
        OK(MPI_Allreduce(&f, &fm, 1, MPI_FLOAT_INT, MPI_MINLOC, MPI_COMM_WORLD));
        CHECK(fm.v == -(p - 1) && fm.i == p - 1, "float_int minloc");
        struct { long v; int i; } l = {(long)r * 1000000000L, r}, lm;
        OK(MPI_Reduce(&l, &lm, 1, MPI_LONG_INT, MPI_MAXLOC, 0, MPI_COMM_WORLD));
        if (r == 0) CHECK(lm.v == (long)(p - 1) * 1000000000L && lm.i == p - 1, "long_int maxloc");
        struct { short v; int i; } s = {(short)(5 - r), 100000 + r}, sm;
        OK(MPI_Allreduce(&s, &sm, 1, MPI_SHORT_INT, MPI_MINLOC, MPI_COMM_WORLD));
        CHECK(sm.v == 5 - (p - 1) && sm.i == 100000 + p - 1, "short_int minloc");
        int ti[2] = {r % 2, r}, tm[2];
        OK(MPI_Allreduce(ti, tm, 1, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD));
        CHECK(tm[0] == 1 && tm[1] == 1, "2int maxloc");
        struct { long double v; int i; } ld = {(long double)r, r}, ldm;
        OK(MPI_Allreduce(&ld, &ldm, 1, MPI_LONG_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
        CHECK(ldm.v == p - 1 && ldm.i == p - 1, "long_double_int maxloc");
        /* Scan with MINLOC on the padded pair type. */
        dint sc = {(double)(10 - r), r}, sco;
        OK(MPI_Scan(&sc, &sco, 1, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
        CHECK(sco.v == 10 - r && sco.i == r, "double_int scan minloc");
    }

    /* Complex, long double, C bool, MPI_BYTE. */
    {
        double complex z = (r + 1) + 1.0 * I, zs, zp;
        OK(MPI_Allreduce(&z, &zs, 1, MPI_C_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
        CHECK(creal(zs) == p * (p + 1) / 2.0 && cimag(zs) == p, "complex sum");
        OK(MPI_Allreduce(&z, &zp, 1, MPI_C_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD));
        double complex want = 1;
        for (int j = 0; j < p; j++) want *= (j + 1) + 1.0 * I;
        CHECK(creal(zp) == creal(want) && cimag(zp) == cimag(want), "complex prod");
        float complex fz = r + 2.0f * I, fzs;
        OK(MPI_Allreduce(&fz, &fzs, 1, MPI_C_FLOAT_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
        CHECK(crealf(fzs) == p * (p - 1) / 2.0f && cimagf(fzs) == 2.0f * p, "float complex sum");
        long double x = 1.0L + (r == 0 ? 0x1p-60L : 0.0L), xs, xm;
        OK(MPI_Allreduce(&x, &xs, 1, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        CHECK(xs == (long double)p + 0x1p-60L, "long double sum keeps 64-bit precision");
        long double y = (long double)r / 3.0L;
        OK(MPI_Allreduce(&y, &xm, 1, MPI_LONG_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
        CHECK(xm == (long double)(p - 1) / 3.0L, "long double max");
        long double complex lz = (r + 1) + 1.0L * I, lzp;
        OK(MPI_Allreduce(&lz, &lzp, 1, MPI_C_LONG_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD));
        long double complex lw = 1;
        for (int j = 0; j < p; j++) lw *= (j + 1) + 1.0L * I;
        CHECK(creall(lzp) == creall(lw) && cimagl(lzp) == cimagl(lw), "long double complex prod");
        bool b = (r == 0), band, bor, bx;
        OK(MPI_Allreduce(&b, &band, 1, MPI_C_BOOL, MPI_LAND, MPI_COMM_WORLD));
        OK(MPI_Allreduce(&b, &bor, 1, MPI_C_BOOL, MPI_LOR, MPI_COMM_WORLD));
        OK(MPI_Allreduce(&b, &bx, 1, MPI_C_BOOL, MPI_LXOR, MPI_COMM_WORLD));
        CHECK(!band && bor && bx, "c bool logical ops");
        unsigned char by = (unsigned char)(1u << r), bys;
        OK(MPI_Allreduce(&by, &bys, 1, MPI_BYTE, MPI_BXOR, MPI_COMM_WORLD));
        CHECK(bys == (unsigned char)((1u << p) - 1), "byte bxor");
    }

    /* MPI_Reduce_local: every integer type with every integer op, against C. */
    {
        MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX, MPI_LAND, MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR};
        int64_t a[4] = {3, -7, 0, 1234567}, b[4] = {5, 2, -9, 0};
#define LOCAL(T, DT)                                                                 \
    for (int o = 0; o < 10; o++) {                                                   \
        T x[4], y[4];                                                                \
        for (int i = 0; i < 4; i++) { x[i] = (T)a[i]; y[i] = (T)b[i]; }               \
        OK(MPI_Reduce_local(x, y, 4, DT, ops[o]));                                    \
        for (int i = 0; i < 4; i++) {                                                \
            T l = (T)a[i], rr = (T)b[i], w = 0;                                       \
            switch (o) {                                                             \
            case 0: w = (T)(l + rr); break;                                          \
            case 1: w = (T)(l * rr); break;                                          \
            case 2: w = l < rr ? l : rr; break;                                      \
            case 3: w = l > rr ? l : rr; break;                                      \
            case 4: w = (T)(l && rr); break;                                         \
            case 5: w = (T)(l || rr); break;                                         \
            case 6: w = (T)(!l != !rr); break;                                       \
            case 7: w = (T)(l & rr); break;                                          \
            case 8: w = (T)(l | rr); break;                                          \
            case 9: w = (T)(l ^ rr); break;                                          \
            }                                                                        \
            CHECK(y[i] == w, "reduce_local %s op %d [%d]", #DT, o, i);               \
        }                                                                            \
    }
        LOCAL(signed char, MPI_SIGNED_CHAR)
        LOCAL(unsigned char, MPI_UNSIGNED_CHAR)
        LOCAL(short, MPI_SHORT)
        LOCAL(unsigned short, MPI_UNSIGNED_SHORT)
        LOCAL(int, MPI_INT)
        LOCAL(unsigned, MPI_UNSIGNED)
        LOCAL(long, MPI_LONG)
        LOCAL(unsigned long, MPI_UNSIGNED_LONG)
        LOCAL(long long, MPI_LONG_LONG)
        LOCAL(int8_t, MPI_INT8_T)
        LOCAL(uint16_t, MPI_UINT16_T)
        LOCAL(int32_t, MPI_INT32_T)
        LOCAL(uint64_t, MPI_UINT64_T)
        double fx[3] = {1.5, -2, 8}, fy[3] = {2, 3, -1};
        OK(MPI_Reduce_local(fx, fy, 3, MPI_DOUBLE, MPI_PROD));
        CHECK(fy[0] == 3 && fy[1] == -6 && fy[2] == -8, "reduce_local double prod");
        float gx[2] = {1.5f, -2}, gy[2] = {2, -3};
        OK(MPI_Reduce_local(gx, gy, 2, MPI_FLOAT, MPI_MIN));
        CHECK(gy[0] == 1.5f && gy[1] == -3, "reduce_local float min");
        int rin[2] = {0, 0}, rio[2] = {1, 1};
        OK(MPI_Reduce_local(rin, rio, 1, MPI_2INT, cat));
        CHECK(rio[0] == 0 && rio[1] == 1, "reduce_local user op");
        dint di[1] = {{2.0, 4}}, dio[1] = {{2.0, 3}};
        OK(MPI_Reduce_local(di, dio, 1, MPI_DOUBLE_INT, MPI_MINLOC));
        CHECK(dio[0].v == 2.0 && dio[0].i == 3, "reduce_local double_int minloc");
    }

    OK(MPI_Op_free(&cat));
    CHECK(cat == MPI_OP_NULL, "op freed");
    OK(MPI_Op_free(&catc));
    OK(MPI_Op_free(&dop));
    OK(MPI_Finalize());
    if (rank == 0 && fails == 0) printf("coll_ops: ok, %d checks\n", checks);
    return fails ? 1 : 0;
}
