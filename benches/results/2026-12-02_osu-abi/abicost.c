/* abicost.c: nanoseconds per call of cheap MPI calls on one rank (np=1), to size the
 * per-call work of an MPI library's C layer: MPI_Comm_rank, MPI_Send to MPI_PROC_NULL
 * (argument checks, communicator lookup, no message), and a message to self
 * (MPI_Irecv + MPI_Isend + MPI_Waitall of 8 bytes, and blocking MPI_Send + MPI_Recv,
 * which relies on the 8-byte send being buffered: legal MPI may block there, and MPICH 5.0.2's
 * ABI build did). Best of 7 trials of N calls. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static double best(double *t, int n) { double b = t[0]; for (int i = 1; i < n; i++) if (t[i] < b) b = t[i]; return b; }

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 200000, r, buf[2] = {1, 2}, rb[2];
    double t[7];
    MPI_Request q[2];
    MPI_Init(&argc, &argv);
    for (int k = 0; k < 7; k++) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < n; i++) MPI_Comm_rank(MPI_COMM_WORLD, &r);
        t[k] = (MPI_Wtime() - t0) / n * 1e9;
    }
    printf("MPI_Comm_rank                 %8.1f ns\n", best(t, 7));
    for (int k = 0; k < 7; k++) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < n; i++) MPI_Send(buf, 2, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD);
        t[k] = (MPI_Wtime() - t0) / n * 1e9;
    }
    printf("MPI_Send to MPI_PROC_NULL     %8.1f ns\n", best(t, 7));
    for (int k = 0; k < 7; k++) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < n; i++) {
            MPI_Irecv(rb, 2, MPI_INT, 0, 0, MPI_COMM_WORLD, &q[0]);
            MPI_Isend(buf, 2, MPI_INT, 0, 0, MPI_COMM_WORLD, &q[1]);
            MPI_Waitall(2, q, MPI_STATUSES_IGNORE); /* gcc may warn (-Wstringop-overflow) with MPICH's header: harmless */
        }
        t[k] = (MPI_Wtime() - t0) / n * 1e9;
    }
    printf("Irecv+Isend+Waitall to self   %8.1f ns\n", best(t, 7));
    for (int k = 0; k < 7; k++) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < n; i++) {
            MPI_Send(buf, 2, MPI_INT, 0, 0, MPI_COMM_WORLD);
            MPI_Recv(rb, 2, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        t[k] = (MPI_Wtime() - t0) / n * 1e9;
    }
    printf("Send+Recv to self             %8.1f ns\n", best(t, 7));
    MPI_Finalize();
    return 0;
}
