#!/usr/bin/env python3
# scripts/test's closing summary from meson's testlog.json files: every failure and every skip named, the final count line.
"""Usage: test_summary.py [--allowlist FILE] LOG...

LOG is a meson testlog.json, as BUILD=PATH or a plain PATH (BUILD is then the directory that
holds meson-logs/, e.g. build-asan for build-asan/meson-logs/testlog.json). Prints each failed
test with Catch2's account of its failure, each skipped test with the reason its output gave
and whether FILE (default tests/skip-allowlist.txt) allows that skip, and ends with one line:
"N passed, N failed, N skipped". A skip that is not on the allowlist counts as failed: a
machine missing a tool must not read as green. Exits 0 only when nothing failed."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_ALLOWLIST = os.path.join(ROOT, "tests", "skip-allowlist.txt")


def load_allowlist(path):
    """{(build or '*', test name): reason}; raises ValueError naming the line that is malformed."""
    allowed = {}
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            entry, sep, reason = line.partition("#")
            fields = entry.split()
            if not sep or not reason.strip() or len(fields) != 2:
                raise ValueError("%s:%d: expected 'BUILD TEST  # reason' (BUILD a build directory or '*'), got '%s'"
                                 % (path, number, line))
            allowed[(fields[0], fields[1])] = reason.strip()
    return allowed


def allowlisted(allowed, build, test):
    return allowed.get((build, test)) or allowed.get(("*", test))


def short_name(name):
    # meson names a test "project:suite / test" when the project has several suites.
    return name.rsplit(" / ", 1)[-1]


def output_of(t):
    return (t.get("stdout") or "") + (t.get("stderr") or "")


def skip_reasons(t):
    """The reasons a skipped test printed: its "SKIP: " lines (skip.hpp, the suites' own mains,
    test_deploy.py and the shell tests all print one per reason)."""
    lines = output_of(t).splitlines()
    reasons = [l.split("SKIP:", 1)[1].strip() for l in lines if l.lstrip().startswith("SKIP:")]
    if reasons:
        return reasons
    tail = [l.strip() for l in lines if l.strip()][-3:]
    return ["no SKIP: line in its output" + (" (it ended: %s)" % " | ".join(tail) if tail else "")]


def failure_excerpt(t):
    """Catch2's own account of each failure: from its "FAILED:" line to the rule that ends it,
    with the expansion and every INFO/CAPTURE (where the evidence is), the first three; else the
    lines that look like errors, else the last lines."""
    all_lines = output_of(t).splitlines()
    blocks = []
    for i, l in enumerate(all_lines):
        if l.rstrip().endswith("FAILED:") and len(blocks) < 3:
            block = []
            for k in range(i, min(i + 40, len(all_lines))):
                m = all_lines[k]
                if block and (m.startswith("-----") or m.startswith("=====")):
                    break
                # A blank line not followed by more of its indented expansion or messages
                # ends it (what the test printed next is not the failure's).
                after = all_lines[k + 1] if k + 1 < len(all_lines) else ""
                if block and not m.strip() and not after.startswith(("  ", "with ")):
                    break
                block.append(m)
            blocks.append(block)
    if blocks:
        return [l[:1500] for block in blocks for l in block]
    lines = [l for l in all_lines if "FAILED" in l or "REQUIRE" in l or "CHECK" in l or "error" in l.lower()]
    return [l[:300] for l in (lines[:12] or all_lines[-12:])]


def build_of(arg):
    if "=" in arg:
        build, path = arg.split("=", 1)
        return build, path
    d = os.path.dirname(os.path.abspath(arg))
    if os.path.basename(d) == "meson-logs":
        d = os.path.dirname(d)
    return os.path.basename(d), arg


def summarize(logs, allowed, allowlist_name, out=sys.stdout):
    """Prints the summary; returns the exit status (0: nothing failed, no skip off the list)."""
    passed = failed = skipped = 0
    failures, skips, errors = [], [], []
    for build, path in logs:
        try:
            results = [json.loads(line) for line in open(path) if line.strip()]
        except (OSError, ValueError) as e:
            errors.append("no test results from %s/: %s" % (build, e))
            continue
        if not results:
            errors.append("no test results from %s/: %s is empty (no test ran)" % (build, path))
        for t in results:
            r = t.get("result", "")
            if r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif r == "SKIP":
                reason = allowlisted(allowed, build, short_name(t.get("name", "")))
                skips.append((build, t, reason))
                if reason:
                    skipped += 1
                else:
                    failed += 1
            else:
                failed += 1
                failures.append((build, t))
    # Everything that did not pass, again at the end: CI keeps only the tail of a run, and the
    # first build's failures scroll away under the second build's output.
    for build, t in failures:
        print("FAILED in %s/: %s (%s, %.0f s)" % (build, t.get("name"), t.get("result"), t.get("duration") or 0), file=out)
        for l in failure_excerpt(t):
            print("    " + l, file=out)
    for build, t, reason in skips:
        if reason:
            print("SKIPPED in %s/: %s (allowlisted: %s)" % (build, t.get("name"), reason), file=out)
        else:
            print("FAILED in %s/: %s skipped and is not on the skip allowlist (%s)"
                  % (build, t.get("name"), allowlist_name), file=out)
        for why in skip_reasons(t):
            print("    skip reason: " + why[:500], file=out)
    for e in errors:
        print("ERROR: " + e, file=out)
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped), file=out)
    return 1 if failed or errors else 0


def main(argv):
    args = argv[1:]
    allowlist = DEFAULT_ALLOWLIST
    if len(args) >= 2 and args[0] == "--allowlist":
        allowlist, args = args[1], args[2:]
    if not args or any(a.startswith("-") for a in args):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        allowed = load_allowlist(allowlist)
    except (OSError, ValueError) as e:
        print("test_summary.py: the skip allowlist: %s" % e, file=sys.stderr)
        return 2
    return summarize([build_of(a) for a in args], allowed, os.path.relpath(allowlist, ROOT))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
