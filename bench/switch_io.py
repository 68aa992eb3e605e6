#!/usr/bin/env python3
"""bench/switch_io.py SWITCH_SOCK -- COMMAND...: run COMMAND (a playbook run against a lab) while
sampling the lab switch's counters once a second, then print per second the writes the switch
made to its ports, the wire frames per write (how long the runs it joined into super-frames
were), what ended those writes' runs (`run_ends`: the sender's push, the delivery hold, an ECN
mark, a full run, frames that join none such as pure ACKs, and the rest), the bytes it sent,
the ECN marks, and its busy share. Shows what the switch's time follows (bench/README.md,
"What sets the switch's time" and "Why the switch's writes end").

  sudo build/controller/rdmachaos lab up --dir /tmp/lab
  sudo bench/switch_io.py /tmp/lab/switch.sock -- build/controller/rdmachaos run \\
      playbooks/ecn-threshold-sweep.toml --inventory /tmp/lab/inventory.toml --report-dir /tmp/rep
"""
import os
import subprocess
import sys
import tempfile
import threading
import time

from labswitch_control import control


# Why each write's run ended (labswitch/switch_offload.hpp, RunEnds); "alone": frames that join no run.
ENDS = ["push", "hold", "marked", "full", "alone", "short", "fin", "differs", "evicted", "flushed"]
SHOWN = ["push", "hold", "marked", "full", "alone"]


def counters(path):
    r = control(path, {"cmd": "counters"}, timeout=2)
    if not r.get("ok"):
        raise RuntimeError(r.get("error", "the switch refused 'counters'"))
    row = {"t": time.time(), "busy_ns": r.get("busy_ns", 0), "writes": 0, "write_frames": 0, "tx_bytes": 0, "marks": 0}
    row.update({k: 0 for k in ENDS})
    for p in r["ports"]:
        io = p.get("io") or {}
        row["writes"] += io.get("writes", 0)
        row["write_frames"] += io.get("write_frames", 0)
        ends = io.get("run_ends") or {}
        for k in ENDS:
            row[k] += ends.get(k, 0)
        row["tx_bytes"] += p.get("tx_bytes", 0)
        row["marks"] += sum(q.get("ecn_marked", 0) for q in p.get("queues", []))
    return row


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: bench/switch_io.py SWITCH_SOCK -- COMMAND...")
    sock, cmd = sys.argv[1], sys.argv[3:]
    try:
        rows = [counters(sock)]
    except (OSError, ValueError, RuntimeError) as e:
        sys.exit(f"switch_io.py: cannot read the switch's counters at {sock}: {e} (is the lab up?)")
    done = threading.Event()

    def sample():
        while not done.wait(1.0):
            try:
                rows.append(counters(sock))
            except (OSError, ValueError, RuntimeError) as e:
                print(f"switch_io.py: a sample failed: {e}", file=sys.stderr)

    th = threading.Thread(target=sample)
    th.start()
    fd, log = tempfile.mkstemp(prefix="switch_io-", suffix=".log")  # kept: the command's own report
    os.close(fd)
    print(f"running {' '.join(cmd)} (its output in {log}), sampling the switch once a second...", flush=True)
    with open(log, "w") as out:
        rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT)
    done.set()
    th.join()
    print("writes/s by what ended their run: push (a PSH), hold (the delivery hold), marked (ECN bits changed),")
    print("full (62 KiB), alone (frames that join none: pure ACKs, SYN, CWR, UDP), other (short, FIN, a gap, ...)")
    print(f"{'s':>4} {'writes/s':>9} {'frames/write':>12} " + " ".join(f"{k:>7}" for k in SHOWN + ["other"]) +
          f" {'Gb/s sent':>9} {'marks/s':>8} {'busy':>5}")
    for i, (a, b) in enumerate(zip(rows, rows[1:])):
        dt = b["t"] - a["t"]
        w = (b["writes"] - a["writes"]) / dt
        f = (b["write_frames"] - a["write_frames"]) / dt
        per = {k: (b[k] - a[k]) / dt for k in ENDS}
        other = sum(per[k] for k in ENDS if k not in SHOWN)
        ends = " ".join(f"{per[k]:>7.0f}" for k in SHOWN) + f" {other:>7.0f}"
        print(f"{i:>4} {w:>9.0f} {f / w if w else 0:>12.2f} {ends} {(b['tx_bytes'] - a['tx_bytes']) * 8 / dt / 1e9:>9.2f} "
              f"{(b['marks'] - a['marks']) / dt:>8.0f} {100 * (b['busy_ns'] - a['busy_ns']) / 1e9 / dt:>4.0f}%")
    print(f"command exit {rc}")
    sys.exit(rc)


main()
