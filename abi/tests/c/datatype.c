/* rankwire-test: ranks=2,3 */
/* Derived datatypes end to end: layouts (values checked against MPICH 5.0.2's
 * standard-ABI library), a vector column and a struct array sent between ranks,
 * pack/unpack, get_count/get_elements of a short message, envelopes and contents. */
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int checks = 0, failures = 0;
#define CHECK(c, ...) do { checks++; if (!(c)) { failures++; printf("datatype: FAILED line %d: ", __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

struct particle { double x; int id; char tag; };

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Aint lb, ext, tlb, tex;

    /* A column of a 4x5 row-major int matrix. */
    MPI_Datatype col;
    MPI_Type_vector(4, 1, 5, MPI_INT, &col);
    MPI_Type_commit(&col);
    MPI_Type_get_extent(col, &lb, &ext);
    CHECK(lb == 0 && ext == 64, "column lb %ld extent %ld", (long)lb, (long)ext);
    int tsize; MPI_Type_size(col, &tsize);
    CHECK(tsize == 16, "column size %d", tsize);

    /* A struct matching struct particle, resized to sizeof. */
    int bl[3] = {1, 1, 1};
    MPI_Aint disp[3] = {offsetof(struct particle, x), offsetof(struct particle, id), offsetof(struct particle, tag)};
    MPI_Datatype types[3] = {MPI_DOUBLE, MPI_INT, MPI_CHAR}, pt;
    MPI_Type_create_struct(3, bl, disp, types, &pt);
    MPI_Type_get_extent(pt, &lb, &ext);
    CHECK(lb == 0 && ext == (MPI_Aint)sizeof(struct particle), "struct extent %ld, sizeof %zu", (long)ext, sizeof(struct particle));
    MPI_Type_get_true_extent(pt, &tlb, &tex);
    CHECK(tlb == 0 && tex == 13, "struct true extent %ld %ld", (long)tlb, (long)tex);
    MPI_Type_commit(&pt);

    /* Negative-stride vector: lb -32, extent 40. */
    MPI_Datatype neg;
    MPI_Type_vector(3, 2, -4, MPI_INT, &neg);
    MPI_Type_get_extent(neg, &lb, &ext);
    CHECK(lb == -32 && ext == 40, "negative stride lb %ld extent %ld", (long)lb, (long)ext);
    MPI_Type_free(&neg);
    CHECK(neg == MPI_DATATYPE_NULL, "free sets MPI_DATATYPE_NULL");

    /* Subarray (C order) of a 4x5 int array, 2x3 starting at (1,2). */
    int sz[2] = {4, 5}, sub[2] = {2, 3}, st[2] = {1, 2};
    MPI_Datatype sa;
    MPI_Type_create_subarray(2, sz, sub, st, MPI_ORDER_C, MPI_INT, &sa);
    MPI_Type_get_true_extent(sa, &tlb, &tex);
    CHECK(tlb == 28 && tex == 32, "subarray true extent %ld %ld", (long)tlb, (long)tex);
    MPI_Type_commit(&sa);

    int ni, na, nd, comb;
    MPI_Type_get_envelope(col, &ni, &na, &nd, &comb);
    CHECK(ni == 3 && na == 0 && nd == 1 && comb == MPI_COMBINER_VECTOR, "vector envelope %d %d %d %d", ni, na, nd, comb);
    int ints[3]; MPI_Datatype dts[1];
    MPI_Type_get_contents(col, 3, 0, 1, ints, NULL, dts);
    CHECK(ints[0] == 4 && ints[1] == 1 && ints[2] == 5 && dts[0] == MPI_INT, "vector contents");

    char name[MPI_MAX_OBJECT_NAME]; int len;
    MPI_Type_get_name(MPI_DOUBLE, name, &len);
    CHECK(strcmp(name, "MPI_DOUBLE") == 0 && len == 10, "name of MPI_DOUBLE: %s", name);
    MPI_Type_set_name(col, "column");
    MPI_Type_get_name(col, name, &len);
    CHECK(strcmp(name, "column") == 0, "set name: %s", name);

    /* Pack / unpack: an int then a column. */
    int m[20];
    for (int i = 0; i < 20; i++) m[i] = i;
    char packed[64]; int pos = 0, seven = 7, psize;
    MPI_Pack_size(1, col, MPI_COMM_WORLD, &psize);
    CHECK(psize == 16, "pack size %d", psize);
    MPI_Pack(&seven, 1, MPI_INT, packed, 64, &pos, MPI_COMM_WORLD);
    MPI_Pack(m, 1, col, packed, 64, &pos, MPI_COMM_WORLD);
    CHECK(pos == 20, "pack position %d", pos);
    int back[20] = {0}, first = 0; pos = 0;
    MPI_Unpack(packed, 20, &pos, &first, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Unpack(packed, 20, &pos, back, 1, col, MPI_COMM_WORLD);
    CHECK(first == 7 && back[0] == 0 && back[5] == 5 && back[10] == 10 && back[15] == 15 && back[1] == 0, "unpack");

    /* Rank 0 sends column 2 and two particles to every other rank; a short message
     * of 20 bytes, then a status of 20 bytes checks get_count / get_elements of
 * partial elements. */
    struct particle ps[2] = {{1.5, 10, 'a'}, {-2.25, 20, 'b'}};
    if (rank == 0) {
        for (int r = 1; r < size; r++) {
            MPI_Send(&m[2], 1, col, r, 1, MPI_COMM_WORLD);
            MPI_Send(ps, 2, pt, r, 2, MPI_COMM_WORLD);
            MPI_Send(m, 1, sa, r, 3, MPI_COMM_WORLD);
            MPI_Send(m, 20, MPI_BYTE, r, 4, MPI_COMM_WORLD);
        }
    } else {
        int got[20];
        for (int i = 0; i < 20; i++) got[i] = -1;
        MPI_Status s; int c;
        MPI_Recv(&got[2], 1, col, 0, 1, MPI_COMM_WORLD, &s);
        MPI_Get_count(&s, col, &c);
        CHECK(c == 1, "column count %d", c);
        MPI_Get_elements(&s, col, &c);
        CHECK(c == 4, "column elements %d", c);
        CHECK(got[2] == 2 && got[7] == 7 && got[12] == 12 && got[17] == 17 && got[3] == -1, "column data");
        struct particle q[2];
        memset(q, 0, sizeof q);
        MPI_Recv(q, 2, pt, 0, 2, MPI_COMM_WORLD, &s);
        CHECK(q[0].x == 1.5 && q[0].id == 10 && q[0].tag == 'a' && q[1].x == -2.25 && q[1].id == 20 && q[1].tag == 'b', "particles");
        MPI_Get_elements(&s, pt, &c);
        CHECK(c == 6, "particle elements %d", c);
        int grid[20];
        for (int i = 0; i < 20; i++) grid[i] = -1;
        MPI_Recv(grid, 1, sa, 0, 3, MPI_COMM_WORLD, &s);
        CHECK(grid[7] == 7 && grid[9] == 9 && grid[12] == 12 && grid[14] == 14 && grid[6] == -1 && grid[10] == -1, "subarray data");
        char raw[32];
        MPI_Recv(raw, 32, MPI_BYTE, 0, 4, MPI_COMM_WORLD, &s);
        MPI_Get_count(&s, MPI_BYTE, &c);
        CHECK(c == 20 && s.MPI_SOURCE == 0 && s.MPI_TAG == 4, "short byte message: count %d", c);
        /* The counts of 20 bytes in other types (a status set by hand). */
        MPI_Status_set_elements(&s, MPI_BYTE, 20);
        MPI_Get_count(&s, MPI_DOUBLE, &c);
        CHECK(c == MPI_UNDEFINED, "count of 2.5 doubles %d", c);
        MPI_Get_elements(&s, MPI_DOUBLE, &c);
        CHECK(c == MPI_UNDEFINED, "elements of 2.5 doubles %d", c);
        MPI_Get_count(&s, MPI_INT, &c);
        CHECK(c == 5, "count of 5 ints %d", c);
    }

    MPI_Type_free(&col);
    MPI_Type_free(&pt);
    MPI_Type_free(&sa);
    int all = 0;
    MPI_Reduce(&failures, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0 && all == 0) printf("datatype: ok, %d checks\n", checks);
    MPI_Finalize();
    return all == 0 && failures == 0 ? 0 : 1;
}
