/* rankwire-test: ranks=1,2,4 */
/* hello: MPI_Init, MPI_Comm_rank, MPI_Comm_size, MPI_Finalize and the
 * initialized/finalized flags through the standard ABI. Each rank checks its own
 * results; rank 0 prints "hello: ok, K checks". Built with abi/bin/mpicc it also runs
 * on MPICH's libmpi_abi.so.1 (the header is the standard's). */
#include <mpi.h>
#include <stdio.h>

static int checks, failures;

static void check(int ok, const char *what, int rank)
{
    checks++;
    if (!ok) {
        failures++;
        fprintf(stderr, "hello: rank %d: check failed: %s\n", rank, what);
    }
}

int main(int argc, char **argv)
{
    int flag = -1, rank = -1, size = -1;
    check(MPI_Initialized(&flag) == MPI_SUCCESS && flag == 0, "not initialized before MPI_Init", -1);
    check(MPI_Init(&argc, &argv) == MPI_SUCCESS, "MPI_Init returns MPI_SUCCESS", -1);
    check(MPI_Initialized(&flag) == MPI_SUCCESS && flag == 1, "initialized after MPI_Init", -1);
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank) == MPI_SUCCESS, "MPI_Comm_rank(WORLD)", rank);
    check(MPI_Comm_size(MPI_COMM_WORLD, &size) == MPI_SUCCESS, "MPI_Comm_size(WORLD)", rank);
    check(size >= 1 && rank >= 0 && rank < size, "0 <= rank < size", rank);
    {
        int srank = -1, ssize = -1;
        check(MPI_Comm_rank(MPI_COMM_SELF, &srank) == MPI_SUCCESS && srank == 0, "rank 0 in SELF", rank);
        check(MPI_Comm_size(MPI_COMM_SELF, &ssize) == MPI_SUCCESS && ssize == 1, "size 1 of SELF", rank);
    }
    printf("hello from rank %d of %d\n", rank, size);
    fflush(stdout);
    check(MPI_Finalized(&flag) == MPI_SUCCESS && flag == 0, "not finalized before MPI_Finalize", rank);
    check(MPI_Finalize() == MPI_SUCCESS, "MPI_Finalize returns MPI_SUCCESS", rank);
    check(MPI_Finalized(&flag) == MPI_SUCCESS && flag == 1, "finalized after MPI_Finalize", rank);
    if (failures == 0 && rank == 0)
        printf("hello: ok, %d checks\n", checks);
    return failures == 0 ? 0 : 1;
}
