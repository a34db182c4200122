#!/usr/bin/env python3
"""Import graph of core/: which file of core/src names which other, and its cycles.

Parses every core/src/**/*.rs (comments, strings and char literals stripped) for
module paths:
  - `crate::a::b::Item` anywhere (a `use`, a type, a call), `use crate::{a, b::{c, d}}`
    groups included;
  - `super::` (any depth) and `self::` paths;
  - paths that start with a child module of the current file (`sched::Exec` in
    coll/mod.rs) or with a module bound by an earlier `use` (`use crate::coll;` then
    `coll::sched::Exec`);
  - names re-exported at the crate root (`crate::Error`) are followed to the module
    that defines them (lib.rs's `pub use`), so they do not all point at lib.rs.
Each path is mapped to the file of the longest module prefix that exists (an inline
module such as `coll::args` maps to its file). `mod x;` declarations are not edges. The
file-level graph gets Tarjan's strongly connected components; every component of
more than one file is a cycle.

A cycle is allowed only when it is one module split into files by concern (a parent
file and its direct child files, e.g. protocol.rs with protocol/send.rs and
protocol/recv.rs, whose `impl Protocol` blocks name each other's items), or a two-file
pair listed in ALLOWED_PAIRS (below): sibling `impl Communicator` blocks. A
collective's file adds methods to `Communicator` (`impl Communicator { pub fn
allreduce.. }`) and names comm.rs for the type; comm.rs does not name them back
except through those methods, which Rust resolves by type, not by path, so the pair
can only close a cycle if comm.rs names the file by path. The pairs are listed
explicitly so that a new one is a reviewed decision.

It also lists every `static` item of the crate (process-global state) and fails on one
not in ALLOWED_STATICS, whose entries say why each cannot live in the runtime.

Usage: scripts/import-graph.py [--dot] [--edges] [--without FROM:TO].. [--root core/src]
  exit 0: no cycle beyond the allowlist; exit 1: a cycle remains (printed).
"""

from __future__ import annotations

import argparse
import os
import re
import sys

# Two-file cycles that are allowed, each with why. Paths relative to core/src.
ALLOWED_PAIRS: dict[frozenset[str], str] = {
    # (none needed so far: comm.rs does not name any collective file by path; a pair
    # goes here only when a sibling `impl Communicator` file and comm.rs must name
    # each other, e.g. comm.rs calling a collective's helper by path.)
}

# Process-global mutable state of core/ (issue 16: none outside the runtime). Every
# `static` item of core/src must be listed here with why it cannot live in the runtime
# (`crate::runtime::Inner`); an unlisted one fails the check. (file, name) -> why.
ALLOWED_STATICS: dict[tuple[str, str], str] = {
    ("universe.rs", "INITIALIZED"): "MPI's init-once flag: it guards the creation of "
    "a runtime, so it cannot live in one",
    ("abort.rs", "PANIC_MESSAGE"): "written by the panic hook, which can reach only statics",
    ("abort.rs", "HOOK"): "the panic hook is installed once per process",
    ("abort.rs", "LAST_ERROR"): "errors are recorded where they are built, in every "
    "layer, with no runtime at hand; one universe per process",
    ("bootstrap/launch.rs", "UNDER_RESOURCE_MANAGER"): "how the process was started "
    "(srun or rwrun), written once at init and read by error remedies, which are built "
    "where no runtime is at hand",
    # The GPU temporary pool is an owned value in gpu/src/pool.rs (the engine's); only
    # its settings, read once from the environment, remain a static here.
    ("coll/device.rs", "S"): "device-collective settings read once from the "
    "environment (RANKWIRE_GPU_*), never written after: no state, a cached read of "
    "the process environment (the pool itself is the engine's, gpu/src/pool.rs)",
    ("coll/device_hier.rs", "SPLIT"): "RANKWIRE_TEST_GPU_HIER_SPLIT (a test switch) read once from "
    "the environment, never written after (a cached read, no state)",
    ("coll/device_peer.rs", "S"): "peer-memory collective settings (RANKWIRE_GPU_PEER*) "
    "read once from the environment, never written after; the groups themselves live "
    "in each communicator's state",
    ("select.rs", "V"): "RANKWIRE_GPU_EAGER_MAX read once from the environment, never "
    "written after (a cached read, no state)",
    ("gdr_standin.rs", "MODE"): "RANKWIRE_GDR_STANDIN read once from the environment, "
    "never written after (a cached read, no state)",
    ("gdr_standin.rs", "ALLOCS"): "the test stand-in's table of live allocations: it "
    "stands in for the CUDA driver's process-wide allocation table, which pointer "
    "queries read without a runtime (buffers outlive and precede runtimes)",
    ("coll/device_peer_host_tests.rs", "COPY"): "test only: the host build of the "
    "peer-memory copy kernel, compiled with g++ once per test process (a loaded library "
    "is process-wide, like the CUDA module it stands in for)",
    ("coll/device_peer_host_tests.rs", "I64"): "test only: the host build of the i64 "
    "reduction kernels, compiled once per test process, as COPY",
    ("gdr_standin.rs", "NEXT"): "the stand-in's buffer-id counter, process-wide like "
    "CUDA's CU_POINTER_ATTRIBUTE_BUFFER_ID",
}

KEYWORDS_NOT_MODULES = {"crate", "super", "self", "Self"}


def find_statics(crate: "Crate") -> list[tuple[str, str, int]]:
    """Every `static NAME` / `static mut NAME` item: (file, name, line)."""
    out = []
    for rel in sorted(crate.file_mod):
        with open(os.path.join(crate.root, rel), encoding="utf-8") as fh:
            code = strip_code(fh.read())
        for ln, line in enumerate(code.split("\n"), 1):
            for m in re.finditer(r"(?<![\w'])static\s+(?:mut\s+)?([A-Za-z_]\w*)\s*:", line):
                out.append((rel, m.group(1), ln))
    return out


def strip_code(src: str) -> str:
    """Source with comments, string and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * src.count("\n", i, j))
            i = j
            continue
        m = re.match(r'b?r(#*)"', src[i : i + 10])
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j + 1
            continue
        if c == "'":
            # A char literal ('a', '\n', '\u{1F600}'), not a lifetime ('a).
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i : i + 12])
            if m:
                out.append("' '")
                i += m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


class Crate:
    """The module tree of one crate: module path (tuple) -> file, and back."""

    def __init__(self, root: str):
        self.root = root
        self.mod_file: dict[tuple[str, ...], str] = {}
        for dirpath, _, files in os.walk(root):
            for f in files:
                if not f.endswith(".rs"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                self.mod_file[self.module_of(rel)] = rel
        self.file_mod = {f: m for m, f in self.mod_file.items()}
        self.reexports: dict[str, tuple[str, ...]] = {}

    @staticmethod
    def module_of(rel: str) -> tuple[str, ...]:
        parts = rel[:-3].split(os.sep)
        if parts[-1] in ("lib", "mod"):
            parts = parts[:-1]
        return tuple(parts)

    def resolve(self, segs: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
        """File of the longest existing module prefix of `segs` (absolute), and the
        module it names."""
        if segs and segs[0] in self.reexports and tuple(segs[:1]) not in self.mod_file:
            segs = self.reexports[segs[0]] + tuple(segs[1:])
        for k in range(len(segs), -1, -1):
            f = self.mod_file.get(tuple(segs[:k]))
            if f is not None:
                return f, tuple(segs[:k])
        return None, ()

    def children(self, module: tuple[str, ...]) -> set[str]:
        k = len(module)
        return {m[k] for m in self.mod_file if len(m) == k + 1 and m[:k] == module}


TOKEN = re.compile(r"::|[A-Za-z_][A-Za-z0-9_]*|\{|\}|,|\*|;|[^\sA-Za-z0-9_]")


def tokens(code: str) -> list[str]:
    return TOKEN.findall(code)


def parse_tree(toks: list[str], i: int, prefix: tuple[str, ...], out: list):
    """Parse a use-tree / path starting at toks[i] (after a `::`); append each full
    path (tuple of segments, with its bound alias) to `out`. Returns the next index."""
    segs = list(prefix)
    while i < len(toks):
        t = toks[i]
        if t == "{":
            i += 1
            while i < len(toks) and toks[i] != "}":
                if toks[i] == ",":
                    i += 1
                    continue
                i = parse_tree(toks, i, tuple(segs), out)
            return i + 1
        if t == "*":
            out.append((tuple(segs), None))
            return i + 1
        if re.match(r"[A-Za-z_]", t):
            if t == "self" and segs:
                # `a::{self, b}`: `self` names `a` itself.
                out.append((tuple(segs), segs[-1]))
                return i + 1
            segs.append(t)
            i += 1
            if i < len(toks) and toks[i] == "::":
                i += 1
                continue
            alias = t
            if i + 1 < len(toks) and toks[i] == "as":
                alias = toks[i + 1]
                i += 2
            out.append((tuple(segs), alias))
            return i
        # Anything else (`<`, `(`) ends the path.
        out.append((tuple(segs), None))
        return i
    out.append((tuple(segs), None))
    return i


def file_edges(crate: Crate, rel: str) -> dict[str, int]:
    """Files `rel` names, with the line of the first mention."""
    with open(os.path.join(crate.root, rel), encoding="utf-8") as fh:
        code = strip_code(fh.read())
    here = crate.file_mod[rel]
    # `foo.rs` beside a `foo/` directory is the module `foo` too: children of `here`.
    kids = crate.children(here)
    aliases: dict[str, tuple[str, ...]] = {}
    edges: dict[str, int] = {}
    # Line number of each token, for the report.
    toks, lines = [], []
    for ln, line in enumerate(code.split("\n"), 1):
        for t in tokens(line):
            toks.append(t)
            lines.append(ln)
    # Inline modules (`mod tests { .. }`) open at a brace depth: `super` inside one
    # names the file's own module.
    inline: list[tuple[str, int]] = []
    depth = 0
    i = 0
    while i < len(toks):
        t = toks[i]
        prev = toks[i - 1] if i else ""
        nxt = toks[i + 1] if i + 1 < len(toks) else ""
        if t == "{":
            depth += 1
            if i >= 2 and toks[i - 2] == "mod":
                inline.append((toks[i - 1], depth))
            i += 1
            continue
        if t == "}":
            if inline and inline[-1][1] == depth:
                inline.pop()
            depth -= 1
            i += 1
            continue
        if prev == "::" or nxt != "::" or not re.match(r"[A-Za-z_]", t):
            i += 1
            continue
        cur = here + tuple(name for name, _ in inline)
        in_use = prev == "use" or (prev in ("{", ",") and _inside_use(toks, i))
        if t == "crate":
            base: tuple[str, ...] = ()
            j = i + 2
        elif t == "super":
            base = cur
            j = i
            while j + 1 < len(toks) and toks[j] == "super" and toks[j + 1] == "::":
                base = base[:-1]
                j += 2
        elif t == "self":
            base = cur
            j = i + 2
        elif t in kids:
            base = here
            j = i
        elif t in aliases:
            base = aliases[t][:-1]
            j = i
        else:
            i += 1
            continue
        paths: list = []
        j = parse_tree(toks, j, base, paths)
        for segs, alias in paths:
            f, mod = crate.resolve(segs)
            if f is None or f == rel:
                continue
            edges.setdefault(f, lines[i])
            if in_use and alias and alias != "_" and mod == segs:
                aliases[alias] = segs
        i = max(j, i + 1)
    return edges


def _inside_use(toks: list[str], i: int) -> bool:
    """Whether toks[i] sits inside the braces of a `use` statement."""
    depth = 0
    for k in range(i - 1, -1, -1):
        t = toks[k]
        if t == "}":
            depth += 1
        elif t == "{":
            if depth == 0:
                # Walk back to the statement start.
                for m in range(k - 1, -1, -1):
                    if toks[m] in (";", "{", "}"):
                        return False
                    if toks[m] == "use":
                        return True
                return False
            depth -= 1
        elif t == ";":
            return False
    return False


def read_reexports(crate: Crate):
    """Root names re-exported by lib.rs (`pub use a::b::{C, D}`) -> their module."""
    with open(os.path.join(crate.root, "lib.rs"), encoding="utf-8") as fh:
        code = strip_code(fh.read())
    toks = tokens(code)
    for i, t in enumerate(toks):
        if t == "use" and i and toks[i - 1] in ("pub", ")"):
            paths: list = []
            parse_tree(toks, i + 1, (), paths)
            for segs, alias in paths:
                if alias and segs and tuple(segs[:1]) in crate.mod_file:
                    crate.reexports[alias] = tuple(segs[:-1]) or tuple(segs)


def tarjan(nodes: list[str], graph: dict[str, dict[str, int]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    comps: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, {})):
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
            comps.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return comps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=None, help="crate source root (default core/src)")
    ap.add_argument("--dot", action="store_true", help="print the graph as Graphviz")
    ap.add_argument("--edges", action="store_true", help="print every edge with its line")
    ap.add_argument(
        "--self-test",
        action="store_true",
        help="check the parser on a small made-up crate and exit",
    )
    ap.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="FROM:TO",
        help="what-if: leave out the edge FROM -> TO (files relative to the root; "
        "TO may be '*' for every edge out of FROM); repeatable",
    )
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    root = args.root or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "core", "src")
    crate = Crate(os.path.normpath(root))
    read_reexports(crate)
    files = sorted(crate.file_mod)
    graph = {f: file_edges(crate, f) for f in files}
    # lib.rs declares every module; its `pub use` lines are the API surface, not a
    # dependency of the modules, so it is left out of the cycle search.
    graph.pop("lib.rs", None)
    for f in graph:
        graph[f].pop("lib.rs", None)
    for w in args.without:
        a, _, b = w.partition(":")
        if a not in graph:
            ap.error(f"--without {w}: no file {a}")
        if b == "*":
            graph[a].clear()
        else:
            graph[a].pop(b, None)
    nodes = [f for f in files if f != "lib.rs"]
    comps = [c for c in tarjan(nodes, graph) if len(c) > 1]

    if args.dot:
        in_cycle = {f for c in comps for f in c}
        print("digraph core {\n  rankdir=LR; node [shape=box, fontsize=10];")
        for f in nodes:
            style = ' color=red' if f in in_cycle else ""
            print(f'  "{f}" [{style.strip()}];' if style else f'  "{f}";')
        for f in nodes:
            for g in sorted(graph[f]):
                red = f in in_cycle and g in in_cycle and _same_comp(comps, f, g)
                print(f'  "{f}" -> "{g}"{" [color=red]" if red else ""};')
        print("}")
        return 1 if _bad(comps) else 0

    if args.edges:
        for f in nodes:
            for g, ln in sorted(graph[f].items()):
                print(f"{f}:{ln} -> {g}")

    print(f"import-graph: {len(nodes)} files of {crate.root}")
    stray = []
    for rel, name, ln in find_statics(crate):
        why = ALLOWED_STATICS.get((rel, name))
        if why is None:
            stray.append(f"{rel}:{ln} static {name}")
        else:
            print(f"import-graph: process-wide static {rel}:{ln} {name}: {why}")
    for s_ in stray:
        print(f"import-graph: static not in ALLOWED_STATICS (move it into the runtime, "
              f"or list it with why): {s_}")
    if ALLOWED_PAIRS:
        print("import-graph: allowed pairs (sibling impl Communicator blocks):")
        for p, why in ALLOWED_PAIRS.items():
            a, b = sorted(p)
            print(f"  {a} <-> {b}: {why}")
    else:
        print("import-graph: allowlist: empty")
    bad = _bad(comps)
    if stray:
        print(f"import-graph: FAIL: {len(stray)} static(s) outside the runtime")
    for c in comps:
        allowed = c not in bad
        print(
            f"import-graph: {'allowed ' if allowed else ''}cycle of {len(c)} files: "
            + " ".join(c)
        )
        for f in c:
            inside = [f"{g}:{graph[f][g]}" for g in sorted(graph[f]) if g in c]
            print(f"    {f} (line of first use) -> " + ", ".join(inside))
    if bad:
        print(f"import-graph: FAIL: {len(bad)} cycle(s) beyond the allowlist")
        return 1
    if stray:
        return 1
    print("import-graph: ok, no cycle beyond the allowlist")
    return 0


def self_test() -> int:
    """The parser and the cycle search on a made-up crate, with exact expectations."""
    import tempfile

    files = {
        "lib.rs": "mod a; mod b; mod c; mod d; pub use d::Thing;\n",
        # A use group with nesting and `self`, a comment and a string that name
        # modules (must be ignored), an inline test module whose `super` is a.rs.
        "a.rs": (
            "use crate::{b::{self, B}, c};\n"
            "// crate::d::Thing in a comment\n"
            'const S: &str = "crate::d::Thing";\n'
            "#[cfg(test)] mod tests { use super::*; }\n"
        ),
        # A plain path in an expression closes the cycle a.rs <-> b.rs.
        "b.rs": "pub struct B; fn f() { crate::a::g(); }\n",
        # A path through a module bound by `use`: `c` -> d via `use crate::d;`.
        "c.rs": "use crate::d; fn f() -> d::Thing { todo!() }\n",
        # A root re-export (`crate::Thing`) resolves to d.rs itself, not to lib.rs.
        # One static item (and a `'static` lifetime, which is none).
        "d.rs": "pub struct Thing; fn f(_: crate::Thing) {}\n"
        "static N: u8 = 0; fn g(_: &'static str) {}\n",
    }
    with tempfile.TemporaryDirectory() as root:
        for name, text in files.items():
            with open(os.path.join(root, name), "w", encoding="utf-8") as fh:
                fh.write(text)
        crate = Crate(root)
        read_reexports(crate)
        got = {f: sorted(file_edges(crate, f)) for f in sorted(crate.file_mod)}
        statics = find_statics(crate)
    want = {
        "a.rs": ["b.rs", "c.rs"],
        "b.rs": ["a.rs"],
        "c.rs": ["d.rs"],
        "d.rs": [],
        "lib.rs": ["d.rs"],
    }
    ok = got == want
    graph = {f: dict.fromkeys(v, 1) for f, v in got.items() if f != "lib.rs"}
    comps = [c for c in tarjan(sorted(graph), graph) if len(c) > 1]
    ok &= comps == [["a.rs", "b.rs"]]
    ok &= statics == [("d.rs", "N", 2)]
    # One module split by concern is allowed; two modules, or a grandchild, are not.
    ok &= _one_module(["p.rs", "p/send.rs", "p/recv.rs"]) and _one_module(["q/mod.rs", "q/a.rs"])
    ok &= not _one_module(["a.rs", "b.rs"]) and not _one_module(["p.rs", "p/x/y.rs"])
    ok &= not _one_module(["p.rs", "p/a.rs", "engine.rs"])
    print(f"import-graph self-test: edges {got}; cycles {comps}: {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


def _same_comp(comps, f, g) -> bool:
    return any(f in c and g in c for c in comps)


def _one_module(comp: list[str]) -> bool:
    """Whether every file of `comp` is one module split by concern: its own file
    (`m.rs` or `m/mod.rs`) and child files directly under `m/` (`impl Protocol` blocks
    in protocol/send.rs, recv.rs, ...; the select walk's table and inputs). Like
    sibling `impl Communicator` blocks, these name each other's items by design, and
    nothing outside the module takes part in the cycle."""
    def module(f: str) -> str:
        if f.endswith("/mod.rs"):
            return f[: -len("/mod.rs")]
        return f[: -len(".rs")]
    mods = {module(f) for f in comp}
    parents = [m for m in mods if all(n == m or n.startswith(m + "/") and "/" not in n[len(m) + 1:] for n in mods)]
    return len(parents) == 1


def _bad(comps: list[list[str]]) -> list[list[str]]:
    return [
        c
        for c in comps
        if not (len(c) == 2 and frozenset(c) in ALLOWED_PAIRS) and not _one_module(c)
    ]


if __name__ == "__main__":
    sys.exit(main())
