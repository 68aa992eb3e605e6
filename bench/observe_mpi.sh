#!/usr/bin/env bash
# observe_mpi.sh: an MPI all-reduce loop (2 ranks on this host, over TCP on loopback) with and
# without the PMPI wrappers preloaded (librdmachaos-observe-mpi.so, sending to an intake that
# listens), alternating, RUNS runs each: the median iteration times and their ratio.
# Usage: bench/observe_mpi.sh [SIZE_BYTES] [ITERATIONS] [RUNS]   (BUILD_DIR, default build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
size=${1:-4194304}
iters=${2:-200}
runs=${3:-5}
for f in "$build/bench/observe_allreduce" "$build/observe/librdmachaos-observe-mpi.so" "$build/bench/observe_cost"; do
  [ -e "$f" ] || { echo "observe_mpi.sh: $f is missing (ninja -C $build bench/observe_allreduce bench/observe_cost; needs libopenmpi-dev)" >&2; exit 2; }
done
command -v mpirun >/dev/null || { echo "observe_mpi.sh: mpirun is missing (openmpi-bin)" >&2; exit 2; }
dir=$(mktemp -d /tmp/rc-observe-mpi-XXXXXX)
listener=
cleanup() { [ -n "$listener" ] && kill "$listener" 2>/dev/null && wait "$listener" || true; rm -rf "$dir"; }
trap cleanup EXIT
"$build/bench/observe_cost" --listen "$dir/o.sock" 3600 > "$dir/intake.txt" 2>&1 &
listener=$!
sleep 0.5
run() {
  mpirun --allow-run-as-root --oversubscribe -n 2 --mca btl self,tcp --mca btl_tcp_if_include lo \
    --mca oob_tcp_if_include lo "$@" "$build/bench/observe_allreduce" "$size" "$iters" |
    awk '/median_us/ {print $2}'
}
without=() with=()
for i in $(seq "$runs"); do
  without+=("$(run)")
  with+=("$(run -x LD_PRELOAD="$PWD/$build/observe/librdmachaos-observe-mpi.so" -x RDMACHAOS_OBSERVE_SOCKET="$dir/o.sock")")
  echo "run $i: without ${without[-1]} us, with ${with[-1]} us"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
m0=$(median "${without[@]}") m1=$(median "${with[@]}")
kill "$listener"; wait "$listener" || true; listener=
cat "$dir/intake.txt"
awk -v a="$m0" -v b="$m1" -v s="$size" -v n="$runs" 'BEGIN {
  printf "all-reduce of %d bytes, 2 ranks, median of %d runs: %.1f us without, %.1f us with the wrappers; throughput ratio (without/with) %.3f\n", s, n, a, b, a / b }'
