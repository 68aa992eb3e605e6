#!/usr/bin/env bash
# Pairwise TCP workload throughput against iperf3 on the same lab path (same streams, same
# duration, same run), then 4-host all-reduce busbw relative to the pairwise figure.
# Prints ratios; asserts nothing. Needs root (namespace lab). See bench/README.md.
# Usage: bench/tcp_vs_iperf3.sh [--streams N] [--for SECONDS] [--size SIZE]
set -euo pipefail
cd "$(dirname "$0")/.."
streams=4
secs=10
size=4MiB
while [ $# -gt 0 ]; do
  case "$1" in
    --streams) streams=$2; shift 2 ;;
    --for) secs=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    *) echo "bench: unknown option '$1' (use --streams N, --for SECONDS, --size SIZE)" >&2; exit 2 ;;
  esac
done
builddir=${BUILD_DIR:-build}
cli=$builddir/controller/rdmachaos
export RDMACHAOS_AGENT=${RDMACHAOS_AGENT:-$PWD/$builddir/agent/rdmachaos-agent}
command -v iperf3 >/dev/null || { echo "bench: iperf3 is not installed (scripts/install-deps)" >&2; exit 2; }
[ -x "$cli" ] || { echo "bench: build first (scripts/build)" >&2; exit 2; }

dir=$(mktemp -d /tmp/rc-bench-XXXXXX)
cleanup() {
  [ -n "${iperf_pid:-}" ] && kill "$iperf_pid" 2>/dev/null || true
  "$cli" lab down --dir "$dir" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
inv=$("$cli" lab up --nodes 4 --dir "$dir" 2>/dev/null)
field() { python3 -c "import json,sys; n=[x for x in json.load(open('$dir/lab.json'))['nodes'] if x['name']=='$1'][0]; print(n['$2'])"; }
ns1=$(field n1 netns); ns2=$(field n2 netns); a2=$(field n2 data_address)

echo "== iperf3: n1 -> n2, $streams streams, ${secs}s =="
ip netns exec "$ns2" iperf3 -s -1 -B "$a2" >/dev/null 2>&1 &
iperf_pid=$!
sleep 0.5
ip netns exec "$ns1" iperf3 -c "$a2" -P "$streams" -t "$secs" -J > "$dir/iperf.json"
wait "$iperf_pid" 2>/dev/null || true
iperf_pid=

# iperf3 does not check payloads: the like-for-like run has checksums off; the second run
# shows what payload checksums cost on this machine.
echo "== rdmachaos pairwise: n1 -> n2, $streams streams, ${secs}s, $size messages, no checksums =="
"$cli" workload --inventory "$inv" --kind pairwise --node n1 --node n2 --streams "$streams" \
  --size "$size" --for "${secs}s" --no-checksum --json > "$dir/pairwise-nosum.json"
echo "== rdmachaos pairwise: the same with payload checksums =="
"$cli" workload --inventory "$inv" --kind pairwise --node n1 --node n2 --streams "$streams" \
  --size "$size" --for "${secs}s" --json > "$dir/pairwise.json"
echo "== rdmachaos allreduce: 4 hosts, $streams streams, ${secs}s, $size =="
"$cli" workload --inventory "$inv" --kind allreduce --streams "$streams" --size "$size" \
  --for "${secs}s" --json > "$dir/allreduce.json"

python3 - "$dir" "$secs" <<'PY'
import json, sys
d, secs = sys.argv[1], float(sys.argv[2])
ip = json.load(open(f"{d}/iperf.json"))["end"]["sum_received"]["bits_per_second"]
def steady_rate(w, node):
    # Bytes the receiver got, per second, over the run minus its first and last 0.5 s.
    n = [x for x in w["nodes"] if x["node"] == node][0]
    lo, hi = w["start_ns"] + 5e8, w["start_ns"] + secs * 1e9 - 5e8
    got = sum(b for t, b in n["bins"] if lo <= t < hi)
    return got * 8 / ((hi - lo) / 1e9)
pn = json.load(open(f"{d}/pairwise-nosum.json"))
pw = json.load(open(f"{d}/pairwise.json"))
ar = json.load(open(f"{d}/allreduce.json"))
nosum = steady_rate(pn, "n2")
pair = steady_rate(pw, "n2")
busbw = ar["summary"]["busbw_Bps"] * 8
print(f"iperf3                          {ip/1e9:8.2f} Gb/s")
print(f"rdmachaos pairwise, no checksum {nosum/1e9:8.2f} Gb/s   ratio to iperf3: {nosum/ip:.3f} (target >= 0.95)")
print(f"rdmachaos pairwise, checksums   {pair/1e9:8.2f} Gb/s   ratio to iperf3: {pair/ip:.3f}")
print(f"rdmachaos allreduce (checksums) busbw {busbw/1e9:.2f} Gb/s on 4 hosts   ratio to pairwise (checksums): {busbw/pair:.3f}")
for name, w in (("pairwise", pn), ("pairwise", pw), ("allreduce", ar)):
    bad = [n["node"] for n in w["nodes"] if n["end_reason"] != "completed" or not n["verified"]]
    if bad: print(f"warning: {name} did not complete cleanly on {', '.join(bad)}")
PY
