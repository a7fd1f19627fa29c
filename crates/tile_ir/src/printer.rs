//! The text form of a kernel.
//!
//! ```text
//! kernel @add(%0: *fp32 {divisibility = 16}, %1: i32) num_warps = 4 {
//!   %2 = program_id {axis = 0} : i32
//!   %3 = arange {start = 0, end = 1024} : <1024xi32, #0>
//!   %4, %5 = for %a, %b, %c, %init : fp32, fp32 (%6: i32, %7: fp32) { ... }
//! }
//! #0 = #blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
//! ```

use crate::entities::{Block, Op, Value};
use crate::function::Function;
use crate::ops::OpKind;
use crate::types::Type;
use std::collections::HashMap;
use std::fmt::{self, Write};

/// Names values `%0, %1, ...` in the order the text defines them, so printing is canonical
/// (print → parse → print gives the same text whatever the arena's numbering).
struct Namer {
    names: HashMap<Value, usize>,
}

impl Namer {
    fn new(func: &Function) -> Namer {
        let mut names = HashMap::new();
        let mut next = |v: Value, names: &mut HashMap<Value, usize>| {
            let n = names.len();
            names.entry(v).or_insert(n);
        };
        for &a in &func.blocks[func.entry].args {
            next(a, &mut names);
        }
        fn go(
            func: &Function,
            b: Block,
            names: &mut HashMap<Value, usize>,
            next: &mut dyn FnMut(Value, &mut HashMap<Value, usize>),
        ) {
            for &op in &func.blocks[b].ops {
                for &r in &func.ops[op].results {
                    next(r, names);
                }
                for &r in &func.ops[op].regions {
                    let rb = func.regions[r].block;
                    for &a in &func.blocks[rb].args {
                        next(a, names);
                    }
                    go(func, rb, names, next);
                }
            }
        }
        go(func, func.entry, &mut names, &mut next);
        Namer { names }
    }

    fn name(&self, v: Value) -> String {
        match self.names.get(&v) {
            Some(n) => format!("%{n}"),
            None => format!("%undef{}", v.0),
        }
    }
}

/// Writes a type: `i32`, `*fp16`, `<64x64xfp32>` or `<1024xi32, #0>`.
pub fn write_type(f: &mut dyn Write, ty: &Type) -> fmt::Result {
    if ty.is_scalar() {
        return write!(f, "{}", ty.elem);
    }
    write!(f, "<{}x{}", ty.shape, ty.elem)?;
    if let Some(l) = ty.layout {
        write!(f, ", #{}", l.0)?;
    }
    f.write_str(">")
}

/// An op's attributes; `rank` is its first result's (per-dimension lists print that many).
fn attrs(func: &Function, kind: &OpKind, rank: usize) -> String {
    let text = |i: u32| {
        format!(
            "{:?}",
            func.strings
                .get(i as usize)
                .map(String::as_str)
                .unwrap_or("")
        )
    };
    match kind {
        OpKind::Print { prefix, hex } => format!(
            " {{prefix = {}{}}}",
            text(*prefix),
            if *hex { ", hex" } else { "" }
        ),
        OpKind::Assert { msg } => format!(" {{msg = {}}}", text(*msg)),
        OpKind::InlineAsm {
            asm,
            constraints,
            pack,
            pure,
        } => format!(
            " {{asm = {}, constraints = {}, pack = {pack}{}}}",
            text(*asm),
            text(*constraints),
            if *pure { ", pure" } else { "" }
        ),
        OpKind::Constant(c) => format!(" {{value = {c}}}"),
        OpKind::ProgramId(a)
        | OpKind::NumPrograms(a)
        | OpKind::ExpandDims(a)
        | OpKind::Gather(a) => {
            format!(" {{axis = {a}}}")
        }
        OpKind::Arange { start, end } => format!(" {{start = {start}, end = {end}}}"),
        OpKind::Compare(p, run) if *run > 1 => format!(" {{pred = {}, run = {run}}}", p.name()),
        OpKind::Compare(p, _) => format!(" {{pred = {}}}", p.name()),
        OpKind::Reduce { axis } => format!(" {{axis = {axis}}}"),
        OpKind::For { stages } if *stages > 0 => format!(" {{stages = {stages}}}"),
        OpKind::AsyncCopy(a) => format!(
            " {{buf = {}, stages = {}{}, vector = {}{}}}",
            a.buf,
            a.stages,
            if a.masked { ", masked" } else { "" },
            a.vector,
            if a.prefix_mask { ", prefix_mask" } else { "" }
        ),
        OpKind::AsyncWait { pending } => format!(" {{pending = {pending}}}"),
        OpKind::LocalView { buf, stages, trans } => format!(
            " {{buf = {buf}, stages = {stages}{}}}",
            if *trans { ", trans" } else { "" }
        ),
        OpKind::LocalLoad { buf, stages } => format!(" {{buf = {buf}, stages = {stages}}}"),
        OpKind::Dot { precision } => format!(" {{precision = {}}}", precision.name()),
        OpKind::Scan { axis, reverse } => format!(
            " {{axis = {axis}{}}}",
            if *reverse { ", reverse" } else { "" }
        ),
        OpKind::Permute { perm } => format!(" {{perm = {:?}}}", &perm[..rank.max(1)]),
        OpKind::Hint { kind, values } => {
            format!(" {{{} = {:?}}}", kind.name(), &values[..rank.max(1)])
        }
        OpKind::Atomic(a) => format!(
            " {{op = {}{}, sem = {:?}, scope = {:?}}}",
            a.op.name(),
            if a.masked { ", masked" } else { "" },
            a.sem,
            a.scope
        )
        .to_lowercase(),
        OpKind::Load(m) | OpKind::Store(m) => {
            let mut parts = Vec::new();
            if m.masked {
                parts.push("masked".to_string());
            }
            if m.has_other {
                parts.push("other".to_string());
            }
            if m.vector > 0 {
                parts.push(format!("vector = {}", m.vector));
            }
            if m.volatile {
                parts.push("volatile".to_string());
            }
            if m.whole_granules {
                parts.push("whole_granules".to_string());
            }
            if m.prefix_mask {
                parts.push("prefix_mask".to_string());
            }
            if let Some(c) = crate::CACHE_MODIFIERS
                .get(m.cache as usize)
                .filter(|c| !c.is_empty())
            {
                parts.push(format!("cache = {c}"));
            }
            if let Some(e) = crate::EVICTION_POLICIES
                .get(m.evict as usize)
                .filter(|e| !e.is_empty())
            {
                parts.push(format!("evict = {e}"));
            }
            if m.has_runs() {
                let n = m.runs.iter().rposition(|&r| r > 1).map_or(0, |i| i + 1);
                let runs: Vec<u8> = m.runs[..n].iter().map(|&r| r.max(1)).collect();
                parts.push(format!("runs = {runs:?}"));
            }
            if parts.is_empty() {
                String::new()
            } else {
                format!(" {{{}}}", parts.join(", "))
            }
        }
        _ => String::new(),
    }
}

fn write_block(
    func: &Function,
    namer: &Namer,
    f: &mut dyn Write,
    b: Block,
    indent: usize,
) -> fmt::Result {
    for &op in &func.blocks[b].ops {
        write_op_named(func, namer, f, op, indent)?;
    }
    Ok(())
}

fn join_values(namer: &Namer, vs: &[Value]) -> String {
    vs.iter()
        .map(|&v| namer.name(v))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes one op (and its regions) at `indent` spaces.
pub fn write_op(func: &Function, f: &mut dyn Write, op: Op, indent: usize) -> fmt::Result {
    write_op_named(func, &Namer::new(func), f, op, indent)
}

fn write_op_named(
    func: &Function,
    namer: &Namer,
    f: &mut dyn Write,
    op: Op,
    indent: usize,
) -> fmt::Result {
    let data = &func.ops[op];
    let pad = " ".repeat(indent);
    f.write_str(&pad)?;
    if !data.results.is_empty() {
        write!(f, "{} = ", join_values(namer, &data.results))?;
    }
    let rank = data.results.first().map_or(0, |&r| func.ty(r).shape.rank());
    write!(f, "{}{}", data.kind.name(), attrs(func, &data.kind, rank))?;
    if !data.operands.is_empty() {
        write!(f, " {}", join_values(namer, &data.operands))?;
    }
    if !data.results.is_empty() {
        f.write_str(" : ")?;
        for (i, &r) in data.results.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write_type(f, func.ty(r))?;
        }
    }
    for &r in &data.regions {
        let b = func.regions[r].block;
        f.write_str(" (")?;
        for (i, &a) in func.blocks[b].args.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}: ", namer.name(a))?;
            write_type(f, func.ty(a))?;
        }
        f.write_str(") {\n")?;
        write_block(func, namer, f, b, indent + 2)?;
        write!(f, "{pad}}}")?;
    }
    if data.loc.line > 0 {
        write!(f, " loc({}:{})", data.loc.line, data.loc.col)?;
    }
    f.write_str("\n")
}

impl fmt::Display for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let namer = Namer::new(self);
        write!(f, "kernel @{}(", self.name)?;
        for (i, (&v, p)) in self.blocks[self.entry]
            .args
            .iter()
            .zip(&self.params)
            .enumerate()
        {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}: ", namer.name(v))?;
            write_type(f, self.ty(v))?;
            write!(f, " {{name = {:?}", p.name)?;
            if p.divisibility > 1 {
                write!(f, ", divisibility = {}", p.divisibility)?;
            }
            f.write_str("}")?;
        }
        write!(f, ") num_warps = {}", self.num_warps)?;
        if self.num_stages != Function::DEFAULT_NUM_STAGES {
            write!(f, " num_stages = {}", self.num_stages)?;
        }
        if !self.file.is_empty() {
            write!(f, " file = {:?}", self.file)?;
        }
        f.write_str(" {\n")?;
        write_block(self, &namer, f, self.entry, 2)?;
        f.write_str("}\n")?;
        for (id, l) in self.layouts.iter() {
            writeln!(f, "#{} = {l}", id.0)?;
        }
        Ok(())
    }
}
