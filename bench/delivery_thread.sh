#!/usr/bin/env bash
# What the delivery thread saves (labswitch/host_delivery.hpp): on one lab (3 nodes, 1G; `lab up
# --split-cores` unless other `lab up` options are given), the all-reduce of link-flap-recovery (16 MiB, 4 streams, the workers) runs
# with the switch's TAP writes made by the delivery thread on the hosts' core ("thread", the
# default) and by the switch's loop itself ("inline", switch.json `delivery_thread: false`),
# alternating, RUNS times each; the switch is restarted by its supervisor between them. Per run,
# over 8 s of steady traffic: the loop's busy share (the report's switch load), each switch
# thread's time on a CPU, the machine's busy share of all cores, inter-processor interrupts a
# second, and the frames the switch moved. Printed figures, never test assertions.
#
#   sudo bench/delivery_thread.sh [RUNS] [-- lab up options]
#   sudo bench/delivery_thread.sh 3 -- --rate 1G        (the shared cores)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
if [ $# -ge 1 ] && [ "$1" != "--" ]; then runs=$1; shift; fi
[ "${1:-}" = "--" ] && shift
[ $# -ge 1 ] || set -- --split-cores
build=${BUILD_DIR:-build}
cli=$build/controller/rdmachaos
[ "$(id -u)" = 0 ] || { echo "bench/delivery_thread.sh: the lab needs root (network namespaces)" >&2; exit 2; }
[ -x "$cli" ] || { echo "bench/delivery_thread.sh: $cli not built (ninja -C $build)" >&2; exit 2; }
. bench/lab_runs.sh
bench_lab_up delivery-thread 3 "$@"
lab=$work/lab
field() { python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$lab/lab.json" "$1"; }
sock=$(field 'd["switch"]["control"]')

# One request to the switch's control socket (bench/labswitch_control.py); prints the reply.
request() {
  PYTHONPATH=bench python3 -c 'import json, sys; from labswitch_control import control
print(json.dumps(control(sys.argv[1], json.loads(sys.argv[2])), separators=(",", ":")))' "$sock" "$1"
}

# Restarts the switch with delivery_thread set to $1 (true/false); waits for its answer.
switch_with() {
  local old new i
  python3 - "$lab/switch.json" "$1" <<'EOF'
import json, sys
path, on = sys.argv[1], sys.argv[2] == "true"
cfg = json.load(open(path))
cfg["delivery_thread"] = on
json.dump(cfg, open(path + ".tmp", "w"), indent=2)
EOF
  mv "$lab/switch.json.tmp" "$lab/switch.json"
  old=$(field 'd["switch"]["proc"]["pid"]')
  kill -KILL "$old"
  for i in $(seq 1 200); do
    new=$(field 'd["switch"]["proc"]["pid"]' 2>/dev/null || echo "$old")
    if [ "$new" != "$old" ] && request '{"cmd":"ping"}' 2>/dev/null | grep -q '"ok":true'; then break; fi
    sleep 0.05
  done
  [ "$new" != "$old" ] || { echo "the switch was not restarted" >&2; exit 1; }
  echo "$new"
}

snapshot() {  # the switch's counters, its threads' CPU, /proc/stat's cpu line, the IPIs so far
  local pid=$1
  echo "{\"t\": $(date +%s.%N), \"counters\": $(request '{"cmd":"counters"}'),"
  echo " \"threads\": {$(for t in /proc/"$pid"/task/*; do printf '"%s": %s,' "$(cat "$t/comm")" "$(cut -d' ' -f1 "$t/schedstat")"; done | sed 's/,$//')},"
  echo " \"cpu\": [$(grep '^cpu ' /proc/stat | cut -d' ' -f3- | tr -s ' ' ',')],"
  echo " \"ipis\": $(awk '/^ *(CAL|RES):/ { for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i } END { print s + 0 }' /proc/interrupts)}"
}

out=$work/rows
: >"$out"
echo "delivery thread against inline writes, 3 nodes (lab up $*), $(nproc) cores, $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
for i in $(seq 1 "$runs"); do
  for mode in thread inline; do
    pid=$(switch_with "$([ $mode = thread ] && echo true || echo false)")
    "$cli" workload --inventory "$lab/inventory.toml" --kind allreduce --size 16MiB --streams 4 --node worker \
      --for 14s >"$work/wl.out" 2>&1 &
    wl=$!
    sleep 4
    a=$(snapshot "$pid")
    sleep 8
    b=$(snapshot "$pid")
    wait $wl || { echo "the workload failed:" >&2; tail -n 5 "$work/wl.out" >&2; exit 1; }
    echo "{\"mode\": \"$mode\", \"a\": $a, \"b\": $b}" | tr -d '\n' >>"$out"
    echo >>"$out"
    echo "run $i $mode: done"
  done
done
python3 - "$out" <<'EOF'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
per = {"thread": [], "inline": []}
for r in rows:
    a, b = r["a"], r["b"]
    dt = b["t"] - a["t"]
    ca, cb = a["counters"], b["counters"]
    busy = 100 * (cb["busy_ns"] - ca["busy_ns"]) / (cb["loop_ns"] - ca["loop_ns"])
    frames = sum(p.get("tx_frames", 0) for p in cb["ports"]) - sum(p.get("tx_frames", 0) for p in ca["ports"])
    th = {k: 100 * (b["threads"][k] - a["threads"].get(k, 0)) / 1e9 / dt for k in b["threads"]}
    d = [y - x for x, y in zip(a["cpu"], b["cpu"])][:8]
    machine = 100 * (sum(d) - d[3] - d[4]) / sum(d)
    per[r["mode"]].append(dict(busy=busy, loop=th.get("rdmachaos-labsw", 0), delivery=th.get("host-delivery", 0),
                               machine=machine, ipis=(b["ipis"] - a["ipis"]) / dt, frames=frames / dt))
print(f"{'':8} {'loop busy':>10} {'loop CPU':>9} {'delivery CPU':>13} {'machine busy':>13} {'IPIs/s':>8} {'frames/s':>9}")
for mode, xs in per.items():
    for x in xs:
        print(f"{mode:8} {x['busy']:9.1f}% {x['loop']:8.1f}% {x['delivery']:12.1f}% {x['machine']:12.1f}% {x['ipis']:8.0f} {x['frames']:9.0f}")
med = {m: {k: st.median(x[k] for x in xs) for k in xs[0]} for m, xs in per.items() if xs}
if len(med) == 2:
    t, i = med["thread"], med["inline"]
    print(f"medians, thread against inline: loop busy {t['busy']:.1f} / {i['busy']:.1f} % (ratio {t['busy'] / i['busy']:.2f}), "
          f"machine busy {t['machine']:.1f} / {i['machine']:.1f} %, IPIs {t['ipis']:.0f} / {i['ipis']:.0f} per s, "
          f"frames {t['frames']:.0f} / {i['frames']:.0f} per s (ratio {t['frames'] / i['frames']:.2f})")
EOF
