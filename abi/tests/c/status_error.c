/* rankwire-test: ranks=2 */
/* The MPI_ERROR field of a status (MPI 4.1 §3.2.5): calls that return one status never
 * change it (their error is the return value); calls with arrays of statuses set it
 * only when they return MPI_ERR_IN_STATUS, and then on every entry they completed
 * (MPI_SUCCESS for the good ones). And a nonblocking call whose request pointer is
 * null fails with MPI_ERR_ARG before it posts anything: the message it would have
 * taken goes to the next receive. The empty status of a null request is written whole,
 * its MPI_ERROR MPI_SUCCESS included (MPI 4.1 §3.7.3). */
#include <mpi.h>
#include <stdio.h>

static int checks = 0, rank;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)
#define SENTINEL (-7)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int peer = 1 - rank, cls = -1, rc;
  MPI_Status st[3];

  /* Success: MPI_Recv, MPI_Wait, MPI_Waitall leave MPI_ERROR alone. */
  int a = 10 + rank, b = -1, c[2] = {-1, -1};
  st[0].MPI_ERROR = SENTINEL;
  if (rank == 0) { MPI_Send(&a, 1, MPI_INT, 1, 1, MPI_COMM_WORLD); }
  else { MPI_Recv(&b, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, &st[0]); CHECK(b == 10, "recv got %d", b); CHECK(st[0].MPI_ERROR == SENTINEL, "MPI_Recv wrote MPI_ERROR %d", st[0].MPI_ERROR); }
  MPI_Request r[3];
  MPI_Irecv(&b, 1, MPI_INT, peer, 2, MPI_COMM_WORLD, &r[0]);
  MPI_Send(&a, 1, MPI_INT, peer, 2, MPI_COMM_WORLD);
  st[0].MPI_ERROR = SENTINEL;
  CHECK(MPI_Wait(&r[0], &st[0]) == MPI_SUCCESS, "wait");
  CHECK(st[0].MPI_ERROR == SENTINEL && b == 10 + peer, "MPI_Wait wrote MPI_ERROR %d (b %d)", st[0].MPI_ERROR, b);
  MPI_Irecv(&c[0], 1, MPI_INT, peer, 3, MPI_COMM_WORLD, &r[0]);
  MPI_Irecv(&c[1], 1, MPI_INT, peer, 4, MPI_COMM_WORLD, &r[1]);
  MPI_Isend(&a, 1, MPI_INT, peer, 3, MPI_COMM_WORLD, &r[2]);
  MPI_Send(&a, 1, MPI_INT, peer, 4, MPI_COMM_WORLD);
  for (int i = 0; i < 3; i++) st[i].MPI_ERROR = SENTINEL;
  CHECK(MPI_Waitall(3, r, st) == MPI_SUCCESS, "waitall");
  CHECK(st[0].MPI_ERROR == SENTINEL && st[1].MPI_ERROR == SENTINEL && st[2].MPI_ERROR == SENTINEL,
        "a successful MPI_Waitall wrote MPI_ERROR %d %d %d", st[0].MPI_ERROR, st[1].MPI_ERROR, st[2].MPI_ERROR);
  CHECK(c[0] == 10 + peer && c[1] == 10 + peer, "waitall got %d %d", c[0], c[1]);

  /* Failure in MPI_Wait (truncation): the error is returned, MPI_ERROR untouched. */
  int big[2] = {1, 2}, small = -1;
  if (rank == 0) {
    MPI_Send(big, 2, MPI_INT, 1, 5, MPI_COMM_WORLD);
    MPI_Send(big, 2, MPI_INT, 1, 6, MPI_COMM_WORLD);
  } else {
    MPI_Irecv(&small, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, &r[0]);
    st[0].MPI_ERROR = SENTINEL;
    rc = MPI_Wait(&r[0], &st[0]);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TRUNCATE, "wait on a truncated receive: class %d", cls);
    CHECK(st[0].MPI_ERROR == SENTINEL, "MPI_Wait wrote MPI_ERROR %d on failure", st[0].MPI_ERROR);
    /* The status of a truncated receive is filled (MPI 4.1 §3.2.4): source, tag, and
     * the count received (the buffer's). */
    int n = -1;
    MPI_Get_count(&st[0], MPI_INT, &n);
    CHECK(st[0].MPI_SOURCE == 0 && st[0].MPI_TAG == 5 && n == 1 && small == 1,
          "truncated MPI_Wait status: source %d tag %d count %d (value %d)", st[0].MPI_SOURCE, st[0].MPI_TAG, n, small);
    /* In MPI_Waitall: MPI_ERR_IN_STATUS, the failed entry's class, MPI_SUCCESS on the
     * good one. */
    MPI_Irecv(&small, 1, MPI_INT, 0, 6, MPI_COMM_WORLD, &r[0]);
    MPI_Irecv(&b, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, &r[1]);
    MPI_Send(&a, 1, MPI_INT, 0, 8, MPI_COMM_WORLD);
    st[0].MPI_ERROR = st[1].MPI_ERROR = SENTINEL;
    rc = MPI_Waitall(2, r, st);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_IN_STATUS, "waitall with a truncated receive: class %d", cls);
    CHECK(st[0].MPI_ERROR == MPI_ERR_TRUNCATE && st[1].MPI_ERROR == MPI_SUCCESS,
          "waitall statuses' MPI_ERROR %d %d", st[0].MPI_ERROR, st[1].MPI_ERROR);
    MPI_Get_count(&st[0], MPI_INT, &n);
    CHECK(st[0].MPI_SOURCE == 0 && st[0].MPI_TAG == 6 && n == 1,
          "truncated MPI_Waitall status: source %d tag %d count %d", st[0].MPI_SOURCE, st[0].MPI_TAG, n);
  }
  if (rank == 0) {
    MPI_Recv(&b, 1, MPI_INT, 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(&a, 1, MPI_INT, 1, 7, MPI_COMM_WORLD);
  }

  /* A truncated receive seen by MPI_Request_get_status: the truncation (as MPICH
   * returns it) with the filled status, and the wait after it returns the truncation
   * with the same status. */
  if (rank == 0) {
    MPI_Send(big, 2, MPI_INT, 1, 12, MPI_COMM_WORLD);
  } else {
    int flag = 0, n = -1;
    small = -1;
    MPI_Irecv(&small, 1, MPI_INT, 0, 12, MPI_COMM_WORLD, &r[0]);
    do { rc = MPI_Request_get_status(r[0], &flag, &st[0]); } while (!flag && rc == MPI_SUCCESS);
    MPI_Error_class(rc, &cls);
    MPI_Get_count(&st[0], MPI_INT, &n);
    CHECK(flag && cls == MPI_ERR_TRUNCATE, "get_status of a truncated receive: flag %d class %d", flag, cls);
    CHECK(st[0].MPI_SOURCE == 0 && st[0].MPI_TAG == 12 && n == 1, "get_status of a truncated receive: source %d tag %d count %d", st[0].MPI_SOURCE, st[0].MPI_TAG, n);
    /* MPI_Request_get_status_all: MPI_ERR_IN_STATUS, the entry's MPI_ERROR. */
    st[0].MPI_ERROR = SENTINEL;
    rc = MPI_Request_get_status_all(1, r, &flag, st);
    MPI_Error_class(rc, &cls);
    CHECK(flag && cls == MPI_ERR_IN_STATUS && st[0].MPI_ERROR == MPI_ERR_TRUNCATE, "get_status_all: flag %d class %d MPI_ERROR %d", flag, cls, st[0].MPI_ERROR);
    rc = MPI_Wait(&r[0], &st[1]);
    MPI_Error_class(rc, &cls);
    MPI_Get_count(&st[1], MPI_INT, &n);
    CHECK(cls == MPI_ERR_TRUNCATE && st[1].MPI_TAG == 12 && n == 1 && small == 1, "wait after get_status: class %d tag %d count %d value %d", cls, st[1].MPI_TAG, n, small);
  }

  /* A truncated receive into a derived datatype: what fits is unpacked into place. */
  int three[3] = {41, 42, 43}, dst[3] = {-1, -1, -1};
  if (rank == 0) {
    MPI_Send(three, 3, MPI_INT, 1, 11, MPI_COMM_WORLD);
  } else {
    MPI_Datatype vec;
    MPI_Type_vector(2, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    MPI_Irecv(dst, 1, vec, 0, 11, MPI_COMM_WORLD, &r[0]);
    rc = MPI_Wait(&r[0], &st[0]);
    MPI_Error_class(rc, &cls);
    int n = -1;
    MPI_Get_count(&st[0], MPI_INT, &n);
    CHECK(cls == MPI_ERR_TRUNCATE && st[0].MPI_SOURCE == 0 && st[0].MPI_TAG == 11 && n == 2,
          "truncated vector receive: class %d source %d tag %d count %d", cls, st[0].MPI_SOURCE, st[0].MPI_TAG, n);
    CHECK(dst[0] == 41 && dst[1] == -1 && dst[2] == 42, "truncated vector receive wrote %d %d %d", dst[0], dst[1], dst[2]);
    MPI_Type_free(&vec);
  }

  /* The empty status of a null request is whole (MPI 4.1 §3.7.3): error MPI_SUCCESS. */
  r[0] = MPI_REQUEST_NULL;
  st[0].MPI_ERROR = SENTINEL;
  CHECK(MPI_Wait(&r[0], &st[0]) == MPI_SUCCESS, "wait on MPI_REQUEST_NULL");
  CHECK(st[0].MPI_ERROR == MPI_SUCCESS && st[0].MPI_SOURCE == MPI_ANY_SOURCE && st[0].MPI_TAG == MPI_ANY_TAG,
        "empty status: error %d source %d tag %d", st[0].MPI_ERROR, st[0].MPI_SOURCE, st[0].MPI_TAG);

  /* A null request pointer: nothing is posted. */
  int x = -1;
  rc = MPI_Irecv(&x, 1, MPI_INT, peer, 9, MPI_COMM_WORLD, NULL);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_ARG, "MPI_Irecv with a null request: class %d", cls);
  int v = 20 + rank;
  rc = MPI_Isend(&v, 1, MPI_INT, peer, 10, MPI_COMM_WORLD, NULL);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_ARG, "MPI_Isend with a null request: class %d", cls);
  int w = 30 + rank, got = -1;
  MPI_Sendrecv(&w, 1, MPI_INT, peer, 9, &got, 1, MPI_INT, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  CHECK(got == 30 + peer && x == -1, "the receive after a refused MPI_Irecv got %d (x %d)", got, x);
  int flag = 1;
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Iprobe(peer, 10, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
  CHECK(flag == 0, "a refused MPI_Isend sent a message");

  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("status_error: ok, %d checks\n", checks);
  MPI_Finalize();
  return 0;
}
