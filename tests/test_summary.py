#!/usr/bin/env python3
# Checks scripts/test_summary.py on made-up testlogs (tests/data/test_summary/): a skip on the allowlist passes, any other fails.
"""Usage: test_summary.py SOURCE_ROOT

Runs scripts/test_summary.py over fixture testlog.json files and checks its exit status, its
final "N passed, N failed, N skipped" line and that every skip is named with its reason; then
checks that the shipped tests/skip-allowlist.txt parses, each entry with a reason. Seconds."""
import os
import subprocess
import sys

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)
    return cond


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    root = argv[1]
    script = os.path.join(root, "scripts", "test_summary.py")
    data = os.path.join(root, "tests", "data", "test_summary")
    fixture_list = os.path.join(data, "allowlist.txt")

    def summary(*logs, allowlist=fixture_list):
        args = [sys.executable, script] + (["--allowlist", allowlist] if allowlist else [])
        r = subprocess.run(args + [build + "=" + os.path.join(data, name) for build, name in logs],
                           capture_output=True, text=True, timeout=60)
        lines = r.stdout.splitlines()
        print("  $ test_summary.py %s -> exit %d, last line '%s'"
              % (" ".join(b + "=" + n for b, n in logs), r.returncode, lines[-1] if lines else ""))
        return r.returncode, r.stdout, lines[-1] if lines else "", r.stderr

    # The last CI's sanitized run: its one skip is allowlisted for build-asan.
    rc, out, last, _ = summary(("build-asan", "asan-allowlisted.json"))
    check(rc == 0, "an allowlisted skip passes (exit 0)")
    check(last == "1 passed, 0 failed, 1 skipped", "and counts as skipped: '%s'" % last)
    check("SKIPPED in build-asan/: rdmachaos:unit / test_workload_manager (allowlisted: " in out,
          "the skip is named, with the allowlist's reason")
    check("skip reason: \"a workload the node has no memory for" in out, "and with the reason the test printed")

    # The same skip in the plain build (listed for build-asan only) and a missing kubectl.
    rc, out, last, _ = summary(("build", "plain-unlisted.json"))
    check(rc == 1, "a skip not on the allowlist fails (exit 1)")
    check(last == "1 passed, 2 failed, 0 skipped", "and counts as failed: '%s'" % last)
    check("FAILED in build/: rdmachaos:unit / test_deploy_kubernetes skipped and is not on the skip allowlist" in out,
          "the unlisted kubernetes skip is named as a failure")
    check("skip reason: kubectl is not installed" in out, "with its reason")
    check("FAILED in build/: rdmachaos:unit / test_workload_manager skipped" in out,
          "an entry for build-asan does not allow the same skip in build/")

    # Both builds at once, as scripts/test --sanitize passes them: the counts add up.
    rc, out, last, _ = summary(("build", "plain-unlisted.json"), ("build-asan", "asan-allowlisted.json"))
    check(rc == 1 and last == "2 passed, 2 failed, 1 skipped", "two logs: the unlisted skips still fail: '%s'" % last)

    # A '*' entry, a skip that printed no reason, and a real failure with Catch2's account of it.
    rc, out, last, _ = summary(("build", "mixed.json"))
    check(rc == 1 and last == "1 passed, 2 failed, 1 skipped", "a wildcard entry allows; the rest fail: '%s'" % last)
    check("SKIPPED in build/: rdmachaos:vm / test_vm_lab (allowlisted: fixture: a wildcard entry)" in out,
          "a '*' entry allows its test in any build")
    check("test_browser skipped and is not on the skip allowlist" in out and "skip reason: no SKIP: line in its output" in out,
          "a skip that printed no reason fails, saying so")
    check("FAILED in build/: rdmachaos:unit / test_score (FAIL" in out and "CHECK( loss == Approx(2.0e9) )" in out,
          "a failed test is named with Catch2's failed assertion")

    # A run that ran nothing is no pass.
    rc, out, last, _ = summary(("build", "empty.json"))
    check(rc == 1 and "no test ran" in out, "an empty testlog fails")
    rc, out, last, _ = summary(("build", "missing.json"))
    check(rc == 1 and "no test results from build/" in out, "a missing testlog fails")

    # An entry without its reason is refused: the list must say why each check is not made.
    rc, out, last, err = summary(("build", "mixed.json"), allowlist=os.path.join(data, "allowlist-no-reason.txt"))
    check(rc == 2 and "allowlist-no-reason.txt:2: expected 'BUILD TEST  # reason'" in err,
          "an allowlist entry without a reason is refused (%s)" % err.strip())

    # The shipped allowlist parses (every entry has its reason), and the default is that file.
    rc, out, last, err = summary(("build-asan", "asan-allowlisted.json"), allowlist=None)
    check(rc == 0 and "(allowlisted: ASan" in out, "tests/skip-allowlist.txt parses and allows the ASan skip (%s)" % err.strip())

    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
