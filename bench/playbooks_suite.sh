#!/usr/bin/env bash
# bench/playbooks_suite.sh [RUNS] [BUILD_DIR]: the playbooks suite (every shipped lab playbook
# to its verdict, no retries) RUNS whole times in a row, as issue 21's acceptance asks ("passes
# with the new bounds and no retries in 5 of 5 whole runs"). Prints how each run ended, then
# per playbook (and per mechanism-off variant) the figures every run's test printed for each
# trial: its own band below its baseline, the lab switch's busy share and busiest second in
# the fault window, over all runs (median and worst). Each run's log is kept in
# BUILD_DIR/meson-logs/playbooks-suite-runI.txt. Needs root (the namespace lab), ~16 min a run.
set -euo pipefail
runs=${1:-5}
build=${2:-build}
[ "$(id -u)" = 0 ] || { echo "playbooks_suite.sh: needs root (the namespace lab); run it with sudo" >&2; exit 2; }
[ -x "$build/tests/test_lab_playbooks" ] ||
  { echo "playbooks_suite.sh: no $build/tests/test_lab_playbooks: build first (meson setup $build && ninja -C $build)" >&2; exit 2; }
case $runs in '' | *[!0-9]*) echo "playbooks_suite.sh: RUNS must be a whole number, not '$runs'" >&2; exit 2 ;; esac

logs=()
passed=0
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  rc=0
  meson test -C "$build" --suite playbooks --num-processes 1 --logbase "playbooks-suite-run$i" >/dev/null 2>&1 || rc=$?
  log=$build/meson-logs/playbooks-suite-run$i.txt
  logs+=("$log")
  if [ $rc = 0 ]; then
    passed=$((passed + 1))
    echo "run $i: passed after $(( $(date +%s) - start )) s"
  else
    echo "run $i: FAILED (meson exit $rc) after $(( $(date +%s) - start )) s; failed checks:"
    grep -E "FAILED:|^  CHECK|^  REQUIRE|with expansion|^  [a-z]" "$log" | head -n 30 | sed 's/^/    /' || true
  fi
done
echo "playbooks suite: $passed of $runs whole runs passed (logs: $build/meson-logs/playbooks-suite-run*.txt)"

python3 - "${logs[@]}" <<'EOF'
import re, statistics, sys
rows = {}
for path in sys.argv[1:]:
    try:
        text = open(path, errors="replace").read()
    except OSError:
        continue
    for line in text.splitlines():
        m = re.match(r"\[lab-figures\] (.+?) \| (.+?) \| own band (-?[\d.]+)% \| switch busy (-?[\d.]+)% \| busiest second (-?[\d.]+)% \| (\w+)", line)
        if not m:
            continue
        name = m.group(1)
        r = rows.setdefault(name, {"band": [], "busy": [], "peak": [], "verdicts": []})
        for key, g in (("band", 3), ("busy", 4), ("peak", 5)):
            v = float(m.group(g))
            if v >= 0:
                r[key].append(v)
        r["verdicts"].append(m.group(6))

def cell(vals):
    return f"{statistics.median(vals):5.1f} % ({max(vals):5.1f} %)" if vals else "   -"

print(f"\n{'playbook (test report)':<28} {'trials':>6}  {'own band, median (worst)':>24}  {'switch busy':>20}  {'busiest second':>20}")
for name in sorted(rows):
    r = rows[name]
    print(f"{name:<28} {len(r['band']) or len(r['peak']):>6}  {cell(r['band']):>24}  {cell(r['busy']):>20}  {cell(r['peak']):>20}")
if not rows:
    print("no [lab-figures] lines in the logs (did the suite skip? see the logs)")
EOF
[ "$passed" = "$runs" ]
