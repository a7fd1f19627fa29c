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
}

/// How one dimension's thread offset is formed from the lane and warp ids:
/// `((lane >> lane_shift) & lane_mask) * lane_mul + ((warp >> warp_shift) & warp_mask) * warp_mul`.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
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
    /// Number of dimensions of the tiles this layout describes.
    pub fn rank(&self) -> usize {
        match self {
            Layout::Blocked(b) => b.order.len(),
            Layout::Slice { parent, .. } => parent.rank() - 1,
        }
    }

    /// Warps the layout spreads over.
    pub fn num_warps(&self) -> u32 {
        match self {
            Layout::Blocked(b) => b.warps_per_cta.iter().product(),
            Layout::Slice { parent, .. } => parent.num_warps(),
        }
    }

    /// The underlying blocked layout (the root of a chain of slices).
    pub fn root(&self) -> &BlockedLayout {
        match self {
            Layout::Blocked(b) => b,
            Layout::Slice { parent, .. } => parent.root(),
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
        }
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
        }
    }
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
