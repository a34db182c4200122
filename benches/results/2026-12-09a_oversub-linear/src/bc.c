/* Per-rank time in MPI_Bcast (8 B from rank 0) and in the MPI_Barrier after it, averaged over
 * ITERS iterations after 200 warm-up ones; rank 0 prints every rank's pair. Build with an MPI
 * mpicc; run with 4 ranks on 2 cores. (The "Why" of README.md.) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r, n; MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);
  int iters = argc > 1 ? atoi(argv[1]) : 4000;
  char buf[8] = {0};
  double tb = 0, tbar = 0;
  for (int i = 0; i < iters + 200; i++) {
    double t0 = MPI_Wtime();
    MPI_Bcast(buf, 8, MPI_CHAR, 0, MPI_COMM_WORLD);
    double t1 = MPI_Wtime();
    MPI_Barrier(MPI_COMM_WORLD);
    double t2 = MPI_Wtime();
    if (i >= 200) { tb += t1 - t0; tbar += t2 - t1; }
  }
  double all[2*16];
  double mine[2] = {tb * 1e6 / iters, tbar * 1e6 / iters};
  MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (r == 0) { for (int k = 0; k < n; k++) printf("rank %d bcast %.2f barrier %.2f\n", k, all[2*k], all[2*k+1]); }
  MPI_Finalize();
}
