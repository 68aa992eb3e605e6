#!/usr/bin/env bash
# The lab's noise band (issue 21): runs a playbook (default playbooks/noise-floor.toml) RUNS
# times on a fresh namespace lab and prints, per trial, how far the healthy job's smoothed
# throughput fell below its own baseline (the trial's band), the band the scorer used (after
# pooling and widening), and the lab switch's load in the fault window; then, per run, the
# baseline's CV across trials; then the median and worst of each over all runs. A printed
# figure, never a test assertion (these machines are noisy).
#
#   sudo bench/noise_band.sh [RUNS] [-- extra `lab up` options, e.g. --rate 500M --delivery-hold 0]
#   NODES=4 PLAYBOOK=playbooks/quickstart.toml sudo bench/noise_band.sh 5
#
# Needs the controller, agent and switch built (build/ or BUILD_DIR). Takes about a minute
# per noise-floor run. The lab is its own (a temporary directory) and is taken down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
shift || true
[ "${1:-}" = "--" ] && shift
build=${BUILD_DIR:-build}
cli=$build/controller/rdmachaos
playbook=${PLAYBOOK:-playbooks/noise-floor.toml}
nodes=${NODES:-4}
if [ "$(id -u)" != 0 ]; then
  echo "bench/noise_band.sh: the lab needs root (network namespaces)" >&2
  exit 2
fi
[ -x "$cli" ] || { echo "bench/noise_band.sh: $cli not built (ninja -C $build)" >&2; exit 2; }
case $runs in '' | *[!0-9]*) echo "bench/noise_band.sh: RUNS must be a number, not '$runs'" >&2; exit 2 ;; esac
. bench/lab_runs.sh
bench_lab_up noise-band "$nodes" "$@"
echo "noise band of $playbook on a $nodes-node lab (lab up $*), $runs run(s), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
bench_run_playbook "$playbook" "$runs"
python3 - "$work" "$runs" <<'EOF'
import glob, json, statistics as st, sys
work, runs = sys.argv[1], int(sys.argv[2])
rows, cvs = [], []
for i in range(1, runs + 1):
    paths = glob.glob(f"{work}/run{i}/**/result.json", recursive=True)
    if not paths:
        print(f"run {i}: no result.json"); continue
    j = json.load(open(paths[0]))
    for t in j["trials"]:
        job = t["job"]; band = job.get("baseline_band") or {}
        b = job.get("baseline_Bps") or 0
        own = 100 * (1 - band["lowest_Bps"] / b) if b and band.get("lowest_Bps") else float("nan")
        used = 100 * (1 - band["floor_Bps"] / b) if b and band.get("floor_Bps") else float("nan")
        busy = (t.get("fabric") or {}).get("switch_busy") or {}
        rows.append((i, t["index"], b * 8 / 1e9, own, used, busy.get("pct", float("nan")), busy.get("peak_pct", float("nan"))))
    for g in j.get("repeatability", []):
        for m in g["metrics"]:
            if m["metric"] == "baseline" and m.get("cv_pct") is not None:
                cvs.append((i, m["cv_pct"]))
print(f"{'run':>3} {'trial':>5} {'baseline':>10} {'own band':>9} {'scored band':>11} {'switch busy':>11} {'busiest s':>9}")
for r in rows:
    print(f"{r[0]:>3} {r[1]:>5} {r[2]:>8.3f}Gb {r[3]:>8.1f}% {r[4]:>10.1f}% {r[5]:>10.0f}% {r[6]:>8.0f}%")
for i, cv in cvs:
    print(f"run {i}: baseline CV across trials {cv:.1f}%")
def summary(name, vals, unit="%"):
    vals = [v for v in vals if v == v]
    if vals:
        print(f"{name}: median {st.median(vals):.1f}{unit}, worst {max(vals):.1f}{unit} over {len(vals)}")
summary("own band (below the trial's baseline)", [r[3] for r in rows])
summary("scored band (pooled, widened)", [r[4] for r in rows])
summary("baseline CV across trials", [c for _, c in cvs])
summary("switch busy in the fault window", [r[5] for r in rows])
summary("switch busiest second", [r[6] for r in rows])
EOF
