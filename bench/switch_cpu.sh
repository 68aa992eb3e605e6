#!/usr/bin/env bash
# What the lab switch's "busy" share leaves out (issue 21): runs PLAYBOOK once on a fresh
# 3-node lab and samples, every second, the switch process's scheduler account
# (/proc/PID/schedstat: time on a CPU, time runnable but waiting for one) and the kernel's
# steal time, then prints them beside the report's switch load (busy = the event loop's time
# outside epoll_wait). Printed figures, never test assertions.
#
#   sudo bench/switch_cpu.sh PLAYBOOK [-- extra `lab up` options]
#   sudo bench/switch_cpu.sh playbooks/noise-floor.toml -- --rate 600M
#
# Needs the controller, agent and switch built (build/ or BUILD_DIR). The lab is its own (a
# temporary directory) and is taken down on exit, also on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: sudo bench/switch_cpu.sh PLAYBOOK [-- lab up options]" >&2; exit 2; }
playbook=$1
shift
[ "${1:-}" = "--" ] && shift
build=${BUILD_DIR:-build}
cli=$build/controller/rdmachaos
[ "$(id -u)" = 0 ] || { echo "bench/switch_cpu.sh: the lab needs root (network namespaces)" >&2; exit 2; }
[ -x "$cli" ] || { echo "bench/switch_cpu.sh: $cli not built (ninja -C $build)" >&2; exit 2; }
[ -f "$playbook" ] || { echo "bench/switch_cpu.sh: no playbook '$playbook'" >&2; exit 2; }
. bench/lab_runs.sh
bench_lab_up switch-cpu 3 "$@"
sw=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["switch"]["proc"]["pid"])' "$work/lab/lab.json")
echo "switch cpu of $playbook on a 3-node lab (lab up $*), switch pid $sw (nice $(ps -o ni= -p "$sw" | tr -d ' ')), $(nproc) cores, $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
(
  while kill -0 "$sw" 2>/dev/null; do
    echo "$(date +%s.%N) $(cat "/proc/$sw/schedstat") $(awk '/^(non)?voluntary_ctxt_switches/ { printf "%s ", $2 }' "/proc/$sw/status") $(grep -E '^cpu ' /proc/stat)"
    sleep 1
  done
) >"$work/samples" 2>/dev/null &
sampler=$!
bench_run_playbook "$playbook" 1
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
python3 - "$work" <<'EOF'
import glob, json, statistics as st, sys
work = sys.argv[1]
rows = []
for line in open(f"{work}/samples"):
    f = line.split()
    if len(f) < 14: continue
    # time, on-cpu ns, runnable-wait ns, sleeps (voluntary switches), preemptions, /proc/stat cpu
    rows.append((float(f[0]), int(f[1]), int(f[2]), int(f[4]), int(f[5]), [int(x) for x in f[7:]]))
per = []  # (on-cpu %, runnable-wait %, steal %, sleeps/s, preemptions/s) per second while the switch worked
for a, b in zip(rows, rows[1:]):
    dt = b[0] - a[0]
    total = sum(b[5][:8]) - sum(a[5][:8])
    on = 100 * (b[1] - a[1]) / 1e9 / dt
    if on < 5: continue  # the lab idle between trials
    per.append((on, 100 * (b[2] - a[2]) / 1e9 / dt, 100 * (b[5][7] - a[5][7]) / max(total, 1),
                (b[3] - a[3]) / dt, (b[4] - a[4]) / dt))
if not per:
    print("no second with the switch at work"); sys.exit(0)
def line(name, xs):
    print(f"  {name:<34} median {st.median(xs):5.1f} %, max {max(xs):5.1f} %")
print(f"scheduler's account over {len(per)} busy seconds (per second, of one core):")
line("switch on a CPU", [p[0] for p in per])
line("switch runnable, waiting for one", [p[1] for p in per])
line("steal (of all cores)", [p[2] for p in per])
for name, k in (("sleeps (epoll_wait blocked)", 3), ("preemptions", 4)):
    xs = [p[k] for p in per]
    print(f"  {name:<34} median {st.median(xs):7.0f} /s, max {max(xs):7.0f} /s")
paths = glob.glob(f"{work}/run1/**/result.json", recursive=True)
if paths:
    busy = [t["fabric"]["switch_busy"] for t in json.load(open(paths[0]))["trials"]
            if (t.get("fabric") or {}).get("switch_busy")]
    if busy:
        print("the report's switch load (time outside epoll_wait), fault windows:")
        line("busy", [b["pct"] for b in busy])
        line("busiest second", [b["peak_pct"] for b in busy])
EOF
