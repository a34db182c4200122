/* rankwire-test: ranks=1,2,4 */
/* Process topologies and neighborhood collectives through the standard ABI. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int checks = 0, rank, size;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  int d2[2] = {0, 0};
  MPI_Dims_create(12, 2, d2);
  CHECK(d2[0] == 4 && d2[1] == 3, "dims_create(12,2) = %d %d", d2[0], d2[1]);
  int d3[3] = {0, 2, 0};
  MPI_Dims_create(16, 3, d3);
  CHECK(d3[0] * d3[1] * d3[2] == 16 && d3[1] == 2 && d3[0] >= d3[2], "dims_create(16,3) = %d %d %d", d3[0], d3[1], d3[2]);

  /* 2-D periodic grid over all ranks. */
  int dims[2] = {0, 0}, periods[2] = {1, 1};
  MPI_Dims_create(size, 2, dims);
  MPI_Comm cart;
  MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
  int st;
  MPI_Topo_test(cart, &st);
  CHECK(st == MPI_CART, "topo_test %d", st);
  MPI_Topo_test(MPI_COMM_WORLD, &st);
  CHECK(st == MPI_UNDEFINED, "world topo %d", st);
  int coords[2], r2;
  MPI_Cart_coords(cart, rank, 2, coords);
  MPI_Cart_rank(cart, coords, &r2);
  CHECK(r2 == rank && coords[0] == rank / dims[1] && coords[1] == rank % dims[1], "coords/rank");
  int nbr[4];
  for (int d = 0; d < 2; d++) MPI_Cart_shift(cart, d, 1, &nbr[2 * d], &nbr[2 * d + 1]);
  /* Each rank sends block k = 100*rank + k to neighbor k. */
  int sb[4], rb[4];
  for (int k = 0; k < 4; k++) { sb[k] = 100 * rank + k; rb[k] = -1; }
  MPI_Neighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, cart);
  /* In-block 2d (from the negative neighbor) is what it sent to its positive side. */
  for (int k = 0; k < 4; k++) CHECK(rb[k] == 100 * nbr[k] + (k ^ 1), "alltoall block %d: %d (nbr %d)", k, rb[k], nbr[k]);
  int ag[4];
  MPI_Neighbor_allgather(&rank, 1, MPI_INT, ag, 1, MPI_INT, cart);
  for (int k = 0; k < 4; k++) CHECK(ag[k] == nbr[k], "allgather block %d", k);
  MPI_Request rq;
  for (int k = 0; k < 4; k++) rb[k] = -1;
  MPI_Ineighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, cart, &rq);
  MPI_Wait(&rq, MPI_STATUS_IGNORE);
  for (int k = 0; k < 4; k++) CHECK(rb[k] == 100 * nbr[k] + (k ^ 1), "ialltoall block %d", k);

  /* Non-periodic line: ends have MPI_PROC_NULL neighbors and untouched blocks. */
  int ld = size, lp = 0;
  MPI_Comm line;
  MPI_Cart_create(MPI_COMM_WORLD, 1, &ld, &lp, 0, &line);
  int lo, hi;
  MPI_Cart_shift(line, 0, 1, &lo, &hi);
  CHECK(lo == (rank ? rank - 1 : MPI_PROC_NULL) && hi == (rank < size - 1 ? rank + 1 : MPI_PROC_NULL), "line shift");
  int lb[2] = {-7, -7};
  MPI_Neighbor_allgather(&rank, 1, MPI_INT, lb, 1, MPI_INT, line);
  CHECK(lb[0] == (lo == MPI_PROC_NULL ? -7 : lo) && lb[1] == (hi == MPI_PROC_NULL ? -7 : hi), "line allgather %d %d", lb[0], lb[1]);

  /* Cart_sub: rows of the grid. */
  int keep[2] = {0, 1};
  MPI_Comm row;
  MPI_Cart_sub(cart, keep, &row);
  int rs, rr;
  MPI_Comm_size(row, &rs);
  MPI_Comm_rank(row, &rr);
  CHECK(rs == dims[1] && rr == coords[1], "cart_sub %d %d", rs, rr);

  /* Distributed graph: a directed ring, weights given. */
  int src = (rank + size - 1) % size, dst = (rank + 1) % size, w = 5;
  MPI_Comm ring;
  MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &src, &w, 1, &dst, &w, MPI_INFO_NULL, 0, &ring);
  int indeg, outdeg, weighted;
  MPI_Dist_graph_neighbors_count(ring, &indeg, &outdeg, &weighted);
  CHECK(indeg == 1 && outdeg == 1 && weighted, "dist counts");
  int got = -1;
  MPI_Neighbor_alltoall(&rank, 1, MPI_INT, &got, 1, MPI_INT, ring);
  CHECK(got == src, "ring got %d want %d", got, src);
  /* The same ring through MPI_Dist_graph_create (every rank gives its out-edge). */
  MPI_Comm ring2;
  int one = 1;
  MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &rank, &one, &dst, MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &ring2);
  int s2[1], d2b[1];
  MPI_Dist_graph_neighbors(ring2, 1, s2, MPI_UNWEIGHTED, 1, d2b, MPI_UNWEIGHTED);
  CHECK(s2[0] == src && d2b[0] == dst, "dist_graph_create neighbors %d %d", s2[0], d2b[0]);

  MPI_Comm_free(&ring2); MPI_Comm_free(&ring); MPI_Comm_free(&row); MPI_Comm_free(&line); MPI_Comm_free(&cart);
  if (rank == 0) printf("topo: ok, %d checks\n", checks);
  MPI_Finalize();
  return 0;
}
