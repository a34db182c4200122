/* Windowed 8-byte bandwidth like osu_bw: rank 0 posts W Isends, rank 1 W Irecvs,
   both Waitall, then a 4-byte ack. ITER iterations. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#define W 64
int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 2000;
    int size = argc > 2 ? atoi(argv[2]) : 8;
    MPI_Init(&argc, &argv);
    int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char *buf = malloc(size * W + 8); char ack[4];
    MPI_Request req[W];
    double t0 = 0;
    for (int i = 0; i < iters + 100; i++) {
        if (i == 100) t0 = MPI_Wtime();
        if (rank == 0) {
            for (int j = 0; j < W; j++) MPI_Isend(buf + j*size, size, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &req[j]);
            MPI_Waitall(W, req, MPI_STATUSES_IGNORE);
            MPI_Recv(ack, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (int j = 0; j < W; j++) MPI_Irecv(buf + j*size, size, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &req[j]);
            MPI_Waitall(W, req, MPI_STATUSES_IGNORE);
            MPI_Send(ack, 4, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
        }
    }
    double t = MPI_Wtime() - t0;
    if (rank == 0) printf("%d B: %.1f ns/msg, %.2f MB/s\n", size, t * 1e9 / ((double)iters * W), (double)size * W * iters / t / 1e6);
    MPI_Finalize();
    return 0;
}
