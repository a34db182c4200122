/* GPU buffers through the standard ABI (run on a machine with a GPU; scripts/gpu-run.sh).
 * Build: mpicc -O2 gpu_buffers.c -I$CUDA_HOME/include -L$CUDA_HOME/lib64 -lcudart
 * Every rank uses device local_rank % device_count. Checks device->device send/recv at
 * eager and rendezvous sizes, host<->device mixes, allreduce/reduce/bcast/allgather on
 * device buffers, a non-contiguous datatype over device memory, MPIX_Query_cuda_support,
 * and prints timings of 8-byte device ping-pong and 64 MiB device allreduce. */
#include <mpi.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks = 0, rank, size;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)
#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "rank %d: %s: %s\n", rank, #x, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 2); } } while (0)

int main(int argc, char **argv) {
  const char *lr = getenv("LOCAL_RANK");
  int ndev = 0;
  cudaGetDeviceCount(&ndev);
  if (ndev > 0) cudaSetDevice((lr ? atoi(lr) : 0) % ndev);
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(MPIX_Query_cuda_support() == 1, "MPIX_Query_cuda_support() = %d", MPIX_Query_cuda_support());
  int right = (rank + 1) % size, left = (rank + size - 1) % size;

  /* Device -> device ring at several sizes; host buffer on the receive side too. */
  size_t sizes[] = {8, 4096, 65536, 1 << 20, 16 << 20};
  for (int si = 0; si < 5; si++) {
    size_t n = sizes[si] / sizeof(int);
    int *h = malloc(n * sizeof(int)), *d_s, *d_r;
    CU(cudaMalloc((void **)&d_s, n * sizeof(int)));
    CU(cudaMalloc((void **)&d_r, n * sizeof(int)));
    for (size_t i = 0; i < n; i++) h[i] = rank * 7919 + (int)i;
    CU(cudaMemcpy(d_s, h, n * sizeof(int), cudaMemcpyHostToDevice));
    CU(cudaMemset(d_r, 0, n * sizeof(int)));
    MPI_Sendrecv(d_s, (int)n, MPI_INT, right, 1, d_r, (int)n, MPI_INT, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CU(cudaMemcpy(h, d_r, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) if (h[i] != left * 7919 + (int)i) CHECK(0, "d2d %zu bytes at %zu: %d", sizes[si], i, h[i]);
    checks++;
    /* device send -> host receive */
    memset(h, 0, n * sizeof(int));
    MPI_Sendrecv(d_s, (int)n, MPI_INT, right, 2, h, (int)n, MPI_INT, left, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(h[n - 1] == left * 7919 + (int)(n - 1), "d2h %zu", sizes[si]);
    cudaFree(d_s); cudaFree(d_r); free(h);
  }

  /* Collectives on device buffers. */
  {
    size_t n = 1 << 20;
    float *h = malloc(n * sizeof(float)), *d_s, *d_r;
    CU(cudaMalloc((void **)&d_s, n * sizeof(float)));
    CU(cudaMalloc((void **)&d_r, n * sizeof(float) * size));
    for (size_t i = 0; i < n; i++) h[i] = (float)(rank + 1) + (float)(i % 13);
    CU(cudaMemcpy(d_s, h, n * sizeof(float), cudaMemcpyHostToDevice));
    MPI_Allreduce(d_s, d_r, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    CU(cudaMemcpy(h, d_r, n * sizeof(float), cudaMemcpyDeviceToHost));
    float base = (float)(size * (size + 1) / 2);
    for (size_t i = 0; i < n; i++) if (h[i] != base + size * (float)(i % 13)) CHECK(0, "allreduce at %zu: %f", i, h[i]);
    checks++;
    /* in place */
    CU(cudaMemcpy(d_r, d_s, n * sizeof(float), cudaMemcpyDeviceToDevice));
    MPI_Allreduce(MPI_IN_PLACE, d_r, (int)n, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
    CU(cudaMemcpy(h, d_r, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(h[5] == (float)size + 5.0f, "allreduce in place max %f", h[5]);
    /* reduce to root 0 */
    MPI_Reduce(d_s, d_r, (int)n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      CU(cudaMemcpy(h, d_r, n * sizeof(float), cudaMemcpyDeviceToHost));
      CHECK(h[n - 1] == base + size * (float)((n - 1) % 13), "reduce %f", h[n - 1]);
    }
    /* bcast from the last rank */
    for (size_t i = 0; i < n; i++) h[i] = rank == size - 1 ? (float)i : -1.0f;
    CU(cudaMemcpy(d_s, h, n * sizeof(float), cudaMemcpyHostToDevice));
    MPI_Bcast(d_s, (int)n, MPI_FLOAT, size - 1, MPI_COMM_WORLD);
    CU(cudaMemcpy(h, d_s, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(h[12345] == 12345.0f, "bcast %f", h[12345]);
    /* allgather of 1000 floats each */
    for (int i = 0; i < 1000; i++) h[i] = (float)(rank * 1000 + i);
    CU(cudaMemcpy(d_s, h, 1000 * sizeof(float), cudaMemcpyHostToDevice));
    MPI_Allgather(d_s, 1000, MPI_FLOAT, d_r, 1000, MPI_FLOAT, MPI_COMM_WORLD);
    CU(cudaMemcpy(h, d_r, 1000 * size * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 1000 * size; i++) if (h[i] != (float)i) CHECK(0, "allgather at %d: %f", i, h[i]);
    checks++;
    cudaFree(d_s); cudaFree(d_r); free(h);
  }

  /* Scan and exscan on device buffers: blocking, in place, nonblocking. Rank r holds
   * (r + 1) * 1000 + i; the inclusive sum at rank r is (r+1)(r+2)/2 * 1000 + (r+1) i. */
  {
    int n = 100003;
    long long *h = malloc(n * sizeof(long long)), *d_s, *d_r, *d_x;
    CU(cudaMalloc((void **)&d_s, n * sizeof(long long)));
    CU(cudaMalloc((void **)&d_r, n * sizeof(long long)));
    CU(cudaMalloc((void **)&d_x, n * sizeof(long long)));
    for (int i = 0; i < n; i++) h[i] = (long long)(rank + 1) * 1000 + i;
    CU(cudaMemcpy(d_s, h, n * sizeof(long long), cudaMemcpyHostToDevice));
    long long inc = (long long)(rank + 1) * (rank + 2) / 2 * 1000, exc = (long long)rank * (rank + 1) / 2 * 1000;
    MPI_Scan(d_s, d_r, n, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    CU(cudaMemcpy(h, d_r, n * sizeof(long long), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) if (h[i] != inc + (long long)(rank + 1) * i) CHECK(0, "scan at %d: %lld", i, h[i]);
    checks++;
    CU(cudaMemset(d_r, 0x5a, n * sizeof(long long)));
    MPI_Exscan(d_s, d_r, n, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    CU(cudaMemcpy(h, d_r, n * sizeof(long long), cudaMemcpyDeviceToHost));
    if (rank == 0) CHECK(h[n - 1] == 0x5a5a5a5a5a5a5a5aLL, "exscan wrote rank 0: %lld", h[n - 1]);
    else for (int i = 0; i < n; i++) if (h[i] != exc + (long long)rank * i) CHECK(0, "exscan at %d: %lld", i, h[i]);
    checks++;
    /* in place, blocking and nonblocking (two in flight) */
    CU(cudaMemcpy(d_r, d_s, n * sizeof(long long), cudaMemcpyDeviceToDevice));
    CU(cudaMemcpy(d_x, d_s, n * sizeof(long long), cudaMemcpyDeviceToDevice));
    MPI_Scan(MPI_IN_PLACE, d_r, n, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    CU(cudaMemcpy(h, d_r, n * sizeof(long long), cudaMemcpyDeviceToHost));
    CHECK(h[n - 1] == inc + (long long)(rank + 1) * (n - 1), "scan in place %lld", h[n - 1]);
    CU(cudaMemcpy(d_r, d_s, n * sizeof(long long), cudaMemcpyDeviceToDevice));
    MPI_Request q[2];
    MPI_Iexscan(MPI_IN_PLACE, d_r, n, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD, &q[0]);
    MPI_Iscan(MPI_IN_PLACE, d_x, n, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, &q[1]);
    MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
    CU(cudaMemcpy(h, d_r, n * sizeof(long long), cudaMemcpyDeviceToHost));
    if (rank == 0) CHECK(h[7] == 1000 + 7, "iexscan in place changed rank 0: %lld", h[7]);
    else CHECK(h[7] == exc + (long long)rank * 7, "iexscan in place %lld", h[7]);
    CU(cudaMemcpy(h, d_x, n * sizeof(long long), cudaMemcpyDeviceToHost));
    CHECK(h[9] == (long long)(rank + 1) * 1000 + 9, "iscan max in place %lld", h[9]);
    /* MPI_Exscan with rank 0's receive buffer NULL (not significant there). */
    CU(cudaMemset(d_r, 0, n * sizeof(long long)));
    MPI_Exscan(d_s, rank == 0 ? NULL : d_r, n, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    CU(cudaMemcpy(h, d_r, n * sizeof(long long), cudaMemcpyDeviceToHost));
    if (rank == 0) CHECK(h[3] == 0, "exscan with NULL at rank 0 wrote its buffer: %lld", h[3]);
    else CHECK(h[3] == exc + (long long)rank * 3, "exscan (rank 0 NULL) %lld", h[3]);
    cudaFree(d_s); cudaFree(d_r); cudaFree(d_x); free(h);
  }

  /* Nonblocking MPI_IN_PLACE on device buffers, four in flight together: allreduce,
   * reduce (in place at the root), allgather, reduce_scatter_block. */
  {
    int n = 4099;
    size_t nb = (size_t)n * size;
    float *h = malloc(nb * sizeof(float)), *d_a, *d_g;
    int *hi = malloc(nb * sizeof(int)), *d_r, *d_s;
    CU(cudaMalloc((void **)&d_a, n * sizeof(float)));
    CU(cudaMalloc((void **)&d_g, nb * sizeof(float)));
    CU(cudaMalloc((void **)&d_r, n * sizeof(int)));
    CU(cudaMalloc((void **)&d_s, nb * sizeof(int)));
    for (int i = 0; i < n; i++) h[i] = (float)(rank + 1) * (float)(i % 7);
    CU(cudaMemcpy(d_a, h, n * sizeof(float), cudaMemcpyHostToDevice));
    for (size_t i = 0; i < nb; i++) h[i] = -1.0f;
    for (int i = 0; i < n; i++) h[(size_t)rank * n + i] = (float)(rank * 100000 + i);
    CU(cudaMemcpy(d_g, h, nb * sizeof(float), cudaMemcpyHostToDevice));
    for (int i = 0; i < n; i++) hi[i] = rank * 1000 + i;
    CU(cudaMemcpy(d_r, hi, n * sizeof(int), cudaMemcpyHostToDevice));
    for (size_t i = 0; i < nb; i++) hi[i] = rank + (int)i;
    CU(cudaMemcpy(d_s, hi, nb * sizeof(int), cudaMemcpyHostToDevice));
    int root = size - 1;
    MPI_Request q[4];
    MPI_Iallreduce(MPI_IN_PLACE, d_a, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q[0]);
    MPI_Ireduce(rank == root ? MPI_IN_PLACE : d_r, d_r, n, MPI_INT, MPI_MAX, root, MPI_COMM_WORLD, &q[1]);
    MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, d_g, n, MPI_FLOAT, MPI_COMM_WORLD, &q[2]);
    MPI_Ireduce_scatter_block(MPI_IN_PLACE, d_s, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[3]);
    MPI_Waitall(4, q, MPI_STATUSES_IGNORE);
    float tri = (float)(size * (size + 1) / 2);
    CU(cudaMemcpy(h, d_a, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) if (h[i] != tri * (float)(i % 7)) CHECK(0, "iallreduce in place at %d: %f", i, h[i]);
    checks++;
    CU(cudaMemcpy(hi, d_r, n * sizeof(int), cudaMemcpyDeviceToHost));
    if (rank == root) CHECK(hi[n - 1] == (size - 1) * 1000 + n - 1, "ireduce in place %d", hi[n - 1]);
    else CHECK(hi[5] == rank * 1000 + 5, "ireduce changed a non-root: %d", hi[5]);
    CU(cudaMemcpy(h, d_g, nb * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < nb; i++) if (h[i] != (float)((i / n) * 100000 + i % n)) CHECK(0, "iallgather in place at %zu: %f", i, h[i]);
    checks++;
    CU(cudaMemcpy(hi, d_s, n * sizeof(int), cudaMemcpyDeviceToHost));
    /* sum over ranks r of (r + rank*n + i) */
    for (int i = 0; i < n; i++) if (hi[i] != size * (size - 1) / 2 + size * (rank * n + i)) CHECK(0, "ireduce_scatter_block in place at %d: %d", i, hi[i]);
    checks++;
    cudaFree(d_a); cudaFree(d_g); cudaFree(d_r); cudaFree(d_s); free(h); free(hi);
  }

  /* A strided datatype over device memory: every other int of 2000. */
  {
    MPI_Datatype vec;
    MPI_Type_vector(1000, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    int *h = malloc(2000 * sizeof(int)), *d;
    CU(cudaMalloc((void **)&d, 2000 * sizeof(int)));
    for (int i = 0; i < 2000; i++) h[i] = rank * 100000 + i;
    CU(cudaMemcpy(d, h, 2000 * sizeof(int), cudaMemcpyHostToDevice));
    int *r = malloc(1000 * sizeof(int));
    MPI_Sendrecv(d, 1, vec, right, 3, r, 1000, MPI_INT, left, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < 1000; i++) if (r[i] != left * 100000 + 2 * i) CHECK(0, "vector send at %d: %d", i, r[i]);
    checks++;
    /* and receive into the strided layout on the device */
    for (int i = 0; i < 1000; i++) r[i] = rank * 10 + i;
    CU(cudaMemset(d, 0, 2000 * sizeof(int)));
    MPI_Sendrecv(r, 1000, MPI_INT, right, 4, d, 1, vec, left, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CU(cudaMemcpy(h, d, 2000 * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 1000; i++) if (h[2 * i] != left * 10 + i || h[2 * i + 1] != 0) CHECK(0, "vector recv at %d", i);
    checks++;
    MPI_Type_free(&vec);
    cudaFree(d); free(h); free(r);
  }

  /* Timings (reported, not asserted). */
  {
    char *d;
    CU(cudaMalloc((void **)&d, 64 << 20));
    int iters = 1000;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters && size > 1; i++) {
      if (rank == 0) { MPI_Send(d, 8, MPI_BYTE, 1, 9, MPI_COMM_WORLD); MPI_Recv(d, 8, MPI_BYTE, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
      else if (rank == 1) { MPI_Recv(d, 8, MPI_BYTE, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(d, 8, MPI_BYTE, 0, 9, MPI_COMM_WORLD); }
    }
    double lat = (MPI_Wtime() - t0) / (2.0 * iters) * 1e6;
    float *f = (float *)d;
    MPI_Allreduce(MPI_IN_PLACE, f, 16 << 20, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int i = 0; i < 20; i++) MPI_Allreduce(MPI_IN_PLACE, f, 16 << 20, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double ar = (MPI_Wtime() - t0) / 20 * 1e6;
    MPI_Allreduce(MPI_IN_PLACE, f, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int i = 0; i < 200; i++) MPI_Allreduce(MPI_IN_PLACE, f, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double ar8 = (MPI_Wtime() - t0) / 200 * 1e6;
    if (rank == 0) printf("gpu_buffers: device ping-pong 8 B one-way %.1f us; allreduce f32 8 B %.1f us, 64 MiB %.0f us (%d ranks)\n", lat, ar8, ar, size);
    cudaFree(d);
  }
  if (rank == 0) printf("gpu_buffers: ok, %d checks\n", checks);
  MPI_Finalize();
  return 0;
}
