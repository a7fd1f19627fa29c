"""A read-only view of a kernel's tile IR through the shape of Triton's MLIR Python bindings
(`module.walk`, operations, operands and results with ids, regions, blocks and their
arguments), with Triton's TTIR operation names for what tools look for.

For tools that analyse Triton's TTIR rather than compile it: torch's inductor finds which
tensors a user's `@triton.jit` kernel writes (`identify_mutated_tensors`) by walking the module
`ASTSource.make_ir` returns, from each store or atomic back to the kernel's parameters. The view
is built from the IR's own structure (`Kernel.structure()`).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

# tile IR names -> Triton's, where they differ and a tool may look for them. Other operations
# keep tiles' name under Triton's dialect prefix; an analysis traces through them by operands.
_STRUCTURED = {"for": "scf.for", "if": "scf.if", "while": "scf.while", "reduce": "tt.reduce", "scan": "tt.scan"}
_TERMINATORS = {"scf.for": "scf.yield", "scf.if": "scf.yield", "scf.while": "scf.yield",
                "tt.reduce": "tt.reduce.return", "tt.scan": "tt.scan.return"}
_RENAMED = {"func": "tt.func", "store": "tt.store", "return": "tt.return",
            "inline_asm": "tt.elementwise_inline_asm"}

class Value:
    def __init__(self, index: int):
        self._id = index

    def id(self) -> int:
        return self._id


class Region:
    def __init__(self, index: int):
        self._id = index
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
        return bool(self._attrs.get(name, False))

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


def _ttir_name(name: str, facts: Dict[str, Any]) -> str:
    if name in _STRUCTURED:
        return _STRUCTURED[name]
    if name in _RENAMED:
        return _RENAMED[name]
    if name == "atomic":  # every atomic writes (an atomic load too, as far as a tool can tell)
        return "tt.atomic_cas" if facts.get("op") == "cas" else "tt.atomic_rmw"
    return "tt." + name


def view(kernel: Any) -> Module:
    """The view of a kernel (`tiles._tiles.Kernel`): `builtin.module` holding `tt.func`, whose
    body is the kernel's entry block, the parameters its arguments."""
    ids = iter(range(1 << 30))

    def region_of(owner: Operation, block: Tuple[List[int], list]) -> None:
        region = Region(next(ids))
        owner.regions.append(region)
        args, ops = block
        b = Block(next(ids), region, args)
        region.blocks.append(b)
        first_region = len(owner.regions) == 1
        for name, facts, operands, results, regions in ops:
            if name == "yield" and owner.get_name() in _TERMINATORS:
                op_name = "scf.condition" if owner.get_name() == "scf.while" and first_region \
                    else _TERMINATORS[owner.get_name()]
            else:
                op_name = _ttir_name(name, facts)
            op = Operation(op_name, operands, results, b, facts)
            b.ops.append(op)
            for inner in regions:
                region_of(op, inner)

    name, entry = kernel.structure()
    module = Module("builtin.module", [], [], None, {})
    region_of(module, ([], [("func", {"sym_name": name}, [], [], [entry])]))
    return module
