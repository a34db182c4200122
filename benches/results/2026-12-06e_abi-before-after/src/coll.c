#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 2000;
    MPI_Init(&argc, &argv);
    int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    float a[2] = {1, 2}, b[2]; int x = 0;
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) MPI_Allreduce(a, b, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t1 = MPI_Wtime();
    for (int i = 0; i < iters; i++) MPI_Bcast(&x, 1, MPI_INT, 0, MPI_COMM_WORLD);
    double t2 = MPI_Wtime();
    if (rank == 0) printf("allreduce %.3f us bcast %.3f us\n", (t1-t0)*1e6/iters, (t2-t1)*1e6/iters);
    MPI_Finalize();
    return 0;
}
