/* rankwire-test: ranks=2,3 */
/* MPI_Allreduce with the same buffer as sendbuf and recvbuf, without MPI_IN_PLACE:
 * erroneous in MPI (MPI 4.1 §2.3: no aliasing of buffers), common in C programs.
 * rankwire treats it as the in-place form and gives the right sum; its single-copy
 * allreduce of large vectors (above 64 KiB) once read the first peer's vector straight
 * into the receive buffer, over the rank's own input, and returned a wrong sum with
 * MPI_SUCCESS. Sizes below and above 64 KiB, MPI_DOUBLE and MPI_INT. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int checks = 0, rank;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)

int main(int argc, char **argv) {
  int size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const long counts[] = {1, 1000, 8192, 8193, 100000, 300001};
  for (unsigned c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    long n = counts[c];
    double *d = malloc(n * sizeof *d);
    int *k = malloc(n * sizeof *k);
    for (long i = 0; i < n; i++) {
      d[i] = (double)(rank + 1) * (double)(i % 7 + 1);
      k[i] = (rank + 1) * (int)(i % 5 + 1);
    }
    CHECK(MPI_Allreduce(d, d, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "double");
    CHECK(MPI_Allreduce(k, k, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "int");
    double tri = size * (size + 1) / 2.0;
    long bad = 0;
    for (long i = 0; i < n; i++)
      if (d[i] != tri * (double)(i % 7 + 1) || k[i] != (int)tri * (int)(i % 5 + 1)) bad++;
    CHECK(bad == 0, "count %ld: %ld wrong elements (d[0] = %g, want %g)", n, bad, d[0], tri);
    free(d);
    free(k);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("aliased_allreduce: ok, %d checks\n", checks);
  MPI_Finalize();
  return 0;
}
