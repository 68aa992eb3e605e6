#!/usr/bin/env python3
"""bench/suite_figures.py LOG...: the figures of the playbooks suite's runs, from their meson logs.

tests/test_lab_playbooks.cpp prints, for every playbook it runs, the CLI's summary (one
"ok"/"FAIL" line per expectation with the measured value) and one "[lab-figures]" line per
trial (its own band below its baseline, the lab switch's busy share and busiest second in the
fault window). This gathers them over every log given (one per whole run of the suite) and
prints, per playbook run of the test (the report's name: "pfc-storm-watchdog-off" is the
watchdog turned off), every expectation's median, range and how many trials met it, then
the band and the switch's load (median and worst). bench/playbooks_suite.sh calls it.
"""
import re
import statistics
import sys

UNITS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3}


def value(text):
    """A measured value as printed ("190ms", "2.990s", "7.70%", "4.2x", "0ns") in ms, % or plain."""
    m = re.match(r"(-?[\d.]+)([a-zµ%]*)", text.strip())
    if not m:
        return None
    v, unit = float(m.group(1)), m.group(2)
    return v * UNITS[unit] if unit in UNITS else v


def unit_of(text):
    m = re.match(r"-?[\d.]+([a-zµ%]*)", text.strip())
    unit = m.group(1) if m else ""
    return "ms" if unit in UNITS else unit


def main(paths):
    expectations = {}  # report -> {expectation: [(value, met)]}
    figures = {}  # report -> {"band": [], "busy": [], "peak": []}
    runs_read = 0
    for path in paths:
        try:
            text = open(path, errors="replace").read()
        except OSError as e:
            print(f"suite_figures: cannot read {path}: {e.strerror}", file=sys.stderr)
            continue
        runs_read += 1
        report = None
        for line in text.splitlines():
            m = re.match(r"\[lab-playbooks\] (\S+): exit \d+ after", line)
            if m:
                report = m.group(1)
                continue
            m = re.match(r"  (ok|FAIL)\s+(.+?): (.+)$", line)
            if m and report:
                v = value(m.group(3))
                if v is not None:
                    rows = expectations.setdefault(report, {}).setdefault(m.group(2), [])
                    rows.append((v, m.group(1) == "ok", unit_of(m.group(3))))
                continue
            m = re.match(r"\[lab-figures\] (.+?) \| (.+?) \| own band (-?[\d.]+)% \| switch busy (-?[\d.]+)% \| "
                         r"busiest second (-?[\d.]+)%", line)
            if m:
                f = figures.setdefault(m.group(1), {"band": [], "busy": [], "peak": []})
                for key, g in (("band", 3), ("busy", 4), ("peak", 5)):
                    if float(m.group(g)) >= 0:
                        f[key].append(float(m.group(g)))
    print(f"{runs_read} run log(s) read")
    if not expectations and not figures:
        print("no playbook figures in the logs (did the suite skip? see the logs)")
        return 1

    def fmt(v, unit):
        return f"{v:.1f}{unit}" if unit else f"{v:.2f}"

    print("\nexpectations, per playbook run of the test: median (min-max) over every trial, trials that met it")
    for report in sorted(expectations):
        print(f"  {report}")
        for exp, rows in expectations[report].items():
            vals = [r[0] for r in rows]
            unit = rows[0][2]
            met = sum(r[1] for r in rows)
            print(f"    {exp:<44} {fmt(statistics.median(vals), unit):>9} ({fmt(min(vals), unit)}-{fmt(max(vals), unit)})"
                  f"  met {met} of {len(rows)}")

    def cell(vals):
        return f"{statistics.median(vals):5.1f} % ({max(vals):5.1f} %)" if vals else "-"

    print(f"\n{'per trial (test report)':<28} {'trials':>6}  {'own band, median (worst)':>24}  {'switch busy':>18}  "
          f"{'busiest second':>18}")
    for report in sorted(figures):
        f = figures[report]
        n = max(len(f["band"]), len(f["peak"]))
        print(f"{report:<28} {n:>6}  {cell(f['band']):>24}  {cell(f['busy']):>18}  {cell(f['peak']):>18}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: bench/suite_figures.py LOG... (meson logs of playbooks suite runs)", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
