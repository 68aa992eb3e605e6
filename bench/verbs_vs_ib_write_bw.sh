#!/usr/bin/env bash
# The verbs transport against Debian's ib_write_bw on the same two soft-RoCE guests in one run,
# and against the TCP transport between the same guests. Prints ratios; asserts nothing.
# Needs root, QEMU and the guest kernel (scripts/install-deps). See bench/README.md.
# Usage: bench/verbs_vs_ib_write_bw.sh [--for SECONDS] [--size SIZE] [--qps N]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=15
size=64KiB
qps=1
while [ $# -gt 0 ]; do
  case "$1" in
    --for) secs=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --qps) qps=$2; shift 2 ;;
    *) echo "bench: unknown option '$1' (use --for SECONDS, --size SIZE, --qps N)" >&2; exit 2 ;;
  esac
done
builddir=${BUILD_DIR:-build}
cli=$builddir/controller/rdmachaos
export RDMACHAOS_AGENT=${RDMACHAOS_AGENT:-$PWD/$builddir/agent/rdmachaos-agent}
[ -x "$cli" ] || { echo "bench: build first (scripts/build)" >&2; exit 2; }
[ -x /usr/bin/ib_write_bw ] || { echo "bench: perftest is not installed (scripts/install-deps)" >&2; exit 2; }

dir=$(mktemp -d /tmp/rc-bench-vm-XXXXXX)
out=$(mktemp -d /tmp/rc-bench-vm-out-XXXXXX)
cleanup() {
  "$cli" lab down --dir "$dir" >/dev/null 2>&1 || true
  rm -rf "$dir" "$out"
}
trap cleanup EXIT
echo "== soft-RoCE lab: 2 guests =="
inv=$("$cli" lab up --soft-roce --nodes 2 --dir "$dir" 2>/dev/null)

# Each run gets 30 s of request timeout: a guest's first RDMA use loads rdma-core's providers
# over 9p under TCG.
echo "== ib_write_bw (perftest as a workload): n1 -> n2, $size, $qps QP(s), ${secs}s =="
"$cli" workload --inventory "$inv" --kind perftest --test ib_write_bw --node n1 --node n2 \
  --size "$size" --streams "$qps" --for "${secs}s" --timeout 30s --json > "$out/perftest.json"
echo "== rdmachaos pairwise over verbs: n1 -> n2, $size, $qps QP(s), ${secs}s, no checksums =="
"$cli" workload --inventory "$inv" --kind pairwise --transport verbs --node n1 --node n2 \
  --size "$size" --streams "$qps" --for "${secs}s" --timeout 30s --no-checksum --json > "$out/verbs-nosum.json"
echo "== the same with payload checksums =="
"$cli" workload --inventory "$inv" --kind pairwise --transport verbs --node n1 --node n2 \
  --size "$size" --streams "$qps" --for "${secs}s" --timeout 30s --json > "$out/verbs.json"
echo "== rdmachaos pairwise over TCP: n1 -> n2, $size, $qps stream(s), ${secs}s, no checksums =="
"$cli" workload --inventory "$inv" --kind pairwise --node n1 --node n2 \
  --size "$size" --streams "$qps" --for "${secs}s" --timeout 30s --no-checksum --json > "$out/tcp-nosum.json"

python3 - "$out" "$secs" <<'PY'
import json, sys
d, secs = sys.argv[1], float(sys.argv[2])
def steady(w, node):
    # Bytes per second in the node's bins over the middle of the run: from the first second
    # with traffic + 1 s to the last such second - 1 s (set-up and teardown left out).
    n = [x for x in w["nodes"] if x["node"] == node][0]
    bins = [(t, b) for t, b in n["bins"] if b > 0]
    if len(bins) < 2: return 0.0, n
    lo, hi = bins[0][0] + 1e9, bins[-1][0] - 1e9
    if hi <= lo: lo, hi = bins[0][0], bins[-1][0] + w["bin_ns"]
    got = sum(b for t, b in n["bins"] if lo <= t < hi)
    return got * 8 / ((hi - lo) / 1e9), n
# perftest's client (n1) measures; the built-in workloads count what the receiver (n2) got.
pt, _ = steady(json.load(open(f"{d}/perftest.json")), "n1")
vn, _ = steady(json.load(open(f"{d}/verbs-nosum.json")), "n2")
vs, _ = steady(json.load(open(f"{d}/verbs.json")), "n2")
tn, _ = steady(json.load(open(f"{d}/tcp-nosum.json")), "n2")
def ratio(a, b): return a / b if b > 0 else float("nan")
print(f"ib_write_bw (perftest 4.5)           {pt/1e6:8.1f} Mb/s")
print(f"rdmachaos verbs pairwise, no checksum {vn/1e6:8.1f} Mb/s   verbs/ib_write_bw: {ratio(vn, pt):.3f} (target >= 0.95)")
print(f"rdmachaos verbs pairwise, checksums   {vs/1e6:8.1f} Mb/s   verbs/ib_write_bw: {ratio(vs, pt):.3f}")
print(f"rdmachaos TCP pairwise, no checksum   {tn/1e6:8.1f} Mb/s   verbs/tcp: {ratio(vn, tn):.3f}")
for name in ("perftest", "verbs-nosum", "verbs", "tcp-nosum"):
    w = json.load(open(f"{d}/{name}.json"))
    bad = [n["node"] + ": " + (n["error"] or n["end_reason"]) for n in w["nodes"]
           if n["end_reason"] != "completed" or not n["verified"]]
    if bad: print(f"warning: {name} did not complete cleanly: {'; '.join(bad)}")
PY
