/* rankwire-test: ranks=2 */
/* MPI_Request_free of operations that are still active, then MPI_Finalize: a freed
 * receive no message will ever match is withdrawn at MPI_Finalize (it must return, not
 * wait for it); a generalized request freed while active stays valid for
 * MPI_Grequest_complete through a copy of the handle, which then runs free_fn once
 * and not query_fn (MPI 4.1 §13.2); one completed and then freed runs free_fn once; one
 * freed and never completed does not keep MPI_Finalize from returning. */
#include <mpi.h>
#include <stdio.h>

static int checks = 0, fails = 0, rank = 0;
#define CHECK(c, ...)                                                          \
    do {                                                                       \
        checks++;                                                              \
        if (!(c)) {                                                            \
            fails++;                                                           \
            fprintf(stderr, "request_free rank %d line %d: ", rank, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

static int queried = 0, freed = 0;
static int q_fn(void *e, MPI_Status *st) { (void)e; (void)st; queried++; return MPI_SUCCESS; }
static int f_fn(void *e) { (void)e; freed++; return MPI_SUCCESS; }
static int c_fn(void *e, int done) { (void)e; (void)done; return MPI_SUCCESS; }

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    static int never = -1; /* the freed receive's buffer, alive until exit */
    MPI_Request r, copy;

    /* A receive nobody will match, freed. */
    OK(MPI_Irecv(&never, 1, MPI_INT, 1 - rank, 77, MPI_COMM_WORLD, &r));
    OK(MPI_Request_free(&r));
    CHECK(r == MPI_REQUEST_NULL, "freed request not MPI_REQUEST_NULL");

    /* Generalized request freed while active, completed through a copy. */
    OK(MPI_Grequest_start(q_fn, f_fn, c_fn, NULL, &r));
    copy = r;
    OK(MPI_Request_free(&r));
    CHECK(freed == 0, "free_fn ran before completion");
    int rc = MPI_Grequest_complete(copy);
    CHECK(rc == MPI_SUCCESS, "MPI_Grequest_complete after MPI_Request_free returned %d", rc);
    CHECK(freed == 1 && queried == 0, "after completion: free_fn %d times, query_fn %d (want 1, 0)", freed, queried);

    /* Completed, then freed without a wait. */
    OK(MPI_Grequest_start(q_fn, f_fn, c_fn, NULL, &r));
    OK(MPI_Grequest_complete(r));
    OK(MPI_Request_free(&r));
    CHECK(freed == 2 && queried == 0, "completed then freed: free_fn %d, query_fn %d (want 2, 0)", freed, queried);

    /* Freed and never completed (erroneous to leave, but MPI_Finalize must return). */
    OK(MPI_Grequest_start(q_fn, f_fn, c_fn, NULL, &r));
    OK(MPI_Request_free(&r));

    /* Communication still works afterwards. */
    int v = 10 + rank, w = -1;
    OK(MPI_Sendrecv(&v, 1, MPI_INT, 1 - rank, 5, &w, 1, MPI_INT, 1 - rank, 5, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    CHECK(w == 11 - rank, "sendrecv after the frees got %d", w);

    OK(MPI_Finalize());
    CHECK(never == -1, "the withdrawn receive wrote %d", never);
    if (rank == 0 && fails == 0) printf("request_free: ok, %d checks\n", checks);
    return fails ? 1 : 0;
}
