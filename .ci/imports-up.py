#!/usr/bin/env python3
"""Lists the imports in src/ that point *up* the codemap.

ARCHITECTURE.md's codemap lists modules from the top (what wires things
together) to the bottom (what everything uses); the names in a row's first
column are its modules, and modules in one row are one layer. Every path a
module names, `use crate::...`, `use super::...` or `crate::x::y` in code,
is mapped to the row of its longest listed prefix; a path into a row above
the importer's is printed, as `importer -> imported  file:line`, with
`(test)` when only `#[cfg(test)]` code has it. Paths inside one row are
not reported. The exceptions ARCHITECTURE.md names ("Where imports point
up") should be exactly these. Not run by CI: a listing, not a check.

    python3 .ci/imports-up.py [ARCHITECTURE.md]
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src"


def codemap_rows(path):
    """The codemap's rows, top first: a list of sets of module paths."""
    text = pathlib.Path(path).read_text()
    section = text.split("## Codemap", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| Module") or line.startswith("|---"):
            continue
        first = line.split("|")[1]
        names = set()
        for name in re.findall(r"`([^`]+)`", first):
            if name in ("src/main.rs", "src/commands/"):
                names.add("<bin>")
            elif re.fullmatch(r"[a-z_][a-z0-9_]*(::[a-z_][a-z0-9_]*)*", name):
                names.add(name)
        if names:
            rows.append(names)
    return rows


def strip(code):
    """The code with comments, strings and char literals blanked (lines kept)."""
    out = []
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            j = code.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif code.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if code.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif code.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * code.count("\n", i, j))
            i = j
        elif (m := re.match(r'b?r(#*)"', code[i:])) and (i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_")):
            end = '"' + m.group(1)
            j = code.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * code.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and code[j] != '"':
                j += 2 if code[j] == "\\" else 1
            out.append('""' + "\n" * code.count("\n", i, j))
            i = j + 1
        elif c == "'" and (m := re.match(r"'(\\.[^']*|[^\\'])'", code[i:])):
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand(path):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    path = re.sub(r"\s+", "", path)
    m = re.match(r"^([^{]*)\{(.*)\}$", path)
    if not m:
        return [path]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    return [x for p in parts if p for x in expand(prefix + p)]


def module_of(file):
    rel = file.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[0] in ("main", "commands"):
        return ["<bin>"]
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return parts


def test_files():
    """Files that are whole `#[cfg(test)] mod x;` modules."""
    tests = set()
    for file in SRC.rglob("*.rs"):
        code = strip(file.read_text())
        for m in re.finditer(r"#\[cfg\([^\]]*\btest\b[^\]]*\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code):
            base = file.parent if file.name in ("mod.rs", "lib.rs", "main.rs") else file.with_suffix("")
            for cand in (base / (m.group(1) + ".rs"), base / m.group(1) / "mod.rs"):
                tests.add(cand)
    return tests


def paths_in(file, module):
    """(line, importer module, path as crate-absolute parts, test?) for each path named."""
    code = strip(file.read_text())
    # Inline modules and #[cfg(test)] items: one entry per open brace,
    # (the inline module's name or None, whether it is test code).
    stack = []
    pending_test = False
    results = []
    line_starts = [0] + [m.end() for m in re.finditer("\n", code)]

    def line_of(p):
        lo, hi = 0, len(line_starts)
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if line_starts[mid] <= p:
                lo = mid
            else:
                hi = mid
        return lo + 1

    def here():
        names = [name for name, _ in stack if name]
        return module + names, any(test for _, test in stack)

    token = re.compile(
        r"#\[cfg\([^\]]*\btest\b[^\]]*\)\]|\bmod\s+(\w+)\s*\{|\buse\s+([^;]*);|\b(crate|super|self)((?:::\w+)+)|[{};]"
    )
    for m in token.finditer(code):
        t = m.group(0)
        if t.startswith("#[cfg("):
            pending_test = True
        elif m.group(1):
            stack.append((m.group(1), pending_test))
            pending_test = False
        elif m.group(2) is not None:
            mod, test = here()
            test = test or pending_test
            pending_test = False
            for p in expand(re.sub(r"\s+as\s+\w+", "", m.group(2))):
                absolute = resolve(p.split("::"), mod)
                if absolute:
                    results.append((line_of(m.start()), mod, absolute, test))
        elif m.group(3):
            mod, test = here()
            absolute = resolve([m.group(3)] + m.group(4).split("::")[1:], mod)
            if absolute:
                results.append((line_of(m.start()), mod, absolute, test))
        elif t == "{":
            stack.append((None, pending_test))
            pending_test = False
        elif t == "}":
            if stack:
                stack.pop()
        elif t == ";":
            pending_test = False
    return results


def resolve(parts, module):
    """A path's parts, made crate-absolute from `module`; None if external."""
    if not parts:
        return None
    if parts[0] == "crate":
        return parts[1:]
    if parts[0] in ("super", "self"):
        base = list(module)
        while parts and parts[0] in ("super", "self"):
            if parts[0] == "super":
                base = base[:-1]
            parts = parts[1:]
        return base + parts
    return None


def row_of(parts, rows):
    """The index of the row listing the longest prefix of `parts`."""
    best, best_len = None, -1
    for i, names in enumerate(rows):
        for name in names:
            segs = name.split("::")
            if parts[: len(segs)] == segs and len(segs) > best_len:
                best, best_len = i, len(segs)
    return best, best_len


def main():
    rows = codemap_rows(sys.argv[1] if len(sys.argv) > 1 else ROOT / "ARCHITECTURE.md")
    tests = test_files()
    modules = {tuple(module_of(f)) for f in SRC.rglob("*.rs")}
    found = []
    unmapped = set()
    for file in sorted(SRC.rglob("*.rs")):
        module = module_of(file)
        for line, mod, target, test in paths_in(file, module):
            if mod == ["<bin>"] or not target:
                continue
            src_row, _ = row_of(mod, rows)
            dst_row, _ = row_of(target, rows)
            if src_row is None:
                unmapped.add("::".join(mod))
                continue
            if dst_row is None:
                unmapped.add("::".join(target))
                continue
            if dst_row < src_row:
                importer = "::".join(mod)
                # The module named, not the item: its longest prefix with a file.
                n = max(i for i in range(1, len(target) + 1) if tuple(target[:i]) in modules)
                imported = "::".join(target[:n])
                where = f"{file.relative_to(ROOT)}:{line}"
                found.append((importer, imported, where, test or file in tests))
    seen = set()
    for importer, imported, where, test in sorted(found):
        key = (importer, imported, where)
        if key in seen:
            continue
        seen.add(key)
        print(f"{importer} -> {imported}  {where}{'  (test)' if test else ''}")
    if unmapped:
        print("not in the codemap:", ", ".join(sorted(unmapped)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
