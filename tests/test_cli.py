#!/usr/bin/env python3
"""The command line's surface: every command's --help prints its own help and exits 0 (walked from
`rdmachaos --help` down), an unknown command is named with the nearest one and the list (exit 2,
as other usage errors), --version names the version and git revision, and the bash completion the
build writes parses and completes commands, options and fault kinds.

Usage: test_cli.py  (RDMACHAOS_CLI: the built rdmachaos)
"""
import os
import re
import subprocess
import sys

CLI = os.environ.get("RDMACHAOS_CLI", "")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(*args):
    p = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def subcommands(help_text):
    out, inside = [], False
    for line in help_text.splitlines():
        if line.startswith("Subcommands:"):
            inside = True
            continue
        if inside:
            m = re.match(r"^  (\S+)\s", line)
            if m:
                out.append(m.group(1))
            elif line.strip() == "":
                inside = False
    return out


def walk(path):
    rc, out, err = run(*path, "--help")
    name = " ".join(path) or "(top)"
    check(rc == 0, f"{name} --help exits 0 (got {rc}: {err.strip()[:200]})")
    check(re.search(r"Usage: \S*rdmachaos" + "".join(" " + re.escape(p) for p in path) + r"( |$)", out, re.M) is not None,
          f"{name} --help prints its own usage line")
    n = 1
    for sub in subcommands(out):
        n += walk(path + [sub])
    return n


def main():
    if not CLI or not os.access(CLI, os.X_OK):
        print("SKIP: RDMACHAOS_CLI is not set to the built rdmachaos (meson sets it)")
        return 77
    count = walk([])
    check(count >= 17, f"{count} commands walked (every command and subcommand)")

    rc, out, err = run("nosuch")
    check(rc == 2, f"an unknown command exits 2 (got {rc})")
    check("unknown command 'nosuch'" in err and "did you mean '" in err and "commands: agents, inject" in err,
          f"an unknown command is named with the nearest one and the list: {err.strip()}")
    rc, out, err = run("valdate", "x.toml")
    check(rc == 2 and "did you mean 'validate'?" in err, f"a misspelt command gets its nearest: {err.strip()}")
    rc, out, err = run("lab", "upp")
    check(rc == 2 and err.startswith("rdmachaos lab: unknown command 'upp'; did you mean 'up'?"),
          f"a misspelt subcommand too: {err.strip()}")
    rc, out, err = run("run", "--no-such-option", "p.toml")
    check(rc == 2, f"an unknown option is a usage error, exit 2 (got {rc})")
    # A value that looks like a command word is not one (validate takes files).
    rc, out, err = run("validate", "nosuch.toml")
    check("unknown command" not in err, "a command's argument is not taken for a command")

    # `workload --kind mpi`: no --test to name (the agent's [mpi] program runs), tcp or ucx only;
    # the options pass their checks before the inventory is read.
    mpi = ["workload", "--inventory", "/nonexistent/inventory.toml", "--kind", "mpi", "--node", "n1", "--node", "n2",
           "--for", "5s"]
    for extra in ([], ["--transport", "ucx"]):
        rc, out, err = run(*mpi, *extra)
        check(rc == 2 and "cannot read inventory" in err, f"workload --kind mpi {' '.join(extra)} reaches the inventory: {err.strip()}")
    rc, out, err = run(*mpi, "--test", "x")
    check(rc == 2 and "--test 'x' is not a mpi benchmark" in err, f"workload --kind mpi --test is refused: {err.strip()}")
    rc, out, err = run(*mpi, "--transport", "verbs")
    check(rc == 2 and "takes transport = \"tcp\"" in err, f"workload --kind mpi --transport verbs is refused: {err.strip()}")

    rc, out, err = run("--version")
    check(rc == 0 and re.match(r"^rdmachaos \d+\.\d+\.\d+ \(git [0-9a-z.-]+\)$", out.strip()) is not None,
          f"--version names the version and the git revision: {out.strip()}")

    rc, script, err = run("completion", "bash")
    check(rc == 0 and "complete -F _rdmachaos rdmachaos" in script, "completion bash prints a script")
    check(subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0, "the completion script parses")
    probe = script + r'''
t() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMPREPLY=(); _rdmachaos; echo "${COMPREPLY[*]}"; }
t rdmachaos va
t rdmachaos lab u
t rdmachaos inject link_f
t rdmachaos run --inven
'''
    got = subprocess.run(["bash", "-c", probe], capture_output=True, text=True).stdout.splitlines()
    check(got == ["validate", "up", "link_flap", "--inventory"], f"completions: {got}")
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
