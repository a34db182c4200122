/* rankwire-test: ranks=2 */
/* A NULL buffer with data and a non-contiguous type (a pair type such as
 * MPI_DOUBLE_INT, a vector) is MPI_ERR_BUFFER, as with a contiguous type; it used to
 * be packed from / unpacked to address 0 (a crash; in a debug build an abort on
 * copy_nonoverlapping's precondition). Also for persistent requests (checked at
 * MPI_Start), and MPI_BOTTOM with absolute displacements still works. */
#include <mpi.h>
#include <stdio.h>

static int checks = 0, rank;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)
#define CLASS(call, want) do { int rc_ = (call), c_ = -1; MPI_Error_class(rc_, &c_); CHECK(c_ == (want), "%s: class %d, want %d", #call, c_, (want)); } while (0)

struct di { double d; int i; };

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int peer = 1 - rank;
  MPI_Request q;
  MPI_Datatype vec;
  MPI_Type_vector(3, 1, 2, MPI_INT, &vec);
  MPI_Type_commit(&vec);
  CLASS(MPI_Send(NULL, 2, MPI_DOUBLE_INT, peer, 1, MPI_COMM_WORLD), MPI_ERR_BUFFER);
  CLASS(MPI_Send(NULL, 1, vec, peer, 1, MPI_COMM_WORLD), MPI_ERR_BUFFER);
  CLASS(MPI_Isend(NULL, 3, MPI_SHORT_INT, peer, 1, MPI_COMM_WORLD, &q), MPI_ERR_BUFFER);
  CLASS(MPI_Recv(NULL, 2, MPI_DOUBLE_INT, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE), MPI_ERR_BUFFER);
  CLASS(MPI_Irecv(NULL, 1, vec, peer, 1, MPI_COMM_WORLD, &q), MPI_ERR_BUFFER);
  if (MPI_Recv_init(NULL, 1, vec, peer, 1, MPI_COMM_WORLD, &q) == MPI_SUCCESS) {
    CLASS(MPI_Start(&q), MPI_ERR_BUFFER);
    CHECK(MPI_Request_free(&q) == MPI_SUCCESS, "free recv_init");
  }
  if (MPI_Send_init(NULL, 2, MPI_DOUBLE_INT, peer, 1, MPI_COMM_WORLD, &q) == MPI_SUCCESS) {
    CLASS(MPI_Start(&q), MPI_ERR_BUFFER);
    CHECK(MPI_Request_free(&q) == MPI_SUCCESS, "free send_init");
  }
  /* count 0 with NULL stays fine */
  CHECK(MPI_Sendrecv(NULL, 0, MPI_DOUBLE_INT, peer, 2, NULL, 0, MPI_DOUBLE_INT, peer, 2,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS, "count 0");
  /* MPI_BOTTOM (NULL) with absolute displacements is not a NULL buffer */
  struct di s = {1.5 + rank, 7 + rank}, r = {0, 0};
  MPI_Aint a[2];
  int bl[2] = {1, 1};
  MPI_Datatype ty[2] = {MPI_DOUBLE, MPI_INT}, st, rt;
  MPI_Get_address(&s.d, &a[0]);
  MPI_Get_address(&s.i, &a[1]);
  MPI_Type_create_struct(2, bl, a, ty, &st);
  MPI_Type_commit(&st);
  MPI_Get_address(&r.d, &a[0]);
  MPI_Get_address(&r.i, &a[1]);
  MPI_Type_create_struct(2, bl, a, ty, &rt);
  MPI_Type_commit(&rt);
  CHECK(MPI_Sendrecv(MPI_BOTTOM, 1, st, peer, 3, MPI_BOTTOM, 1, rt, peer, 3, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_BOTTOM sendrecv");
  CHECK(r.d == 1.5 + peer && r.i == 7 + peer, "MPI_BOTTOM data %g %d", r.d, r.i);
  MPI_Type_free(&vec);
  MPI_Type_free(&st);
  MPI_Type_free(&rt);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("null_noncontig: ok, %d checks\n", checks);
  MPI_Finalize();
  return 0;
}
