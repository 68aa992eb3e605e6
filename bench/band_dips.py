#!/usr/bin/env python3
"""What sets a healthy job's own band (issue 21): reads result.json documents of a playbook
run (e.g. noise-floor, `rdmachaos run ... --report-dir DIR`) and prints, per trial and over
its baseline window:

- the band (how far the lowest smoothed window fell below the median window) at several
  smoothing lengths, so aliasing between the window and the job's iterations would show as a
  length that is special;
- the 250 ms windows (every 50 ms) grouped by how many of the job's iteration ends they hold,
  with their mean and lowest throughput against the median window;
- the iterations around the lowest 250 ms window (how long each took);
- the 10 ms bins in which some rank received nothing, and how many of them lie within 20 ms
  of an iteration end (the ring draining there);
- with --stalls LOG (build/bench/core_stalls run beside the playbook): the time the cores were
  taken (late real-time wake-ups) over the baseline and around its lowest window, so that a
  dip the host made reads apart from one the lab made;
- how long the ranks spent between two iterations (their own checks and inputs, when no rank
  sends).

    python3 bench/band_dips.py [--stalls LOG] DIR_OR_RESULT_JSON...

Printed figures, never a test assertion.
"""
import glob
import json
import os
import statistics as st
import sys

WINDOWS_MS = (250, 320, 400, 500)


def load(path):
    if not os.path.exists(path):
        sys.exit(f"band_dips: {path}: no such file or directory (a run's --report-dir, or its result.json)")
    if os.path.isdir(path):
        found = glob.glob(os.path.join(path, "**", "result.json"), recursive=True)
        if not found:
            sys.exit(f"band_dips: no result.json under {path}")
        path = found[0]
    try:
        with open(path) as f:
            doc = json.load(f)
        doc["series"], doc["plan"]["trials"]
    except (ValueError, KeyError, TypeError) as e:
        sys.exit(f"band_dips: {path} is not a run's result.json (rdmachaos-result/1): {e}")
    return path, doc


def smoothed(job, lo, hi, width, step=1):
    return [sum(job[i:i + width]) / width for i in range(lo, hi - width, step)]


def iteration_ends(doc, lo_ns, hi_ns):
    """The job's iteration ends in [lo_ns, hi_ns): the last rank's end of each iteration."""
    ends = {}
    for it in doc.get("iterations", []):
        if lo_ns <= it["end_ns"] < hi_ns:
            ends[it["iteration"]] = max(ends.get(it["iteration"], 0), it["end_ns"])
    return sorted(ends.values())


def load_stalls(path):
    """core_stalls' log: (due_unix_ns, late_ns) per late wake-up, both cores."""
    try:
        with open(path) as f:
            return [(int(p[1]), int(p[2])) for p in (l.split() for l in f if not l.startswith("#")) if len(p) == 3]
    except (OSError, ValueError) as e:
        sys.exit(f"band_dips: {path} is not a core_stalls log (cpu due_unix_ns late_ns): {e}")


def stalled_ms(stalls, t0_unix, a_ns, b_ns):
    return sum(late for due, late in stalls if a_ns <= due - t0_unix < b_ns) / 1e6


def print_gaps(doc, lo_ns, hi_ns):
    by = {}
    for it in doc.get("iterations", []):
        if lo_ns <= it["start_ns"] < hi_ns:
            by.setdefault(it["node"], {})[it["iteration"]] = it
    gaps = sorted((its[k]["start_ns"] - its[k - 1]["end_ns"]) / 1e6
                  for its in by.values() for k in its if k - 1 in its)
    if gaps:
        print(f"    between iterations (a rank's end to its next start): median {st.median(gaps):.2f} ms, "
              f"p90 {gaps[int(0.9 * (len(gaps) - 1))]:.2f} ms, max {gaps[-1]:.2f} ms")


def print_trial(doc, trial, stalls=None):
    series = doc["series"]
    bin_ns, job, nodes = series["bin_ns"], series["job"], series["nodes"]
    lo, hi = trial["baseline_from_ns"] // bin_ns, trial["baseline_to_ns"] // bin_ns
    end_ns = iteration_ends(doc, lo * bin_ns, hi * bin_ns)
    end_bins = [e // bin_ns for e in end_ns]
    bands = []
    for ms in WINDOWS_MS:
        xs = smoothed(job, lo, hi, max(1, ms * 1_000_000 // bin_ns))
        if xs:
            bands.append(f"{ms} ms {100 * (1 - min(xs) / st.median(xs)):.1f} %")
    print(f"  {trial['label']}: band at " + ", ".join(bands))
    lengths = sorted((b - a) / 1e6 for a, b in zip(end_ns, end_ns[1:]))
    if lengths:
        print(f"    iterations {len(lengths)}: {lengths[0]:.0f}-{lengths[-1]:.0f} ms, median {st.median(lengths):.0f} ms")
    w = max(1, 250_000_000 // bin_ns)
    groups = {}
    for i in range(lo, hi - w, max(1, 50_000_000 // bin_ns)):
        k = sum(1 for e in end_bins if i <= e < i + w)
        groups.setdefault(k, []).append(sum(job[i:i + w]) / w)
    if groups:
        med = st.median(x for g in groups.values() for x in g)
        for k, xs in sorted(groups.items()):
            print(f"    250 ms windows holding {k} iteration end(s): {len(xs):4d}, mean {100 * (st.mean(xs) / med - 1):+5.1f} %, "
                  f"lowest {100 * (min(xs) / med - 1):+5.1f} % against the median window")
    xs = smoothed(job, lo, hi, w)
    if xs and len(end_ns) > 1:
        at = min(range(len(xs)), key=xs.__getitem__)
        a_ns, b_ns = (lo + at) * bin_ns, (lo + at + w) * bin_ns
        around = [e for e in end_ns if a_ns - 100_000_000 <= e <= b_ns + 100_000_000]
        gaps = ", ".join(f"{(b - a) / 1e6:.0f}" for a, b in zip(around, around[1:]))
        print(f"    the lowest 250 ms window ({100 * (1 - xs[at] / st.median(xs)):.1f} % below) at "
              f"{a_ns / 1e9:.2f} s: the iterations around it took {gaps} ms")
        if stalls is not None:
            t0 = doc["run"]["started_unix_ns"]
            whole = stalled_ms(stalls, t0, lo * bin_ns, hi * bin_ns)
            per = whole / max(1e-9, (hi - lo) * bin_ns / 250e6)
            print(f"    cores taken (core_stalls): {whole:.1f} ms over the baseline ({per:.2f} ms per 250 ms), "
                  f"{stalled_ms(stalls, t0, a_ns - 100_000_000, b_ns):.1f} ms from 100 ms before the lowest window to its end")
    idle = [i for i in range(lo, hi) if min(nodes[n][i] for n in nodes) == 0]
    near = sum(1 for i in idle if any(abs(i - e) * bin_ns <= 20_000_000 for e in end_bins))
    print(f"    10 ms bins with a rank receiving nothing: {len(idle)}, {near} within 20 ms of an iteration end")
    print_gaps(doc, lo * bin_ns, hi * bin_ns)


def main(args):
    stalls = None
    if args[:1] == ["--stalls"]:
        if len(args) < 2:
            sys.exit("band_dips: --stalls needs a core_stalls log")
        stalls, args = load_stalls(args[1]), args[2:]
    if not args:
        sys.exit("usage: python3 bench/band_dips.py [--stalls LOG] DIR_OR_RESULT_JSON...")
    for arg in args:
        path, doc = load(arg)
        print(path)
        for trial in doc["plan"]["trials"]:
            print_trial(doc, trial, stalls)


if __name__ == "__main__":
    main(sys.argv[1:])
