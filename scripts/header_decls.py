#!/usr/bin/env python3
"""Checks that two versions of include/kvcache.h declare the same things.

The header is ordered for reading, and its order will change again; what must not change
by accident is what it declares. This preprocesses both versions (gcc -E -P, as C and as
C++, with the Windows export variants too), cuts the result into top-level declarations,
normalizes their whitespace and compares the sorted lists, together with the macros the
header defines (gcc -dM -E minus the compiler's own). Comments, order and line breaks do
not count; a field, parameter, enum value or macro that differs does.

    scripts/header_decls.py                  HEAD's header vs the working tree's
    scripts/header_decls.py REV              REV's header vs the working tree's
    scripts/header_decls.py REV_A REV_B      REV_A's vs REV_B's
    scripts/header_decls.py --print FILE     the declaration list of FILE

Exit status 1 when the sets differ (the differences are printed).
"""
import collections
import difflib
import os
import re
import subprocess
import sys
import tempfile

HEADER = "include/kvcache.h"
VARIANTS = [("gcc", []), ("gcc", ["-D_WIN32", "-DKVC_BUILDING_SHARED"]),
            ("gcc", ["-D_WIN32", "-DKVC_USING_SHARED"]), ("gcc", ["-U__GNUC__"]), ("g++", [])]


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def declarations(path, cc, flags):
    lang = ["-x", "c++"] if cc.endswith("++") else ["-x", "c", "-std=c11"]
    pp = run([cc, "-E", "-P"] + lang + flags + [path])
    # extern "C" { ... } would make the whole C++ header one declaration
    pp = re.sub(r'extern\s+"C"\s*\{', "", pp, count=1)
    if cc.endswith("++"):
        pp = pp.rstrip()
        assert pp.endswith("}"), "unexpected end of the C++ preprocessed header"
        pp = pp[:-1]
    decls, depth, cur = [], 0, []
    for tok in re.findall(r'"(?:\\.|[^"\\])*"|\w+|\S', pp):
        cur.append(tok)
        if tok in "{(":
            depth += 1
        elif tok in "})":
            depth -= 1
        elif tok == ";" and depth == 0:
            decls.append(" ".join(cur))
            cur = []
    if cur:
        decls.append(" ".join(cur))
    out = [("%dx " % n if n > 1 else "") + d for d, n in sorted(collections.Counter(decls).items())]
    builtin = set(run([cc, "-dM", "-E"] + lang + flags + ["/dev/null"]).splitlines())
    mine = set(run([cc, "-dM", "-E"] + lang + flags + [path]).splitlines())
    out += ["MACRO " + " ".join(m.split()) for m in sorted(mine - builtin)]
    return out


def header_at(rev, tmp):
    path = os.path.join(tmp, rev.replace("/", "_") + ".h")
    with open(path, "w") as f:
        f.write(run(["git", "show", "%s:%s" % (rev, HEADER)]))
    return path


def main(argv):
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    if argv[:1] == ["--print"]:
        print("\n".join(declarations(argv[1], "gcc", [])))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        a = header_at(argv[0] if argv else "HEAD", tmp)
        b = header_at(argv[1], tmp) if len(argv) > 1 else HEADER
        differ = False
        for cc, flags in VARIANTS:
            da, db = declarations(a, cc, flags), declarations(b, cc, flags)
            name = " ".join([cc] + flags)
            if da == db:
                print("same declarations (%d lines): %s" % (len(da), name))
                continue
            differ = True
            print("DIFFERENT: %s" % name)
            sys.stdout.writelines(l + "\n" for l in difflib.unified_diff(da, db, "a", "b", lineterm="", n=0))
        return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
