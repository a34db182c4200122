/* rankwire-test: ranks=2,3 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r, n; MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);
  int checks = 0;
  for (int sz = 1; sz <= (1<<22); sz *= 4) {
    char *b = malloc(sz); MPI_Status st;
    if (r == 0) { memset(b, sz & 0x7f, sz); MPI_Send(b, sz, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
      MPI_Recv(b, sz, MPI_BYTE, 1, 8, MPI_COMM_WORLD, &st);
      int c; MPI_Get_count(&st, MPI_BYTE, &c);
      if (c != sz || st.MPI_SOURCE != 1 || st.MPI_TAG != 8 || b[sz-1] != (char)((sz+1)&0x7f)) { printf("bad %d\n", sz); return 1; }
      checks++;
    } else if (r == 1) { MPI_Recv(b, sz, MPI_BYTE, 0, 7, MPI_COMM_WORLD, &st);
      for (int i=0;i<sz;i++) b[i]=(sz+1)&0x7f; MPI_Send(b, sz, MPI_BYTE, 0, 8, MPI_COMM_WORLD); }
    free(b);
  }
  MPI_Request rq[2]; int x = r, y = -1;
  MPI_Irecv(&y, 1, MPI_INT, (r+1)%n, 3, MPI_COMM_WORLD, &rq[0]);
  MPI_Isend(&x, 1, MPI_INT, (r+n-1)%n, 3, MPI_COMM_WORLD, &rq[1]);
  MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
  if (y != (r+1)%n) { printf("ring bad\n"); return 1; } checks++;
  double t0 = MPI_Wtime();
  for (int i = 0; i < 10000; i++) { char c=0; if (r==0){MPI_Send(&c,1,MPI_BYTE,1,0,MPI_COMM_WORLD);MPI_Recv(&c,1,MPI_BYTE,1,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);} else if (r==1){MPI_Recv(&c,1,MPI_BYTE,0,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);MPI_Send(&c,1,MPI_BYTE,0,0,MPI_COMM_WORLD);} }
  if (r == 0) printf("p2p_basic: ok, %d checks, latency %.2f us\n", checks, (MPI_Wtime()-t0)/20000*1e6);
  MPI_Finalize(); return 0;
}
