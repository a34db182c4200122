/* rankwire-test: ranks=1,2 */
/* The profiling interface (MPI 5.0 §15.2): this program interposes MPI_Send,
 * MPI_Recv and MPI_Comm_rank as a tool would (count the call, then call the PMPI_
 * name), and calls PMPI_ functions directly. The counts must be exact (the library's
 * own calls do not reach the program's MPI_Send), the messages must arrive, and the
 * PMPI_ forms must give the same results as the MPI_ ones. */
#include <mpi.h>
#include <stdio.h>

static int checks = 0, fails = 0, rank = 0, size = 0;
#define CHECK(c, ...)                                                          \
    do {                                                                       \
        checks++;                                                              \
        if (!(c)) {                                                            \
            fails++;                                                           \
            fprintf(stderr, "pmpi rank %d line %d: ", rank, __LINE__);         \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

static int sends = 0, recvs = 0, ranks = 0;

int MPI_Send(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
    sends++;
    return PMPI_Send(buf, count, dt, dest, tag, comm);
}

int MPI_Recv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm,
             MPI_Status *st) {
    recvs++;
    return PMPI_Recv(buf, count, dt, src, tag, comm, st);
}

int MPI_Comm_rank(MPI_Comm comm, int *r) {
    ranks++;
    return PMPI_Comm_rank(comm, r);
}

int main(int argc, char **argv) {
    OK(PMPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(PMPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(ranks == 1, "interposed MPI_Comm_rank called %d times, want 1", ranks);
    int r2 = -1;
    OK(PMPI_Comm_rank(MPI_COMM_WORLD, &r2));
    CHECK(r2 == rank && ranks == 1, "PMPI_Comm_rank gave %d (rank %d), count %d", r2, rank, ranks);

    /* Messages through the interposed MPI_Send / MPI_Recv (to self at 1 rank). */
    int peer = (rank + 1) % size, from = (rank + size - 1) % size;
    for (int i = 0; i < 3; i++) {
        int v = 100 * rank + i, got = -1;
        MPI_Status st;
        if (size == 1) {
            MPI_Request q;
            OK(PMPI_Irecv(&got, 1, MPI_INT, from, i, MPI_COMM_WORLD, &q));
            OK(MPI_Send(&v, 1, MPI_INT, peer, i, MPI_COMM_WORLD));
            OK(PMPI_Wait(&q, &st));
        } else if (rank % 2 == 0) {
            OK(MPI_Send(&v, 1, MPI_INT, peer, i, MPI_COMM_WORLD));
            OK(MPI_Recv(&got, 1, MPI_INT, from, i, MPI_COMM_WORLD, &st));
        } else {
            OK(MPI_Recv(&got, 1, MPI_INT, from, i, MPI_COMM_WORLD, &st));
            OK(MPI_Send(&v, 1, MPI_INT, peer, i, MPI_COMM_WORLD));
        }
        CHECK(got == 100 * from + i && st.MPI_TAG == i, "message %d: got %d tag %d", i, got, st.MPI_TAG);
    }
    CHECK(sends == 3, "interposed MPI_Send called %d times, want 3", sends);
    CHECK(recvs == (size == 1 ? 0 : 3), "interposed MPI_Recv called %d times", recvs);

    /* Collectives and queries through PMPI_ names. */
    int one = 1, sum = 0;
    OK(PMPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == size, "PMPI_Allreduce sum %d, want %d", sum, size);
    OK(PMPI_Barrier(MPI_COMM_WORLD));
    CHECK(PMPI_Wtime() > 0.0 || MPI_Wtime() >= 0.0, "PMPI_Wtime");
    int flag = 0;
    OK(PMPI_Initialized(&flag));
    CHECK(flag == 1, "PMPI_Initialized");
    CHECK(sends == 3 && ranks == 1, "library calls reached the program's MPI_ functions: sends %d ranks %d", sends, ranks);

    OK(PMPI_Finalize());
    if (rank == 0 && fails == 0) printf("pmpi: ok, %d checks\n", checks);
    return fails ? 1 : 0;
}
