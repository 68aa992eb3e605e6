#!/usr/bin/env python3
"""Benchmark: how closely do link flaps scheduled for one instant on every lab host happen?

Brings up a namespace lab, then for each round schedules a link_flap on every host for one
common instant (`rdmachaos inject --node all`), and reads back the kernel-observed down
transitions that each agent reports (netlink notifications, mapped onto the controller's
timeline with the measured clock offsets). Prints the spread across hosts (max - min) and the
lateness against the scheduled instant, as p50 and max over the rounds. Target: spread < 1 ms.
Needs root. Usage: sudo bench/flap_sync.py [--nodes 4] [--rounds 10] [--build build]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("flap_sync: needs root to build the namespace lab")
    cli = os.path.abspath(os.path.join(args.build, "controller", "rdmachaos"))
    env = dict(os.environ, RDMACHAOS_AGENT=os.path.abspath(
        os.path.join(args.build, "agent", "rdmachaos-agent")))
    labdir = tempfile.mkdtemp(prefix="rc-bench-flap-")
    spreads, lateness = [], []
    try:
        inv = subprocess.run([cli, "lab", "up", "--nodes", str(args.nodes), "--dir", labdir],
                             env=env, check=True, capture_output=True, text=True).stdout.strip()
        for r in range(args.rounds):
            out = subprocess.run([cli, "inject", "link_flap", "--inventory", inv, "--node", "all",
                                  "--set", "down=50ms", "--for", "10s", "--json"],
                                 env=env, check=True, capture_output=True, text=True).stdout
            rep = json.loads(out)
            start = rep["start_ns"]
            downs = []
            for n in rep["nodes"]:
                ev = [e for e in n["fault"]["events"] if e["what"] == "down"]
                if not ev:
                    sys.exit(f"flap_sync: no down event from {n['node']}")
                downs.append(ev[0]["t_ns"] - n["clock_offset_ns"])
            spreads.append((max(downs) - min(downs)) / 1e6)
            lateness.extend((d - start) / 1e6 for d in downs)
            print(f"round {r + 1}/{args.rounds}: spread {spreads[-1]:.3f} ms", file=sys.stderr)
    finally:
        subprocess.run([cli, "lab", "down", "--dir", labdir], env=env, capture_output=True)
        subprocess.run(["rm", "-rf", labdir])
    print(f"flap_sync: {args.nodes} hosts, {args.rounds} rounds")
    print(f"  spread of down transitions across hosts: p50 {statistics.median(spreads):.3f} ms, "
          f"max {max(spreads):.3f} ms (target < 1 ms)")
    print(f"  lateness against the scheduled instant:  p50 {statistics.median(lateness):.3f} ms, "
          f"max {max(lateness):.3f} ms")


if __name__ == "__main__":
    main()
