#!/usr/bin/env python3
# Runs playbooks/pfc-storm-watchdog.toml N times on one 3-node lab and counts the runs that
# reached the scenario's condition, read from the lab switch's ground truth: the storm on n2's
# port spread to the victim's senders (n1 and n3 held in XOFF on priority 3) and the
# watchdog fired. Prints one line per run and the tally; asserts nothing. Root (namespace lab).
# Usage: bench/watchdog_condition.py [--runs 20] [--watchdog on|off]
import argparse, json, os, subprocess, sys, tempfile, time

from labswitch_control import control

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build = os.environ.get("BUILD_DIR", "build")
cli = os.path.join(root, build, "controller", "rdmachaos")
os.environ.setdefault("RDMACHAOS_AGENT", os.path.join(root, build, "agent", "rdmachaos-agent"))


def queue(sock_path, port, prio, key):
    c = control(sock_path, {"cmd": "counters", "port": port})
    for p in c["ports"]:
        for q in p["queues"]:
            if q["queue"] == prio:
                return q[key]
    return 0


def ground_truth(sock_path):
    return {"n1": queue(sock_path, "n1", 3, "xoff_ns"), "n3": queue(sock_path, "n3", 3, "xoff_ns"),
            "wd": queue(sock_path, "n2", 3, "wd_storms")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--watchdog", choices=["on", "off"], default="on")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: needs root (the lab is made of network namespaces)")
    if not os.access(cli, os.X_OK):
        sys.exit(f"bench: build first (scripts/build); {cli} is missing")
    d = tempfile.mkdtemp(prefix="rc-wdbench-")
    playbook = os.path.join(root, "playbooks", "pfc-storm-watchdog.toml")
    reached = 0
    detect_gaps, restore_gaps = [], []
    try:
        inv = subprocess.run([cli, "lab", "up", "--nodes", "3", "--dir", d], check=True,
                             capture_output=True, text=True).stdout.strip()
        sock = os.path.join(d, "switch.sock")
        if a.watchdog == "off":
            control(sock, {"cmd": "set_watchdog", "port": "*", "priority": 3, "enabled": False})
        for i in range(a.runs):
            before = ground_truth(sock)
            t0 = time.time()
            r = subprocess.run([cli, "run", playbook, "--inventory", inv, "--report-dir", f"{d}/run{i}"],
                               capture_output=True, text=True)
            after = ground_truth(sock)
            x1 = (after["n1"] - before["n1"]) / 1e6
            x3 = (after["n3"] - before["n3"]) / 1e6
            wd = after["wd"] - before["wd"]
            stall = "?"
            timing = ""
            try:
                doc = json.load(open(f"{d}/run{i}/result.json"))
                stall = "%.0f ms" % (max(t["job"]["impact"].get("longest_stall_ns", 0) for t in doc["trials"]) / 1e6)
                # The data plane's view of the watchdog against the switch's own instants.
                for ep in doc["trials"][0]["fabric"]["watchdog"][:1]:
                    def diff(a, b):
                        if not isinstance(ep.get(a), (int, float)) or not isinstance(ep.get(b), (int, float)):
                            return None
                        return (ep[a] - ep[b]) / 1e6
                    det = diff("data_plane_detect_time_ns", "detect_time_ns")
                    res = diff("data_plane_restore_time_ns", "restore_time_ns")
                    if det is not None:
                        detect_gaps.append(abs(det))
                    if res is not None:
                        restore_gaps.append(abs(res))
                    fmt = lambda v: "n/a" if v is None else "%+.1f ms" % v
                    timing = f", data plane - switch: detection {fmt(det)}, restoration {fmt(res)}"
            except Exception:
                pass
            # The condition: both senders were paused by the spread (and, with the watchdog
            # on, it fired).
            ok = x1 > 0 and x3 > 0 and (wd >= 1 if a.watchdog == "on" else True)
            reached += ok
            print(f"run {i + 1:2d}: exit {r.returncode}, n1 XOFF {x1:7.0f} ms, n3 XOFF {x3:7.0f} ms, "
                  f"watchdog storms {wd}, victim's longest stall {stall}{timing}, {time.time() - t0:.0f} s: "
                  f"{'condition reached' if ok else 'CONDITION NOT REACHED'}", flush=True)
        print(f"watchdog_condition: {reached} of {a.runs} runs reached the condition "
              f"(watchdog {a.watchdog}; target >= 19 of 20)")
        for name, gaps in (("detection", detect_gaps), ("restoration", restore_gaps)):
            if gaps:
                within = sum(g <= 10 for g in gaps)
                print(f"watchdog_condition: {name}, data plane vs switch: {within} of {len(gaps)} within 10 ms, "
                      f"largest {max(gaps):.1f} ms")
    finally:
        subprocess.run([cli, "lab", "down", "--dir", d], capture_output=True)
        subprocess.run(["rm", "-rf", d])


if __name__ == "__main__":
    main()
