/* rankwire-test: ranks=2 */
/* An error of a request is raised on the request's communicator (MPI 4.1 §9.3) by
 * every wait/test function and by MPI_Startall, as MPI_Wait/MPI_Waitall/MPI_Start do:
 * MPI_COMM_WORLD keeps MPI_ERRORS_ARE_FATAL, a dup has MPI_ERRORS_RETURN, and a
 * truncated receive on the dup is returned by MPI_Waitany, MPI_Testany, MPI_Waitsome,
 * MPI_Testsome and MPI_Testall (these used to raise it on MPI_COMM_WORLD: the job was
 * aborted; MPI_Testall raised it twice), and MPI_Startall on an active request of the
 * dup returns MPI_ERR_REQUEST. */
#include <mpi.h>
#include <stdio.h>

static int checks = 0, rank;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  int peer = 1 - rank, big[4] = {1, 2, 3, 4}, small[1];
  for (int mode = 0; mode < 5; mode++) {
    if (rank == 0) {
      MPI_Send(big, 4, MPI_INT, 1, mode, c);
    } else {
      MPI_Request r[2];
      MPI_Status st[2];
      int rc = MPI_SUCCESS, idx, flag = 0, outc = 0, ind[2], cls = -1;
      MPI_Irecv(small, 1, MPI_INT, 0, mode, c, &r[0]);
      r[1] = MPI_REQUEST_NULL;
      st[0].MPI_ERROR = -7;
      switch (mode) {
      case 0: rc = MPI_Waitany(2, r, &idx, &st[0]); break;
      case 1: do rc = MPI_Testany(2, r, &idx, &flag, &st[0]); while (rc == MPI_SUCCESS && !flag); break;
      case 2: rc = MPI_Waitsome(2, r, &outc, ind, st); break;
      case 3: do rc = MPI_Testsome(2, r, &outc, ind, st); while (rc == MPI_SUCCESS && outc == 0); break;
      case 4: do rc = MPI_Testall(2, r, &flag, st); while (rc == MPI_SUCCESS && !flag); break;
      }
      MPI_Error_class(rc, &cls);
      CHECK(cls == (mode < 2 ? MPI_ERR_TRUNCATE : MPI_ERR_IN_STATUS), "mode %d: class %d", mode, cls);
      /* MPI 4.1 §3.2.5: only the calls with arrays of statuses (Waitsome, Testsome,
       * Testall) set MPI_ERROR; Waitany and Testany return the error and leave it. */
      CHECK(st[0].MPI_ERROR == (mode < 2 ? -7 : MPI_ERR_TRUNCATE), "mode %d: status error %d", mode, st[0].MPI_ERROR);
      CHECK(r[0] == MPI_REQUEST_NULL, "mode %d: request freed", mode);
    }
  }
  MPI_Request p;
  int z = 0, rc, cls = -1;
  MPI_Recv_init(&z, 1, MPI_INT, peer, 99, c, &p);
  CHECK(MPI_Start(&p) == MPI_SUCCESS, "start");
  rc = MPI_Startall(1, &p);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_REQUEST, "startall on an active request: class %d", cls);
  rc = MPI_Start(&p);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_REQUEST, "start on an active request: class %d", cls);
  MPI_Cancel(&p);
  MPI_Wait(&p, MPI_STATUS_IGNORE);
  MPI_Request_free(&p);
  MPI_Comm_free(&c);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("request_errhandler: ok, %d checks\n", checks);
  MPI_Finalize();
  return 0;
}
