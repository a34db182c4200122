/* rankwire-test: ranks=2 */
/* Errors of the wait family (found by a trial, 2026-12-07):
 * - MPI_Waitall over requests of two communicators, request 0 on MPI_COMM_WORLD (the
 *   fatal default handler) and a truncated receive on a dup with MPI_ERRORS_RETURN: the
 *   error is raised on the failing request's communicator, so the call returns
 *   MPI_ERR_IN_STATUS (it aborted the job: the first request's handler was used), in
 *   both orders;
 * - MPI_Wait, MPI_Test and MPI_Waitall after MPI_Finalize on a receive still pending,
 *   on MPI_COMM_WORLD and on a communicator with reversed ranks: MPI_ERR_OTHER, at once
 *   (the reversed one waited forever). Each rank checks its results. */
#include <mpi.h>
#include <stdio.h>

static int checks = 0, fails = 0, rank = 0;
#define CHECK(c, ...)                                                          \
    do {                                                                       \
        checks++;                                                              \
        if (!(c)) {                                                            \
            fails++;                                                           \
            fprintf(stderr, "request_errors rank %d line %d: ", rank, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int peer = 1 - rank;
    MPI_Comm d;
    MPI_Comm_dup(MPI_COMM_WORLD, &d);
    MPI_Comm_set_errhandler(d, MPI_ERRORS_RETURN);
    for (int swap = 0; swap < 2; swap++) {
        int a = -1, o = 1, t[1], to[2] = {1, 2};
        MPI_Request q[4];
        MPI_Status st[4];
        MPI_Irecv(&a, 1, MPI_INT, peer, 1, MPI_COMM_WORLD, &q[swap ? 1 : 0]);
        MPI_Irecv(t, 1, MPI_INT, peer, 2, d, &q[swap ? 0 : 1]);
        MPI_Isend(&o, 1, MPI_INT, peer, 1, MPI_COMM_WORLD, &q[2]);
        MPI_Isend(to, 2, MPI_INT, peer, 2, d, &q[3]);
        int rc = MPI_Waitall(4, q, st);
        int bad = swap ? 0 : 1, good = swap ? 1 : 0;
        CHECK(rc == MPI_ERR_IN_STATUS, "swap %d: MPI_Waitall returned %d", swap, rc);
        CHECK(st[bad].MPI_ERROR == MPI_ERR_TRUNCATE && st[good].MPI_ERROR == MPI_SUCCESS &&
                  a == 1,
              "swap %d: statuses %d %d, value %d", swap, st[bad].MPI_ERROR,
              st[good].MPI_ERROR, a);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Comm_free(&d);

    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Comm rev;
    MPI_Comm_split(MPI_COMM_WORLD, 0, -rank, &rev);
    int b1, b2, b3, flag = -1;
    MPI_Request r1, r2, r3;
    MPI_Irecv(&b1, 1, MPI_INT, peer, 5, MPI_COMM_WORLD, &r1);
    MPI_Irecv(&b2, 1, MPI_INT, 1 - rank, 5, rev, &r2);
    MPI_Irecv(&b3, 1, MPI_INT, 1 - rank, 6, rev, &r3);
    int total = checks, failed = fails;
    MPI_Finalize();
    int cl = -1, rc = MPI_Wait(&r1, MPI_STATUS_IGNORE);
    MPI_Error_class(rc, &cl);
    CHECK(cl == MPI_ERR_OTHER, "MPI_Wait after MPI_Finalize (world): class %d", cl);
    rc = MPI_Wait(&r2, MPI_STATUS_IGNORE);
    MPI_Error_class(rc, &cl);
    CHECK(cl == MPI_ERR_OTHER, "MPI_Wait after MPI_Finalize (reversed): class %d", cl);
    rc = MPI_Test(&r3, &flag, MPI_STATUS_IGNORE);
    MPI_Error_class(rc, &cl);
    CHECK(cl == MPI_ERR_OTHER, "MPI_Test after MPI_Finalize: class %d", cl);
    MPI_Request both[2] = {r1, r3};
    rc = MPI_Waitall(2, both, MPI_STATUSES_IGNORE);
    MPI_Error_class(rc, &cl);
    CHECK(cl == MPI_ERR_OTHER, "MPI_Waitall after MPI_Finalize: class %d", cl);
    (void)total;
    (void)failed;
    if (rank == 0 && fails == 0) printf("request_errors: ok, %d checks\n", checks);
    return fails ? 1 : 0;
}
