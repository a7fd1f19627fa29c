"""Reads a profile written by `tiles.profiler.finalize` and prints it as a tree with derived
metrics (`time/ms`, `avg_time/us`, `tflop16/s`, `tbyte/s`, ...), as Triton's proton viewer does.

    python -m tiles.profiler.viewer -m tflop16/s,time/ms matmul.hatchet
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, Dict, List, Optional, Tuple

_TIME_UNITS = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}
_RATE_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}


class Node:
    """One node of a profile: its name, summed raw metrics and children."""

    def __init__(self, name: str, metrics: Dict[str, float], children: List["Node"]):
        self.name = name
        self.metrics = metrics
        self.children = children

    def walk(self, depth: int = 0):
        yield self, depth
        for c in self.children:
            yield from c.walk(depth + 1)


def _load(node: Dict[str, Any]) -> Node:
    return Node(node["frame"]["name"], dict(node.get("metrics", {})), [_load(c) for c in node.get("children", [])])


def derive(metrics: Dict[str, float], name: str) -> Optional[float]:
    """The value of a derived metric (`time/ms`, `avg_time/us`, `tflop16/s`, `gbyte/s`, a raw
    metric's own name) from a node's raw metrics; None where it does not apply."""
    ns = metrics.get("time (ns)")
    m = re.fullmatch(r"(avg_)?time/(s|ms|us|ns)", name)
    if m:
        if ns is None:
            return None
        v = ns / _TIME_UNITS[m.group(2)]
        return v / max(metrics.get("count", 1), 1) if m.group(1) else v
    m = re.fullmatch(r"([kmgtp]?)(flop|byte)(\d*)/s", name)
    if m:
        if not ns:
            return None
        if m.group(2) == "byte":
            total = metrics.get("bytes")
        elif m.group(3):
            total = metrics.get(f"flops{m.group(3)}")
        else:
            parts = [v for k, v in metrics.items() if re.fullmatch(r"flops\d*", k)]
            total = sum(parts) if parts else None
        if total is None:
            return None
        return total / (ns / 1e9) / _RATE_UNITS[m.group(1)]
    return metrics.get(name)


def parse(metrics: List[str], filename: str, include: Optional[str] = None, exclude: Optional[str] = None,
          threshold: Optional[float] = None) -> Tuple[Node, List[str]]:
    """Loads `filename`; returns (tree, metric names). `include`/`exclude` are regular
    expressions over node names; `threshold` drops nodes whose first metric is below that
    fraction of the root's."""
    with open(filename) as f:
        data = json.load(f)
    root = _load(data[0] if isinstance(data, list) else data)

    def keep(n: Node) -> bool:
        return (include is None or re.search(include, n.name) is not None) and \
            (exclude is None or re.search(exclude, n.name) is None)

    def prune(n: Node) -> None:
        n.children = [c for c in n.children if keep(c) or any(keep(d) for d, _ in c.walk())]
        for c in n.children:
            prune(c)

    if include or exclude:
        prune(root)
    if threshold is not None and metrics:
        total = derive(root.metrics, metrics[0]) or 0.0

        def cut(n: Node) -> None:
            n.children = [c for c in n.children if (derive(c.metrics, metrics[0]) or 0.0) >= threshold * total]
            for c in n.children:
                cut(c)

        cut(root)
    return root, list(metrics)


def format_tree(tree: Node, metrics: List[str], depth: int = 100, print_sorted: bool = False) -> str:
    lines: List[str] = []

    def label(n: Node) -> str:
        vals = []
        for name in metrics:
            v = derive(n.metrics, name)
            vals.append(f"{v:.3f} ({name})" if v is not None else f"- ({name})")
        return "  ".join(vals) + f"  {n.name}"

    def go(n: Node, prefix: str, d: int) -> None:
        kids = n.children
        if print_sorted and metrics:
            kids = sorted(kids, key=lambda c: -(derive(c.metrics, metrics[0]) or 0.0))
        if d >= depth:
            return
        for i, c in enumerate(kids):
            last = i == len(kids) - 1
            lines.append(prefix + ("└─ " if last else "├─ ") + label(c))
            go(c, prefix + ("   " if last else "│  "), d + 1)

    lines.append(label(tree))
    go(tree, "", 0)
    return "\n".join(lines)


def print_tree(tree: Node, metrics: List[str], depth: int = 100, format: Optional[str] = None,
               print_sorted: bool = False) -> None:
    print(format_tree(tree, metrics, depth, print_sorted))


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tiles.profiler.viewer", description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--metrics", default="time/ms", help="comma-separated metrics (default time/ms)")
    ap.add_argument("-i", "--include")
    ap.add_argument("-e", "--exclude")
    ap.add_argument("-t", "--threshold", type=float)
    ap.add_argument("-d", "--depth", type=int, default=100)
    ap.add_argument("--print-sorted", action="store_true")
    ap.add_argument("file")
    a = ap.parse_args(argv)
    tree, ms = parse(a.metrics.split(","), a.file, a.include, a.exclude, a.threshold)
    print_tree(tree, ms, a.depth, print_sorted=a.print_sorted)


if __name__ == "__main__":
    main(sys.argv[1:])
