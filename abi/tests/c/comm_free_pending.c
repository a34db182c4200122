/* rankwire-test: ranks=2 */
/* MPI_Comm_free while operations on the communicator are pending (MPI 4.1 §7.4.3: the
 * communicator is only marked for deallocation; pending operations complete normally).
 * Their errors must still be raised on the freed communicator's error handler: this
 * used to raise them on MPI_COMM_SELF (fatal: the job was aborted), or on a communicator
 * created meanwhile that had been given the same handle. Checked for a truncated
 * nonblocking receive (MPI_ERRORS_RETURN and a user handler), a persistent receive
 * started after the free, and a nonblocking collective; new communicators created
 * meanwhile get other handles. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int checks = 0, rank, user_calls = 0, user_code = 0;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)

static void count_errors(MPI_Comm *c, int *code, ...) {
  (void)c;
  user_calls++;
  MPI_Error_class(*code, &user_code);
}

static int cls_of(int rc) {
  int cls = -1;
  MPI_Error_class(rc, &cls);
  return cls;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  MPI_Errhandler user;
  MPI_Comm_create_errhandler(count_errors, &user);
  int big[4] = {1, 2, 3, 4};
  for (int round = 0; round < 3; round++) {
    MPI_Comm a, b, u, fresh[3];
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_dup(MPI_COMM_WORLD, &b);
    MPI_Comm_dup(MPI_COMM_WORLD, &u);
    MPI_Comm_set_errhandler(a, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(b, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(u, user);
    if (rank == 0) {
      MPI_Barrier(MPI_COMM_WORLD);
      MPI_Send(big, 4, MPI_INT, 1, 1, a);
      MPI_Send(big, 4, MPI_INT, 1, 2, b);
      MPI_Send(big, 4, MPI_INT, 1, 3, u);
      MPI_Comm_free(&a);
      MPI_Comm_free(&b);
      MPI_Comm_free(&u);
    } else {
      int small[1], cell[1];
      MPI_Request ra, rb, ru;
      MPI_Comm old_a = a, old_b = b, old_u = u;
      MPI_Irecv(small, 1, MPI_INT, 0, 1, a, &ra);
      MPI_Recv_init(cell, 1, MPI_INT, 0, 2, b, &rb);
      MPI_Irecv(small, 1, MPI_INT, 0, 3, u, &ru);
      CHECK(MPI_Comm_free(&a) == MPI_SUCCESS && a == MPI_COMM_NULL, "free a");
      CHECK(MPI_Comm_free(&b) == MPI_SUCCESS && b == MPI_COMM_NULL, "free b");
      CHECK(MPI_Comm_free(&u) == MPI_SUCCESS && u == MPI_COMM_NULL, "free u");
      /* New communicators (default handler: fatal) must not get the freed handles. */
      for (int i = 0; i < 3; i++) {
        MPI_Comm_split(MPI_COMM_SELF, 0, 0, &fresh[i]);
        CHECK(fresh[i] != old_a && fresh[i] != old_b && fresh[i] != old_u,
              "round %d: a new communicator got a handle still in use", round);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      CHECK(MPI_Start(&rb) == MPI_SUCCESS, "a persistent request outlives its freed communicator");
      CHECK(cls_of(MPI_Wait(&ra, MPI_STATUS_IGNORE)) == MPI_ERR_TRUNCATE, "truncation on freed a returned");
      CHECK(cls_of(MPI_Wait(&rb, MPI_STATUS_IGNORE)) == MPI_ERR_TRUNCATE, "truncation on freed b returned");
      CHECK(MPI_Request_free(&rb) == MPI_SUCCESS, "free the persistent request");
      int before = user_calls;
      MPI_Wait(&ru, MPI_STATUS_IGNORE);
      CHECK(user_calls == before + 1 && user_code == MPI_ERR_TRUNCATE,
            "the user handler of freed u ran once with MPI_ERR_TRUNCATE (%d calls, class %d)",
            user_calls - before, user_code);
      for (int i = 0; i < 3; i++) MPI_Comm_free(&fresh[i]);
    }
    /* A nonblocking collective on a communicator freed before it completes. */
    MPI_Comm c;
    MPI_Request r;
    int in = rank + 1, out = 0;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_SUM, c, &r);
    CHECK(MPI_Comm_free(&c) == MPI_SUCCESS, "free with a collective pending");
    CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE) == MPI_SUCCESS && out == 3, "iallreduce on freed comm: %d", out);
  }
  /* A message from MPI_Mprobe on a communicator freed before its MPI_Mrecv: the
   * truncation is raised on the freed communicator's handler (MPI_ERRORS_RETURN), and
   * a communicator created meanwhile does not get its handle. */
  {
    MPI_Comm d, fresh;
    int big4[4] = {1, 2, 3, 4}, one[1];
    MPI_Comm_dup(MPI_COMM_WORLD, &d);
    MPI_Comm_set_errhandler(d, MPI_ERRORS_RETURN);
    if (rank == 0) {
      MPI_Send(big4, 4, MPI_INT, 1, 8, d);
    } else if (rank == 1) {
      MPI_Message m;
      MPI_Comm old = d;
      MPI_Mprobe(0, 8, d, &m, MPI_STATUS_IGNORE);
      MPI_Comm_free(&d);
      MPI_Comm_split(MPI_COMM_SELF, 0, 0, &fresh);
      CHECK(fresh != old, "a new communicator got the handle of a pending message");
      CHECK(cls_of(MPI_Mrecv(one, 1, MPI_INT, &m, MPI_STATUS_IGNORE)) == MPI_ERR_TRUNCATE,
            "truncated MPI_Mrecv on a freed communicator returned");
      MPI_Comm_free(&fresh);
    }
    if (d != MPI_COMM_NULL) MPI_Comm_free(&d);
  }
  /* A persistent neighborhood collective on a Cartesian communicator freed before its
   * first start: the topology stays with the request. */
  {
    int n, dims[1] = {0}, periods[1] = {1}, nb[2] = {-1, -1}, me = rank;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    dims[0] = n;
    MPI_Comm cart;
    MPI_Request pr;
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &cart);
    MPI_Neighbor_allgather_init(&me, 1, MPI_INT, nb, 1, MPI_INT, cart, MPI_INFO_NULL, &pr);
    CHECK(MPI_Comm_free(&cart) == MPI_SUCCESS, "free the Cartesian communicator");
    for (int k = 0; k < 3; k++) {
      nb[0] = nb[1] = -1;
      CHECK(MPI_Start(&pr) == MPI_SUCCESS, "start %d on a freed Cartesian communicator", k);
      CHECK(MPI_Wait(&pr, MPI_STATUS_IGNORE) == MPI_SUCCESS, "wait %d", k);
      CHECK(nb[0] == (rank + n - 1) % n && nb[1] == (rank + 1) % n, "neighbors %d %d", nb[0], nb[1]);
    }
    MPI_Request_free(&pr);
  }
  /* rankwire's library (other libraries need not detect a freed handle): a call with
   * the freed handle while its request is pending fails with MPI_ERR_COMM, raised on
   * MPI_COMM_SELF (MPI_ERRORS_RETURN here), not on the freed communicator's fatal
   * handler. */
  {
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(ver, &len);
    if (strstr(ver, "rankwire")) {
      MPI_Comm c, old;
      MPI_Request r;
      int x = 0, size = -1;
      MPI_Comm_dup(MPI_COMM_WORLD, &c);
      MPI_Irecv(&x, 1, MPI_INT, 1 - rank, 6, c, &r);
      old = c;
      MPI_Comm_free(&c);
      CHECK(cls_of(MPI_Comm_size(old, &size)) == MPI_ERR_COMM, "a freed handle is invalid");
      CHECK(cls_of(MPI_Send(&x, 1, MPI_INT, 1 - rank, 7, old)) == MPI_ERR_COMM, "send on a freed handle");
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
  }
  /* A receive cancelled after its communicator was freed; repeated, so that freed
   * handles are released and reused along the way. */
  for (int i = 0; i < 200; i++) {
    MPI_Comm c;
    MPI_Request r;
    MPI_Status st;
    int x = 0, cancelled = 0;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Irecv(&x, 1, MPI_INT, 1 - rank, 5, c, &r);
    MPI_Comm_free(&c);
    MPI_Cancel(&r);
    CHECK(MPI_Wait(&r, &st) == MPI_SUCCESS, "wait for a cancelled receive");
    MPI_Test_cancelled(&st, &cancelled);
    CHECK(cancelled, "cancelled");
  }
  MPI_Errhandler_free(&user);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("comm_free_pending: ok, %d checks\n", checks);
  MPI_Finalize();
  return 0;
}
