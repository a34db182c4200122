/* rankwire-test: ranks=2,4 */
/* Point-to-point through the standard ABI: modes, probes, matched probes, sendrecv,
 * persistent requests, cancel, the wait/test families, MPI_PROC_NULL, wildcards,
 * truncation under MPI_ERRORS_RETURN. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks = 0, rank, size;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(provided == MPI_THREAD_MULTIPLE, "provided %d", provided);
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  MPI_Status st;
  int count;

  /* Ssend / Rsend / Bsend ring, each with its own tag. */
  int bufsize = 4 * (1 << 16) + 4 * MPI_BSEND_OVERHEAD;
  char *battach = malloc(bufsize);
  MPI_Buffer_attach(battach, bufsize);
  for (int mode = 0; mode < 3; mode++) {
    int n = 1000 + mode * 20000;
    int *s = malloc(n * sizeof(int)), *r = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) s[i] = rank * 1000003 + i + mode;
    MPI_Request rq;
    MPI_Irecv(r, n, MPI_INT, left, 10 + mode, MPI_COMM_WORLD, &rq);
    MPI_Barrier(MPI_COMM_WORLD); /* receives posted before ready sends */
    if (mode == 0) MPI_Ssend(s, n, MPI_INT, right, 10, MPI_COMM_WORLD);
    if (mode == 1) MPI_Rsend(s, n, MPI_INT, right, 11, MPI_COMM_WORLD);
    if (mode == 2) { MPI_Bsend(s, n, MPI_INT, right, 12, MPI_COMM_WORLD); memset(s, 0, n * sizeof(int)); }
    MPI_Wait(&rq, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == n && st.MPI_SOURCE == left && st.MPI_TAG == 10 + mode, "mode %d count %d src %d tag %d", mode, count, st.MPI_SOURCE, st.MPI_TAG);
    for (int i = 0; i < n; i++) if (r[i] != left * 1000003 + i + mode) CHECK(0, "mode %d data at %d", mode, i);
    checks++;
    free(s); free(r);
  }
  void *ret; int retsize;
  MPI_Buffer_detach(&ret, &retsize);
  CHECK(ret == battach && retsize == bufsize, "detach gave %p %d", ret, retsize);
  free(battach);

  /* Probe, then receive with the probed size; ANY_SOURCE/ANY_TAG. */
  {
    int n = 777 + rank;
    double *s = malloc(n * sizeof(double));
    for (int i = 0; i < n; i++) s[i] = rank + i * 0.5;
    MPI_Request rq;
    MPI_Isend(s, n, MPI_DOUBLE, right, 20 + rank, MPI_COMM_WORLD, &rq);
    MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_DOUBLE, &count);
    CHECK(st.MPI_SOURCE == left && st.MPI_TAG == 20 + left && count == 777 + left, "probe src %d tag %d count %d", st.MPI_SOURCE, st.MPI_TAG, count);
    double *r = malloc(count * sizeof(double));
    MPI_Recv(r, count, MPI_DOUBLE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(r[count - 1] == left + (count - 1) * 0.5, "probe data");
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    free(s); free(r);
  }

  /* Matched probe: Improbe until found, then Mrecv; Mprobe + Imrecv. */
  {
    int v = rank * 7, got = -1, flag = 0;
    MPI_Message msg;
    MPI_Send(&v, 1, MPI_INT, right, 30, MPI_COMM_WORLD);
    while (!flag) MPI_Improbe(left, 30, MPI_COMM_WORLD, &flag, &msg, &st);
    MPI_Mrecv(&got, 1, MPI_INT, &msg, &st);
    CHECK(got == left * 7 && msg == MPI_MESSAGE_NULL, "mrecv got %d", got);
    MPI_Send(&v, 1, MPI_INT, right, 31, MPI_COMM_WORLD);
    MPI_Mprobe(left, 31, MPI_COMM_WORLD, &msg, &st);
    MPI_Request rq;
    MPI_Imrecv(&got, 1, MPI_INT, &msg, &rq);
    MPI_Wait(&rq, &st);
    CHECK(got == left * 7 && st.MPI_TAG == 31, "imrecv got %d", got);
  }

  /* Sendrecv and Sendrecv_replace around the ring. */
  {
    int a = rank, b = -1;
    MPI_Sendrecv(&a, 1, MPI_INT, right, 40, &b, 1, MPI_INT, left, 40, MPI_COMM_WORLD, &st);
    CHECK(b == left, "sendrecv %d", b);
    int x[3] = {rank, rank + 1, rank + 2};
    MPI_Sendrecv_replace(x, 3, MPI_INT, right, 41, left, 41, MPI_COMM_WORLD, &st);
    CHECK(x[0] == left && x[2] == left + 2, "sendrecv_replace %d %d", x[0], x[2]);
  }

  /* Persistent requests started 5 times. */
  {
    int s = 0, r = -1;
    MPI_Request rq[2];
    MPI_Recv_init(&r, 1, MPI_INT, left, 50, MPI_COMM_WORLD, &rq[0]);
    MPI_Send_init(&s, 1, MPI_INT, right, 50, MPI_COMM_WORLD, &rq[1]);
    for (int it = 0; it < 5; it++) {
      s = rank * 100 + it;
      MPI_Startall(2, rq);
      MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
      CHECK(r == left * 100 + it, "persistent it %d got %d", it, r);
      CHECK(rq[0] != MPI_REQUEST_NULL, "persistent request stays allocated");
    }
    MPI_Request_free(&rq[0]);
    MPI_Request_free(&rq[1]);
    CHECK(rq[0] == MPI_REQUEST_NULL, "request_free sets NULL");
  }

  /* Cancel a receive that cannot match. */
  {
    int r;
    MPI_Request rq;
    MPI_Irecv(&r, 1, MPI_INT, left, 999, MPI_COMM_WORLD, &rq);
    MPI_Cancel(&rq);
    MPI_Wait(&rq, &st);
    int c = 0;
    MPI_Test_cancelled(&st, &c);
    CHECK(c == 1, "receive not cancelled");
  }

  /* Waitany / Waitsome / Testall over several receives. */
  {
    int r[3] = {-1, -1, -1}, s[3];
    MPI_Request rq[3], sq[3];
    for (int i = 0; i < 3; i++) {
      MPI_Irecv(&r[i], 1, MPI_INT, left, 60 + i, MPI_COMM_WORLD, &rq[i]);
    }
    for (int i = 2; i >= 0; i--) {
      s[i] = rank * 10 + i;
      MPI_Isend(&s[i], 1, MPI_INT, right, 60 + i, MPI_COMM_WORLD, &sq[i]);
    }
    int done = 0, idx;
    while (done < 2) {
      MPI_Waitany(3, rq, &idx, &st);
      CHECK(idx >= 0 && idx < 3 && rq[idx] == MPI_REQUEST_NULL && r[idx] == left * 10 + idx, "waitany idx %d", idx);
      done++;
    }
    int outc, inds[3];
    MPI_Waitsome(3, rq, &outc, inds, MPI_STATUSES_IGNORE);
    CHECK(outc == 1, "waitsome outcount %d", outc);
    MPI_Waitsome(3, rq, &outc, inds, MPI_STATUSES_IGNORE);
    CHECK(outc == MPI_UNDEFINED, "waitsome with no active requests: %d", outc);
    int flag = 0;
    while (!flag) MPI_Testall(3, sq, &flag, MPI_STATUSES_IGNORE);
    CHECK(sq[0] == MPI_REQUEST_NULL && sq[2] == MPI_REQUEST_NULL, "testall completes all");
    for (int i = 0; i < 3; i++) CHECK(r[i] == left * 10 + i, "waitany data %d", i);
  }

  /* MPI_PROC_NULL: immediate, empty status. */
  {
    int x = 5;
    MPI_Send(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD);
    MPI_Recv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG && count == 0 && x == 5, "proc_null status");
  }

  /* Truncation and bad arguments return errors under MPI_ERRORS_RETURN. */
  {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int big[4] = {1, 2, 3, 4}, small[2];
    MPI_Request rq;
    MPI_Isend(big, 4, MPI_INT, right, 70, MPI_COMM_WORLD, &rq);
    int rc = MPI_Recv(small, 2, MPI_INT, left, 70, MPI_COMM_WORLD, &st);
    int cls;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TRUNCATE, "truncation gave class %d", cls);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    rc = MPI_Send(big, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_RANK, "bad rank gave class %d", cls);
    rc = MPI_Send(big, 1, MPI_INT, right, -5, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TAG, "bad tag gave class %d", cls);
    rc = MPI_Send(big, -1, MPI_INT, right, 0, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COUNT, "negative count gave class %d", cls);
    rc = MPI_Send(big, 1, MPI_DATATYPE_NULL, right, 0, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TYPE, "null type gave class %d", cls);
    char msg[MPI_MAX_ERROR_STRING];
    int len;
    MPI_Error_string(MPI_ERR_TAG, msg, &len);
    CHECK(len > 0 && strstr(msg, "MPI_ERR_TAG") != NULL, "error string %s", msg);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  }

  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("p2p_modes: ok, %d checks\n", checks);
  MPI_Finalize();
  return 0;
}
