//! Layout assignment with coalescing: gives every tile a distributed layout.
//!
//! 1. **Anchors (coalescing).** Each load and store of a tile gets a blocked layout in which
//!    a thread holds `vec` elements contiguous in memory along the pointer's most contiguous
//!    dimension. `vec` is the largest power of two that axis info proves contiguous, aligned
//!    to `vec × element size` bytes and uniformly masked, at most 16 bytes, and no more than
//!    the tile gives each thread. The access is then one 128-bit (or narrower) instruction.
//! 2. **Backward propagation.** Ops are visited users-first. A value takes the layout its
//!    users demand; an op passes the demand to its operands (`expand_dims` demands a slice
//!    of its result's layout). Loop-carried values take their later users' demand, or the
//!    anchor layout of their shape.
//! 3. **Conflicts.** A cheap op (constants, `arange`, splats, index arithmetic) demanded in
//!    several layouts is recomputed once per layout; any other value gets one
//!    `convert_layout` per extra layout, placed right after its definition.
//! 4. **Write back.** Layouts are interned and written into the value types, and each memory
//!    op records its vector width.

use crate::axis_info::AxisInfoMap;
use std::collections::HashMap;
use tile_ir::{
    Block, BlockedLayout, DType, DotPrecision, Elem, Function, Layout, LayoutId, MemAttrs,
    MmaLayout, Op, OpKind, SecondaryMap, Shape, Value, ValueDef,
};

struct Assigner<'a> {
    func: &'a mut Function,
    num_warps: u32,
    demands: HashMap<Value, Vec<(LayoutId, Op, usize)>>,
    decided: SecondaryMap<Value, Option<LayoutId>>,
    op_block: HashMap<Op, Block>,
    shape_default: HashMap<Shape, LayoutId>,
    anchors: HashMap<Op, (LayoutId, u8)>,
    /// The kernel's axis info (accesses' provable vector widths, [`proven_vector`]).
    axis: &'a AxisInfoMap,
    /// Values computed from a `dot` result (through elementwise ops, loops and branches),
    /// with the dot's layout: they stay in it, so conversions happen as late as possible.
    dot_anchor: SecondaryMap<Value, Option<LayoutId>>,
    /// Whether `dot`s may run on warpgroups (`wgmma`).
    warpgroup_mma: bool,
    /// Whether fp64 `dot`s may run on tensor cores (`mma.sync` f64, sm_80 and later).
    f64_mma: bool,
    /// [`crate::shape_ops_in_registers`], read once.
    shape_ops_in_registers: bool,
}

/// Whether a `dot` of this element type and precision runs on tensor cores (fp64 only where
/// the target has them for it: `f64_mma`).
fn uses_tensor_cores(elem: Elem, precision: DotPrecision, f64_mma: bool) -> bool {
    match elem.dtype() {
        Some(DType::F16 | DType::BF16 | DType::I8) => true,
        Some(DType::F32) => precision != DotPrecision::Ieee,
        Some(DType::F64) => f64_mma,
        _ => false,
    }
}

/// Consecutive K elements per 32-bit register of a tensor-core operand (one for fp64, whose
/// elements take two registers each and sit where tf32's do).
fn k_width(elem: Elem) -> u32 {
    (32 / elem.dtype().map_or(32, |d| d.bits()).max(1)).max(1)
}

fn floor_pow2(n: u64) -> u64 {
    if n == 0 {
        1
    } else {
        1 << (63 - n.leading_zeros())
    }
}

/// The coalesced layout and vector width for an access through a pointer tile.
fn coalesced(
    func: &Function,
    axis: &AxisInfoMap,
    ptr: Value,
    mask: Option<Mask>,
    num_warps: u32,
) -> (BlockedLayout, u8) {
    let ty = *func.ty(ptr);
    let shape = ty.shape.dims();
    let rank = shape.len();
    let info = axis.get(ptr);
    let mut order: Vec<u32> = (0..rank as u32).rev().collect();
    order.sort_by_key(|&d| {
        std::cmp::Reverse(info.contiguity[d as usize].min(shape[d as usize] as u64))
    });
    let fast = order[0] as usize;
    // No wider than what leaves every thread an element (no replication).
    let numel = ty.shape.numel();
    let vec =
        proven_vector(func, axis, ptr, mask, fast).min((numel / (32 * num_warps as u64)).max(1));
    let vec = floor_pow2(vec) as u32;
    (
        BlockedLayout::default_for(shape, num_warps, &order, vec),
        vec as u8,
    )
}

/// An access's mask, and whether a vector may read past its selected elements (a load of
/// [`MemAttrs::whole_granules`]): then a mask true on a prefix of the vector is enough.
#[derive(Copy, Clone)]
struct Mask {
    value: Value,
    whole_granules: bool,
}

impl Mask {
    fn of(func: &Function, op: Op) -> Option<Mask> {
        let d = &func.ops[op];
        let (value, whole_granules) = match d.kind {
            OpKind::Load(m) if m.masked => (d.operands[1], m.whole_granules),
            OpKind::Store(m) if m.masked => (d.operands[2], false),
            OpKind::Atomic(a) if a.masked => (*d.operands.last()?, false),
            _ => return None,
        };
        Some(Mask {
            value,
            whole_granules,
        })
    }

    /// The runs along `d` a vector access may span under this mask.
    fn runs(&self, axis: &AxisInfoMap, d: usize) -> u64 {
        let info = axis.get(self.value);
        if self.whole_granules {
            info.prefix[d]
        } else {
            info.constancy[d]
        }
    }
}

/// The widest access along dimension `d` of a pointer tile that its axis info proves
/// contiguous, aligned and uniformly masked (at most 16 bytes), whatever the layout.
fn proven_vector(
    func: &Function,
    axis: &AxisInfoMap,
    ptr: Value,
    mask: Option<Mask>,
    d: usize,
) -> u64 {
    let ty = func.ty(ptr);
    let info = axis.get(ptr);
    let eb = match ty.elem {
        Elem::Ptr(t) => t.bytes() as u64,
        Elem::Num(_) => 8,
    };
    let mut vec = info.contiguity[d]
        .min(ty.shape.dims()[d] as u64)
        .min((info.divisibility[d] / eb).max(1))
        .min((16 / eb).max(1));
    if let Some(m) = mask {
        vec = vec.min(m.runs(axis, d).max(1));
    }
    floor_pow2(vec)
}

/// Whether recomputing the op in another layout costs less than converting its result.
fn is_cheap(kind: &OpKind) -> bool {
    matches!(
        kind,
        OpKind::Constant(_)
            | OpKind::Arange { .. }
            | OpKind::Splat
            | OpKind::ExpandDims(_)
            | OpKind::Broadcast
    ) || (kind.is_elementwise() && !matches!(kind, OpKind::Unary(_)))
}

/// Whether `v` holds one value in every element: a splat of a scalar or a constant tile.
pub(crate) fn is_uniform(func: &Function, v: Value) -> bool {
    func.def_op(v)
        .is_some_and(|op| matches!(func.ops[op].kind, OpKind::Splat | OpKind::Constant(_)))
}

/// Assigns layouts to every tile of `func`, for tensor cores driven by warps (`mma.sync`).
pub fn assign_layouts(func: &mut Function, axis: &AxisInfoMap) {
    assign_layouts_for(func, axis, false, false)
}

/// [`assign_layouts`]; with `warpgroup_mma` (Hopper, `sm_90a`), 16-bit `dot`s whose shapes
/// allow it get the warpgroup `#mma` layout (version 3) and run on `wgmma`; with `f64_mma`
/// (sm_80 and later), fp64 `dot`s get the `mma.sync` layout.
pub fn assign_layouts_for(
    func: &mut Function,
    axis: &AxisInfoMap,
    warpgroup_mma: bool,
    f64_mma: bool,
) {
    let num_warps = func.num_warps;
    let mut op_block = HashMap::new();
    for (b, data) in func.blocks.iter() {
        for &op in &data.ops {
            op_block.insert(op, b);
        }
    }
    let mut a = Assigner {
        func,
        num_warps,
        warpgroup_mma,
        f64_mma,
        demands: HashMap::new(),
        decided: SecondaryMap::with_default(None),
        op_block,
        shape_default: HashMap::new(),
        anchors: HashMap::new(),
        axis,
        dot_anchor: SecondaryMap::with_default(None),
        shape_ops_in_registers: crate::shape_ops_in_registers(),
    };
    a.find_anchors();
    let entry = a.func.entry;
    a.find_dot_anchors(entry);
    a.find_dot_anchors(entry);
    let entry = a.func.entry;
    a.visit_block(entry);
    a.resolve_conflicts();
    a.write_back();
    mark_uniform_compares(func, axis);
    mark_load_runs(func, axis);
}

/// Records on each element-wise load the runs of elements that read one address under one
/// mask (`b_s[offs_n // 128]`: one scale per 128 columns), where its layout gives a thread
/// several elements of a run: codegen then loads each run once per thread.
fn mark_load_runs(func: &mut Function, axis: &AxisInfoMap) {
    for op in func.ops_in_order() {
        let OpKind::Load(m) = func.ops[op].kind else {
            continue;
        };
        if m.vector != 1 || m.volatile {
            continue;
        }
        let data = &func.ops[op];
        let ty = *func.ty(data.results[0]);
        let Some(layout) = func.layout_of(data.results[0]) else {
            continue;
        };
        let dims = ty.shape.dims();
        let mut runs = [0u8; tile_ir::MAX_RANK];
        for (d, &n) in dims.iter().enumerate() {
            let mut run = (n as u64).min(128);
            for &v in &data.operands {
                run = run.min(axis.get(v).constancy[d]);
            }
            let run = floor_pow2(run.max(1));
            if run > 1 && (n as u64).is_multiple_of(run) {
                runs[d] = run as u8;
            }
        }
        if runs.iter().all(|&r| r <= 1) {
            continue;
        }
        let shared = layout
            .run_representatives(dims, &runs)
            .iter()
            .enumerate()
            .any(|(i, &r)| r != i);
        if shared {
            func.ops[op].kind = OpKind::Load(MemAttrs { runs, ..m });
        }
    }
}

/// Records on each comparison how many consecutive elements along its layout's contiguous
/// dimension compare alike (a mask `offs < n` with `n` divisible by the run), so codegen
/// compares once per run, as the loads and stores it guards are vectorised.
fn mark_uniform_compares(func: &mut Function, axis: &AxisInfoMap) {
    for op in func.ops_in_order() {
        let OpKind::Compare(pred, _) = func.ops[op].kind else {
            continue;
        };
        let r = func.ops[op].results[0];
        let Some((dim, n)) = func.layout_of(r).and_then(|l| l.contiguous_dim()) else {
            continue;
        };
        let info = axis.get(r);
        let run = info.constancy[dim].min(n as u64).min(128);
        if run > 1 {
            func.ops[op].kind = OpKind::Compare(pred, floor_pow2(run) as u8);
        }
    }
}

impl Assigner<'_> {
    fn find_anchors(&mut self) {
        for op in self.func.ops_in_order() {
            let data = &self.func.ops[op];
            let (ptr, atomic) = match data.kind {
                OpKind::Load(_) | OpKind::Store(_) => (data.operands[0], false),
                OpKind::Atomic(_) => (data.operands[0], true),
                _ => continue,
            };
            let mask = Mask::of(self.func, op);
            if self.func.ty(ptr).is_scalar() {
                continue;
            }
            let shape = self.func.ty(ptr).shape;
            let (mut layout, mut vec) = coalesced(self.func, self.axis, ptr, mask, self.num_warps);
            if atomic {
                // Atomics move one element per instruction.
                layout = BlockedLayout::default_for(shape.dims(), self.num_warps, &layout.order, 1);
                vec = 1;
            }
            let id = self.func.intern_layout(Layout::Blocked(layout));
            self.anchors.insert(op, (id, vec));
            self.shape_default.entry(shape).or_insert(id);
        }
    }

    /// The layout of each `dot` result (tensor-core `#mma`, or blocked for CUDA-core dots),
    /// and of the values computed from it. Run twice so loop-carried values see the anchors
    /// their bodies produce.
    fn find_dot_anchors(&mut self, b: Block) {
        let ops = self.func.blocks[b].ops.clone();
        for op in ops {
            let data = self.func.ops[op].clone();
            match data.kind {
                OpKind::Dot { precision } => {
                    let r = data.results[0];
                    let ty = *self.func.ty(r);
                    let a = *self.func.ty(data.operands[0]);
                    let dims = ty.shape.dims();
                    let k = a.shape.dims()[1];
                    // fp8 operands are here only for warpgroups (`fp8_warpgroup_dots`).
                    let sixteen_bit = matches!(
                        a.elem.dtype(),
                        Some(DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2)
                    );
                    // int8, and fp32 as tf32, run on warpgroups where wgmma can read both
                    // operands K-major (it transposes only 16-bit operands), as the fp8 pass
                    // checks for fp8.
                    let k_major_only = self.warpgroup_mma
                        && match (a.elem.dtype(), ty.dtype()) {
                            (Some(DType::I8 | DType::U8), Some(DType::I32)) => k.is_multiple_of(32),
                            (Some(DType::F32), Some(DType::F32)) => precision == DotPrecision::Tf32,
                            _ => false,
                        };
                    let k_major = |v: Value, k_dim: usize, transposed: bool| {
                        crate::fp8_dots::k_major(self.func, self.axis, v, k_dim, transposed)
                    };
                    // The operands' axis info is asked only for dots that could qualify.
                    let k_major_only = k_major_only
                        && k_major(data.operands[0], 1, false)
                        && k_major(data.operands[1], 0, true);
                    let warpgroup = (self.warpgroup_mma
                        && (sixteen_bit || k_major_only)
                        && k.is_multiple_of(16))
                    .then(|| MmaLayout::warpgroup(dims[0], dims[1], self.num_warps))
                    .flatten();
                    let l = if let Some(m) = warpgroup {
                        self.func.intern_layout(Layout::Mma(m))
                    } else if uses_tensor_cores(a.elem, precision, self.f64_mma)
                        && k.is_multiple_of(8 * k_width(a.elem))
                    {
                        let m = MmaLayout::for_shape(dims[0], dims[1], self.num_warps);
                        self.func.intern_layout(Layout::Mma(m))
                    } else {
                        let b = BlockedLayout::for_fma(dims[0], dims[1], self.num_warps);
                        self.func.intern_layout(Layout::Blocked(b))
                    };
                    self.dot_anchor.set(r, Some(l));
                }
                OpKind::For { .. } | OpKind::If => {
                    let is_for = matches!(data.kind, OpKind::For { .. });
                    for i in 0..data.regions.len() {
                        let body = self.func.region_block(op, i);
                        if is_for {
                            let args = self.func.blocks[body].args.clone();
                            for (k, &r) in data.results.iter().enumerate() {
                                let l = *self.dot_anchor.get(r);
                                self.dot_anchor.set(args[k + 1], l);
                            }
                        }
                        self.find_dot_anchors(body);
                        let y = *self.func.blocks[body].ops.last().expect("yield");
                        let ys = self.func.ops[y].operands.clone();
                        for (k, &r) in data.results.iter().enumerate() {
                            if let Some(l) = *self.dot_anchor.get(ys[k]) {
                                if !self.func.ty(r).is_scalar() {
                                    self.dot_anchor.set(r, Some(l));
                                }
                            }
                        }
                    }
                }
                _ if !data.regions.is_empty() => {
                    // `while`, reductions and scans: dots inside still need their anchors.
                    for i in 0..data.regions.len() {
                        let body = self.func.region_block(op, i);
                        self.find_dot_anchors(body);
                    }
                    // A reduction of a dot-derived tile keeps the dot's layout, sliced (a row
                    // max of attention scores stays where the scores are); a scan keeps it.
                    let anchored = data.operands.first().and_then(|&o| *self.dot_anchor.get(o));
                    if let Some(l) = anchored {
                        let kept = match data.kind {
                            OpKind::Reduce { axis } => Some(Layout::Slice {
                                dim: axis as u32,
                                parent: Box::new(self.func.layouts[l].clone()),
                            }),
                            OpKind::Scan { .. } => Some(self.func.layouts[l].clone()),
                            _ => None,
                        };
                        if let Some(k) = kept {
                            let id = self.func.intern_layout(k);
                            for &r in &data.results {
                                if !self.func.ty(r).is_scalar() {
                                    self.dot_anchor.set(r, Some(id));
                                }
                            }
                        }
                    }
                }
                kind if kind.is_elementwise() => {
                    let r = data.results[0];
                    let shape = self.func.ty(r).shape;
                    let l = data
                        .operands
                        .iter()
                        .filter(|&&o| self.func.ty(o).shape == shape)
                        .find_map(|&o| *self.dot_anchor.get(o));
                    if l.is_some() && !self.func.ty(r).is_scalar() {
                        self.dot_anchor.set(r, l);
                    }
                }
                _ => {}
            }
        }
    }

    fn default_layout(&mut self, shape: Shape) -> LayoutId {
        if let Some(&id) = self.shape_default.get(&shape) {
            return id;
        }
        let rank = shape.rank() as u32;
        let order: Vec<u32> = (0..rank).rev().collect();
        let l = BlockedLayout::default_for(shape.dims(), self.num_warps, &order, 1);
        let id = self.func.intern_layout(Layout::Blocked(l));
        self.shape_default.insert(shape, id);
        id
    }

    fn demand(&mut self, v: Value, layout: LayoutId, user: Op, idx: usize) {
        if self.func.ty(v).is_scalar() {
            return;
        }
        self.demands.entry(v).or_default().push((layout, user, idx));
    }

    /// The layout an operand must have for the op to produce `result` in layout `l`.
    fn operand_layout(&mut self, kind: OpKind, l: LayoutId) -> LayoutId {
        match kind {
            OpKind::ExpandDims(axis) => {
                let parent = self.func.layouts[l].clone();
                self.func.intern_layout(Layout::Slice {
                    dim: axis as u32,
                    parent: Box::new(parent),
                })
            }
            _ => l,
        }
    }

    fn demand_operands(&mut self, op: Op, l: LayoutId) {
        let data = &self.func.ops[op];
        let kind = data.kind;
        let operands = data.operands.clone();
        let ol = self.operand_layout(kind, l);
        for (i, v) in operands.into_iter().enumerate() {
            self.demand(v, ol, op, i);
        }
    }

    /// For a `for` loop's `k`-th carried value that nothing after the loop reads: the anchor
    /// layout of a load or store in the body that takes it as its pointers (a carried pointer
    /// tile then needs no conversion each iteration; the shape's default layout could be
    /// another operand's when tiles share a shape, e.g. 128x128 `a` and `b` tiles).
    fn carried_access_layout(&self, op: Op, k: usize) -> Option<LayoutId> {
        if !matches!(self.func.ops[op].kind, OpKind::For { .. }) {
            return None;
        }
        let body = self.func.region_block(op, 0);
        let arg = *self.func.blocks[body].args.get(k + 1)?;
        self.func.blocks[body].ops.iter().find_map(|&u| {
            let d = &self.func.ops[u];
            let access =
                matches!(d.kind, OpKind::Load(_) | OpKind::Store(_)) && d.operands[0] == arg;
            if access {
                self.anchors.get(&u).map(|a| a.0)
            } else {
                None
            }
        })
    }

    fn first_demand_or_default(&mut self, v: Value) -> LayoutId {
        match self.demands.get(&v).and_then(|d| d.first()) {
            Some(&(l, _, _)) => l,
            None => {
                let shape = self.func.ty(v).shape;
                self.default_layout(shape)
            }
        }
    }

    fn visit_block(&mut self, b: Block) {
        let ops = self.func.blocks[b].ops.clone();
        for op in ops.into_iter().rev() {
            self.visit_op(op);
        }
    }

    fn visit_op(&mut self, op: Op) {
        let kind = self.func.ops[op].kind;
        match kind {
            OpKind::Store(_) | OpKind::Load(_) | OpKind::Atomic(_)
                if self.anchors.contains_key(&op) =>
            {
                let (mut l, mut vec) = self.anchors[&op];
                if let Some(&r) = self.func.ops[op].results.first() {
                    // A load whose users all want one other layout loads in that layout directly
                    // (no conversion), as wide along its contiguous dimension as the axis info
                    // proves there (the coalesced layout's width can be narrower: a 32-element
                    // row vector over 128 threads takes one element each). Unless that layout
                    // runs along another dimension than the memory and reads narrower: a
                    // transposed copy then loads coalesced and converts (through shared memory).
                    if matches!(kind, OpKind::Load(_)) {
                        let operand = |f: &Function, w: LayoutId| {
                            matches!(f.layouts[w], Layout::DotOperand { .. })
                        };
                        if let Some(want) = self
                            .single_demand(r)
                            .filter(|&w| w != l && !operand(self.func, w))
                        {
                            let mask = Mask::of(self.func, op);
                            let ptr = self.func.ops[op].operands[0];
                            let want_dim = self.func.layouts[want].contiguous_dim();
                            let want_vec = match want_dim {
                                Some((dim, spt)) => {
                                    let p = proven_vector(self.func, self.axis, ptr, mask, dim);
                                    p.min(spt as u64).clamp(1, 255) as u8
                                }
                                _ => 1,
                            };
                            let same_dim = want_dim.map(|w| w.0)
                                == self.func.layouts[l].contiguous_dim().map(|a| a.0);
                            if same_dim || want_vec >= vec {
                                vec = want_vec;
                                l = want;
                            }
                        }
                    }
                    self.decided.set(r, Some(l));
                }
                // A vector wider than the mask's uniform runs reads whole granules under a
                // prefix mask (`proven_vector`): the lowering then selects element by element.
                let prefix_mask = Mask::of(self.func, op).is_some_and(|m| {
                    let dim = self.func.layouts[l].contiguous_dim().map_or(0, |c| c.0);
                    m.whole_granules && self.axis.get(m.value).constancy[dim] < vec as u64
                });
                if let OpKind::Load(m) | OpKind::Store(m) = &mut self.func.ops[op].kind {
                    m.vector = vec;
                    m.prefix_mask = prefix_mask;
                }
                self.demand_operands(op, l);
            }
            OpKind::For { .. } | OpKind::If => self.visit_region_op(op, kind),
            OpKind::While => self.visit_while(op),
            OpKind::Reduce { axis } => self.visit_reduce(op, axis),
            OpKind::Scan { .. } => {
                let r = self.func.ops[op].results[0];
                let l = self.first_demand_or_default(r);
                for r in self.func.ops[op].results.clone() {
                    self.decided.set(r, Some(l));
                }
                self.demand_operands(op, l);
                let body = self.func.region_block(op, 0);
                self.visit_block(body);
            }
            // Inline PTX: operands and results share one layout, with `pack` consecutive
            // elements per thread along its contiguous dimension.
            OpKind::InlineAsm { pack, .. } => {
                let results = self.func.ops[op].results.clone();
                let r = results[0];
                if self.func.ty(r).is_scalar() {
                    return;
                }
                // As for elementwise ops (`unshared`), from the first tile operand.
                let from = self.func.ops[op]
                    .operands
                    .iter()
                    .copied()
                    .find(|&o| !self.func.ty(o).is_scalar());
                let mut l = self.unshared(r, from);
                let run = self.func.layouts[l].contiguous_dim().map_or(1, |(_, n)| n);
                if pack > 1 && run < pack as u32 {
                    let shape = self.func.ty(r).shape;
                    let order: Vec<u32> = (0..shape.rank() as u32).rev().collect();
                    let b = BlockedLayout::default_for(
                        shape.dims(),
                        self.num_warps,
                        &order,
                        pack as u32,
                    );
                    l = self.func.intern_layout(Layout::Blocked(b));
                }
                for r in results {
                    self.decided.set(r, Some(l));
                }
                self.demand_operands(op, l);
            }
            // Staged in shared memory: `src` in any layout; the indices in the result's.
            OpKind::Gather(_) => {
                let data = self.func.ops[op].clone();
                let l = self.first_demand_or_default(data.results[0]);
                self.decided.set(data.results[0], Some(l));
                self.demand(data.operands[1], l, op, 1);
            }
            // Data movement through shared memory: any operand layout will do.
            OpKind::Permute { .. } | OpKind::Reshape | OpKind::Join | OpKind::Split => {
                for r in self.func.ops[op].results.clone() {
                    let mut l = self.first_demand_or_default(r);
                    if !matches!(self.func.layouts[l], Layout::Blocked(_)) {
                        // A chain of interleaves ends here: in a blocked layout with the
                        // chain's run in each thread, the joins and reshapes move no data,
                        // and one conversion to what the users want follows.
                        if let Some(il) = self.interleave_layout(op) {
                            l = il;
                        }
                    }
                    self.decided.set(r, Some(l));
                }
                // Operands asked for a layout in which each result element is already in its
                // thread, where one exists: the op then moves no data (codegen checks again).
                if self.shape_ops_in_registers {
                    if let Some(ol) = self.register_local_operand_layout(op) {
                        for (i, v) in self.func.ops[op].operands.clone().into_iter().enumerate() {
                            self.demand(v, ol, op, i);
                        }
                    }
                }
            }
            OpKind::Yield | OpKind::Return => {}
            OpKind::Dot { .. } => {
                let data = self.func.ops[op].clone();
                let r = data.results[0];
                let l = match *self.dot_anchor.get(r) {
                    Some(l) => l,
                    None => {
                        let shape = self.func.ty(r).shape;
                        self.default_layout(shape)
                    }
                };
                self.decided.set(r, Some(l));
                let kw = match self.func.layouts[l] {
                    Layout::Mma(_) => k_width(self.func.ty(data.operands[0]).elem),
                    _ => 1,
                };
                for idx in 0..2u32 {
                    let parent = Box::new(self.func.layouts[l].clone());
                    let ol = self.func.intern_layout(Layout::DotOperand {
                        op_idx: idx,
                        parent,
                        k_width: kw,
                    });
                    self.demand(data.operands[idx as usize], ol, op, idx as usize);
                }
                self.demand(data.operands[2], l, op, 2);
            }
            _ => {
                let Some(&r) = self.func.ops[op].results.first() else {
                    return;
                };
                if self.func.ty(r).is_scalar() {
                    return;
                }
                if let Some(l) = *self.dot_anchor.get(r) {
                    // Computed from a dot result: stays in the dot's layout.
                    self.decided.set(r, Some(l));
                    self.demand_operands(op, l);
                    return;
                }
                let l = self.unshared(r, Some(r));
                self.decided.set(r, Some(l));
                // Not recomputed in the dot operand layout `unshared` turned down: that copy
                // would pull its operands (the interleaves) back into it.
                let declined = self.first_demand_or_default(r) != l;
                if is_cheap(&kind) && !declined {
                    self.rematerialize(op, r, l);
                }
                self.demand_operands(op, l);
            }
        }
    }

    /// For a `reshape` that merges the last dimension of a `join`'s result (`tl.interleave`),
    /// possibly the last of a chain of them (an AWQ kernel unpacks with three): the number of
    /// consecutive last-dimension elements each thread must hold for every op of the chain to
    /// keep its elements in their threads. None for any other op.
    fn interleave_run(&self, op: Op) -> Option<u32> {
        if !self.shape_ops_in_registers {
            return None;
        }
        let last = *self
            .func
            .ty(self.func.ops[op].results[0])
            .shape
            .dims()
            .last()?;
        let mut run = 1u32;
        let mut op = op;
        loop {
            let data = &self.func.ops[op];
            if data.kind != OpKind::Reshape {
                break;
            }
            let (src, dst) = (
                self.func.ty(data.operands[0]).shape,
                self.func.ty(data.results[0]).shape,
            );
            let (sd, dd) = (src.dims(), dst.dims());
            let rank = dd.len().checked_sub(1)?;
            if sd.len() != dd.len() + 1 || sd[..rank] != dd[..rank] {
                break;
            }
            let Some(join) = self.func.def_op(data.operands[0]) else {
                break;
            };
            if self.func.ops[join].kind != OpKind::Join {
                break;
            }
            run = run.checked_mul(*sd.last()?)?;
            match self.func.def_op(self.func.ops[join].operands[0]) {
                Some(prev) => op = prev,
                None => break,
            }
        }
        (run > 1 && last % run == 0).then_some(run)
    }

    /// The blocked layout for the result of `op`, the last `reshape` of a chain of interleaves,
    /// in which every op of the chain keeps its elements in their threads ([`interleave_run`]).
    fn interleave_layout(&mut self, op: Op) -> Option<LayoutId> {
        let run = self.interleave_run(op)?;
        let shape = self.func.ty(self.func.ops[op].results[0]).shape;
        let order: Vec<u32> = (0..shape.rank() as u32).rev().collect();
        let b = BlockedLayout::default_for(shape.dims(), self.num_warps, &order, run);
        Some(self.func.intern_layout(Layout::Blocked(b)))
    }

    /// For a `join` whose result holds the new last dimension in each thread's registers, a
    /// `split` (the reverse), or a `reshape` that merges or splits the last dimension within
    /// each thread's run of registers: the operand layout with which the op moves no data
    /// (checked with [`tile_ir::layout::shape_op_gather`]).
    fn register_local_operand_layout(&mut self, op: Op) -> Option<LayoutId> {
        let data = self.func.ops[op].clone();
        let r = data.results[0];
        let rl = (*self.decided.get(r))?;
        let Layout::Blocked(b) = self.func.layouts[rl].clone() else {
            return None;
        };
        let src = self.func.ty(data.operands[0]).shape;
        let dst = self.func.ty(r).shape;
        let (sd, dd) = (src.dims().to_vec(), dst.dims().to_vec());
        let last = dd.len() - 1;
        // A new innermost dimension of `k` elements, all in each thread.
        let widen = |b: &BlockedLayout, k: u32| {
            let mut n = b.clone();
            n.size_per_thread.push(k);
            n.threads_per_warp.push(1);
            n.warps_per_cta.push(1);
            let rank = n.order.len() as u32;
            n.order.insert(0, rank);
            n
        };
        // The innermost dimension dropped (it must be whole in each thread).
        let narrow = |b: &BlockedLayout| {
            let d = b.order.len() - 1;
            (b.order[0] as usize == d && b.threads_per_warp[d] == 1 && b.warps_per_cta[d] == 1)
                .then(|| {
                    let mut n = b.clone();
                    n.size_per_thread.pop();
                    n.threads_per_warp.pop();
                    n.warps_per_cta.pop();
                    n.order.remove(0);
                    n
                })
        };
        let candidate = match data.kind {
            OpKind::Join => narrow(&b)?,
            OpKind::Split => widen(&b, 2),
            OpKind::Reshape if sd.len() == dd.len() + 1 && sd[..last] == dd[..last] => {
                // [.., n, k] -> [.., n * k]: each thread's run along the last dimension splits.
                let k = *sd.last()?;
                if b.order[0] as usize != last || b.size_per_thread[last] % k != 0 {
                    return None;
                }
                let mut n = b.clone();
                n.size_per_thread[last] /= k;
                widen(&n, k)
            }
            OpKind::Reshape
                if dd.len() == sd.len() + 1 && dd[..sd.len() - 1] == sd[..sd.len() - 1] =>
            {
                // [.., n * k] -> [.., n, k]: the whole new dimension in each thread, merged.
                let k = dd[last];
                let mut n = narrow(&b)?;
                if b.size_per_thread[last] != k {
                    return None;
                }
                let d = n.order.len() - 1;
                if n.order[0] as usize != d {
                    return None;
                }
                n.size_per_thread[d] *= k;
                n
            }
            _ => return None,
        };
        let ol = self.func.intern_layout(Layout::Blocked(candidate));
        let srcs: Vec<&Layout> = data
            .operands
            .iter()
            .map(|_| &self.func.layouts[ol])
            .collect();
        let ok = data.results.iter().enumerate().all(|(k, &res)| {
            let l = self.decided.get(res).map(|l| &self.func.layouts[l]);
            l.is_some_and(|l| {
                tile_ir::layout::shape_op_gather(
                    &data.kind,
                    &srcs,
                    &sd,
                    l,
                    &dd,
                    k as u32,
                    self.num_warps,
                )
                .is_some()
            })
        });
        ok.then_some(ol)
    }

    /// The layout `r` is computed in: its first demand, except a warpgroup dot's `b` operand
    /// layout. `wgmma` reads its `b` from shared memory, and every warp along M needs all of
    /// it: computed in the operand layout, each element would be computed once per warp (an
    /// fp8 key tile dequantised before `dot` took 4x the converts and spilled). It is computed
    /// where its source lives (`source_layout` from `from`, else the default) and stored once,
    /// at the dot.
    fn unshared(&mut self, r: Value, from: Option<Value>) -> LayoutId {
        let l = self.first_demand_or_default(r);
        if matches!(self.func.layouts[l], Layout::DotOperand { .. }) {
            // Computed from a chain of interleaves (sub-byte weights unpacked): in the chain's
            // layout, and converted once at the dot, after the arithmetic. In the operand
            // layout the chain's result and every tile combined with it (zero points, scales)
            // would each need a conversion of their own.
            if let Some(il) = from.and_then(|v| self.interleave_source(v)) {
                return il;
            }
        }
        if !self.func.layouts[l].is_warpgroup_b() {
            return l;
        }
        from.and_then(|v| self.source_layout(v)).unwrap_or_else(|| {
            let shape = self.func.ty(r).shape;
            self.default_layout(shape)
        })
    }

    /// The op that `v` is computed from element by element (through casts and arithmetic with
    /// splats or constants): the first op on the way back that is not elementwise.
    fn elementwise_origin(&self, v: Value) -> Option<Op> {
        let mut v = v;
        for _ in 0..32 {
            let ValueDef::Result(op, _) = self.func.values[v].def else {
                return None;
            };
            let data = &self.func.ops[op];
            if !data.kind.is_elementwise() {
                return Some(op);
            }
            // The tile operand that is not a broadcast scalar.
            v = *data.operands.iter().find(|&&o| !is_uniform(self.func, o))?;
        }
        None
    }

    /// The layout of the anchored load that `v` is computed from element by element, if
    /// there is one.
    fn source_layout(&self, v: Value) -> Option<LayoutId> {
        let op = self.elementwise_origin(v)?;
        if !matches!(self.func.ops[op].kind, OpKind::Load(_)) {
            return None;
        }
        self.anchors.get(&op).map(|a| a.0)
    }

    /// The layout of the interleave chain `v` is computed from element by element, if there
    /// is one ([`interleave_layout`]).
    fn interleave_source(&mut self, v: Value) -> Option<LayoutId> {
        let op = self.elementwise_origin(v)?;
        if self.func.ops[op].kind != OpKind::Reshape {
            return None;
        }
        self.interleave_layout(op)
    }

    /// Recomputes `op` once for every other layout its result is demanded in.
    fn rematerialize(&mut self, op: Op, r: Value, primary: LayoutId) {
        let Some(mut demands) = self.demands.get(&r).cloned() else {
            return;
        };
        // Not into a warpgroup dot's `b` operand layout: that copy would be computed once per
        // warp along M, and the dot stores it to shared memory all the same.
        let mut others: Vec<LayoutId> = demands
            .iter()
            .map(|d| d.0)
            .filter(|&l| l != primary && !self.func.layouts[l].is_warpgroup_b())
            .collect();
        others.dedup();
        others.sort();
        others.dedup();
        for l in others {
            let data = self.func.ops[op].clone();
            let ty = *self.func.ty(r);
            let clone = self
                .func
                .create_op(data.kind, data.operands.clone(), &[ty], data.loc);
            let b = self.op_block[&op];
            let pos = self.func.blocks[b]
                .ops
                .iter()
                .position(|&o| o == op)
                .expect("op is in its block");
            self.func.blocks[b].ops.insert(pos + 1, clone);
            self.op_block.insert(clone, b);
            let nr = self.func.result(clone, 0);
            self.decided.set(nr, Some(l));
            let mut kept = Vec::new();
            for &(dl, user, idx) in &demands {
                if dl == l {
                    self.func.ops[user].operands[idx] = nr;
                } else {
                    kept.push((dl, user, idx));
                }
            }
            // The users now served by the clone are no longer demands on the original.
            self.demands.insert(r, kept.clone());
            demands = kept;
            self.demand_operands(clone, l);
        }
    }

    fn visit_region_op(&mut self, op: Op, kind: OpKind) {
        let results = self.func.ops[op].results.clone();
        let mut layouts = Vec::new();
        for (k, &r) in results.iter().enumerate() {
            let l = if self.func.ty(r).is_scalar() {
                None
            } else if let Some(l) = *self.dot_anchor.get(r) {
                Some(l)
            } else if let Some(l) = (!self.demands.contains_key(&r))
                .then(|| self.carried_access_layout(op, k))
                .flatten()
            {
                Some(l)
            } else {
                Some(self.first_demand_or_default(r))
            };
            self.decided.set(r, l);
            layouts.push(l);
        }
        let nregions = self.func.ops[op].regions.len();
        for i in 0..nregions {
            let b = self.func.region_block(op, i);
            if matches!(kind, OpKind::For { .. }) {
                let args = self.func.blocks[b].args.clone();
                for (k, &l) in layouts.iter().enumerate() {
                    self.decided.set(args[k + 1], l);
                    if let Some(l) = l {
                        let init = self.func.ops[op].operands[3 + k];
                        self.demand(init, l, op, 3 + k);
                    }
                }
            }
            let y = *self.func.blocks[b]
                .ops
                .last()
                .expect("regions end in yield");
            let ys = self.func.ops[y].operands.clone();
            for (k, &v) in ys.iter().enumerate() {
                if let Some(l) = layouts[k] {
                    self.demand(v, l, y, k);
                }
            }
            self.visit_block(b);
        }
    }

    /// The layout every user of `v` wants, if they agree.
    fn single_demand(&self, v: Value) -> Option<LayoutId> {
        let d = self.demands.get(&v)?;
        let first = d.first()?.0;
        d.iter().all(|x| x.0 == first).then_some(first)
    }

    /// Whether `layout` spreads a tile of `shape` over the threads as well as the shape's
    /// default layout does (no more registers per thread). A layout made for a smaller tile
    /// may not: a `[2, 1]` store's layout puts all 512 threads of 16 warps along the first
    /// dimension, so a `[2, 2048]` tile in it would hold 2048 elements in every thread.
    fn spreads_as_default(&mut self, layout: &Layout, shape: Shape) -> bool {
        let default = self.default_layout(shape);
        let dims = shape.dims();
        layout.register_offsets(dims).len()
            <= self.func.layouts[default].register_offsets(dims).len()
    }

    /// A reduction's results live in a slice of its operands' layout: the slice its users
    /// want, where that layout suits the operands' shape, else the default layout's.
    fn visit_reduce(&mut self, op: Op, axis: u8) {
        let results = self.func.ops[op].results.clone();
        let operands = self.func.ops[op].operands.clone();
        let in_shape = self.func.ty(operands[0]).shape;
        let wanted = results
            .iter()
            .find_map(|r| self.demands.get(r).and_then(|d| d.first()).map(|d| d.0));
        let anchored = operands.iter().find_map(|&o| *self.dot_anchor.get(o));
        let l_in = match (anchored, wanted.map(|l| self.func.layouts[l].clone())) {
            (Some(l), _) => l,
            (None, Some(Layout::Slice { dim, parent }))
                if dim == axis as u32
                    && parent.rank() == in_shape.rank()
                    && self.spreads_as_default(&parent, in_shape) =>
            {
                self.func.intern_layout(*parent)
            }
            _ => self.default_layout(in_shape),
        };
        let parent = self.func.layouts[l_in].clone();
        let l_out = self.func.intern_layout(Layout::Slice {
            dim: axis as u32,
            parent: Box::new(parent),
        });
        for &r in &results {
            if !self.func.ty(r).is_scalar() {
                self.decided.set(r, Some(l_out));
            }
        }
        for (i, &v) in operands.iter().enumerate() {
            self.demand(v, l_in, op, i);
        }
        let body = self.func.region_block(op, 0);
        self.visit_block(body);
    }

    /// `while`: the loop state keeps one layout through both regions.
    fn visit_while(&mut self, op: Op) {
        let results = self.func.ops[op].results.clone();
        let mut layouts = Vec::new();
        for &r in &results {
            let l = if self.func.ty(r).is_scalar() {
                None
            } else {
                Some(self.first_demand_or_default(r))
            };
            self.decided.set(r, l);
            layouts.push(l);
        }
        for (k, &l) in layouts.iter().enumerate() {
            if let Some(l) = l {
                let init = self.func.ops[op].operands[k];
                self.demand(init, l, op, k);
            }
        }
        for (i, skip) in [(1usize, 0usize), (0, 1)] {
            let b = self.func.region_block(op, i);
            let args = self.func.blocks[b].args.clone();
            for (k, &l) in layouts.iter().enumerate() {
                self.decided.set(args[k], l);
            }
            let y = *self.func.blocks[b]
                .ops
                .last()
                .expect("regions end in yield");
            let ys = self.func.ops[y].operands.clone();
            for (k, &l) in layouts.iter().enumerate() {
                if let Some(l) = l {
                    self.demand(ys[k + skip], l, y, k + skip);
                }
            }
            self.visit_block(b);
        }
    }

    /// Inserts one `convert_layout` per value and extra layout, right after the definition.
    fn resolve_conflicts(&mut self) {
        let demands = std::mem::take(&mut self.demands);
        let mut values: Vec<Value> = demands.keys().copied().collect();
        values.sort();
        for v in values {
            let Some(have) = *self.decided.get(v) else {
                continue;
            };
            let mut made: HashMap<LayoutId, Value> = HashMap::new();
            for &(want, user, idx) in &demands[&v] {
                if want == have {
                    continue;
                }
                let c = match made.get(&want) {
                    Some(&c) => c,
                    None => {
                        let c = self.insert_convert(v, want);
                        made.insert(want, c);
                        c
                    }
                };
                self.func.ops[user].operands[idx] = c;
            }
        }
    }

    fn insert_convert(&mut self, v: Value, want: LayoutId) -> Value {
        let ty = *self.func.ty(v);
        let (block, pos, loc) = match self.func.values[v].def {
            ValueDef::Result(op, _) => {
                let b = self.op_block[&op];
                let pos = self.func.blocks[b]
                    .ops
                    .iter()
                    .position(|&o| o == op)
                    .expect("op is in its block");
                (b, pos + 1, self.func.ops[op].loc)
            }
            ValueDef::Arg(b, _) => (b, 0, Default::default()),
        };
        let op = self
            .func
            .create_op(OpKind::ConvertLayout, vec![v], &[ty], loc);
        self.func.blocks[block].ops.insert(pos, op);
        self.op_block.insert(op, block);
        let r = self.func.result(op, 0);
        self.decided.set(r, Some(want));
        r
    }

    fn write_back(&mut self) {
        let values: Vec<Value> = self.func.values.keys().collect();
        for v in values {
            if self.func.ty(v).is_scalar() {
                continue;
            }
            let l = match *self.decided.get(v) {
                Some(l) => l,
                None => {
                    let shape = self.func.ty(v).shape;
                    self.default_layout(shape)
                }
            };
            self.func.values[v].ty.layout = Some(l);
        }
        for op in self.func.ops_in_order() {
            if let OpKind::Load(m) | OpKind::Store(m) = &mut self.func.ops[op].kind {
                if m.vector == 0 {
                    *m = MemAttrs { vector: 1, ..*m };
                }
            }
        }
    }
}
