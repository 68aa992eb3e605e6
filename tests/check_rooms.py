#!/usr/bin/env python3
"""The controller's rooms depend one way (issue 22, docs/architecture.md "controller/"): a source
in controller/ROOM includes headers of its own room and of the rooms before it in ORDER, never
of a room after it, and every source of controller/ is in a room. Each room's meson library
lists only the rooms before it, so an include further down would be a cycle that meson's static
libraries hide. Prints every breach with its place; exit 1 if any.

Usage: check_rooms.py SOURCE_ROOT | --self-test
"""
import os
import re
import sys
import tempfile

# The order of controller/meson.build's subdir() calls.
ORDER = ["measure", "search", "fleet", "playbook", "run", "score", "report", "cli"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"controller/([^"/]+)/[^"]+"', re.M)
FLAT_INCLUDE = re.compile(r'^\s*#\s*include\s+"controller/([^"/]+\.(?:hpp|h))"', re.M)


def check(root):
    """Breaches in ROOT's controller/, as 'path:line: why' strings."""
    breaches = []
    base = os.path.join(root, "controller")
    for dirpath, _, files in os.walk(base):
        for name in sorted(files):
            if not name.endswith((".cpp", ".hpp", ".h")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            parts = os.path.relpath(path, base).split(os.sep)
            if len(parts) != 2 or parts[0] not in ORDER:
                breaches.append(f"{rel}: not in a room; put it in controller/ROOM/ (rooms: {', '.join(ORDER)})")
                continue
            room = ORDER.index(parts[0])
            text = open(path, encoding="utf-8").read()
            for m in INCLUDE.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                other = m.group(1)
                if other not in ORDER:
                    breaches.append(f"{rel}:{line}: includes controller/{other}/, which is not a room")
                elif ORDER.index(other) > room:
                    breaches.append(f"{rel}:{line}: room '{parts[0]}' includes room '{other}', which comes after it "
                                    f"(order: {' < '.join(ORDER)}); move the shared part to an earlier room")
            for m in FLAT_INCLUDE.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                breaches.append(f"{rel}:{line}: includes controller/{m.group(1)}, outside any room")
    return breaches


def self_test():
    """The checker on made-up trees: a clean one passes, each kind of breach is found."""
    def tree(files):
        d = tempfile.mkdtemp()
        for p, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, p)), exist_ok=True)
            open(os.path.join(d, p), "w").write(text)
        return d
    ok = tree({"controller/run/a.cpp": '#include "controller/fleet/f.hpp"\n#include "controller/run/a.hpp"\n',
               "controller/fleet/f.hpp": "#pragma once\n"})
    assert check(ok) == [], check(ok)
    up = check(tree({"controller/fleet/f.cpp": '// x\n#include "controller/score/s.hpp"\n'}))
    assert len(up) == 1 and "controller/fleet/f.cpp:2:" in up[0] and "'score'" in up[0], up
    flat = check(tree({"controller/x.cpp": ""}))
    assert len(flat) == 1 and "not in a room" in flat[0], flat
    unknown = check(tree({"controller/run/a.cpp": '#include "controller/misc/m.hpp"\n'}))
    assert len(unknown) == 1 and "not a room" in unknown[0], unknown
    old = check(tree({"controller/run/a.cpp": '#include "controller/score.hpp"\n'}))
    assert len(old) == 1 and "outside any room" in old[0], old
    print("check_rooms self-test: 5 cases ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    breaches = check(sys.argv[1])
    for b in breaches:
        print(b)
    print(f"check_rooms: {len(breaches)} breach(es) of the controller's room order ({' < '.join(ORDER)})")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
