//! A kernel function: arenas of values, ops, blocks and regions, plus interned layouts.

use crate::entities::{Block, LayoutId, Op, PrimaryMap, Region, Value};
use crate::layout::Layout;
use crate::ops::OpKind;
use crate::types::Type;
use std::collections::HashMap;

/// Where an op came from in the kernel's source (1-based line and column; 0 when unknown).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Loc {
    /// Line in the source file.
    pub line: u32,
    /// Column in that line.
    pub col: u32,
}

/// How a value is defined.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum ValueDef {
    /// Result `n` of an op.
    Result(Op, u32),
    /// Argument `n` of a block.
    Arg(Block, u32),
}

/// A value's type and definition.
#[derive(Clone, Debug)]
pub struct ValueData {
    /// The value's type.
    pub ty: Type,
    /// Where it is defined.
    pub def: ValueDef,
}

/// An op's kind, operands, results and regions.
#[derive(Clone, Debug)]
pub struct OpData {
    /// What the op does.
    pub kind: OpKind,
    /// Values it reads.
    pub operands: Vec<Value>,
    /// Values it defines.
    pub results: Vec<Value>,
    /// Regions it owns (`for`: the body; `if`: then, else).
    pub regions: Vec<Region>,
    /// Source location.
    pub loc: Loc,
}

/// A block's arguments and ops, in order.
#[derive(Clone, Debug, Default)]
pub struct BlockData {
    /// Block arguments.
    pub args: Vec<Value>,
    /// Ops in execution order.
    pub ops: Vec<Op>,
}

/// A region: one block (control flow is structured).
#[derive(Clone, Debug)]
pub struct RegionData {
    /// The region's block.
    pub block: Block,
}

/// Facts about a kernel parameter that the caller promised (specialisation).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Param {
    /// The Python name.
    pub name: String,
    /// Integers: the value is a multiple of this. Pointers: the address is (in bytes).
    pub divisibility: u32,
}

/// A kernel.
#[derive(Clone, Debug)]
pub struct Function {
    /// Symbol name of the kernel.
    pub name: String,
    /// The parameters, in order; their values are the entry block's arguments.
    pub params: Vec<Param>,
    /// All values.
    pub values: PrimaryMap<Value, ValueData>,
    /// All ops.
    pub ops: PrimaryMap<Op, OpData>,
    /// All blocks.
    pub blocks: PrimaryMap<Block, BlockData>,
    /// All regions.
    pub regions: PrimaryMap<Region, RegionData>,
    /// The entry block.
    pub entry: Block,
    /// Interned layouts.
    pub layouts: PrimaryMap<LayoutId, Layout>,
    layout_index: HashMap<Layout, LayoutId>,
    /// Warps per program.
    pub num_warps: u32,
    /// Pipeline depth for loops that feed `dot` (Triton's `num_stages`; 1 turns pipelining
    /// off). Loops may ask for their own (`For { stages }`).
    pub num_stages: u32,
    /// The file the kernel came from, for diagnostics.
    pub file: String,
    /// Strings referenced by ops (print prefixes, assert messages).
    pub strings: Vec<String>,
}

impl Function {
    /// Triton's default pipeline depth on NVIDIA GPUs.
    pub const DEFAULT_NUM_STAGES: u32 = 3;

    /// An empty kernel with an empty entry block.
    pub fn new(name: &str, num_warps: u32) -> Function {
        let mut blocks = PrimaryMap::default();
        let entry = blocks.push(BlockData::default());
        Function {
            name: name.to_string(),
            params: Vec::new(),
            values: PrimaryMap::default(),
            ops: PrimaryMap::default(),
            blocks,
            regions: PrimaryMap::default(),
            entry,
            layouts: PrimaryMap::default(),
            layout_index: HashMap::new(),
            num_warps,
            num_stages: Function::DEFAULT_NUM_STAGES,
            file: String::new(),
            strings: Vec::new(),
        }
    }

    /// Adds a string to the table; returns its index.
    pub fn intern_string(&mut self, s: &str) -> u32 {
        if let Some(i) = self.strings.iter().position(|x| x == s) {
            return i as u32;
        }
        self.strings.push(s.to_string());
        (self.strings.len() - 1) as u32
    }

    /// The type of a value.
    pub fn ty(&self, v: Value) -> &Type {
        &self.values[v].ty
    }

    /// The op whose result `v` is (None for a block argument).
    pub fn def_op(&self, v: Value) -> Option<Op> {
        match self.values[v].def {
            ValueDef::Result(op, _) => Some(op),
            ValueDef::Arg(..) => None,
        }
    }

    /// Where `op` stands among `block`'s ops, if it is one of them.
    pub fn position(&self, block: Block, op: Op) -> Option<usize> {
        self.blocks[block].ops.iter().position(|&o| o == op)
    }

    /// Every live `for` loop, outer loops before the loops they contain.
    pub fn for_loops(&self) -> Vec<Op> {
        let mut out = Vec::new();
        self.walk(|op| {
            if matches!(self.ops[op].kind, OpKind::For { .. }) {
                out.push(op);
            }
        });
        out
    }

    /// The block holding each op, for every block's ops.
    pub fn op_blocks(&self) -> std::collections::HashMap<Op, Block> {
        let mut parent = std::collections::HashMap::new();
        for (b, data) in self.blocks.iter() {
            for &op in &data.ops {
                parent.insert(op, b);
            }
        }
        parent
    }

    /// The layout behind a value's type, if assigned.
    pub fn layout_of(&self, v: Value) -> Option<&Layout> {
        self.values[v].ty.layout.map(|l| &self.layouts[l])
    }

    /// Interns a layout.
    pub fn intern_layout(&mut self, l: Layout) -> LayoutId {
        if let Some(&id) = self.layout_index.get(&l) {
            return id;
        }
        let id = self.layouts.push(l.clone());
        self.layout_index.insert(l, id);
        id
    }

    /// Adds a parameter (an entry block argument).
    pub fn add_param(&mut self, name: &str, ty: Type, divisibility: u32) -> Value {
        let entry = self.entry;
        let v = self.add_block_arg(entry, ty);
        self.params.push(Param {
            name: name.to_string(),
            divisibility,
        });
        v
    }

    /// Adds an argument to a block.
    pub fn add_block_arg(&mut self, b: Block, ty: Type) -> Value {
        let n = self.blocks[b].args.len() as u32;
        let v = self.values.push(ValueData {
            ty,
            def: ValueDef::Arg(b, n),
        });
        self.blocks[b].args.push(v);
        v
    }

    /// Creates an op (not yet placed in a block) with results of the given types.
    pub fn create_op(
        &mut self,
        kind: OpKind,
        operands: Vec<Value>,
        result_types: &[Type],
        loc: Loc,
    ) -> Op {
        let op = self.ops.push(OpData {
            kind,
            operands,
            results: Vec::new(),
            regions: Vec::new(),
            loc,
        });
        for (i, ty) in result_types.iter().enumerate() {
            let v = self.values.push(ValueData {
                ty: *ty,
                def: ValueDef::Result(op, i as u32),
            });
            self.ops[op].results.push(v);
        }
        op
    }

    /// Appends a result of type `ty` to `op`.
    pub fn add_result(&mut self, op: Op, ty: Type) -> Value {
        let n = self.ops[op].results.len() as u32;
        let v = self.values.push(ValueData {
            ty,
            def: ValueDef::Result(op, n),
        });
        self.ops[op].results.push(v);
        v
    }

    /// The body of the `for` loop `for_op` and the `yield` that ends it (None for a body that
    /// does not end in one).
    pub fn loop_body(&self, for_op: Op) -> Option<(Block, Op)> {
        let body = self.region_block(for_op, 0);
        let &last = self.blocks[body].ops.last()?;
        (self.ops[last].kind == OpKind::Yield).then_some((body, last))
    }

    /// Adds a value the `for` loop `for_op` carries, starting at `init`: the body's new
    /// argument and the loop's new result, both of type `ty`. The caller appends the value's
    /// next iteration to the body's yield.
    pub fn add_carried(&mut self, for_op: Op, init: Value, ty: Type) -> (Value, Value) {
        let body = self.region_block(for_op, 0);
        self.ops[for_op].operands.push(init);
        let arg = self.add_block_arg(body, ty);
        (arg, self.add_result(for_op, ty))
    }

    /// Creates a region with a fresh block, owned by `op`.
    pub fn add_region(&mut self, op: Op) -> Block {
        let block = self.blocks.push(BlockData::default());
        let r = self.regions.push(RegionData { block });
        self.ops[op].regions.push(r);
        block
    }

    /// The block of region `i` of `op`.
    pub fn region_block(&self, op: Op, i: usize) -> Block {
        self.regions[self.ops[op].regions[i]].block
    }

    /// Result `i` of `op`.
    pub fn result(&self, op: Op, i: usize) -> Value {
        self.ops[op].results[i]
    }

    /// Visits every op reachable from the entry block, parents before the ops they contain.
    pub fn walk(&self, mut f: impl FnMut(Op)) {
        for &op in &self.blocks[self.entry].ops {
            self.walk_op(op, &mut f);
        }
    }

    /// Visits `op` and every op in its regions, parents first.
    pub fn walk_op(&self, op: Op, mut f: impl FnMut(Op)) {
        fn go(func: &Function, op: Op, f: &mut dyn FnMut(Op)) {
            f(op);
            for &r in &func.ops[op].regions {
                for &o in &func.blocks[func.regions[r].block].ops {
                    go(func, o, f);
                }
            }
        }
        go(self, op, &mut f);
    }

    /// Every live op in program order (parents before their regions' ops).
    pub fn ops_in_order(&self) -> Vec<Op> {
        let mut out = Vec::new();
        self.walk(|op| out.push(op));
        out
    }

    /// Appends to `out` every value `op` reads: its operands, then those of the ops in its
    /// regions (a loop or branch reads what its body reads from outside).
    pub fn reads(&self, op: Op, out: &mut Vec<Value>) {
        out.extend_from_slice(&self.ops[op].operands);
        for &r in &self.ops[op].regions {
            for &o in &self.blocks[self.regions[r].block].ops {
                self.reads(o, out);
            }
        }
    }

    /// How many times each value is used by live ops.
    pub fn use_counts(&self) -> crate::entities::SecondaryMap<Value, u32> {
        let mut uses = crate::entities::SecondaryMap::with_default(0);
        self.walk(|op| {
            for &v in &self.ops[op].operands {
                let n = uses[v] + 1;
                uses.set(v, n);
            }
        });
        uses
    }

    /// Replaces every use of `from` by `to` in live ops.
    pub fn replace_uses(&mut self, from: Value, to: Value) {
        let ops = self.ops_in_order();
        for op in ops {
            for v in self.ops[op].operands.iter_mut() {
                if *v == from {
                    *v = to;
                }
            }
        }
    }
}
