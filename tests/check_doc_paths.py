#!/usr/bin/env python3
"""The docs name the tree as it is: every path of this repository that README.md or a page of
docs/ names (in `code` or as a relative link) exists. A placeholder in capitals (NAME, ROOM,
KIND) stands for any name; a path without an extension may name a source pair
(`common/protocol` for protocol.hpp and protocol.cpp). Paths outside the repository (/sys/...,
DIR/lab.json, URLs) are not checked. Prints every stale path with its page and line; exit 1 if
any.

Usage: check_doc_paths.py SOURCE_ROOT | --self-test
"""
import glob
import os
import re
import sys
import tempfile

CODE = re.compile(r"`([A-Za-z0-9_.*/-]+/[A-Za-z0-9_.*/-]*)`")
LINK = re.compile(r"\]\(([^)#\s]+)")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]+")
SKIP_DIRS = {".git", "build", "build-asan", "subprojects"}


def pages(root):
    out = [os.path.join(root, "README.md")]
    for dirpath, dirs, files in os.walk(os.path.join(root, "docs")):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        out += [os.path.join(dirpath, f) for f in sorted(files) if f.endswith(".md")]
    return [p for p in out if os.path.isfile(p)]


def exists(pattern):
    pattern = PLACEHOLDER.sub("*", pattern).rstrip("/")
    return bool(glob.glob(pattern) or glob.glob(pattern + ".*"))


def check(root):
    """Stale paths, as 'page:line: why' strings."""
    tops = {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and d not in SKIP_DIRS
            and not d.startswith(".")}
    stale = []
    for page in pages(root):
        text = open(page, encoding="utf-8").read()
        rel = os.path.relpath(page, root)
        here = os.path.dirname(page)
        for regex, kind in ((CODE, "code"), (LINK, "link")):
            for m in regex.finditer(text):
                path = m.group(1)
                if path.startswith(("http:", "https:", "mailto:", "/")):
                    continue
                line = text.count("\n", 0, m.start()) + 1
                if kind == "link":
                    # A link is relative to its page.
                    if not exists(os.path.join(here, path)):
                        stale.append(f"{rel}:{line}: link to {path}, which does not exist")
                    continue
                first = path.split("/")[0]
                if first not in tops:
                    continue  # not a path of this tree (DIR/..., a host's path, a URL path)
                if not exists(os.path.join(root, path)):
                    stale.append(f"{rel}:{line}: names {path}, which does not exist: fix the path or the page")
    return stale


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs", "faults"))
        os.makedirs(os.path.join(root, "common"))
        os.makedirs(os.path.join(root, "faults"))
        for f in ("common/protocol.cpp", "common/protocol.hpp", "faults/link_flap.cpp", "docs/faults/link_flap.md"):
            open(os.path.join(root, f), "w").close()
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("See `common/protocol`, `faults/NAME.cpp`, `DIR/lab.json`, `/sys/class/net`.\n")
        with open(os.path.join(root, "docs", "a.md"), "w") as f:
            f.write("[flap](faults/link_flap.md) and `faults/link_flap.cpp`\n\n`common/gone.hpp` and [x](faults/nope.md)\n")
        got = check(root)
        want = ["docs/a.md:3: names common/gone.hpp, which does not exist: fix the path or the page",
                "docs/a.md:3: link to faults/nope.md, which does not exist"]
        if sorted(got) != sorted(want):
            print("self-test failed:\n  got  " + "\n       ".join(got) + "\n  want " + "\n       ".join(want))
            return 1
    print("self-test ok: a stale path and a stale link found, placeholders, source pairs and outside paths accepted")
    return 0


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    if argv[1] == "--self-test":
        return self_test()
    stale = check(argv[1])
    for s in stale:
        print(s)
    print(f"{len(stale)} stale path(s) in the docs" if stale else "every path the docs name exists")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
