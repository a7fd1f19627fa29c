"""A read-only view of a kernel's tile IR through the shape of Triton's MLIR Python bindings
(`module.walk`, operations, operands and results with ids, regions, blocks and their
arguments), with Triton's TTIR operation names for what tools look for.

For tools that analyse Triton's TTIR rather than compile it: torch's inductor finds which
tensors a user's `@triton.jit` kernel writes (`identify_mutated_tensors`) by walking the module
`ASTSource.make_ir` returns, from each store or atomic back to the kernel's parameters. The view
is built from the IR's text form (`Kernel.text()`), which every IR has.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional

# tile IR names -> Triton's, where they differ and a tool may look for them. Other operations
# keep tiles' name under Triton's dialect prefix; an analysis traces through them by operands.
_STRUCTURED = {"for": "scf.for", "if": "scf.if", "while": "scf.while", "reduce": "tt.reduce", "scan": "tt.scan"}
_TERMINATORS = {"scf.for": "scf.yield", "scf.if": "scf.yield", "scf.while": "scf.yield",
                "tt.reduce": "tt.reduce.return", "tt.scan": "tt.scan.return"}
_RENAMED = {"store": "tt.store", "return": "tt.return", "inline_asm": "tt.elementwise_inline_asm"}
# Reads of memory that tiles spells as atomics; every other atomic writes.
_ATOMIC_READS = ("atomic_load", "atomic_poll")

_VALUE = re.compile(r"%(\d+)")


class Value:
    def __init__(self, index: int):
        self._id = index

    def id(self) -> int:
        return self._id


class Region:
    def __init__(self, index: int, owner: "Operation"):
        self._id = index
        self.owner = owner
        self.blocks: List[Block] = []

    def id(self) -> int:
        return self._id


class Block:
    def __init__(self, index: int, region: Optional[Region], args: List[int]):
        self._id = index
        self._region = region
        self._args = [Value(a) for a in args]
        self.ops: List[Operation] = []

    def id(self) -> int:
        return self._id

    def get_num_arguments(self) -> int:
        return len(self._args)

    def get_argument(self, i: int) -> Value:
        return self._args[i]

    def get_parent(self) -> Optional[Region]:
        return self._region


class Operation:
    def __init__(self, name: str, operands: List[int], results: List[int], block: Optional[Block],
                 attrs: Dict[str, Any]):
        self._name = name
        self._operands = [Value(v) for v in operands]
        self._results = [Value(v) for v in results]
        self._block = block
        self._attrs = attrs
        self.regions: List[Region] = []

    def get_name(self) -> str:
        return self._name

    def get_num_operands(self) -> int:
        return len(self._operands)

    def get_operand(self, i: int) -> Value:
        return self._operands[i]

    def get_num_results(self) -> int:
        return len(self._results)

    def get_result(self, i: int) -> Value:
        return self._results[i]

    def get_num_regions(self) -> int:
        return len(self.regions)

    def get_region(self, i: int) -> Region:
        return self.regions[i]

    def get_block(self) -> Optional[Block]:
        return self._block

    def get_str_attr(self, name: str) -> Optional[str]:
        v = self._attrs.get(name)
        return None if v is None else str(v)

    def get_bool_attr(self, name: str) -> bool:
        return str(self._attrs.get(name, "false")).lower() == "true"

    def get_flat_symbol_ref_attr(self, name: str) -> Optional[str]:
        return self.get_str_attr(name)

    def walk(self, fn: Callable[["Operation"], Any]) -> None:
        """Post-order, as MLIR's default walk: nested operations before their parent."""
        for region in self.regions:
            for block in region.blocks:
                for op in block.ops:
                    op.walk(fn)
        fn(self)


class Module(Operation):
    """What `ASTSource.make_ir` returns: `builtin.module` holding one `tt.func`."""

    def verify(self) -> bool:
        return True

    def __str__(self) -> str:
        return self.text

    text = ""


def _attributes(text: str) -> Dict[str, str]:
    """`a = 1, b = "x", c = [1, 0], pure` -> {a: "1", b: "x", c: "[1, 0]", pure: "true"}: values
    as written (strings unquoted), flags true. Items split at commas outside strings and
    brackets."""
    items, depth, quoted, start, i = [], 0, False, 0, 0
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c in "[(<{":
            depth += 1
        elif c in "])>}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
        i += 1
    items.append(text[start:])
    out: Dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not key:
            continue
        if not eq:
            out[key] = "true"
        else:
            out[key] = value[1:-1] if value.startswith('"') and value.endswith('"') else value
    return out


def _split_braces(rest: str):
    """`{attrs} tail` -> (attrs text, tail); strings inside the braces may hold anything."""
    if not rest.startswith("{"):
        return "", rest
    depth, quoted, i = 0, False, 0
    while i < len(rest):
        c = rest[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return rest[1:i], rest[i + 1:].strip()
        i += 1
    raise ValueError(f"unbalanced attributes: {rest!r}")


def _strip_loc(line: str) -> str:
    return re.sub(r"\s+loc\([^)]*\)\s*$", "", line)


def _ttir_name(name: str, attrs: Dict[str, str]) -> str:
    if name in _STRUCTURED:
        return _STRUCTURED[name]
    if name in _RENAMED:
        return _RENAMED[name]
    if name == "atomic":
        return "tt.atomic_cas" if attrs.get("op") == "cas" else "tt.atomic_rmw"
    if name.startswith("atomic_") and name not in _ATOMIC_READS:
        return "tt.atomic_rmw"
    return "tt." + name


def parse_module(text: str) -> Module:
    """The view of a kernel's IR text (`Kernel.text()`)."""
    ids = iter(range(1 << 30))
    module = Module("builtin.module", [], [], None, {})
    module.text = text
    top = Region(next(ids), module)
    module.regions.append(top)
    top_block = Block(next(ids), top, [])
    top.blocks.append(top_block)
    lines = [ln.strip() for ln in text.splitlines()]
    header = next((ln for ln in lines if ln.startswith("kernel @")), None)
    if header is None:
        raise ValueError("no kernel in the IR text")
    m = re.match(r"kernel @(\w+)\((.*)\)[^)]*\{$", header)
    if m is None:
        raise ValueError(f"unreadable kernel header: {header!r}")
    params = [int(p) for p in re.findall(r"%(\d+):", m.group(2))]
    func = Operation("tt.func", [], [], top_block, {"sym_name": m.group(1)})
    top_block.ops.append(func)
    body = Region(next(ids), func)
    func.regions.append(body)
    entry = Block(next(ids), body, params)
    body.blocks.append(entry)
    # The open structured operations, innermost last, with the block ops go into.
    stack: List[Operation] = [func]
    block = entry
    for line in lines[lines.index(header) + 1:]:
        if not line or line.startswith("#"):
            continue
        line = _strip_loc(line)
        if line.startswith("}"):
            op = stack[-1]
            rest = line[1:].strip()
            if rest.endswith("{"):  # the next region of the same operation: `} (%a: t) {`
                region = Region(next(ids), op)
                op.regions.append(region)
                block = Block(next(ids), region, [int(a) for a in re.findall(r"%(\d+):", rest)])
                region.blocks.append(block)
                continue
            stack.pop()
            if not stack:
                break
            parent_region = stack[-1].regions[-1]
            block = parent_region.blocks[-1]
            continue
        results: List[int] = []
        rm = re.match(r"^((?:%\d+(?:,\s*)?)+)\s*=\s*(.*)$", line)
        if rm:
            results = [int(v) for v in _VALUE.findall(rm.group(1))]
            line = rm.group(2)
        nm = re.match(r"^([A-Za-z_][\w.]*)\s*(.*)$", line)
        if nm is None:
            raise ValueError(f"unreadable operation: {line!r}")
        name, rest = nm.group(1), nm.group(2)
        attr_text, rest = _split_braces(rest)
        attrs = _attributes(attr_text)
        opens = rest.endswith("{")
        operand_text = re.split(r"\s:\s|\s\(|^\(|\s\{$|^\{$", rest, maxsplit=1)[0]
        operands = [int(v) for v in _VALUE.findall(operand_text)]
        op_name = _ttir_name(name, attrs)
        if name == "yield" and stack[-1] is not func:
            owner = stack[-1]
            first_region = owner.regions and owner.regions[0] is block.get_parent()
            op_name = "scf.condition" if owner.get_name() == "scf.while" and first_region \
                else _TERMINATORS[owner.get_name()]
        op = Operation(op_name, operands, results, block, attrs)
        block.ops.append(op)
        if opens:
            region = Region(next(ids), op)
            op.regions.append(region)
            args = re.findall(r"%(\d+):", rest[len(operand_text):])
            block = Block(next(ids), region, [int(a) for a in args])
            region.blocks.append(block)
            stack.append(op)
    return module
