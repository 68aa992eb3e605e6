# Sourced by the bench scripts that run a playbook on a lab of their own (noise_band.sh,
# playbook_figures.sh). Needs $cli (the controller) set by the caller.

# bench_lab_up NAME NODES [lab up options]: a fresh lab in a temporary directory ($work/lab),
# taken down and removed on exit, also on failure or Ctrl-C. KEEP=DIR copies each run's
# report and log there first (for bench/band_dips.py).
bench_lab_up() {
  local name=$1 nodes=$2
  shift 2
  work=$(mktemp -d "/tmp/rdmachaos-$name.XXXXXX")
  trap 'bench_stall_stop; bench_keep; "$cli" lab down --dir "$work/lab" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
  trap 'exit 130' INT TERM
  "$cli" lab up --nodes "$nodes" --dir "$work/lab" "$@" >"$work/lab-up.log" 2>&1 ||
    { cat "$work/lab-up.log" >&2; exit 1; }
  bench_rt
  bench_ecn
}

# ECN_PROFILE="KMIN KMAX PMAX" (experiment): every node port's lossless queue (3) marks with
# this profile instead of the lab's default, e.g. ECN_PROFILE="4194304 8388608 0.1".
bench_ecn() {
  [ -n "${ECN_PROFILE:-}" ] || return 0
  local sw sock node
  read -r sw sock < <(python3 -c '
import json, sys
lab = json.load(open(sys.argv[1]))
print(lab["switch"]["binary"], lab["switch"]["control"])' "$work/lab/lab.json")
  for node in $(python3 -c '
import json, sys
print(*[n["name"] for n in json.load(open(sys.argv[1]))["nodes"]])' "$work/lab/lab.json"); do
    # shellcheck disable=SC2086
    "$sw" --ecn-profile "$sock" set "$node" 3 $ECN_PROFILE >/dev/null
  done
}

# RT_PRIO=N (experiment): every thread of the lab switch and of the agents at SCHED_FIFO N.
bench_rt() {
  [ -n "${RT_PRIO:-}" ] || return 0
  local pid
  for pid in $(python3 -c '
import json, sys
lab = json.load(open(sys.argv[1]))
print(lab["switch"]["proc"]["pid"], *[n["agent"]["pid"] for n in lab["nodes"]])' "$work/lab/lab.json"); do
    chrt -f -a -p "$RT_PRIO" "$pid" >/dev/null
  done
}

bench_keep() {
  [ -n "${KEEP:-}" ] || return 0
  mkdir -p "$KEEP" && cp -r "$work"/run* "$KEEP"/ 2>/dev/null || true
}

# STALL=MS/PERIOD (e.g. STALL=15/1): while each run goes on, the lab switch is stopped
# (SIGSTOP) for MS milliseconds every PERIOD seconds, then continued: the host's own
# hiccups, made on purpose and at known times, to see what a stall of the switch costs a
# job's band and its scores. STALL_TARGET=NODE (e.g. n2) stops that node's agent instead (the
# job's rank on it). What was stopped is continued on every way out.
stall_pid=""
bench_stall_start() {
  [ -n "${STALL:-}" ] || return 0
  local ms=${STALL%/*} period=${STALL#*/} sw
  case $ms$period in *[!0-9.]* | '') echo "STALL must be MS/PERIOD (e.g. 15/1), not '$STALL'" >&2; exit 2 ;; esac
  sw=$(python3 -c '
import json, sys
lab = json.load(open(sys.argv[1]))
target = sys.argv[2]
if target == "switch":
    print(lab["switch"]["proc"]["pid"])
else:
    print(next((n["agent"]["pid"] for n in lab["nodes"] if n["name"] == target), 0))
' "$work/lab/lab.json" "${STALL_TARGET:-switch}")
  [ "$sw" -gt 1 ] 2>/dev/null ||
    { echo "bench: no pid for STALL_TARGET '${STALL_TARGET:-switch}' in $work/lab/lab.json (the switch, or a node: n1, n2, ...)" >&2; exit 2; }
  (
    trap 'kill -CONT '"$sw"' 2>/dev/null; exit 0' TERM INT EXIT
    while kill -0 "$sw" 2>/dev/null; do
      sleep "$period"
      kill -STOP "$sw"; sleep "$(awk -v m="$ms" 'BEGIN { printf "%.3f", m / 1000 }')"; kill -CONT "$sw"
    done
  ) &
  stall_pid=$!
}
bench_stall_stop() {
  [ -n "$stall_pid" ] || return 0
  kill "$stall_pid" 2>/dev/null || true
  wait "$stall_pid" 2>/dev/null || true
  stall_pid=""
}

# bench_run_playbook PLAYBOOK RUNS: runs it RUNS times on the lab, each report in
# $work/runI/report, and says how each ended. Exit 1 is a playbook whose expectations failed:
# its figures count all the same; any other exit stops the script.
bench_run_playbook() {
  local playbook=$1 runs=$2 i rc start out
  for i in $(seq 1 "$runs"); do
    out=$work/run$i
    mkdir -p "$out"
    start=$(date +%s)
    rc=0
    bench_stall_start
    "$cli" run "$playbook" --inventory "$work/lab/inventory.toml" --report-dir "$out/report" >"$out/log" 2>&1 || rc=$?
    bench_stall_stop
    [ $rc = 0 ] || [ $rc = 1 ] || { echo "run $i failed (exit $rc):" >&2; tail -n 20 "$out/log" >&2; exit 1; }
    echo "run $i: exit $rc after $(( $(date +%s) - start )) s"
  done
}
