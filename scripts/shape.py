#!/usr/bin/env python3
"""The house's shape rules (ARCHITECTURE.md, issue 12), checked on the Rust sources.

  python3 scripts/shape.py [--max-file 700] [--max-fn 100] [--report]

- every `.rs` file under `crates/` has at most --max-file lines (tests included);
- every function outside tests (files under `tests/`, `benches/`, and `#[cfg(test)]` modules)
  has at most --max-fn lines, counted from its `fn` line to its closing brace;
- inside each crate, the files' imports form no circle: an arrow runs from a file to every
  file whose module it names through `crate::…`, `super::…` or `self::…` paths (in `use`
  items and inline paths); a `mod x;` declaration is not an arrow.

Exit status 0 when every rule holds, 1 otherwise (each breach on its own line, with path and
line). `--report` lists the largest files and longest functions whatever the limits.
It reads text, not the compiler's view: a string that looks like code can mislead it, which the
project's sources avoid.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FN_RE = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:default\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?"
    r"(?:extern\s+\"[^\"]*\"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)"
)
PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP_RE = re.compile(r"\buse\s+(crate|super|self)::\{", re.S)


def strip_code(text: str) -> str:
    """The text with comments, string and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
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
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = len(re.match(r"r(#*)\"", text[i:]).group(1))
            end = '"' + "#" * hashes
            j = text.find(end, i + 2 + hashes)
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i : i + 4]) or (c == "'" and re.match(r"'\\(x..|u\{[0-9a-fA-F]+\})'", text[i:i+12])):
            m = re.match(r"'(\\x..|\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            j = i + len(m.group(0))
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def test_ranges(code: str) -> list[tuple[int, int]]:
    """Line ranges (1-based, inclusive) of `#[cfg(test)]` items."""
    lines = code.split("\n")
    ranges = []
    for idx, line in enumerate(lines):
        if re.match(r"\s*#\[cfg\(test\)\]", line):
            end = block_end(lines, idx)
            ranges.append((idx + 1, end + 1))
    return ranges


def block_end(lines: list[str], start: int) -> int:
    """Index of the line closing the first `{` block at or after `start` (or `;` item end)."""
    depth, opened = 0, False
    for j in range(start, len(lines)):
        for ch in lines[j]:
            if ch == "{":
                depth, opened = depth + 1, True
            elif ch == "}":
                depth -= 1
                if opened and depth == 0:
                    return j
            elif ch == ";" and not opened and j > start:
                return j
    return len(lines) - 1


def functions(code: str) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function with a body."""
    lines = code.split("\n")
    found = []
    for idx, line in enumerate(lines):
        m = FN_RE.match(line)
        if not m:
            continue
        # a declaration without a body (trait method) ends with `;` before any `{`
        depth, opened, end = 0, False, None
        for j in range(idx, len(lines)):
            for ch in lines[j]:
                if ch == "{":
                    depth, opened = depth + 1, True
                elif ch == "}":
                    depth -= 1
                    if opened and depth == 0:
                        end = j
                        break
                elif ch == ";" and not opened:
                    end = -1
                    break
            if end is not None:
                break
        if end is not None and end >= 0:
            found.append((m.group(1), idx + 1, end - idx + 1))
    return found


def module_file(src: Path, parts: list[str]) -> Path | None:
    """The file holding the longest prefix of `parts` as a module path under `src`."""
    for k in range(len(parts), 0, -1):
        base = src.joinpath(*parts[:k])
        for cand in (base.with_suffix(".rs"), base / "mod.rs"):
            if cand.is_file():
                return cand
    return None


def module_parts(src: Path, f: Path) -> list[str]:
    rel = f.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts and parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def expand_groups(code: str) -> list[str]:
    """Paths named in `use crate::{a, b::{c}}` groups, flattened to `crate::a`, `crate::b::c`."""
    paths = []
    for m in USE_GROUP_RE.finditer(code):
        root = m.group(1)
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        inner = code[m.end() : j - 1]
        for item in split_top(inner):
            for p in flatten(item.strip()):
                if p:
                    paths.append(f"{root}::{p}")
    return paths


def split_top(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    out.append(cur)
    return out


def flatten(item: str) -> list[str]:
    if "{" not in item:
        return [re.sub(r"\s+as\s+\w+$", "", item).strip()]
    head, rest = item.split("{", 1)
    head = head.strip().rstrip(":").rstrip(":")
    inner = rest.rsplit("}", 1)[0]
    return [f"{head}::{p}" if p not in ("self",) else head for sub in split_top(inner) for p in flatten(sub.strip())]


def arrows(src: Path, files: list[Path], codes: dict[Path, str]) -> dict[Path, set[Path]]:
    edges: dict[Path, set[Path]] = {f: set() for f in files}
    for f in files:
        here = module_parts(src, f)
        code = codes[f]
        found = [(m.group(1), m.group(2)) for m in PATH_RE.finditer(code)]
        found += [(p.split("::", 1)[0], "::" + p.split("::", 1)[1]) for p in expand_groups(code) if "::" in p]
        for root, tail in found:
            parts = [p for p in tail.split("::") if p]
            if root == "crate":
                base = []
            elif root == "self":
                base = here
            else:  # super, possibly repeated
                base = here[:-1]
                while parts and parts[0] == "super":
                    base, parts = base[:-1], parts[1:]
            target = module_file(src, base + parts) if base + parts else None
            if target is None and not parts:
                target = module_file(src, base)
            if target is not None and target != f:
                edges[f].add(target)
    return edges


def circles(edges: dict[Path, set[Path]]) -> list[list[Path]]:
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v: Path) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-file", type=int, default=700)
    ap.add_argument("--max-fn", type=int, default=100)
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args()
    breaches, sizes, fns = [], [], []
    for crate in sorted((ROOT / "crates").iterdir()):
        if not (crate / "Cargo.toml").is_file():
            continue
        rs = sorted(p for p in crate.rglob("*.rs") if "target" not in p.parts)
        codes = {}
        for f in rs:
            text = f.read_text()
            rel = f.relative_to(ROOT)
            n = text.count("\n") + (0 if text.endswith("\n") else 1)
            sizes.append((n, rel))
            if n > a.max_file:
                breaches.append(f"{rel}: {n} lines (at most {a.max_file})")
            code = strip_code(text)
            codes[f] = code
            in_tests = any(p in ("tests", "benches") for p in f.relative_to(crate).parts)
            skip = test_ranges(code)
            for name, line, length in functions(code):
                if in_tests or any(s <= line <= e for s, e in skip):
                    continue
                fns.append((length, rel, line, name))
                if length > a.max_fn:
                    breaches.append(f"{rel}:{line}: fn {name} is {length} lines (at most {a.max_fn})")
        src = crate / "src"
        if src.is_dir():
            files = [f for f in rs if src in f.parents]
            for comp in circles(arrows(src, files, codes)):
                names = ", ".join(str(p.relative_to(ROOT)) for p in comp)
                breaches.append(f"import circle in {crate.name}: {names}")
    if a.report:
        print("largest files:")
        for n, rel in sorted(sizes, reverse=True)[:15]:
            print(f"  {n:5}  {rel}")
        print("longest functions (tests aside):")
        for length, rel, line, name in sorted(fns, reverse=True)[:15]:
            print(f"  {length:5}  {rel}:{line} {name}")
    for b in breaches:
        print(b)
    print(f"shape: {len(breaches)} breaches")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
