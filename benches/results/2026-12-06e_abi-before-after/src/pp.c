#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 2000;
    MPI_Init(&argc, &argv);
    int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char b[8];
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (rank == 0) { MPI_Send(b, 8, MPI_CHAR, 1, 1, MPI_COMM_WORLD); MPI_Recv(b, 8, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
        else { MPI_Recv(b, 8, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(b, 8, MPI_CHAR, 0, 1, MPI_COMM_WORLD); }
    }
    double t = MPI_Wtime() - t0;
    if (rank == 0) printf("latency %.3f us\n", t * 1e6 / (2.0 * iters));
    MPI_Finalize();
    return 0;
}
