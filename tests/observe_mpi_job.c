/* A user's MPI job for the observed workload's netns test and the mpi kind's benchmark:
 * MPI_Allreduce of SIZE bytes, again and again for SECONDS, rank 0 deciding when to stop. Its
 * flag rides in the all-reduce itself (the last element: rank 0 adds 0 to stop, the others 1),
 * so that every collective the job calls, and every record its ranks send, is one all-reduce of
 * SIZE (a separate MPI_Bcast of the flag made every other record a 4-byte broadcast). Each rank
 * prints its own count of the collectives it called ("rank R ops N"), which the test compares
 * with what its node's agent received. The data is checked: every element but the flag must be
 * the sum of the ranks' values. Run with librdmachaos-observe-mpi.so preloaded. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  double seconds = argc > 1 ? atof(argv[1]) : 30;
  long size = argc > 2 ? atol(argv[2]) : 4L << 20;
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int count = (int)(size / (long)sizeof(double));
  if (count < 2) count = 2; /* one value and the flag */
  double *a = malloc(sizeof(double) * (size_t)count), *b = malloc(sizeof(double) * (size_t)count);
  if (!a || !b) MPI_Abort(MPI_COMM_WORLD, 2);
  for (int i = 0; i < count; i++) a[i] = rank + 1;
  const double want = world * (world + 1) / 2.0;
  long ops = 0, wrong = 0;
  double start = MPI_Wtime();
  int go = 1;
  while (go) {
    a[count - 1] = rank == 0 ? (MPI_Wtime() - start < seconds) : 1;
    MPI_Allreduce(a, b, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    ops++;
    if (b[0] != want || b[count - 2] != want) wrong++;
    go = b[count - 1] == world; /* every rank goes on, or all stop after this one */
  }
  printf("rank %d ops %ld wrong %ld\n", rank, ops, wrong);
  fflush(stdout);
  free(a), free(b);
  MPI_Finalize();
  return wrong ? 1 : 0;
}
