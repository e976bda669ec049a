#!/usr/bin/env python3
"""The shape of the code, for a reviewer: the largest modules and functions under runner/ (lines, with
blank and comment lines), so a change that is meant to make rooms smaller can show that it did.

    python scripts/code_shape.py [ROOT] [--top N]
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def functions(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
            out.append((node.end_lineno - node.lineno + 1, f"{path}:{node.lineno} {node.name}"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=".")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    root = Path(args.root)
    files = sorted(p for p in (root / "runner").rglob("*.py") if "bench" not in p.parts)
    sizes = sorted(((len(p.read_text().splitlines()), str(p.relative_to(root))) for p in files), reverse=True)
    print(f"controller modules (runner/ without the benchmark, runner/bench/): {len(files)} files, {sum(n for n, _ in sizes)} lines")
    print(f"largest modules (top {args.top}):")
    for n, name in sizes[:args.top]:
        print(f"  {n:5d}  {name}")
    funcs = sorted((f for p in files for f in functions(p)), reverse=True)
    print(f"largest functions (top {args.top}):")
    for n, name in funcs[:args.top]:
        print(f"  {n:5d}  {name.replace(str(root) + '/', '')}")


if __name__ == "__main__":
    main()
