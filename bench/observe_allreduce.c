/* An MPI all-reduce loop for bench/observe_mpi.sh: ITERS all-reduces of SIZE bytes of doubles
 * after a warm-up; rank 0 prints the median and mean iteration time in microseconds. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  long size = argc > 1 ? atol(argv[1]) : 4L << 20;
  int iters = argc > 2 ? atoi(argv[2]) : 200;
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int count = (int)(size / (long)sizeof(double));
  double *a = calloc((size_t)count, sizeof(double)), *b = calloc((size_t)count, sizeof(double));
  double *t = malloc(sizeof(double) * (size_t)iters);
  for (int i = 0; i < 10; i++) MPI_Allreduce(a, b, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  double sum = 0;
  for (int i = 0; i < iters; i++) {
    double t0 = MPI_Wtime();
    MPI_Allreduce(a, b, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    t[i] = (MPI_Wtime() - t0) * 1e6;
    sum += t[i];
  }
  qsort(t, (size_t)iters, sizeof(double), cmp);
  if (rank == 0) printf("median_us %.1f mean_us %.1f\n", t[iters / 2], sum / iters);
  free(a), free(b), free(t);
  MPI_Finalize();
  return 0;
}
