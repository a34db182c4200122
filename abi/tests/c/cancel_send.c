/* rankwire-test: ranks=2 */
/* MPI_Cancel on sends (MPI 4.1 §3.8.4: "If a communication is marked for cancellation,
 * then a MPI_WAIT call for that communication is guaranteed to return, irrespective of
 * the activities of other processes"; either the cancellation succeeds and no part of
 * the message is received, or the operation completes normally):
 * - a 1 MiB (rendezvous) MPI_Isend nobody receives: MPI_Wait returns cancelled and the
 *   receiver no longer sees the message (MPI_Iprobe), the next message takes its place;
 * - MPI_Request_get_status on such a send: cancelled, and so is the MPI_Wait after it;
 * - a large send a thread waits for, cancelled by another thread (MPI_THREAD_MULTIPLE);
 * - a small MPI_Issend nobody receives: the same;
 * - in MPI_Waitall beside an eager send: one cancelled, the other delivered;
 * - a send whose receive matched before the cancel: not cancelled, data whole;
 * - an eager send: the cancel may fail (rankwire: it completed locally); whichever
 *   MPI_Test_cancelled says is what the receiver sees. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int checks = 0, rank;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)
#define BIG (1 << 18) /* ints: 1 MiB */

static int cancelled(MPI_Status *st) { int f = -1; MPI_Test_cancelled(st, &f); return f; }

static MPI_Request shared;
static void *canceller(void *arg) {
  (void)arg;
  usleep(200 * 1000);
  MPI_Request copy = shared;
  CHECK(MPI_Cancel(&copy) == MPI_SUCCESS, "MPI_Cancel from another thread");
  return NULL;
}

int main(int argc, char **argv) {
  int provided = -1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int *big = malloc(BIG * sizeof(int)), *in = malloc(BIG * sizeof(int));
  for (int i = 0; i < BIG; i++) big[i] = i * 3 + 1;
  MPI_Request r, rs[2];
  MPI_Status st, sts[2];
  int flag = -1, small[4] = {1, 2, 3, 4}, got[4] = {0};

  /* A large send nobody receives. */
  if (rank == 0) {
    MPI_Isend(big, BIG, MPI_INT, 1, 5, MPI_COMM_WORLD, &r);
    CHECK(MPI_Cancel(&r) == MPI_SUCCESS, "MPI_Cancel");
    CHECK(MPI_Wait(&r, &st) == MPI_SUCCESS, "MPI_Wait");
    CHECK(cancelled(&st) == 1 && r == MPI_REQUEST_NULL, "large send: cancelled %d", cancelled(&st));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    MPI_Iprobe(0, 5, MPI_COMM_WORLD, &flag, &st);
    CHECK(flag == 0, "the cancelled message is still visible");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  /* The next message on that tag takes its place. */
  if (rank == 0) MPI_Send(small, 4, MPI_INT, 1, 5, MPI_COMM_WORLD);
  else {
    MPI_Recv(in, BIG, MPI_INT, 0, 5, MPI_COMM_WORLD, &st);
    int n = -1;
    MPI_Get_count(&st, MPI_INT, &n);
    CHECK(n == 4 && in[3] == 4, "after the cancelled send: count %d", n);
  }

  /* MPI_Request_get_status on a cancelled send says so, and leaves the wait its
   * cancelled status. */
  if (rank == 0) {
    MPI_Isend(big, BIG, MPI_INT, 1, 12, MPI_COMM_WORLD, &r);
    MPI_Cancel(&r);
    do { MPI_Request_get_status(r, &flag, &st); } while (!flag);
    CHECK(cancelled(&st) == 1 && r != MPI_REQUEST_NULL, "get_status: cancelled %d", cancelled(&st));
    CHECK(MPI_Wait(&r, &st) == MPI_SUCCESS && cancelled(&st) == 1, "wait after get_status: cancelled %d", cancelled(&st));
  }
  MPI_Barrier(MPI_COMM_WORLD);

  /* MPI_Wait on a large send nobody receives, cancelled by another thread: the
   * receiver withdraws it (its runtime answers in the barrier). */
  if (provided == MPI_THREAD_MULTIPLE) {
    if (rank == 0) {
      pthread_t t;
      MPI_Isend(big, BIG, MPI_INT, 1, 13, MPI_COMM_WORLD, &shared);
      r = shared;
      CHECK(pthread_create(&t, NULL, canceller, NULL) == 0, "pthread_create");
      CHECK(MPI_Wait(&r, &st) == MPI_SUCCESS, "MPI_Wait on a send cancelled by another thread");
      pthread_join(t, NULL);
      CHECK(cancelled(&st) == 1 && r == MPI_REQUEST_NULL, "send cancelled by a thread: %d", cancelled(&st));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
      MPI_Iprobe(0, 13, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
      CHECK(flag == 0, "the send cancelled by a thread is still visible");
    }
  }

  /* A synchronous send nobody receives. */
  if (rank == 0) {
    MPI_Issend(small, 4, MPI_INT, 1, 6, MPI_COMM_WORLD, &r);
    MPI_Cancel(&r);
    CHECK(MPI_Wait(&r, &st) == MPI_SUCCESS, "MPI_Wait (Issend)");
    CHECK(cancelled(&st) == 1, "synchronous send: cancelled %d", cancelled(&st));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    MPI_Iprobe(0, 6, MPI_COMM_WORLD, &flag, &st);
    CHECK(flag == 0, "the cancelled synchronous message is still visible");
  }

  /* MPI_Waitall: a cancelled large send beside an eager one that is received. */
  if (rank == 0) {
    MPI_Isend(big, BIG, MPI_INT, 1, 7, MPI_COMM_WORLD, &rs[0]);
    MPI_Isend(small, 4, MPI_INT, 1, 8, MPI_COMM_WORLD, &rs[1]);
    MPI_Cancel(&rs[0]);
    CHECK(MPI_Waitall(2, rs, sts) == MPI_SUCCESS, "MPI_Waitall");
    CHECK(cancelled(&sts[0]) == 1 && cancelled(&sts[1]) == 0, "Waitall: cancelled %d %d", cancelled(&sts[0]), cancelled(&sts[1]));
  } else {
    MPI_Recv(got, 4, MPI_INT, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(got[0] == 1 && got[3] == 4, "eager beside the cancelled one");
  }
  MPI_Barrier(MPI_COMM_WORLD);

  /* A send whose receive matched first completes normally. */
  if (rank == 1) {
    MPI_Recv(in, BIG, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    int ok = 1;
    for (int i = 0; i < BIG; i++) ok &= in[i] == i * 3 + 1;
    CHECK(ok, "matched large send: data");
    MPI_Send(&ok, 1, MPI_INT, 0, 10, MPI_COMM_WORLD);
  } else {
    int ack = 0;
    MPI_Isend(big, BIG, MPI_INT, 1, 9, MPI_COMM_WORLD, &r);
    MPI_Recv(&ack, 1, MPI_INT, 1, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Cancel(&r);
    CHECK(MPI_Wait(&r, &st) == MPI_SUCCESS, "MPI_Wait (matched)");
    CHECK(cancelled(&st) == 0, "a matched send was cancelled");
  }

  /* An eager send: cancelled or delivered, never both nor neither. */
  int outcome = -1;
  if (rank == 0) {
    MPI_Isend(small, 4, MPI_INT, 1, 11, MPI_COMM_WORLD, &r);
    MPI_Cancel(&r);
    MPI_Wait(&r, &st);
    outcome = cancelled(&st);
  }
  MPI_Bcast(&outcome, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 1) {
    MPI_Iprobe(0, 11, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    if (outcome == 0) {
      MPI_Recv(got, 4, MPI_INT, 0, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      CHECK(got[2] == 3, "the eager send that was not cancelled");
    } else {
      CHECK(flag == 0, "a cancelled eager send is visible");
    }
  }

  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("cancel_send: ok, %d checks\n", checks);
  free(big);
  free(in);
  MPI_Finalize();
  return 0;
}
