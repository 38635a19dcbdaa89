#!/usr/bin/env python3
"""Print the import cycles between the top-level modules of one Rust crate.

Usage: scripts/module-cycles.py CRATE/src [--graph]

The top-level modules are the `mod NAME;` declarations of the crate root
(`lib.rs`, `main.rs`). Module A depends on module B when a file of A (A.rs,
A/mod.rs or any file under A/) names a path that resolves to B from the crate
root: `crate::B`, `$crate::B`, `use crate::{.., B, ..}`, or a `super::` path
that climbs out of A (`super::super::B` from A/x/y.rs), including items the
root re-exports (`pub use B::Item;` in lib.rs makes `crate::Item` mean B).
Comments and string literals are ignored; inline `mod name { .. }` blocks
(tests) count for `super::`. A lalrpop grammar belongs to the module whose
`lalrpop_mod!` includes it.

It exits 0 when the graph has no cycle, 1 when it has (each strongly
connected component is printed with its elementary cycles and the lines that
make each of its edges), 2 on a usage error. `--graph` prints every edge too.
"""

import os
import re
import sys

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def strip(text):
    """Blank out comments and string/char literals, keeping newlines."""
    out = []
    i, n = 0, len(text)

    def blank(s):
        return "".join(c if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif (c in "rb" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))
              and re.match(r"(br|r)#*\"", text[i:i + 260])):
            m = re.match(r"(br|r)(#*)\"", text[i:])
            close = '"' + m.group(2)
            j = text.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            out.append(blank(text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(blank(text[i:j + 1]))
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            if i + 1 < n and text[i + 1] == "\\":
                j = text.find("'", i + 3)
                j = n if j < 0 else j
                out.append(blank(text[i:j + 1]))
                i = j + 1
            elif i + 2 < n and text[i + 2] == "'":
                out.append("   ")
                i += 3
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def tokens(text):
    """(kind, value, line) for identifiers, `::` and single punctuation."""
    line = 1
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif c.isalpha() or c == "_":
            m = IDENT.match(text, i)
            yield ("id", m.group(0), line)
            i = m.end()
        elif c.isdigit():
            m = re.compile(r"[0-9A-Za-z_.]+").match(text, i)
            i = m.end()
        elif text.startswith("::", i):
            yield ("p", "::", line)
            i += 2
        else:
            yield ("p", c, line)
            i += 1


def root_decls(path):
    """Top-level `mod NAME;` names and root re-exports {item: module}."""
    toks = list(tokens(strip(open(path, encoding="utf-8").read())))
    mods, reexports = [], {}
    depth = 0
    for k, (kind, val, _) in enumerate(toks):
        if val == "{":
            depth += 1
        elif val == "}":
            depth -= 1
        elif depth == 0 and val == "mod" and k + 2 < len(toks):
            if toks[k + 1][0] == "id" and toks[k + 2][1] == ";":
                mods.append(toks[k + 1][1])
    # `pub use m::Item;`, `pub use m::{A, B as C};`, `pub use m::sub::Item;`
    text = strip(open(path, encoding="utf-8").read())
    for m in re.finditer(r"\bpub(\([^)]*\))?\s+use\s+(?:crate::|self::)?([A-Za-z_]\w*)::([^;]*);",
                         text):
        module, rest = m.group(2), m.group(3)
        for name in re.findall(r"([A-Za-z_]\w*)\s*(?:,|}|$)", rest.replace("\n", " ")):
            reexports.setdefault(name, module)
        for name in re.findall(r"\bas\s+([A-Za-z_]\w*)", rest):
            reexports.setdefault(name, module)
    return mods, reexports


def module_files(src, name):
    """Every source file of top-level module `name`, with its module path."""
    files = []
    flat = os.path.join(src, name + ".rs")
    if os.path.isfile(flat):
        files.append((flat, [name]))
    folder = os.path.join(src, name)
    if os.path.isdir(folder):
        for dirpath, _, names in os.walk(folder):
            rel = os.path.relpath(dirpath, src).split(os.sep)
            for f in sorted(names):
                if not f.endswith(".rs"):
                    continue
                p = os.path.join(dirpath, f)
                stem = f[:-3]
                files.append((p, rel if stem == "mod" else rel + [stem]))
    # Grammars: `lalrpop_mod!(.. name ..)` in a file of the module.
    for p, mpath in list(files):
        text = strip(open(p, encoding="utf-8").read())
        for m in re.finditer(r"lalrpop_mod!\s*\(", text):
            # The arguments, to the matching `)` (an attribute has its own).
            depth, j = 1, m.end()
            while j < len(text) and depth and text[j] != ";":
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                j += 1
            if depth:
                continue
            body = re.sub(r"#\[[^\]]*\]", " ", text[m.end():j - 1])
            words = IDENT.findall(body)
            if words:
                g = os.path.join(os.path.dirname(p), words[-1] + ".lalrpop")
                if os.path.isfile(g):
                    files.append((g, mpath + [words[-1]]))
    return files


def references(path, mpath):
    """(root_segment, line) for every path in the file that starts at the
    crate root: the segment right after `crate::` (or after enough
    `super::`s), one per item of a `{..}` group."""
    toks = list(tokens(strip(open(path, encoding="utf-8").read())))
    found = []
    inline = []  # (name, brace depth at which the inline module's body opened)
    depth = 0
    k = 0
    while k < len(toks):
        kind, val, line = toks[k]
        if val == "{":
            depth += 1
        elif val == "}":
            if inline and inline[-1][1] == depth:
                inline.pop()
            depth -= 1
        elif (val == "mod" and k + 2 < len(toks) and toks[k + 1][0] == "id"
              and toks[k + 2][1] == "{"):
            inline.append((toks[k + 1][1], depth + 1))
            depth += 1
            k += 3
            continue
        here = mpath + [name for name, _ in inline]
        starts = k == 0 or toks[k - 1][1] != "::"
        if kind == "id" and val in ("crate", "super", "self") and starts \
                and k + 1 < len(toks) and toks[k + 1][1] == "::":
            prefix = [] if val == "crate" else (here[:-1] if val == "super" else here)
            j = k + 2
            while (val != "crate" and j + 1 < len(toks) and toks[j][1] == "super"
                   and toks[j + 1][1] == "::"):
                prefix = prefix[:-1]
                j += 2
            if not prefix and j < len(toks):
                if toks[j][0] == "id":
                    found.append((toks[j][1], toks[j][2]))
                elif toks[j][1] == "{":
                    d, first = 0, True
                    while j < len(toks):
                        v = toks[j][1]
                        if v == "{":
                            d += 1
                            first = d == 1
                        elif v == "}":
                            d -= 1
                            if d == 0:
                                break
                        elif v == "," and d == 1:
                            first = True
                        elif first and d == 1 and toks[j][0] == "id":
                            found.append((v, toks[j][2]))
                            first = False
                        j += 1
        k += 1
    return found


def tarjan(nodes, edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def cycles_in(comp, edges, limit=50):
    """The elementary cycles inside one component, each starting at its
    smallest member, shortest first (at most `limit`)."""
    members = sorted(comp)
    found = []
    for i, start in enumerate(members):
        allowed = set(members[i:])
        stack = [(start, [start])]
        while stack and len(found) < limit * 4:
            v, path = stack.pop()
            for w in sorted(edges.get(v, ()), reverse=True):
                if w == start:
                    found.append(path + [start])
                elif w in allowed and w not in path:
                    stack.append((w, path + [w]))
    found.sort(key=lambda c: (len(c), c))
    return found[:limit]


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    if len(args) != 1 or not os.path.isdir(args[0]):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    src = args[0]
    show_graph = "--graph" in argv

    mods, reexports = [], {}
    for root in ("lib.rs", "main.rs"):
        p = os.path.join(src, root)
        if os.path.isfile(p):
            m, r = root_decls(p)
            mods += [x for x in m if x not in mods]
            for key, val in r.items():
                reexports.setdefault(key, val)
    reexports = {k: v for k, v in reexports.items() if v in mods}

    edges = {m: {} for m in mods}  # from -> {to: [(file, line)]}
    for m in mods:
        for path, mpath in module_files(src, m):
            for seg, line in references(path, mpath):
                to = seg if seg in mods else reexports.get(seg)
                if to and to != m:
                    where = f"{os.path.relpath(path, src)}:{line}"
                    edges[m].setdefault(to, []).append(where)

    if show_graph:
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f"{a} -> {b}  ({edges[a][b][0]})")

    comps = [c for c in tarjan(mods, edges) if len(c) > 1]
    if not comps:
        print(f"{src}: no import cycles between {len(mods)} top-level modules")
        return 0
    print(f"{src}: {len(comps)} group(s) of top-level modules import each other:")
    for comp in sorted(comps):
        print()
        for cycle in cycles_in(comp, edges):
            print("  cycle: " + " -> ".join(cycle))
        for a in comp:
            for b in sorted(edges[a]):
                if b in comp:
                    uses = edges[a][b]
                    more = f" (+{len(uses) - 3} more)" if len(uses) > 3 else ""
                    print(f"    {a} -> {b}: {', '.join(uses[:3])}{more}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
