#!/usr/bin/env bash
# The `mpi` workload kind's all-reduce (Open MPI over TCP, started by rdmachaos) against the
# engine's own `allreduce` kind: same lab, same nodes, same size, same duration, one run; both
# busbw figures and the ratio mpi/engine. Prints numbers; asserts nothing. Needs root (namespace
# lab), mpirun (openmpi-bin) and a build with Open MPI's headers (build/tests/observe_mpi_job,
# build/observe/librdmachaos-observe-mpi.so). See bench/README.md.
# Usage: bench/mpi_vs_allreduce.sh [--nodes 3] [--for SECONDS] [--size SIZE] [--fabric switch|bridge] [--rate 1G]
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=3
secs=12
size=4MiB
fabric=switch
rate=1G
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --for) secs=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --fabric) fabric=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    *) echo "bench: unknown option '$1' (use --nodes N, --for SECONDS, --size SIZE, --fabric switch|bridge, --rate RATE)" >&2; exit 2 ;;
  esac
done
builddir=${BUILD_DIR:-build}
cli=$builddir/controller/rdmachaos
export RDMACHAOS_AGENT=${RDMACHAOS_AGENT:-$PWD/$builddir/agent/rdmachaos-agent}
[ "$(id -u)" = 0 ] || { echo "bench: needs root (the namespace lab)" >&2; exit 2; }
[ -x "$cli" ] || { echo "bench: build first (scripts/build)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bench: mpirun is missing (openmpi-bin; scripts/install-deps)" >&2; exit 2; }
for f in "$builddir/tests/observe_mpi_job" "$builddir/observe/librdmachaos-observe-mpi.so"; do
  [ -e "$f" ] || { echo "bench: $f is missing (libopenmpi-dev at meson setup, then ninja -C $builddir)" >&2; exit 2; }
done
[ "$secs" -ge 6 ] 2>/dev/null || { echo "bench: --for must be a whole number of seconds, at least 6 (3 s of it are mpirun's launch)" >&2; exit 2; }

dir=$(mktemp -d /tmp/rc-bench-mpi-XXXXXX)
cleanup() {
  # What of the MPI job outlived its run (mpirun, its daemons, the ranks): only processes whose
  # environment names this lab's directory, which the lab's launcher template gives them.
  for p in /proc/[0-9]*; do
    case "$(readlink "$p/exe" 2>/dev/null)" in
      */mpirun | */orterun | */orted | */observe_mpi_job)
        tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qF "$dir/" && kill -9 "${p#/proc/}" 2>/dev/null || true ;;
    esac
  done
  "$cli" lab down --dir "$dir" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
lab_opts=(--nodes "$nodes" --dir "$dir" --fabric "$fabric")
[ "$fabric" = switch ] && lab_opts+=(--rate "$rate")
inv=$("$cli" lab up "${lab_opts[@]}" 2>/dev/null)
grep -q '^\[mpi\]' "$dir/nodes/n1/agent.toml" ||
  { echo "bench: the lab wrote no [mpi] section for n1 (lab/lab_files.cpp: the benchmark was not found)" >&2; exit 1; }
node_list=$(seq -s, -f '"n%g"' 1 "$nodes")

# Both kinds run as a playbook of one fault-free phase: `rdmachaos workload --kind mpi` refuses
# every invocation (bench/README.md), and the same path for both keeps the comparison fair.
playbook() {  # KIND
  cat <<EOF
name = "bench-$1"
description = "bench/mpi_vs_allreduce.sh: $1 all-reduce of $size on $nodes nodes, no fault"
seed = 1
[workload]
kind = "$1"
nodes = [$node_list]
size = "$size"
transport = "tcp"
[scoring]
bin = "10ms"
warmup = "3s"
[[phase]]
name = "baseline"
duration = "${secs}s"
EOF
}
for kind in mpi allreduce; do
  echo "== $kind: all-reduce of $size on $nodes nodes, ${secs}s, lab fabric $fabric$([ "$fabric" = switch ] && echo " at $rate" || true) =="
  playbook "$kind" > "$dir/$kind.toml"
  "$cli" run "$dir/$kind.toml" --inventory "$inv" --report-dir "$dir/r-$kind" > "$dir/$kind.out" 2>&1 ||
    { cat "$dir/$kind.out" >&2; echo "bench: the $kind run failed" >&2; exit 1; }
done

python3 - "$dir" "$secs" "$nodes" <<'PY'
import json, statistics, sys
d, secs, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
factor = 2 * (n - 1) / n
lo, hi = 3e9, secs * 1e9 - 5e8          # after the 3 s warm-up (mpirun's launch), before the last 0.5 s

def figures(kind):
    r = json.load(open(f"{d}/r-{kind}/result.json"))
    size = r["playbook"]["workload"]["size_bytes"]
    per_node = {}
    for it in r["iterations"]:
        per_node.setdefault(it["node"], []).append(it)
    counts, periods, problems = [], [], []
    for node, its in sorted(per_node.items()):
        its.sort(key=lambda x: x["iteration"])
        if kind == "mpi":
            # Every record of the ranks is one all-reduce (the stop flag rides in it): a gap in
            # the iteration numbers is a lost record, which would read as a slow all-reduce.
            idx = [x["iteration"] for x in its]
            if idx != list(range(idx[0], idx[0] + len(idx))):
                problems.append(f"{node}: its records are not contiguous")
        counts.append(sum(1 for x in its if lo <= x["end_ns"] < hi))
        starts = [x["start_ns"] for x in its]
        periods += [b - a for a, b in zip(starts, starts[1:]) if lo <= a and b < hi]
    if len(per_node) != n:
        problems.append(f"{len(per_node)} of {n} nodes reported")
    t = r["trials"][0]
    problems += t.get("problems", [])
    rate = statistics.mean(counts) / ((hi - lo) / 1e9)          # all-reduces per second, per rank
    p50 = statistics.median(periods) if periods else float("nan")
    return {"size": size, "count": min(counts), "mean_busbw": rate * size * factor,
            "p50_busbw": size / (p50 / 1e9) * factor, "p50_ms": p50 / 1e6,
            "reported": t["job"].get("busbw_Bps"), "problems": problems, "verdict": r["outcome"]["verdict"]}

m, e = figures("mpi"), figures("allreduce")
gb = lambda bps: f"{bps * 8 / 1e9:6.3f} Gb/s"
print(f"busbw = algbw x 2(n-1)/n = algbw x {factor:.3f} ({n} ranks); algbw = SIZE ({m['size']} bytes) / time per all-reduce,")
print(f"from the runs' iteration records between t=3 s and t={secs - 0.5:g} s, every rank:")
print(f"  mean: time per all-reduce = the window / the all-reduces each rank completed in it (nccl-tests' average)")
print(f"  p50:  time per all-reduce = the median start-to-start interval of a rank's consecutive all-reduces")
print(f"{'':28}{'mean busbw':>14}{'p50 busbw':>14}{'p50 period':>12}  all-reduces/rank")
for name, f in (("mpi (Open MPI, btl tcp)", m), ("engine allreduce (tcp)", e)):
    print(f"{name:28}{gb(f['mean_busbw']):>14}{gb(f['p50_busbw']):>14}{f['p50_ms']:9.1f} ms  {f['count']}")
print(f"ratio mpi/engine: mean {m['mean_busbw'] / e['mean_busbw']:.3f}, p50 {m['p50_busbw'] / e['p50_busbw']:.3f}")
print(f"as the reports state it (trial busbw, size / p50 of the records x the kind's factor): "
      f"mpi {gb(m['reported'] or 0).strip()}, engine {gb(e['reported'] or 0).strip()}")
for name, f in (("mpi", m), ("allreduce", e)):
    if f["problems"] or f["verdict"] != "passed":
        print(f"warning: {name}: verdict {f['verdict']}; " + "; ".join(f["problems"]))
PY
