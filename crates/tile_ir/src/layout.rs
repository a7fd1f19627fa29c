//! Layouts: how a tile's elements are spread over the threads of a program.
//!
//! The vocabulary is Triton's, so dumps read alike: a *blocked* layout gives each thread
//! `sizePerThread` contiguous elements, `threadsPerWarp` threads of a warp and `warpsPerCTA`
//! warps per dimension, dimensions listed fastest-first in `order`; a *slice* layout is its
//! parent with one dimension removed (what `x[:, None]` expands back).
//!
//! Every distributed layout here is *affine over bits*: an element's coordinate is
//! `(register offset + thread offset) mod shape`, the register part known at compile time and
//! the thread part a function of the lane and warp ids. Codegen relies on that split.

use std::fmt;

/// A blocked layout (Triton's `#blocked`).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct BlockedLayout {
    /// Contiguous elements each thread holds, per dimension.
    pub size_per_thread: Vec<u32>,
    /// Threads of one warp along each dimension (product 32).
    pub threads_per_warp: Vec<u32>,
    /// Warps along each dimension (product `num_warps`).
    pub warps_per_cta: Vec<u32>,
    /// Dimensions from fastest-varying to slowest.
    pub order: Vec<u32>,
}

/// The accumulator layout of tensor-core `dot`s (Triton's `#mma`): the tile is covered by
/// 16×8 blocks, warp `w` owning blocks `(w mod wm, w / wm)` of each `16·wm × 8·wn` repetition.
/// Within a block lane `l` holds rows `l/4` and `l/4 + 8`, columns `2·(l mod 4)` and the next.
///
/// Version 2 is computed by warps (`mma.sync`). Version 3 is the same distribution with every
/// warp along M (`wn = 1`), computed by warpgroups (Hopper's `wgmma`): four consecutive warps
/// hold one 64-row block, exactly the accumulator fragment of `wgmma.m64nNk*`, and one
/// instruction covers `instr_n` columns.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MmaLayout {
    /// Warps along M and N (`[wm, wn]`, product `num_warps`).
    pub warps_per_cta: Vec<u32>,
    /// 2 (`mma.sync`) or 3 (`wgmma`).
    pub version: u32,
    /// Columns per `wgmma` instruction (version 3; 8 for version 2).
    pub instr_n: u32,
}

/// A distributed layout.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Layout {
    /// Triton's `#blocked`.
    Blocked(BlockedLayout),
    /// Triton's `#slice`: `parent` with dimension `dim` removed.
    Slice {
        /// The removed dimension of the parent.
        dim: u32,
        /// The parent layout (one rank higher).
        parent: Box<Layout>,
    },
    /// Triton's `#mma` (version 2): a `dot` result on tensor cores.
    Mma(MmaLayout),
    /// Triton's `#dot_op`: operand `op_idx` (0 for `a [M, K]`, 1 for `b [K, N]`) of a `dot`
    /// whose result has layout `parent`. With an [`MmaLayout`] parent a thread holds the
    /// fragments `mma.sync` reads, `k_width` consecutive K elements per 32-bit register; with
    /// a blocked parent (CUDA-core `dot`) it holds whole rows of `a` / columns of `b` for the
    /// result elements it owns.
    DotOperand {
        /// 0 for the left operand, 1 for the right one.
        op_idx: u32,
        /// The layout of the `dot` result.
        parent: Box<Layout>,
        /// Consecutive K elements in one 32-bit register (`32 / element bits`; 1 for FMA).
        k_width: u32,
    },
}

/// A map that contributes nothing (the dimension lives in registers only).
const ZERO_MAP: DimThreadMap = DimThreadMap {
    lane_shift: 0,
    lane_mask: 0,
    lane_mul: 0,
    warp_shift: 0,
    warp_mask: 0,
    warp_mul: 0,
};

impl MmaLayout {
    /// Warps along M and N.
    pub fn wm_wn(&self) -> (u32, u32) {
        (self.warps_per_cta[0], self.warps_per_cta[1])
    }

    /// The warp split for a `[m, n]` result on `num_warps` warps: each doubling goes to the
    /// dimension with more work left per warp (counted in 16-wide steps, so warp tiles come
    /// out square), as long as that dimension has a 16-row (8-column) block left per warp.
    pub fn for_shape(m: u32, n: u32, num_warps: u32) -> MmaLayout {
        let (mut wm, mut wn) = (1u32, 1u32);
        while wm * wn < num_warps {
            let (per_m, per_n) = (m / (16 * wm), n / (16 * wn));
            let room_m = m / 16 > wm;
            let room_n = n / 8 > wn;
            if (per_m >= per_n && room_m) || !room_n {
                wm *= 2;
            } else {
                wn *= 2;
            }
        }
        MmaLayout {
            warps_per_cta: vec![wm, wn],
            version: 2,
            instr_n: 8,
        }
    }

    /// The warpgroup layout (version 3) for a `[m, n]` result on `num_warps` warps, where one
    /// exists: warps in groups of four, all along M (each warpgroup owns 64-row blocks), and
    /// `n` a multiple of 16 covered by instructions at most 256 columns wide.
    pub fn warpgroup(m: u32, n: u32, num_warps: u32) -> Option<MmaLayout> {
        let fits = num_warps.is_multiple_of(4)
            && m.is_multiple_of(16 * num_warps)
            && n >= 16
            && n.is_multiple_of(16);
        if !fits {
            return None;
        }
        let instr_n = (8..=n.min(256))
            .rev()
            .step_by(8)
            .find(|w| n.is_multiple_of(*w))?;
        Some(MmaLayout {
            warps_per_cta: vec![num_warps, 1],
            version: 3,
            instr_n,
        })
    }

    fn row_map(&self) -> DimThreadMap {
        DimThreadMap {
            lane_shift: 2,
            lane_mask: 7,
            lane_mul: 1,
            warp_shift: 0,
            warp_mask: self.warps_per_cta[0] - 1,
            warp_mul: 16,
        }
    }

    fn col_map(&self, lane_mul: u32) -> DimThreadMap {
        DimThreadMap {
            lane_shift: 0,
            lane_mask: 3,
            lane_mul,
            warp_shift: self.warps_per_cta[0].trailing_zeros(),
            warp_mask: self.warps_per_cta[1] - 1,
            warp_mul: 8,
        }
    }

    fn n_map(&self) -> DimThreadMap {
        DimThreadMap {
            lane_shift: 2,
            lane_mask: 7,
            lane_mul: 1,
            ..self.col_map(0)
        }
    }

    fn k_map(k_width: u32) -> DimThreadMap {
        DimThreadMap {
            lane_shift: 0,
            lane_mask: 3,
            lane_mul: k_width,
            ..ZERO_MAP
        }
    }

    /// Warp bits that hold copies of an operand: the N warps for `a`, the M warps for `b`.
    fn operand_copies(&self, op_idx: u32) -> DimThreadMap {
        let (wm, wn) = self.wm_wn();
        if op_idx == 0 {
            DimThreadMap {
                warp_shift: wm.trailing_zeros(),
                warp_mask: wn - 1,
                warp_mul: 1,
                ..ZERO_MAP
            }
        } else {
            DimThreadMap {
                warp_shift: 0,
                warp_mask: wm - 1,
                warp_mul: 1,
                ..ZERO_MAP
            }
        }
    }
}

/// Pushes `c` (reduced modulo `shape`) unless already present.
fn push_unique(
    out: &mut Vec<Vec<u32>>,
    seen: &mut std::collections::HashSet<Vec<u32>>,
    shape: &[u32],
    c: [u32; 2],
) {
    let c: Vec<u32> = c.iter().zip(shape).map(|(&x, &n)| x % n.max(1)).collect();
    if seen.insert(c.clone()) {
        out.push(c);
    }
}

/// How one dimension's thread offset is formed from the lane and warp ids:
/// `((lane >> lane_shift) & lane_mask) * lane_mul + ((warp >> warp_shift) & warp_mask) * warp_mul`.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct DimThreadMap {
    /// Shift applied to the lane id.
    pub lane_shift: u32,
    /// Mask applied after the shift (threads along the dimension minus one).
    pub lane_mask: u32,
    /// Elements between neighbouring lanes along the dimension.
    pub lane_mul: u32,
    /// Shift applied to the warp id.
    pub warp_shift: u32,
    /// Mask applied after the shift.
    pub warp_mask: u32,
    /// Elements between neighbouring warps along the dimension.
    pub warp_mul: u32,
}

impl BlockedLayout {
    /// The layout a tile of `shape` gets by default: `vec` contiguous elements per thread along
    /// the fastest dimension `order[0]`, lanes filled fastest-first, warps slowest-first.
    pub fn default_for(shape: &[u32], num_warps: u32, order: &[u32], vec: u32) -> BlockedLayout {
        let rank = shape.len();
        let mut spt = vec![1u32; rank];
        let mut tpw = vec![1u32; rank];
        let mut wpc = vec![1u32; rank];
        if rank == 0 {
            return BlockedLayout {
                size_per_thread: spt,
                threads_per_warp: tpw,
                warps_per_cta: wpc,
                order: vec![],
            };
        }
        let fast = order[0] as usize;
        spt[fast] = vec.clamp(1, shape[fast].max(1));
        let mut lanes = 32u32;
        for &d in order {
            let d = d as usize;
            let room = (shape[d] / spt[d]).max(1);
            let t = lanes.min(room);
            tpw[d] = t;
            lanes /= t;
        }
        tpw[fast] *= lanes;
        let mut warps = num_warps;
        for &d in order.iter().rev() {
            let d = d as usize;
            let room = (shape[d] / (spt[d] * tpw[d])).max(1);
            let w = warps.min(room);
            wpc[d] = w;
            warps /= w;
        }
        wpc[fast] *= warps;
        BlockedLayout {
            size_per_thread: spt,
            threads_per_warp: tpw,
            warps_per_cta: wpc,
            order: order.to_vec(),
        }
    }

    /// The result layout of a CUDA-core `dot` of shape `[m, n]`: each thread owns a
    /// near-square block of results, so one K step reads few operand elements per FMA.
    pub fn for_fma(m: u32, n: u32, num_warps: u32) -> BlockedLayout {
        let per_thread = ((m as u64 * n as u64) / (32 * num_warps as u64)).max(1) as u32;
        let half = per_thread.trailing_zeros() / 2;
        let sn = (1u32 << (per_thread.trailing_zeros() - half)).min(n);
        let sm = (per_thread / sn).clamp(1, m);
        let t1 = (n / sn).clamp(1, 32);
        let t0 = 32 / t1;
        let w0 = (m / (sm * t0)).clamp(1, num_warps);
        let w1 = num_warps / w0;
        BlockedLayout {
            size_per_thread: vec![sm, sn],
            threads_per_warp: vec![t0, t1],
            warps_per_cta: vec![w0, w1],
            order: vec![1, 0],
        }
    }

    fn thread_maps(&self) -> Vec<DimThreadMap> {
        let rank = self.order.len();
        let mut maps = vec![
            DimThreadMap {
                lane_shift: 0,
                lane_mask: 0,
                lane_mul: 0,
                warp_shift: 0,
                warp_mask: 0,
                warp_mul: 0
            };
            rank
        ];
        let (mut lane_shift, mut warp_shift) = (0, 0);
        for &d in &self.order {
            let d = d as usize;
            let (t, w, s) = (
                self.threads_per_warp[d],
                self.warps_per_cta[d],
                self.size_per_thread[d],
            );
            maps[d] = DimThreadMap {
                lane_shift,
                lane_mask: t - 1,
                lane_mul: s,
                warp_shift,
                warp_mask: w - 1,
                warp_mul: s * t,
            };
            lane_shift += t.trailing_zeros();
            warp_shift += w.trailing_zeros();
        }
        maps
    }
}

impl Layout {
    /// Whether this is an operand layout of a warpgroup (`wgmma`) dot.
    pub fn is_warpgroup_operand(&self) -> bool {
        matches!(self, Layout::DotOperand { parent, .. }
            if matches!(parent.as_ref(), Layout::Mma(m) if m.version == 3))
    }

    /// Whether this is the `b` operand layout of a warpgroup (`wgmma`) dot, which the dot reads
    /// from shared memory: no register tile has it.
    pub fn is_warpgroup_b(&self) -> bool {
        matches!(self, Layout::DotOperand { op_idx: 1, .. }) && self.is_warpgroup_operand()
    }

    /// Number of dimensions of the tiles this layout describes.
    pub fn rank(&self) -> usize {
        match self {
            Layout::Blocked(b) => b.order.len(),
            Layout::Slice { parent, .. } => parent.rank() - 1,
            Layout::Mma(m) => m.warps_per_cta.len(),
            Layout::DotOperand { parent, .. } => parent.rank(),
        }
    }

    /// Warps the layout spreads over.
    pub fn num_warps(&self) -> u32 {
        match self {
            Layout::Blocked(b) => b.warps_per_cta.iter().product(),
            Layout::Slice { parent, .. } | Layout::DotOperand { parent, .. } => parent.num_warps(),
            Layout::Mma(m) => m.warps_per_cta.iter().product(),
        }
    }

    /// The fastest-varying dimension of this layout, and the number of contiguous elements
    /// each thread holds along it.
    pub fn contiguous_dim(&self) -> Option<(usize, u32)> {
        match self {
            Layout::Blocked(b) => b
                .order
                .first()
                .map(|&d| (d as usize, b.size_per_thread[d as usize])),
            Layout::Slice { dim, parent } => {
                let (pd, n) = parent.contiguous_dim()?;
                let dim = *dim as usize;
                if pd == dim {
                    None
                } else {
                    Some((if pd > dim { pd - 1 } else { pd }, n))
                }
            }
            Layout::Mma(_) => Some((1, 2)),
            Layout::DotOperand {
                op_idx,
                parent,
                k_width,
            } => match parent.as_ref() {
                Layout::Mma(_) => Some((if *op_idx == 0 { 1 } else { 0 }, *k_width)),
                _ => None,
            },
        }
    }

    /// The compile-time part of each register's coordinates for a tile of `shape`, in register
    /// order: registers along the fastest dimension come first, so a run of `sizePerThread`
    /// registers is contiguous in the tile. Coordinates are reduced modulo the shape and
    /// duplicates dropped.
    pub fn register_offsets(&self, shape: &[u32]) -> Vec<Vec<u32>> {
        match self {
            Layout::Blocked(b) => {
                let rank = shape.len();
                let order: Vec<usize> = b.order.iter().map(|&d| d as usize).collect();
                let mut per_dim: Vec<Vec<u32>> = vec![Vec::new(); rank];
                // Per dimension: the list of offsets, elements fastest, then repetitions.
                for d in 0..rank {
                    let spt = b.size_per_thread[d];
                    let tile = spt * b.threads_per_warp[d] * b.warps_per_cta[d];
                    let reps = (shape[d] / tile).max(1);
                    for r in 0..reps {
                        for e in 0..spt {
                            per_dim[d].push(r * tile + e);
                        }
                    }
                }
                // Enumerate with elements of order[0] innermost, then elements of order[1], ...,
                // then repetitions: split each dimension's list into (reps, spt).
                let spt: Vec<usize> = (0..rank).map(|d| b.size_per_thread[d] as usize).collect();
                let reps: Vec<usize> = (0..rank).map(|d| per_dim[d].len() / spt[d]).collect();
                let mut digits: Vec<(usize, usize)> = Vec::new(); // (dim, radix) innermost first
                for &d in &order {
                    digits.push((d, spt[d]));
                }
                for &d in &order {
                    digits.push((d, reps[d]));
                }
                let total: usize = digits.iter().map(|&(_, r)| r).product();
                let mut out = Vec::with_capacity(total);
                let mut seen = std::collections::HashSet::new();
                for mut i in 0..total {
                    let mut e = vec![0usize; rank];
                    let mut rep = vec![0usize; rank];
                    for (k, &(d, radix)) in digits.iter().enumerate() {
                        let digit = i % radix;
                        i /= radix;
                        if k < rank {
                            e[d] = digit;
                        } else {
                            rep[d] = digit;
                        }
                    }
                    let coord: Vec<u32> = (0..rank)
                        .map(|d| per_dim[d][rep[d] * spt[d] + e[d]] % shape[d].max(1))
                        .collect();
                    if seen.insert(coord.clone()) {
                        out.push(coord);
                    }
                }
                out
            }
            Layout::Slice { dim, parent } => {
                let dim = *dim as usize;
                let mut pshape = shape.to_vec();
                pshape.insert(dim, 1);
                let mut out = Vec::new();
                let mut seen = std::collections::HashSet::new();
                for mut c in parent.register_offsets(&pshape) {
                    c.remove(dim);
                    if seen.insert(c.clone()) {
                        out.push(c);
                    }
                }
                out
            }
            Layout::Mma(m) => {
                let (wm, wn) = m.wm_wn();
                let (tm, tn) = (16 * wm, 8 * wn);
                let mut out = Vec::new();
                let mut seen = std::collections::HashSet::new();
                for rm in 0..(shape[0] / tm).max(1) {
                    for rn in 0..(shape[1] / tn).max(1) {
                        for (i, j) in [(0, 0), (0, 1), (8, 0), (8, 1)] {
                            push_unique(&mut out, &mut seen, shape, [rm * tm + i, rn * tn + j]);
                        }
                    }
                }
                out
            }
            Layout::DotOperand {
                op_idx,
                parent,
                k_width,
            } => dot_operand_offsets(*op_idx, parent, *k_width, shape),
        }
    }

    /// For each register of a tile of `shape` (in [`Layout::register_offsets`] order), the
    /// first register that holds an element of the same run, in every thread, where the tile's
    /// values come in aligned runs of `runs[d]` equal elements along each dimension `d` (a
    /// load whose elements read one address per run); the register itself where none does.
    ///
    /// An element's coordinate along `d` is its register offset plus the thread's offset. Two
    /// registers share a run in every thread when the thread's offset along `d` splits into
    /// multiples of the run (which move both alike) and a part below the run that never
    /// carries either register past the end of its run.
    pub fn run_representatives(&self, shape: &[u32], runs: &[u8]) -> Vec<usize> {
        let offsets = self.register_offsets(shape);
        let (kept, _) = self.thread_maps();
        let rank = shape.len();
        // Per dimension: the usable run and the largest thread offset below it.
        let mut run = vec![1u32; rank];
        let mut low = vec![0u32; rank];
        for d in 0..rank {
            let r = u32::from(runs.get(d).copied().unwrap_or(1));
            let Some(map) = kept.get(d) else { continue };
            if r <= 1 || !r.is_power_of_two() || !shape[d].is_multiple_of(r) {
                continue;
            }
            let mut below = 0u32;
            let mut usable = true;
            for (mask, mul) in [(map.lane_mask, map.lane_mul), (map.warp_mask, map.warp_mul)] {
                if mask == 0 || mul % r == 0 {
                    continue;
                }
                match mask.checked_mul(mul) {
                    Some(top) if (mask + 1).is_power_of_two() && top < r => below += top,
                    _ => usable = false,
                }
            }
            if usable && below < r {
                run[d] = r;
                low[d] = below;
            }
        }
        let mut first: std::collections::HashMap<Vec<(bool, u32)>, usize> =
            std::collections::HashMap::new();
        offsets
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let key: Vec<(bool, u32)> = (0..rank)
                    .map(|d| {
                        let r = run[d];
                        if r > 1 && o[d] % r + low[d] < r {
                            (true, o[d] / r)
                        } else {
                            (false, o[d])
                        }
                    })
                    .collect();
                *first.entry(key).or_insert(i)
            })
            .collect()
    }

    /// How each dimension's thread offset is formed (kept dimensions), and the maps of the
    /// dimensions sliced away (threads along them hold copies of the same elements).
    pub fn thread_maps(&self) -> (Vec<DimThreadMap>, Vec<DimThreadMap>) {
        match self {
            Layout::Blocked(b) => (b.thread_maps(), Vec::new()),
            Layout::Slice { dim, parent } => {
                let (mut kept, mut sliced) = parent.thread_maps();
                sliced.push(kept.remove(*dim as usize));
                (kept, sliced)
            }
            Layout::Mma(m) => (vec![m.row_map(), m.col_map(2)], Vec::new()),
            Layout::DotOperand {
                op_idx,
                parent,
                k_width,
            } => match parent.as_ref() {
                Layout::Mma(m) => {
                    let kept = if *op_idx == 0 {
                        vec![m.row_map(), MmaLayout::k_map(*k_width)]
                    } else {
                        vec![MmaLayout::k_map(*k_width), m.n_map()]
                    };
                    (kept, vec![m.operand_copies(*op_idx)])
                }
                other => {
                    // CUDA-core operands: the parent's map along M (or N), K in registers,
                    // copies along the other parent dimension.
                    let (pk, mut sliced) = other.thread_maps();
                    if *op_idx == 0 {
                        sliced.push(pk[1]);
                        (vec![pk[0], ZERO_MAP], sliced)
                    } else {
                        sliced.push(pk[0]);
                        (vec![ZERO_MAP, pk[1]], sliced)
                    }
                }
            },
        }
    }
}

/// Register coordinates of a `dot` operand tile of `shape`.
fn dot_operand_offsets(op_idx: u32, parent: &Layout, k_width: u32, shape: &[u32]) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    match parent {
        Layout::Mma(m) => {
            let (wm, wn) = m.wm_wn();
            let kw = k_width.max(1);
            let kt = 8 * kw;
            let k_dim = if op_idx == 0 { 1 } else { 0 };
            let reps_k = (shape[k_dim] / kt).max(1);
            if op_idx == 0 {
                let tm = 16 * wm;
                for rm in 0..(shape[0] / tm).max(1) {
                    for rk in 0..reps_k {
                        for (i, j0) in [(0, 0), (8, 0), (0, 4 * kw), (8, 4 * kw)] {
                            for e in 0..kw {
                                let c = [rm * tm + i, rk * kt + j0 + e];
                                push_unique(&mut out, &mut seen, shape, c);
                            }
                        }
                    }
                }
            } else {
                let tn = 8 * wn;
                for rn in 0..(shape[1] / tn).max(1) {
                    for rk in 0..reps_k {
                        for j0 in [0, 4 * kw] {
                            for e in 0..kw {
                                let c = [rk * kt + j0 + e, rn * tn];
                                push_unique(&mut out, &mut seen, shape, c);
                            }
                        }
                    }
                }
            }
        }
        other => {
            // The parent's offsets along M (operand 0) or N (operand 1); all of K.
            let (keep, k_dim) = if op_idx == 0 { (0, 1) } else { (1, 0) };
            let mut pshape = [1u32, 1];
            pshape[keep] = shape[keep];
            let mut along: Vec<u32> = Vec::new();
            for c in other.register_offsets(&pshape) {
                if !along.contains(&c[keep]) {
                    along.push(c[keep]);
                }
            }
            for &x in &along {
                for k in 0..shape[k_dim] {
                    let c = if op_idx == 0 { [x, k] } else { [k, x] };
                    push_unique(&mut out, &mut seen, shape, c);
                }
            }
        }
    }
    out
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list(v: &[u32]) -> String {
            let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
            format!("[{}]", items.join(", "))
        }
        match self {
            Layout::Blocked(b) => write!(
                f,
                "#blocked<{{sizePerThread = {}, threadsPerWarp = {}, warpsPerCTA = {}, order = {}}}>",
                list(&b.size_per_thread),
                list(&b.threads_per_warp),
                list(&b.warps_per_cta),
                list(&b.order)
            ),
            Layout::Slice { dim, parent } => write!(f, "#slice<{{dim = {dim}, parent = {parent}}}>"),
            Layout::Mma(m) if m.version == 3 => write!(
                f,
                "#mma<{{versionMajor = 3, warpsPerCTA = {}, instrShape = [64, {}]}}>",
                list(&m.warps_per_cta),
                m.instr_n
            ),
            Layout::Mma(m) => write!(
                f,
                "#mma<{{versionMajor = 2, warpsPerCTA = {}, instrShape = [16, 8]}}>",
                list(&m.warps_per_cta)
            ),
            Layout::DotOperand {
                op_idx,
                parent,
                k_width,
            } => write!(
                f,
                "#dot_op<{{opIdx = {op_idx}, parent = {parent}, kWidth = {k_width}}}>"
            ),
        }
    }
}

/// The strides, in elements, of a row-major tile of `shape`.
pub fn row_major(shape: &[u32]) -> Vec<u32> {
    let mut s = vec![1u32; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// The coordinates of every element a thread holds, register by register, for a tile of
/// `shape` in `layout` on `num_warps` warps: `out[warp * 32 + lane][register]`. This is the
/// code generator's model: a thread's offset along each dimension from its lane and warp
/// ([`Layout::thread_maps`], wrapped into the tile where the layout covers more than it), plus
/// each register's offset ([`Layout::register_offsets`]). `None` where an offset would leave
/// the tile (the model does not cover that layout).
pub fn thread_coords(layout: &Layout, shape: &[u32], num_warps: u32) -> Option<Vec<Vec<Vec<u32>>>> {
    if layout.rank() != shape.len() {
        return None;
    }
    let regs = layout.register_offsets(shape);
    let (kept, _) = layout.thread_maps();
    let term = |m: &DimThreadMap, id: u32, lane: bool| {
        let (shift, mask, mul) = if lane {
            (m.lane_shift, m.lane_mask, m.lane_mul)
        } else {
            (m.warp_shift, m.warp_mask, m.warp_mul)
        };
        ((id >> shift) & mask) * mul
    };
    let mut out = Vec::with_capacity((num_warps * 32) as usize);
    for warp in 0..num_warps {
        for lane in 0..32u32 {
            let mut base = Vec::with_capacity(shape.len());
            for (d, m) in kept.iter().enumerate() {
                let size = shape[d];
                let raw = term(m, lane, true) + term(m, warp, false);
                let covered = (m.lane_mask + 1) * m.lane_mul + m.warp_mask * m.warp_mul;
                base.push(if covered > size {
                    raw & (size.max(1) - 1)
                } else {
                    raw
                });
            }
            let mut coords = Vec::with_capacity(regs.len());
            for r in &regs {
                let c: Vec<u32> = base.iter().zip(r).map(|(&t, &o)| t + o).collect();
                if c.iter().zip(shape).any(|(&x, &n)| x >= n) {
                    return None;
                }
                coords.push(c);
            }
            out.push(coords);
        }
    }
    Some(out)
}

/// For each register of a `dst` tile, the source and register holding the same element in
/// the same thread, when one register of one source serves in every thread (a shape op that
/// moves no data between threads); `None` otherwise. `element(c)` names the source tile and
/// the coordinates there of the `dst` element at `c`.
pub fn register_gather(
    dst: (&Layout, &[u32]),
    srcs: &[(&Layout, &[u32])],
    num_warps: u32,
    element: impl Fn(&[u32]) -> (usize, Vec<u32>),
) -> Option<Vec<(usize, usize)>> {
    let dst_coords = thread_coords(dst.0, dst.1, num_warps)?;
    let mut held: Vec<Vec<std::collections::HashMap<Vec<u32>, usize>>> =
        Vec::with_capacity(srcs.len());
    for &(l, shape) in srcs {
        let coords = thread_coords(l, shape, num_warps)?;
        held.push(
            coords
                .into_iter()
                .map(|regs| regs.into_iter().enumerate().map(|(i, c)| (c, i)).collect())
                .collect(),
        );
    }
    let nregs = dst_coords.first().map_or(0, |t| t.len());
    let mut out: Vec<Option<(usize, usize)>> = vec![None; nregs];
    for (t, regs) in dst_coords.iter().enumerate() {
        for (i, c) in regs.iter().enumerate() {
            let (s, sc) = element(c);
            let &j = held.get(s)?.get(t)?.get(&sc)?;
            match out[i] {
                None => out[i] = Some((s, j)),
                Some(prev) if prev == (s, j) => {}
                Some(_) => return None,
            }
        }
    }
    out.into_iter().collect()
}

/// [`register_gather`] for a shape op (`permute`, `reshape`, `join`, `split`): result
/// `result` (0, or 1 for a split's second half) in layout `dst` from the operands in `srcs`
/// (all of one shape, `src_shape`). `None` for other ops, or where data must move.
pub fn shape_op_gather(
    kind: &crate::OpKind,
    srcs: &[&Layout],
    src_shape: &[u32],
    dst: &Layout,
    dst_shape: &[u32],
    result: u32,
    num_warps: u32,
) -> Option<Vec<(usize, usize)>> {
    use crate::OpKind;
    let operands: Vec<(&Layout, &[u32])> = srcs.iter().map(|&l| (l, src_shape)).collect();
    match kind {
        OpKind::Permute { perm } => register_gather((dst, dst_shape), &operands, num_warps, |c| {
            let mut sc = vec![0; c.len()];
            for (i, &x) in c.iter().enumerate() {
                sc[perm[i] as usize] = x;
            }
            (0, sc)
        }),
        OpKind::Reshape => {
            let (ss, ds) = (row_major(src_shape), row_major(dst_shape));
            register_gather((dst, dst_shape), &operands, num_warps, |c| {
                let mut flat: u32 = c.iter().zip(&ds).map(|(&x, &s)| x * s).sum();
                let sc = ss
                    .iter()
                    .map(|&s| {
                        let x = flat / s;
                        flat %= s;
                        x
                    })
                    .collect();
                (0, sc)
            })
        }
        OpKind::Join => register_gather((dst, dst_shape), &operands, num_warps, |c| {
            let n = c.len() - 1;
            (c[n] as usize, c[..n].to_vec())
        }),
        OpKind::Split => register_gather((dst, dst_shape), &operands, num_warps, |c| {
            let mut sc = c.to_vec();
            sc.push(result);
            (0, sc)
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_along_registers_moves_nothing() {
        // [64, 32] tiles joined into [64, 32, 2] whose new dimension lies in each thread's
        // registers: element (i, j, t) is register k of operand t wherever (i, j) is.
        let src = BlockedLayout {
            size_per_thread: vec![1, 4],
            threads_per_warp: vec![4, 8],
            warps_per_cta: vec![4, 1],
            order: vec![1, 0],
        };
        let dst = BlockedLayout {
            size_per_thread: vec![1, 4, 2],
            threads_per_warp: vec![4, 8, 1],
            warps_per_cta: vec![4, 1, 1],
            order: vec![2, 1, 0],
        };
        let (s, d) = (Layout::Blocked(src.clone()), Layout::Blocked(dst));
        let g = register_gather(
            (&d, &[64, 32, 2]),
            &[(&s, &[64, 32]), (&s, &[64, 32])],
            4,
            |c| (c[2] as usize, c[..2].to_vec()),
        )
        .expect("in registers");
        let regs = s.register_offsets(&[64, 32]);
        let dregs = d.register_offsets(&[64, 32, 2]);
        assert_eq!(g.len(), 2 * regs.len());
        for (i, &(t, j)) in g.iter().enumerate() {
            assert_eq!(dregs[i][2] as usize, t);
            assert_eq!(dregs[i][..2], regs[j][..]);
        }
        // Merging the joined dimension into its neighbour: [64, 32, 2] -> [64, 64] with
        // twice the elements per thread along it, also register for register.
        let merged = Layout::Blocked(BlockedLayout {
            size_per_thread: vec![1, 8],
            threads_per_warp: vec![4, 8],
            warps_per_cta: vec![4, 1],
            order: vec![1, 0],
        });
        let m = register_gather((&merged, &[64, 64]), &[(&d, &[64, 32, 2])], 4, |c| {
            (0, vec![c[0], c[1] / 2, c[1] % 2])
        })
        .expect("a renaming");
        assert_eq!(m.len(), 32);
        // The same data spread over other threads cannot be had from registers.
        let other = Layout::Blocked(BlockedLayout::default_for(&[64, 64], 4, &[0, 1], 1));
        assert!(
            register_gather((&other, &[64, 64]), &[(&d, &[64, 32, 2])], 4, |c| {
                (0, vec![c[0], c[1] / 2, c[1] % 2])
            })
            .is_none()
        );
    }

    #[test]
    fn default_1d_layout_covers_the_tile_once() {
        let b = BlockedLayout::default_for(&[1024], 4, &[0], 4);
        assert_eq!(b.size_per_thread, vec![4]);
        assert_eq!(b.threads_per_warp, vec![32]);
        assert_eq!(b.warps_per_cta, vec![4]);
        let regs = Layout::Blocked(b).register_offsets(&[1024]);
        assert_eq!(regs.len(), 8);
        assert_eq!(regs[..5], [vec![0], vec![1], vec![2], vec![3], vec![512]]);
    }

    #[test]
    fn runs_group_the_registers_of_a_thread() {
        // A wgmma accumulator's columns (8 warps down M): a thread holds columns
        // 8j + 2 (lane % 4) + {0, 1}, j < 16, so runs of 16 columns give 8 loads, runs of 8
        // give 16, runs of 2 give 16 (each column pair), runs of 1 all 32.
        let mma = MmaLayout::warpgroup(128, 128, 8).expect("a warpgroup layout");
        let cols = Layout::Slice {
            dim: 0,
            parent: Box::new(Layout::Mma(mma)),
        };
        let distinct = |runs: u8| {
            let reps = cols.run_representatives(&[128], &[runs]);
            assert_eq!(reps.len(), 32);
            reps.iter().enumerate().filter(|&(i, &r)| r == i).count()
        };
        assert_eq!(distinct(16), 8);
        assert_eq!(distinct(8), 16);
        assert_eq!(distinct(2), 16);
        assert_eq!(distinct(1), 32);
        // Runs of 4: the thread offset (up to 6) can carry an element into the next run.
        assert_eq!(distinct(4), 32);
        // Elements spread one per thread along the run share nothing within a thread.
        let b = Layout::Blocked(BlockedLayout::default_for(&[1024], 4, &[0], 1));
        let reps = b.run_representatives(&[1024], &[64]);
        assert!(reps.iter().enumerate().all(|(i, &r)| r == i));
    }

    #[test]
    fn small_tiles_are_replicated_not_duplicated() {
        let l = Layout::Blocked(BlockedLayout::default_for(&[16], 4, &[0], 1));
        assert_eq!(l.register_offsets(&[16]), vec![vec![0]]);
    }

    #[test]
    fn slice_drops_the_dimension() {
        let b = BlockedLayout::default_for(&[64, 64], 4, &[1, 0], 4);
        assert_eq!(b.threads_per_warp, vec![2, 16]);
        assert_eq!(b.warps_per_cta, vec![4, 1]);
        let s = Layout::Slice {
            dim: 1,
            parent: Box::new(Layout::Blocked(b)),
        };
        assert_eq!(s.register_offsets(&[64]).len(), 8);
        let (kept, sliced) = s.thread_maps();
        assert_eq!((kept.len(), sliced.len()), (1, 1));
    }
}
