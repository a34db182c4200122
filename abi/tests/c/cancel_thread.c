/* rankwire-test: ranks=2 */
/* MPI_Cancel from another thread (MPI_THREAD_MULTIPLE) on a receive that a thread is
 * blocked on (MPI 4.1 §3.8.4: "If a communication is marked for cancellation, then a
 * MPI_WAIT call for that communication is guaranteed to return, irrespective of the
 * activities of other processes"): in MPI_Wait, and in MPI_Waitall beside a receive
 * that a message completes. The waits return, MPI_Test_cancelled says so, the handles
 * become MPI_REQUEST_NULL and nothing is written to the cancelled buffer. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static int checks = 0, rank;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)

static MPI_Request shared;

static void *canceller(void *arg) {
  (void)arg;
  usleep(200 * 1000);
  MPI_Request copy = shared;
  int rc = MPI_Cancel(&copy);
  CHECK(rc == MPI_SUCCESS, "MPI_Cancel from another thread returned %d", rc);
  return NULL;
}

int main(int argc, char **argv) {
  int provided = -1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (rank == 0) printf("cancel_thread: skipped, MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
    MPI_Finalize();
    return 0;
  }
  int peer = 1 - rank, flag = -1, never = -1;
  MPI_Status st[2];
  pthread_t t;

  /* MPI_Wait on a receive nobody sends to, cancelled by another thread. */
  MPI_Irecv(&never, 1, MPI_INT, peer, 100, MPI_COMM_WORLD, &shared);
  MPI_Request r = shared;
  CHECK(pthread_create(&t, NULL, canceller, NULL) == 0, "pthread_create");
  CHECK(MPI_Wait(&r, &st[0]) == MPI_SUCCESS, "MPI_Wait on the cancelled receive");
  pthread_join(t, NULL);
  MPI_Test_cancelled(&st[0], &flag);
  CHECK(flag == 1 && r == MPI_REQUEST_NULL && never == -1,
        "MPI_Wait: cancelled %d, handle null %d, buffer %d", flag, r == MPI_REQUEST_NULL, never);

  /* MPI_Waitall: one receive cancelled by the thread, one completed by the peer's
   * message (sent after the cancel). */
  int got = -1, mine = 50 + rank;
  MPI_Request rs[2];
  MPI_Irecv(&never, 1, MPI_INT, peer, 101, MPI_COMM_WORLD, &rs[0]);
  MPI_Irecv(&got, 1, MPI_INT, peer, 102, MPI_COMM_WORLD, &rs[1]);
  shared = rs[0];
  CHECK(pthread_create(&t, NULL, canceller, NULL) == 0, "pthread_create");
  if (rank == 0) {
    pthread_join(t, NULL);
    MPI_Send(&mine, 1, MPI_INT, peer, 102, MPI_COMM_WORLD);
    CHECK(MPI_Waitall(2, rs, st) == MPI_SUCCESS, "MPI_Waitall");
  } else {
    CHECK(MPI_Waitall(2, rs, st) == MPI_SUCCESS, "MPI_Waitall");
    pthread_join(t, NULL);
    MPI_Send(&mine, 1, MPI_INT, peer, 102, MPI_COMM_WORLD);
  }
  MPI_Test_cancelled(&st[0], &flag);
  CHECK(flag == 1 && never == -1, "MPI_Waitall entry 0: cancelled %d, buffer %d", flag, never);
  MPI_Test_cancelled(&st[1], &flag);
  CHECK(flag == 0 && got == 50 + peer && st[1].MPI_SOURCE == peer && st[1].MPI_TAG == 102,
        "MPI_Waitall entry 1: cancelled %d, got %d, source %d, tag %d", flag, got, st[1].MPI_SOURCE, st[1].MPI_TAG);
  CHECK(rs[0] == MPI_REQUEST_NULL && rs[1] == MPI_REQUEST_NULL, "MPI_Waitall left handles");

  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("cancel_thread: ok, %d checks\n", checks);
  MPI_Finalize();
  return 0;
}
