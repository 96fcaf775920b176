#!/usr/bin/env python3
"""Import circles of a Rust crate, file by file: every `crate::`/`super::` path a file names
(in `use` lines, brace groups expanded, and inline paths) becomes an arrow to the file that
defines the module; strongly connected components of size > 1 are the circles.
usage: scripts/import-circles.py SRC_DIR [--no-tests] [--edges]  (--no-tests drops tests.rs files and
`mod tests {` blocks; --edges lists the arrows inside each circle). Bare paths through a child
module the file declares count too; `crate::model` (the format crate's alias) does not."""
import os, re, sys

src = sys.argv[1]
no_tests = "--no-tests" in sys.argv
files = {}  # module path tuple -> file
for root, _, names in os.walk(src):
    for n in names:
        if not n.endswith(".rs"):
            continue
        p = os.path.join(root, n)
        rel = os.path.relpath(p, src)[:-3].split(os.sep)
        if rel[-1] in ("mod", "main", "lib"):
            rel = rel[:-1]
        if no_tests and rel and rel[-1] == "tests":
            continue
        files[tuple(rel)] = p

def strip_tests(text):
    if not no_tests:
        return text
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod \w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while depth and j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)

def expand(s):
    s = s.replace(" ", "").replace("\n", "")
    m = re.search(r"\{", s)
    if not m:
        return [s]
    i = m.start(); depth = 0
    for j in range(i, len(s)):
        depth += {"{": 1, "}": -1}.get(s[j], 0)
        if depth == 0:
            break
    inner, head, tail = s[i + 1:j], s[:i], s[j + 1:]
    parts, depth, cur = [], 0, ""
    for c in inner:
        if c == "," and depth == 0:
            parts.append(cur); cur = ""; continue
        depth += {"{": 1, "}": -1}.get(c, 0); cur += c
    parts.append(cur)
    res = []
    for p in parts:
        if p:
            res += expand(head + p + tail)
    return res

def resolve(mod, path):
    segs = path.split("::")
    if segs[0] == "crate":
        base = []; segs = segs[1:]
    elif segs[0] in ("super", "self"):
        base = list(mod)
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    else:
        return None
    full = base + segs
    if full[:1] == ["model"]:  # `crate::model` is the format crate (an alias in main.rs)
        return None
    for k in range(len(full), -1, -1):
        if tuple(full[:k]) in files:
            return tuple(full[:k])
    return None

edges = {m: set() for m in files}
for mod, p in files.items():
    text = strip_tests(open(p).read())
    text = re.sub(r"//[^\n]*", "", text)
    # inline `mod name {` blocks: a path inside one is relative to that inner module
    spans = []
    for m in re.finditer(r"\bmod\s+(\w+)\s*\{", text):
        depth, j = 1, m.end()
        while depth and j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        spans.append((m.start(), j, m.group(1)))
    def inner(pos):
        return tuple(list(mod) + [n for a, b, n in spans if a <= pos < b])
    paths = []
    for m in re.finditer(r"\buse\s+((?:crate|super|self)::[^;]*);", text, re.S):
        paths += [(m.start(), x) for x in expand(m.group(1))]
    for m in re.finditer(r"\b((?:crate|super)(?:::\w+)+)", text):
        paths.append((m.start(), m.group(1)))
    # bare paths through a child module this file declares (`mod recon;` ... `recon::Recon`)
    kids = re.findall(r"^\s*(?:pub(?:\([\w:]+\))?\s+)?mod\s+(\w+)\s*;", text, re.M)
    for k in kids:
        for m in re.finditer(r"(?<![\w:])" + k + r"((?:::\w+)+)", text):
            paths.append((m.start(), "self::" + k + m.group(1)))
        for m in re.finditer(r"\buse\s+(" + k + r"(?:::|\b)[^;]*);", text, re.S):
            paths += [(m.start(), "self::" + x) for x in expand(m.group(1))]
    for pos, path in paths:
        t = resolve(inner(pos), path)
        if t is not None and t != mod:
            edges[mod].add(t)

# Tarjan
index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def sc(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index:
            sc(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        sccs.append(comp)
for v in files:
    if v not in index:
        sc(v)
circles = [c for c in sccs if len(c) > 1]
arrows = sum(len(e) for e in edges.values())
print(f"files {len(files)}, arrows {arrows}, circles {len(circles)}")
for c in sorted(circles, key=len, reverse=True):
    print(f"  circle of {len(c)}: " + " ".join(sorted("/".join(m) or "main" for m in c)))
if "--edges" in sys.argv:
    big = set(m for c in circles for m in c)
    for v in sorted(big):
        for w in sorted(edges[v]):
            if w in big and any(v in c and w in c for c in circles):
                print("   ", "/".join(v) or "main", "->", "/".join(w) or "main")
