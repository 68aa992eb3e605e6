#!/usr/bin/env python3
"""The structure's size limits (issue 22): no source file over 800 lines and no function over
150 lines, outside tests/ and bench/. Prints every breach with its place; exit 1 if any.

A function is a brace block whose head ends in a parameter list (and qualifiers), opened
outside any other function: lambdas and local blocks count toward the function they are in.
Comments, strings and character literals are skipped; raw strings R"x(...)x" too.
Usage: check_sizes.py SOURCE_ROOT [--max-file N] [--max-function N]

KNOWN lists breaches accepted for now (issue 22 named 16; all are fixed and it is empty): the check
fails on any other breach, and on a known one that is gone (so the list only shrinks: remove
its line). Each known entry is "path" (the file's length) or "path function" (a function's).
"""
import os
import re
import sys

KNOWN: set[str] = set()  # every breach issue 22 named is fixed; keep it empty

SKIP_DIRS = {"tests", "bench", "build", "build-asan", ".git", "subprojects"}
CONTROL = {"if", "for", "while", "switch", "catch", "do", "else", "try", "return"}


def strip(text):
    """TEXT with comments and literals blanked (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(" ")  # a digit separator: 1'000'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


HEAD_END = re.compile(r"\)\s*(const|noexcept|override|final|mutable|&|&&|->\s*[\w:<>,\s*&]+|\s)*$")


def functions(text):
    """(name, first line, last line) of every function body in TEXT (stripped)."""
    found = []
    stack = []  # per open brace: "fn", "in-fn" or "scope"
    head_start = 0
    line = 1
    fn_open = None
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            head = text[head_start:i]
            in_fn = any(k in ("fn", "in-fn") for k in stack)
            kind = "in-fn" if in_fn else "scope"
            if not in_fn:
                h = re.sub(r"\s+", " ", head).strip()
                words = re.findall(r"[A-Za-z_]\w*", h.split("(")[0]) if "(" in h else []
                if h.endswith(")") or HEAD_END.search(h) and "(" in h:
                    if words and words[-1] not in CONTROL and not h.startswith(("namespace", "extern")) \
                            and "=" not in h.split("(")[0]:
                        kind = "fn"
                        m = re.search(r"([~\w:]+(?:operator\s*\S+)?)\s*\(", h)
                        fn_open = (m.group(1) if m else "?", line - head[head.rfind("("):].count("\n") if "(" in head else line)
            stack.append(kind)
            head_start = i + 1
        elif c == "}":
            kind = stack.pop() if stack else "scope"
            if kind == "fn" and fn_open:
                found.append((fn_open[0], fn_open[1], line))
                fn_open = None
            head_start = i + 1
        elif c == ";":
            head_start = i + 1
    return found


def self_test():
    """The detector on made-up sources: a long function, one just within, braces in literals."""
    body = "\n".join("  x += %d;" % i for i in range(148))
    src = ("namespace a {\nstruct S {\n  int f(int x) const {\n" + body + "\n    return x;\n  }\n};\n"
           "int g(int x) {\n  auto l = [](int y) { return y; };\n  const char* s = \"{{{\";\n"
           "  char c = '{';\n  // {\n  /* { */\n  auto r = R\"x({)x\";\n" + body + "\n  return l(x);\n}\n}\n")
    fns = {name: last - first + 1 for name, first, last in functions(strip(src))}
    ok = fns.get("f") == 151 and fns.get("g") == 157 and len(fns) == 2
    print("self-test:", "ok" if ok else "FAILED", fns)
    return 0 if ok else 1


def main(argv):
    if "--self-test" in argv:
        return self_test()
    root = argv[1] if len(argv) > 1 else "."
    max_file = int(argv[argv.index("--max-file") + 1]) if "--max-file" in argv else 800
    max_fn = int(argv[argv.index("--max-function") + 1]) if "--max-function" in argv else 150
    breaches = {}  # key (as in KNOWN) -> text
    files = 0
    for d, dirs, names in os.walk(root):
        rel = os.path.relpath(d, root)
        if rel.split(os.sep)[0] in SKIP_DIRS or rel.startswith("build"):
            dirs[:] = []
            continue
        for name in sorted(names):
            if not name.endswith((".cpp", ".hpp", ".h", ".cc")):
                continue
            path = os.path.join(d, name)
            relp = os.path.relpath(path, root)
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            files += 1
            lines = text.count("\n")
            if lines > max_file:
                breaches[relp] = f"{relp}: {lines} lines (at most {max_file}: split it by what its parts do)"
            for fn, first, last in functions(strip(text)):
                if last - first + 1 > max_fn:
                    breaches[f"{relp} {fn}"] = (f"{relp}:{first}: {fn} is {last - first + 1} lines (at most {max_fn}: "
                                               "name its steps as functions)")
    new = sorted(k for k in breaches if k not in KNOWN)
    known = sorted(k for k in breaches if k in KNOWN)
    gone = sorted(KNOWN - set(breaches))
    for k in known:
        print("known:", breaches[k])
    for k in new:
        print("NEW:  ", breaches[k])
    for k in gone:
        print(f"fixed: {k} is within the limits now: remove its line from KNOWN in tests/check_sizes.py")
    print(f"check_sizes: {files} sources; {len(new)} new breaches, {len(known)} known (issue 22), "
          f"{len(gone)} known ones fixed (files {max_file} lines, functions {max_fn})")
    return 1 if new or gone else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
