#!/usr/bin/env bash
# nccl-tests' all_reduce_perf with librdmachaos-observe as NCCL's profiler plugin, reporting to a
# real rdmachaos-agent on this machine, and the agent's series of the job's collectives beside
# nccl-tests' own figures: the NCCL path of issue 51, ready for the first machine with an NVIDIA
# GPU and NCCL (2.23 or newer). Refuses, saying what is missing, anywhere else.
# Usage: bench/nccl_gpu_check.sh [ALL_REDUCE_PERF] [SECONDS]
#   ALL_REDUCE_PERF  nccl-tests' binary (default: all_reduce_perf on PATH, or ./build/all_reduce_perf)
#   SECONDS          how long the observed workload watches (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
builddir=${BUILD_DIR:-build}
perf=${1:-$(command -v all_reduce_perf || echo ./build/all_reduce_perf)}
seconds=${2:-20}
plugin=$PWD/$builddir/observe/librdmachaos-observe.so
cli=$PWD/$builddir/controller/rdmachaos

refuse() { echo "nccl_gpu_check: $*" >&2; exit 2; }
command -v nvidia-smi >/dev/null || refuse "no nvidia-smi: this machine has no NVIDIA driver (the check needs a GPU and NCCL)"
nvidia-smi -L >/dev/null 2>&1 || refuse "nvidia-smi lists no GPU: $(nvidia-smi -L 2>&1 | head -1)"
ldconfig -p | grep -q 'libnccl\.so' || refuse "no libnccl.so in the linker's cache: install NCCL 2.23 or newer"
[ -x "$perf" ] || refuse "no all_reduce_perf at '$perf': build nccl-tests (make MPI=0) and pass its path"
[ -r "$plugin" ] || refuse "$plugin is missing: build first (scripts/build)"
[ -x "$cli" ] || refuse "$cli is missing: build first (scripts/build)"
[ "$(id -u)" = 0 ] || refuse "run as root: the check brings up a one-node agent lab"

work=$(mktemp -d /tmp/rc-nccl-check-XXXXXX)
lab=$work/lab
cleanup() {
  [ -n "${perf_pid:-}" ] && kill "$perf_pid" 2>/dev/null && wait "$perf_pid" 2>/dev/null
  "$cli" lab down --dir "$lab" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
# Two namespace hosts for the agents (an observed workload needs two nodes); the GPU job runs in
# the root namespace and reports to n1's agent, whose socket is a file every namespace reaches.
"$cli" lab up --nodes 2 --dir "$lab" >/dev/null
sock=$lab/nodes/n1/observe.sock
ngpus=$(nvidia-smi -L | wc -l)
echo "nccl_gpu_check: all_reduce_perf on $ngpus GPU(s), plugin $plugin, agent socket $sock"
NCCL_PROFILER_PLUGIN=$plugin RDMACHAOS_OBSERVE_SOCKET=$sock RDMACHAOS_OBSERVE_JOB=nccl-check \
  "$perf" -b 4M -e 4M -g "$ngpus" -n 1000000 -w 5 > "$work/perf.out" 2>&1 &
perf_pid=$!
sleep 5
# The agent's view of the job: its live series (bytes per bin, iterations) for SECONDS. n1 holds
# every rank (one machine); n2's agent sees none and says so ("no rank reported ...").
"$cli" workload --kind observed --test nccl-check --inventory "$lab/inventory.toml" --for "${seconds}s" | tee "$work/series.out"
kill "$perf_pid" 2>/dev/null || true
wait "$perf_pid" 2>/dev/null || true
perf_pid=
echo "--- nccl-tests' own lines:"
grep -E '^ +[0-9]+ |# Avg bus bandwidth' "$work/perf.out" | tail -5 || tail -20 "$work/perf.out"
