# Sourced by the bench scripts that run a playbook on a lab of their own (noise_band.sh,
# playbook_figures.sh). Needs $cli (the controller) set by the caller.

# bench_lab_up NAME NODES [lab up options]: a fresh lab in a temporary directory ($work/lab),
# taken down and removed on exit, also on failure or Ctrl-C.
bench_lab_up() {
  local name=$1 nodes=$2
  shift 2
  work=$(mktemp -d "/tmp/rdmachaos-$name.XXXXXX")
  trap '"$cli" lab down --dir "$work/lab" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
  trap 'exit 130' INT TERM
  "$cli" lab up --nodes "$nodes" --dir "$work/lab" "$@" >"$work/lab-up.log" 2>&1 ||
    { cat "$work/lab-up.log" >&2; exit 1; }
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
    "$cli" run "$playbook" --inventory "$work/lab/inventory.toml" --report-dir "$out/report" >"$out/log" 2>&1 || rc=$?
    [ $rc = 0 ] || [ $rc = 1 ] || { echo "run $i failed (exit $rc):" >&2; tail -n 20 "$out/log" >&2; exit 1; }
    echo "run $i: exit $rc after $(( $(date +%s) - start )) s"
  done
}
