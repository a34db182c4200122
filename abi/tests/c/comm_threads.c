/* rankwire-test: ranks=2,3 */
/* MPI_THREAD_MULTIPLE: two threads of every rank create communicators at the same time
 * from different parents (MPI_Comm_dup, MPI_Comm_split, then an allreduce on the new
 * communicator, then MPI_Comm_free), 300 times each. Both context-id agreements used
 * to offer the same free ids and claim the same id twice: the two new communicators
 * shared a context, their messages mixed, and the job hung in 5 of 10 runs (found by
 * a trial, 2026-12-06). */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>

static int rank, size, wrong[2];
static MPI_Comm parent[2];

static void *work(void *arg) {
  int t = (int)(long)arg;
  for (int it = 0; it < 300; it++) {
    MPI_Comm c;
    if (it % 2) MPI_Comm_dup(parent[t], &c);
    else MPI_Comm_split(parent[t], 0, size - rank, &c);
    int in = rank + 1 + t * 1000 + it, out = 0;
    MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, c);
    if (out != size * (size + 1) / 2 + size * (t * 1000 + it)) wrong[t]++;
    MPI_Comm_free(&c);
  }
  return NULL;
}

int main(int argc, char **argv) {
  int prov;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (prov < MPI_THREAD_MULTIPLE) {
    if (rank == 0) printf("comm_threads: ok, 0 checks (MPI_THREAD_MULTIPLE not provided)\n");
    MPI_Finalize();
    return 0;
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &parent[0]);
  MPI_Comm_dup(MPI_COMM_WORLD, &parent[1]);
  pthread_t th[2];
  for (long t = 0; t < 2; t++) pthread_create(&th[t], NULL, work, (void *)t);
  for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
  MPI_Comm_free(&parent[0]);
  MPI_Comm_free(&parent[1]);
  int bad = wrong[0] + wrong[1], all = 0;
  MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (all) {
    if (rank == 0) fprintf(stderr, "comm_threads: %d wrong sums\n", all);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) printf("comm_threads: ok, %d checks\n", 2 * 300 * size);
  MPI_Finalize();
  return 0;
}
