#!/usr/bin/env bash
# bench/playbooks_suite.sh [RUNS] [BUILD_DIR]: the playbooks suite (every shipped lab playbook
# to its verdict, no retries) RUNS whole times in a row, as issue 21's acceptance asks ("passes
# with the new bounds and no retries in 5 of 5 whole runs"). Prints how each run ended, then
# per playbook (and per mechanism-off variant) what every run's test printed (bench/suite_figures.py):
# each expectation's median, range and met count over every trial, and each trial's own band
# below its baseline and the lab switch's busy share and busiest second in the fault window.
# Before each run, what the host took from each core (build/bench/host_hiccups, 5 s).
# Each run's log is kept in BUILD_DIR/meson-logs/playbooks-suite-runI.txt. Needs root (the namespace lab), ~16 min a run.
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
  # What the host took from each core just before (build/bench/host_hiccups, 5 s, idle lab): a
  # run whose trials missed on a host losing several percent in millisecond gaps is the host's.
  if [ -x "$build/bench/host_hiccups" ]; then
    "$build/bench/host_hiccups" 5 | grep -v "per second" | sed "s/^/run $i: before: /"
  fi
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
    grep -A 6 "FAILED:" "$log" | head -n 60 | sed 's/^/    /' || true
  fi
done
echo "playbooks suite: $passed of $runs whole runs passed (logs: $build/meson-logs/playbooks-suite-run*.txt)"

python3 "$(dirname "$0")/suite_figures.py" "${logs[@]}" || true
[ "$passed" = "$runs" ]
