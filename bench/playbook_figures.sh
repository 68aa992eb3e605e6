#!/usr/bin/env bash
# The figures a lab playbook's bounds are set from (issue 21): runs PLAYBOOK RUNS times on one
# fresh namespace lab (3 nodes, one switch, 1G, as the playbooks suite's lab unless told
# otherwise) and prints, for every expectation of the playbook, what each trial measured, with
# the median, the spread and how many met the bound; then per trial the healthy job's own
# band below its baseline and the lab switch's load in the fault window (busy and busiest
# second). Printed figures, never test assertions (these machines are noisy).
#
#   sudo bench/playbook_figures.sh PLAYBOOK [RUNS] [-- extra `lab up` options]
#   sudo bench/playbook_figures.sh playbooks/incast.toml 10 -- --rate 500M
#   NODES=4 sudo bench/playbook_figures.sh playbooks/adaptive-routing.toml 10 -- --leaves 2 --spines 2 --routing adaptive
#   STALL=15/1 sudo bench/playbook_figures.sh playbooks/noise-floor.toml 3 -- --split-cores
#     (the switch stopped 15 ms every second during each run: what a host hiccup costs)
#
# Needs the controller, agent and switch built (build/ or BUILD_DIR). The lab is its own (a
# temporary directory) and is taken down on exit, also on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: sudo bench/playbook_figures.sh PLAYBOOK [RUNS] [-- lab up options]" >&2; exit 2; }
[ $# -ge 1 ] || usage
playbook=$1
shift
runs=5
if [ $# -gt 0 ] && [ "$1" != "--" ]; then runs=$1; shift; fi
[ "${1:-}" = "--" ] && shift
build=${BUILD_DIR:-build}
cli=$build/controller/rdmachaos
nodes=${NODES:-3}
[ "$(id -u)" = 0 ] || { echo "bench/playbook_figures.sh: the lab needs root (network namespaces)" >&2; exit 2; }
[ -x "$cli" ] || { echo "bench/playbook_figures.sh: $cli not built (ninja -C $build)" >&2; exit 2; }
[ -f "$playbook" ] || { echo "bench/playbook_figures.sh: no playbook '$playbook'" >&2; exit 2; }
case $runs in '' | *[!0-9]* | 0) echo "bench/playbook_figures.sh: RUNS must be a number of at least 1, not '$runs'" >&2; exit 2 ;; esac
. bench/lab_runs.sh
bench_lab_up figures "$nodes" "$@"
echo "figures of $playbook on a $nodes-node lab (lab up $*)${STALL:+, ${STALL_TARGET:-the switch} stopped ${STALL%/*} ms every ${STALL#*/} s}, $runs run(s), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
bench_run_playbook "$playbook" "$runs"
python3 - "$work" "$runs" <<'EOF'
import glob, json, statistics as st, sys
work, runs = sys.argv[1], int(sys.argv[2])
metrics = {}   # (line, metric, scope, op, bound_text) -> [(run, trial label, measured, text, passed)]
trials, verdicts = [], []
for i in range(1, runs + 1):
    paths = glob.glob(f"{work}/run{i}/**/result.json", recursive=True)
    if not paths:
        print(f"run {i}: no result.json"); continue
    j = json.load(open(paths[0]))
    verdicts.append((i, j.get("outcome", {}).get("verdict"), j.get("outcome", {}).get("reason", "")))
    for t in j["trials"]:
        for v in t.get("verdicts", []):
            key = (v.get("line", 0), v["metric"], v.get("scope", "job"), v.get("op", ""), v.get("bound_text", ""))
            metrics.setdefault(key, []).append((i, t.get("label", ""), v.get("measured"), v.get("measured_text", ""), v.get("passed")))
        job = t.get("job") or {}
        loss = (job.get("impact") or {}).get("loss_pct")
        band = job.get("baseline_band") or {}
        b = job.get("baseline_Bps") or 0
        own = 100 * (1 - band["lowest_Bps"] / b) if b and band.get("lowest_Bps") else float("nan")
        busy = (t.get("fabric") or {}).get("switch_busy") or {}
        im = job.get("impact") or {}
        impact = im.get("time_to_impact_ns")
        rec = im.get("recovery_time_ns")
        trials.append((i, t.get("label", ""), b * 8 / 1e9, own, busy.get("pct", float("nan")), busy.get("peak_pct", float("nan")),
                       "none" if impact is None else f"{impact / 1e6:.0f}ms", "-" if rec is None else f"{rec / 1e6:.0f}ms",
                       "-" if loss is None else f"{loss:.1f}%"))
    # stat = "median" expectations are judged once per group of repeats, not per trial
    for g in j.get("repeatability", []):
        for v in g.get("verdicts", []):
            key = (v.get("line", 0), v["metric"], v.get("scope", "job"), v.get("op", ""), v.get("bound_text", ""))
            metrics.setdefault(key, []).append((i, g.get("group", ""), v.get("measured"), v.get("measured_text", ""), v.get("passed")))
for i, v, why in verdicts:
    print(f"run {i}: {v} ({why})")
UNITS = {}    # metric -> "ns" (a duration), "Bps" (a rate) or "" (a number), from the bound's text
def fmt(x, metric):
    if x is None: return "-"
    if metric.startswith("median(") and metric.endswith(")"): metric = metric[7:-1]
    if metric.endswith("_pct"): return f"{x:.2f}%"
    u = UNITS.get(metric, "")
    if u == "ns": return f"{x / 1e6:.0f}ms"
    if u == "Bps": return f"{x * 8 / 1e6:.0f}Mb/s"
    return f"{x:.3g}"
print()
for (line, metric, scope, op, bound) in metrics:
    b = bound.strip()
    if metric.startswith("median(") and metric.endswith(")"): metric = metric[7:-1]
    UNITS[metric] = "Bps" if b.endswith("/s") else "ns" if b[-1:] == "s" or b.endswith("ms") else ""
for key in sorted(metrics):
    line, metric, scope, op, bound = key
    rows = metrics[key]
    vals = [r[2] for r in rows if isinstance(r[2], (int, float))]
    met = sum(1 for r in rows if r[4])
    head = f"line {line}: {metric} ({scope}) {op} {bound}: met in {met} of {len(rows)} trials"
    if vals:
        head += f"; median {fmt(st.median(vals), metric)}, min {fmt(min(vals), metric)}, max {fmt(max(vals), metric)}"
    print(head)
    print("   " + "  ".join(f"{fmt(r[2], metric)}{'' if r[4] else '!'}" for r in rows))
print()
print(f"{'run':>3} {'trial':<28} {'baseline':>10} {'own band':>9} {'switch busy':>11} {'busiest s':>9} {'impact at':>9} {'recovery':>8} {'loss':>7}")
for r in trials:
    print(f"{r[0]:>3} {r[1][:28]:<28} {r[2]:>8.3f}Gb {r[3]:>8.1f}% {r[4]:>10.0f}% {r[5]:>8.0f}% {r[6]:>9} {r[7]:>8} {r[8]:>7}")
print(f"trials with an impact: {sum(1 for r in trials if r[6] != 'none')} of {len(trials)}")
def summary(name, vals):
    vals = [v for v in vals if v == v]
    if vals:
        print(f"{name}: median {st.median(vals):.1f}%, worst {max(vals):.1f}% over {len(vals)} trials")
summary("own band (below the trial's baseline)", [r[3] for r in trials])
summary("switch busy in the fault window", [r[4] for r in trials])
summary("switch busiest second", [r[5] for r in trials])
EOF
