/* A tiny MPI program for tests/test_observe.cpp: runs each collective the PMPI wrappers know,
 * blocking and nonblocking, and prints "ops N", its own count of the collectives it completed. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  enum { N = 1024 };
  double *a = calloc(N * (size_t)size, sizeof(double)), *b = calloc(N * (size_t)size, sizeof(double)),
         *c = calloc(N * (size_t)size, sizeof(double));
  int *counts = malloc(sizeof(int) * (size_t)size);
  for (int i = 0; i < size; i++) counts[i] = N;
  long ops = 0;
  for (int step = 0; step < 10; step++) {
    MPI_Allreduce(a, b, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), ops++;
    MPI_Allgather(a, N, MPI_DOUBLE, b, N, MPI_DOUBLE, MPI_COMM_WORLD), ops++;
    MPI_Alltoall(a, N, MPI_DOUBLE, b, N, MPI_DOUBLE, MPI_COMM_WORLD), ops++;
    MPI_Bcast(a, N, MPI_DOUBLE, 0, MPI_COMM_WORLD), ops++;
    MPI_Reduce_scatter(a, b, counts, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), ops++;
    MPI_Reduce_scatter_block(a, b, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), ops++;
    MPI_Barrier(MPI_COMM_WORLD), ops++;
    MPI_Request r[3];
    MPI_Iallreduce(a, b, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r[0]);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE), ops++;
    MPI_Ibcast(a, N, MPI_DOUBLE, 0, MPI_COMM_WORLD, &r[0]);
    for (int done = 0; !done;) MPI_Test(&r[0], &done, MPI_STATUS_IGNORE);
    ops++;
    MPI_Ialltoall(a, N, MPI_DOUBLE, b, N, MPI_DOUBLE, MPI_COMM_WORLD, &r[0]);
    MPI_Iallgather(a, N, MPI_DOUBLE, c, N, MPI_DOUBLE, MPI_COMM_WORLD, &r[1]);
    MPI_Ibarrier(MPI_COMM_WORLD, &r[2]);
    MPI_Waitall(3, r, MPI_STATUSES_IGNORE), ops += 3;
  }
  printf("ops %ld\n", ops);
  fflush(stdout);
  MPI_Finalize();
  free(a), free(b), free(c), free(counts);
  return 0;
}
