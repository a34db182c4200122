/* rankwire-test: ranks=2,3,4 */
/* Collective calls whose ranks disagree on the count (an erroneous program) under
 * MPI_ERRORS_RETURN: no rank may wait forever. The rank that receives a message of the
 * wrong length fails its call and revokes the communicator's collectives, so that the
 * ranks waiting for its part of the algorithm fail too instead of hanging (rankwire's
 * protocol/revoke.rs, after ULFM's MPIX_Comm_revoke). Checked: every rank returns from
 * each mismatched MPI_Bcast (the root's count larger, then smaller, at sizes that take
 * the eager, binomial and large-message paths), at least one rank of each reports an
 * error, a later collective on the revoked communicator fails at once on every rank,
 * point-to-point on it still works, and collectives on a communicator duplicated before
 * still give the right result, as they do on each fresh duplicate. Each mismatch runs on
 * its own duplicate (one revocation each). The harness bounds the run: a rank left
 * waiting (the ranks below the one that finds the mismatch, at 3 and 4 ranks) fails the
 * test by timeout. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks = 0, rank, size;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm keep;
  MPI_Comm_dup(MPI_COMM_WORLD, &keep);
  const int sizes[] = {64, 100000, 4000000};
  char *buf = malloc(4000000);
  for (int s = 0; s < 3; s++) {
    for (int root_larger = 0; root_larger < 2; root_larger++) {
      MPI_Comm c;
      MPI_Comm_dup(MPI_COMM_WORLD, &c);
      MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
      /* A fresh communicator inherits nothing of an earlier revocation (a revoked
       * communicator's id is never handed out again). */
      int one = 1, sum = 0;
      int rc0 = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c);
      CHECK(rc0 == MPI_SUCCESS && sum == size, "allreduce on a fresh communicator: rc %d sum %d", rc0, sum);
      /* Every rank has finished it before any enters the erroneous call: a revocation
       * interrupts whatever is still pending on the communicator, a correct call of a
       * rank that lags behind included (as ULFM's MPIX_Comm_revoke does). */
      MPI_Barrier(keep);
      int n = sizes[s];
      int count = (rank == 0) == (root_larger == 1) ? n : n / 2;
      memset(buf, rank == 0 ? 7 : 0, n);
      int rc = MPI_Bcast(buf, count, MPI_BYTE, 0, c);
      /* Some rank found the mismatch: the minimum of the "ok" flags is 0. */
      int ok = rc == MPI_SUCCESS, all_ok = -1;
      MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, keep);
      CHECK(all_ok == 0, "no rank reported the mismatch (n=%d root_larger=%d)", n,
            root_larger);
      /* Every rank knows of the revocation once the finder's call returned (the
       * Revoke frames went out before it did; the barrier above orders that). Then a
       * collective on c fails at once, without waiting for anybody. */
      MPI_Barrier(keep);
      int x = 1, y = 0;
      rc = MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, c);
      CHECK(rc != MPI_SUCCESS, "a collective on a revoked communicator succeeded");
      /* Point-to-point on c still works. */
      int v = rank, w = -1;
      int to = (rank + 1) % size, from = (rank + size - 1) % size;
      rc = MPI_Sendrecv(&v, 1, MPI_INT, to, 5, &w, 1, MPI_INT, from, 5, c,
                        MPI_STATUS_IGNORE);
      CHECK(rc == MPI_SUCCESS && w == from, "point-to-point on the revoked communicator: rc %d w %d", rc, w);
      MPI_Comm_free(&c);
    }
  }
  /* The communicator duplicated before is untouched. */
  int x = rank + 1, y = 0;
  int rc = MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, keep);
  CHECK(rc == MPI_SUCCESS && y == size * (size + 1) / 2, "allreduce on keep: rc %d y %d", rc, y);
  MPI_Comm_free(&keep);
  free(buf);
  MPI_Finalize();
  if (rank == 0) printf("coll_revoke: ok (%d checks)\n", checks);
  return 0;
}
