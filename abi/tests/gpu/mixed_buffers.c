/* Host and device buffers mixed across the ranks of one collective (abi/src/memkind.rs),
 * run on a machine with a GPU by scripts/gpu-abi.sh. Legal MPI: each rank passes its
 * own kind of memory. Build: mpicc -O2 mixed_buffers.c -I$CUDA_HOME/include
 * -L$CUDA_HOME/lib64 -lcudart. Usage: mixed_buffers MASK, where rank r uses device
 * buffers when bit r of MASK is set (e.g. 1: rank 0 only; 3: ranks 0 and 1).
 * Checks bcast (device root and host root), allgather (also in place), allreduce (also
 * in place), reduce (each root), reduce_scatter_block, and the nonblocking iallreduce,
 * ibcast and iallgather, at 8 B and 4 MiB; prints the time of an 8-byte allreduce. */
#include <mpi.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks = 0, rank, size, dev;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "mixed_buffers rank %d line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)
#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "rank %d: %s: %s\n", rank, #x, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 2); } } while (0)

/* A buffer of `bytes` in this rank's kind of memory. */
static void *buf(size_t bytes) {
  void *p;
  if (dev) CU(cudaMalloc(&p, bytes)); else p = malloc(bytes);
  return p;
}
static void release(void *p) { if (dev) cudaFree(p); else free(p); }
static void put(void *dst, const void *src, size_t bytes) {
  if (dev) CU(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice)); else memcpy(dst, src, bytes);
}
static void get(void *dst, const void *src, size_t bytes) {
  if (dev) CU(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost)); else memcpy(dst, src, bytes);
}

static void round_of(size_t n) {
  int p = size, r = rank;
  size_t nb = n * sizeof(float);
  float *h = malloc(nb * p), *e = malloc(nb * p);
  float *s = buf(nb * p), *d = buf(nb * p);
  for (size_t i = 0; i < n * p; i++) h[i] = (float)(r + 1) + (float)(i % 7);
  put(s, h, nb * p);

  MPI_Allreduce(s, d, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  get(e, d, nb);
  for (size_t i = 0; i < n; i++) if (e[i] != (float)(p * (p + 1) / 2) + p * (float)(i % 7)) CHECK(0, "allreduce %zu at %zu: %f", n, i, e[i]);
  checks++;
  put(d, h, nb);
  MPI_Allreduce(MPI_IN_PLACE, d, (int)n, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  get(e, d, nb);
  CHECK(e[n - 1] == (float)p + (float)((n - 1) % 7), "allreduce in place %zu: %f", n, e[n - 1]);
  for (int root = 0; root < p; root++) {
    MPI_Reduce(s, d, (int)n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
    if (r == root) { get(e, d, nb); CHECK(e[n / 2] == (float)(p * (p + 1) / 2) + p * (float)((n / 2) % 7), "reduce root %d: %f", root, e[n / 2]); }
  }
  MPI_Reduce_scatter_block(s, d, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  get(e, d, nb);
  CHECK(e[1] == (float)(p * (p + 1) / 2) + p * (float)((r * n + 1) % 7), "reduce_scatter_block: %f", e[1]);
  for (int root = 0; root < p; root++) {
    for (size_t i = 0; i < n; i++) e[i] = r == root ? (float)(100 * root) + (float)(i % 5) : -1.0f;
    put(d, e, nb);
    MPI_Bcast(d, (int)n, MPI_FLOAT, root, MPI_COMM_WORLD);
    get(e, d, nb);
    CHECK(e[n - 1] == (float)(100 * root) + (float)((n - 1) % 5), "bcast root %d: %f", root, e[n - 1]);
  }
  MPI_Allgather(s, (int)n, MPI_FLOAT, d, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
  get(e, d, nb * p);
  for (int j = 0; j < p; j++) CHECK(e[j * n] == (float)(j + 1), "allgather block %d: %f", j, e[j * n]);
  put(d + r * n, h, nb);
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, d, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
  get(e, d, nb * p);
  for (int j = 0; j < p; j++) CHECK(e[j * n + n - 1] == (float)(j + 1) + (float)((n - 1) % 7), "allgather in place block %d: %f", j, e[j * n + n - 1]);

  /* Nonblocking: never agreed (staged where the agreement is on). */
  MPI_Request q[3];
  float *d2 = buf(nb), *d3 = buf(nb * p);
  for (size_t i = 0; i < n; i++) e[i] = r == 0 ? 7.0f : 0.0f;
  put(d2, e, nb);
  MPI_Iallreduce(s, d, (int)n, MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD, &q[0]);
  MPI_Ibcast(d2, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD, &q[1]);
  MPI_Iallgather(s, (int)n, MPI_FLOAT, d3, (int)n, MPI_FLOAT, MPI_COMM_WORLD, &q[2]);
  MPI_Waitall(3, q, MPI_STATUSES_IGNORE);
  get(e, d, nb);
  CHECK(e[n - 1] == 1.0f + (float)((n - 1) % 7), "iallreduce: %f", e[n - 1]);
  get(e, d2, nb);
  CHECK(e[n - 1] == 7.0f, "ibcast: %f", e[n - 1]);
  get(e, d3, nb * p);
  for (int j = 0; j < p; j++) CHECK(e[j * n] == (float)(j + 1), "iallgather block %d: %f", j, e[j * n]);
  release(d2); release(d3); release(s); release(d); free(h); free(e);
}

int main(int argc, char **argv) {
  const char *lr = getenv("LOCAL_RANK");
  int ndev = 0;
  cudaGetDeviceCount(&ndev);
  if (ndev > 0) cudaSetDevice((lr ? atoi(lr) : 0) % ndev);
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  unsigned mask = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 0) : 1u;
  dev = (mask >> rank) & 1u;
  round_of(2);
  round_of(1 << 20);
  /* Time of an 8-byte allreduce (two floats) in this layout. */
  float *s = buf(8), *d = buf(8), h[2] = {1, 2};
  put(s, h, 8);
  for (int i = 0; i < 20; i++) MPI_Allreduce(s, d, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < 500; i++) MPI_Allreduce(s, d, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double us = (MPI_Wtime() - t0) * 1e6 / 500;
  release(s); release(d);
  int total = 0;
  MPI_Reduce(&checks, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("mixed_buffers: ok, %d checks (mask %#x, %d ranks; 8-byte allreduce %.1f us)\n", total, mask, size, us);
  MPI_Finalize();
  return 0;
}
