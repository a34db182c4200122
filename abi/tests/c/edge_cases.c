/* rankwire-test: ranks=2 */
/* Edge cases a reviewer found: zero-count messages with NULL buffers, MPI_IN_PLACE where
 * it is not allowed (MPI_ERR_BUFFER, not a crash), the empty status of null and inactive
 * requests (MPI 4.1 3.7.3); a receive's bad tag named as a receive's, and counts whose
 * bytes pass 2^63 - 1 refused (MPI_ERR_COUNT). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int checks = 0, rank, handler_calls = 0;
static void count_errors(MPI_Comm *c, int *code, ...) { (void)c; (void)code; handler_calls++; }
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = 1 - rank, cls, rc, count;
  MPI_Status st;
  /* zero-count with NULL, blocking and nonblocking */
  if (rank == 0) MPI_Send(NULL, 0, MPI_INT, peer, 1, MPI_COMM_WORLD);
  else {
    MPI_Recv(NULL, 0, MPI_INT, peer, 1, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == 0 && st.MPI_SOURCE == peer && st.MPI_TAG == 1, "zero recv status");
  }
  MPI_Request rq[2];
  MPI_Irecv(NULL, 0, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &rq[0]);
  MPI_Isend(NULL, 0, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &rq[1]);
  MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
  MPI_Sendrecv(NULL, 0, MPI_INT, peer, 3, NULL, 0, MPI_INT, peer, 3, MPI_COMM_WORLD, &st);
  CHECK(st.MPI_SOURCE == peer, "zero sendrecv");
  /* empty status of null and inactive requests */
  MPI_Request r = MPI_REQUEST_NULL;
  st.MPI_SOURCE = 99;
  MPI_Wait(&r, &st);
  MPI_Get_count(&st, MPI_INT, &count);
  CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG && count == 0, "null request status %d %d", st.MPI_SOURCE, st.MPI_TAG);
  int x;
  MPI_Recv_init(&x, 1, MPI_INT, peer, 4, MPI_COMM_WORLD, &r);
  MPI_Wait(&r, &st);
  CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && r != MPI_REQUEST_NULL, "inactive request status");
  MPI_Request_free(&r);
  int idx, flag;
  MPI_Request nulls[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  MPI_Testany(2, nulls, &idx, &flag, &st);
  CHECK(flag && idx == MPI_UNDEFINED && st.MPI_SOURCE == MPI_ANY_SOURCE, "testany on nulls");
  /* MPI_Isendrecv / MPI_Isendrecv_replace (MPI 4.0): the status is the receive's */
  {
    int a = rank + 10, b = -1, c[2] = {rank, rank * 2};
    MPI_Request q;
    MPI_Isendrecv(&a, 1, MPI_INT, peer, 6, &b, 1, MPI_INT, peer, 6, MPI_COMM_WORLD, &q);
    MPI_Wait(&q, &st);
    CHECK(b == peer + 10 && st.MPI_SOURCE == peer && st.MPI_TAG == 6, "isendrecv %d", b);
    MPI_Isendrecv_replace(c, 2, MPI_INT, peer, 7, peer, 7, MPI_COMM_WORLD, &q);
    MPI_Wait(&q, &st);
    CHECK(c[0] == peer && c[1] == peer * 2 && st.MPI_SOURCE == peer, "isendrecv_replace %d %d", c[0], c[1]);
    MPI_Isendrecv(&a, 1, MPI_INT, MPI_PROC_NULL, 8, &b, 1, MPI_INT, MPI_PROC_NULL, 8, MPI_COMM_WORLD, &q);
    MPI_Wait(&q, &st);
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "isendrecv proc_null status %d", st.MPI_SOURCE);
  }
  /* MPI_IN_PLACE where not allowed */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int v = 1;
  rc = MPI_Send(MPI_IN_PLACE, 1, MPI_INT, peer, 5, MPI_COMM_WORLD);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_BUFFER, "send IN_PLACE class %d", cls);
  rc = MPI_Allreduce(&v, MPI_IN_PLACE, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_BUFFER, "allreduce recvbuf IN_PLACE class %d", cls);
  rc = MPI_Bcast(MPI_IN_PLACE, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_BUFFER, "bcast IN_PLACE class %d", cls);
  /* A receive's tag above MPI_TAG_UB: MPI_ERR_TAG, and the text says receive. */
  int *ub, found;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
  MPI_Request bad;
  rc = MPI_Irecv(&v, 1, MPI_INT, peer, *ub + 1, MPI_COMM_WORLD, &bad);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_TAG, "irecv bad tag class %d", cls);
  char text[MPI_MAX_ERROR_STRING];
  int tlen;
  MPI_Error_string(rc, text, &tlen);
  CHECK(strstr(text, "receive") != NULL && strstr(text, "MPI_ANY_TAG") != NULL, "irecv bad tag text: %s", text);
  /* 2^30 elements of a 2^33-byte type: 2^63 bytes, beyond any buffer. */
  MPI_Datatype huge;
  MPI_Type_contiguous(1 << 30, MPI_DOUBLE, &huge);
  MPI_Type_commit(&huge);
  rc = MPI_Send_c(&v, (MPI_Count)1 << 30, huge, peer, 6, MPI_COMM_WORLD);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_COUNT, "2^63-byte send class %d", cls);
  MPI_Type_free(&huge);
  /* The same limit in collectives (both ranks fail locally, before any message). */
  rc = MPI_Bcast_c(&v, (MPI_Count)1 << 60, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_COUNT, "2^63-byte bcast class %d", cls);
  double dv = 1;
  rc = MPI_Allreduce_c(MPI_IN_PLACE, &dv, (MPI_Count)1 << 60, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_COUNT, "2^63-byte allreduce class %d", cls);
  /* A truncated MPI_Sendrecv / MPI_Sendrecv_replace calls the user's handler once, with
   * the receive's class (its wait's error is not raised a second time). */
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Errhandler eh;
  MPI_Comm_create_errhandler(count_errors, &eh);
  MPI_Comm_set_errhandler(dup, eh);
  int two[2] = {1, 2}, one = 0;
  rc = MPI_Sendrecv(two, 2, MPI_INT, peer, 7, &one, 1, MPI_INT, peer, 7, dup, MPI_STATUS_IGNORE);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_TRUNCATE && handler_calls == 1, "sendrecv truncation: class %d, handler called %d times", cls, handler_calls);
  int three[3] = {1, 2, 3};
  handler_calls = 0;
  if (rank == 0) {
    MPI_Send(three, 3, MPI_INT, peer, 8, dup);
    rc = MPI_Sendrecv_replace(three, 2, MPI_INT, peer, 9, peer, 9, dup, MPI_STATUS_IGNORE);
  } else {
    rc = MPI_Sendrecv_replace(three, 2, MPI_INT, peer, 9, peer, 8, dup, MPI_STATUS_IGNORE);
    MPI_Recv(three, 3, MPI_INT, peer, 9, dup, MPI_STATUS_IGNORE);
  }
  MPI_Error_class(rc, &cls);
  if (rank == 1)
    CHECK(cls == MPI_ERR_TRUNCATE && handler_calls == 1, "sendrecv_replace truncation: class %d, handler called %d times", cls, handler_calls);
  else
    CHECK(rc == MPI_SUCCESS && handler_calls == 0, "sendrecv_replace: rc %d, handler called %d times", rc, handler_calls);
  MPI_Errhandler_free(&eh);
  MPI_Comm_free(&dup);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("edge_cases: ok, %d checks\n", checks);
  MPI_Finalize();
  return 0;
}
