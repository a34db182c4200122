/* rankwire-test: ranks=1,3,4 */
/* MPI_Comm_create_group (collective over the group's members only, its tag apart from
 * point-to-point tags) and MPI_Comm_get_parent (no process here was spawned): rsmpi 0.8
 * calls both from every program. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int checks = 0, rank, size;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  MPI_Comm parent = MPI_COMM_WORLD;
  CHECK(MPI_Comm_get_parent(&parent) == MPI_SUCCESS, "get_parent failed");
  CHECK(parent == MPI_COMM_NULL, "a process started by mpiexec has no parent");

  /* A receive of any source and any tag on the parent, pending across every
   * create_group below: their internal messages must not match it. */
  int pending = -1;
  MPI_Request req;
  MPI_Irecv(&pending, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req);

  MPI_Group world;
  MPI_Comm_group(MPI_COMM_WORLD, &world);

  /* Each parity makes its own communicator, at the same time and with the same tag
   * (disjoint groups may); the odd ranks list theirs in reverse order. */
  int members[64], n = 0;
  if (rank % 2 == 0) {
    for (int r = 0; r < size; r += 2) members[n++] = r;
  } else {
    for (int r = size - 1; r >= 1; r--)
      if (r % 2 == 1) members[n++] = r;
  }
  MPI_Group g;
  MPI_Group_incl(world, n, members, &g);
  MPI_Comm pc = MPI_COMM_NULL;
  CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, g, 5, &pc) == MPI_SUCCESS, "create_group");
  CHECK(pc != MPI_COMM_NULL, "a member gets a communicator");
  int prank, psize;
  MPI_Comm_rank(pc, &prank);
  MPI_Comm_size(pc, &psize);
  CHECK(psize == n, "size %d, want %d", psize, n);
  CHECK(members[prank] == rank, "rank %d in the new communicator is world rank %d", prank,
        members[prank]);
  int sum = 0, want = 0;
  for (int i = 0; i < n; i++) want += members[i];
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, pc);
  CHECK(sum == want, "allreduce over the new communicator: %d, want %d", sum, want);
  /* Rank order is the group's: a ring shift by one. */
  int next = (prank + 1) % psize, prev = (prank + psize - 1) % psize, got = -1;
  MPI_Sendrecv(&rank, 1, MPI_INT, next, 1, &got, 1, MPI_INT, prev, 1, pc, MPI_STATUS_IGNORE);
  CHECK(got == members[prev], "ring: got %d, want %d", got, members[prev]);

  /* A second one of the same group, another tag: congruent, not the same context. */
  MPI_Comm pc2 = MPI_COMM_NULL;
  MPI_Comm_create_group(MPI_COMM_WORLD, g, 6, &pc2);
  int cmp = -1;
  MPI_Comm_compare(pc, pc2, &cmp);
  CHECK(cmp == MPI_CONGRUENT, "compare %d, want MPI_CONGRUENT", cmp);
  /* A message on one is not received on the other. */
  int a = 100 + rank, b = -1, flag = 1;
  MPI_Request r2, s1;
  MPI_Irecv(&b, 1, MPI_INT, prank, 9, pc2, &r2);
  MPI_Isend(&a, 1, MPI_INT, prank, 9, pc, &s1);
  MPI_Test(&r2, &flag, MPI_STATUS_IGNORE);
  CHECK(!flag, "a message sent on one communicator matched a receive on the other");
  int c = -1;
  MPI_Recv(&c, 1, MPI_INT, prank, 9, pc, MPI_STATUS_IGNORE);
  MPI_Wait(&s1, MPI_STATUS_IGNORE);
  CHECK(c == a, "self message %d, want %d", c, a);
  MPI_Send(&a, 1, MPI_INT, prank, 9, pc2);
  MPI_Wait(&r2, MPI_STATUS_IGNORE);
  CHECK(b == a, "self message on the second %d, want %d", b, a);

  /* World rank 0 alone: the others do not call it, and are not waited for. */
  if (rank == 0) {
    int zero = 0;
    MPI_Group g0;
    MPI_Group_incl(world, 1, &zero, &g0);
    MPI_Comm c0 = MPI_COMM_NULL;
    MPI_Comm_create_group(MPI_COMM_WORLD, g0, 7, &c0);
    int s0 = 0;
    MPI_Comm_size(c0, &s0);
    CHECK(c0 != MPI_COMM_NULL && s0 == 1, "a group of one: size %d", s0);
    MPI_Comm_free(&c0);
    MPI_Group_free(&g0);
  }
  /* ... and the parent's own collectives still line up after that. */
  int total = 0;
  MPI_Allreduce(&rank, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(total == size * (size - 1) / 2, "world allreduce %d", total);

  /* Not a member: MPI_COMM_NULL, no communication. */
  MPI_Comm ce = MPI_COMM_WORLD;
  CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, MPI_GROUP_EMPTY, 5, &ce) == MPI_SUCCESS,
        "create_group of the empty group");
  CHECK(ce == MPI_COMM_NULL, "the empty group gives MPI_COMM_NULL");

  /* A tag outside 0..MPI_TAG_UB is MPI_ERR_TAG. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm bad = MPI_COMM_NULL;
  int rc = MPI_Comm_create_group(MPI_COMM_WORLD, g, -1, &bad), cls = -1;
  MPI_Error_class(rc, &cls);
  CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_TAG, "tag -1: rc %d class %d", rc, cls);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

  /* The receive posted first was not taken by any of the above. */
  MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
  CHECK(!flag, "create_group's traffic matched a user receive");
  int mine = 1000 + rank;
  MPI_Send(&mine, 1, MPI_INT, rank, 42, MPI_COMM_WORLD);
  MPI_Status st;
  MPI_Wait(&req, &st);
  CHECK(pending == mine && st.MPI_TAG == 42 && st.MPI_SOURCE == rank,
        "pending receive got %d tag %d from %d", pending, st.MPI_TAG, st.MPI_SOURCE);

  MPI_Comm_free(&pc2);
  MPI_Comm_free(&pc);
  MPI_Group_free(&g);
  MPI_Group_free(&world);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("comm_create_group: ok, %d checks\n", checks);
  MPI_Finalize();
  return 0;
}
