//! Parsing the text form (`Display` of [`Function`]) back into a kernel.
//!
//! A character-level recursive-descent parser: every error is a [`ParseError`] with a line and
//! column, never a panic. Layout references `#N` are resolved against the `#N = ...` table
//! after the kernel; `;` starts a comment that runs to the end of the line.

use crate::entities::{Block, LayoutId, Op, Value};
use crate::function::{Function, Loc};
use crate::layout::{BlockedLayout, Layout, MmaLayout};
use crate::ops::{
    AsyncCopyAttrs, AtomicAttrs, AtomicOp, BinaryOp, CmpPred, Const, DotPrecision, MemAttrs,
    MemScope, MemSem, OpKind, UnaryOp,
};
use crate::types::{Elem, Shape, Type, MAX_RANK};
use std::collections::HashMap;
use std::fmt;

/// A syntax or reference error at a position of the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub col: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

type R<T> = Result<T, ParseError>;

/// Parses a kernel from its text form.
pub fn parse(text: &str) -> Result<Function, ParseError> {
    Parser {
        s: text.as_bytes(),
        pos: 0,
        names: Vec::new(),
        func: Function::new("", 1),
        layout_refs: Vec::new(),
    }
    .parse_file()
}

impl std::str::FromStr for Function {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Function, ParseError> {
        parse(s)
    }
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    /// Scopes of value names (one per open region).
    names: Vec<HashMap<String, Value>>,
    func: Function,
    /// Every `#N` used, with where, to check against the table.
    layout_refs: Vec<(u32, usize)>,
}

/// An attribute value.
#[derive(Debug, Clone)]
enum Attr {
    Flag,
    Word(String),
    Str(String),
    List(Vec<i64>),
}

impl Parser<'_> {
    // -- characters -------------------------------------------------------------------------------
    fn err<T>(&self, message: impl Into<String>) -> R<T> {
        self.err_at(self.pos, message)
    }

    fn err_at<T>(&self, pos: usize, message: impl Into<String>) -> R<T> {
        let upto = &self.s[..pos.min(self.s.len())];
        let line = upto.iter().filter(|&&c| c == b'\n').count() + 1;
        let col = pos - upto.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1) + 1;
        Err(ParseError {
            line,
            col,
            message: message.into(),
        })
    }

    fn skip_ws(&mut self) {
        while self.pos < self.s.len() {
            let c = self.s[self.pos];
            if c.is_ascii_whitespace() {
                self.pos += 1;
            } else if c == b';' {
                while self.pos < self.s.len() && self.s[self.pos] != b'\n' {
                    self.pos += 1;
                }
            } else {
                break;
            }
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, t: &str) -> bool {
        self.skip_ws();
        if self.s[self.pos..].starts_with(t.as_bytes()) {
            self.pos += t.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, t: &str) -> R<()> {
        if self.eat(t) {
            Ok(())
        } else {
            let found = self
                .s
                .get(self.pos..(self.pos + 12).min(self.s.len()))
                .map(String::from_utf8_lossy);
            self.err(format!(
                "expected `{t}`, found `{}`",
                found.unwrap_or_default()
            ))
        }
    }

    fn ident(&mut self) -> R<String> {
        self.skip_ws();
        let start = self.pos;
        while self.pos < self.s.len()
            && (self.s[self.pos].is_ascii_alphanumeric() || self.s[self.pos] == b'_')
        {
            self.pos += 1;
        }
        if start == self.pos {
            return self.err("expected a name");
        }
        Ok(String::from_utf8_lossy(&self.s[start..self.pos]).into_owned())
    }

    fn int(&mut self) -> R<i64> {
        self.skip_ws();
        let start = self.pos;
        if self.s.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        let t = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("");
        match t.parse::<i64>() {
            Ok(v) => Ok(v),
            Err(_) => self.err_at(start, "expected an integer"),
        }
    }

    fn uint(&mut self) -> R<u32> {
        let at = self.pos;
        let v = self.int()?;
        u32::try_from(v).or_else(|_| self.err_at(at, format!("{v} is out of range")))
    }

    /// A number or word token (`1.5e0`, `-inf`, `NaN`, `42`).
    fn word(&mut self) -> R<String> {
        self.skip_ws();
        let start = self.pos;
        while self.pos < self.s.len() {
            let c = self.s[self.pos];
            if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-' | b'+') {
                self.pos += 1;
            } else {
                break;
            }
        }
        if start == self.pos {
            return self.err("expected a value");
        }
        Ok(String::from_utf8_lossy(&self.s[start..self.pos]).into_owned())
    }

    fn string(&mut self) -> R<String> {
        self.expect("\"")?;
        let mut out = String::new();
        loop {
            let Some(&c) = self.s.get(self.pos) else {
                return self.err("unterminated string");
            };
            self.pos += 1;
            match c {
                b'"' => return Ok(out),
                b'\\' => {
                    let Some(&e) = self.s.get(self.pos) else {
                        return self.err("unterminated string");
                    };
                    self.pos += 1;
                    match e {
                        b'n' => out.push('\n'),
                        b't' => out.push('\t'),
                        b'r' => out.push('\r'),
                        b'0' => out.push('\0'),
                        b'\\' | b'"' | b'\'' => out.push(e as char),
                        b'u' => {
                            self.expect("{")?;
                            let start = self.pos;
                            while self.pos < self.s.len() && self.s[self.pos].is_ascii_hexdigit() {
                                self.pos += 1;
                            }
                            let hex = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("");
                            let ch = u32::from_str_radix(hex, 16).ok().and_then(char::from_u32);
                            let Some(ch) = ch else {
                                return self.err_at(start, "bad \\u escape");
                            };
                            out.push(ch);
                            self.expect("}")?;
                        }
                        _ => return self.err("unknown escape"),
                    }
                }
                _ => {
                    // Re-decode UTF-8 sequences byte by byte.
                    let start = self.pos - 1;
                    let len = match c {
                        0x00..=0x7f => 1,
                        0xc0..=0xdf => 2,
                        0xe0..=0xef => 3,
                        _ => 4,
                    };
                    let end = (start + len).min(self.s.len());
                    match std::str::from_utf8(&self.s[start..end]) {
                        Ok(t) => out.push_str(t),
                        Err(_) => return self.err_at(start, "invalid UTF-8 in a string"),
                    }
                    self.pos = end;
                }
            }
        }
    }

    // -- names ------------------------------------------------------------------------------------
    fn value_name(&mut self) -> R<String> {
        self.expect("%")?;
        let start = self.pos;
        while self.pos < self.s.len()
            && (self.s[self.pos].is_ascii_alphanumeric() || self.s[self.pos] == b'_')
        {
            self.pos += 1;
        }
        if start == self.pos {
            return self.err("expected a value name after `%`");
        }
        Ok(String::from_utf8_lossy(&self.s[start..self.pos]).into_owned())
    }

    fn define(&mut self, name: String, v: Value) -> R<()> {
        let at = self.pos;
        if self.names.iter().any(|s| s.contains_key(&name)) {
            return self.err_at(at, format!("%{name} is defined twice"));
        }
        self.names
            .last_mut()
            .expect("a scope is open")
            .insert(name, v);
        Ok(())
    }

    fn lookup(&mut self) -> R<Value> {
        let at = self.pos;
        let name = self.value_name()?;
        for s in self.names.iter().rev() {
            if let Some(&v) = s.get(&name) {
                return Ok(v);
            }
        }
        self.err_at(at, format!("%{name} is not defined here"))
    }

    // -- types and layouts ------------------------------------------------------------------------
    fn elem(&mut self) -> R<Elem> {
        self.skip_ws();
        let at = self.pos;
        let ptr = self.eat("*");
        let name = self.ident()?;
        let full = if ptr { format!("*{name}") } else { name };
        match Elem::from_name(&full) {
            Some(e) => Ok(e),
            None => self.err_at(at, format!("unknown element type `{full}`")),
        }
    }

    fn ty(&mut self) -> R<Type> {
        if !self.eat("<") {
            return Ok(Type::scalar(self.elem()?));
        }
        let at = self.pos;
        let mut dims = Vec::new();
        loop {
            self.skip_ws();
            if !self.s.get(self.pos).is_some_and(|c| c.is_ascii_digit()) {
                break;
            }
            dims.push(self.uint()?);
            self.expect("x")?;
        }
        if dims.is_empty() || dims.len() > MAX_RANK {
            return self.err_at(at, "a tile type needs 1 to 4 dimensions");
        }
        let elem = self.elem()?;
        let mut ty = Type::tile(elem, Shape::new(&dims).expect("rank checked"));
        if self.eat(",") {
            self.expect("#")?;
            let at = self.pos;
            let n = self.uint()?;
            self.layout_refs.push((n, at));
            ty.layout = Some(LayoutId(n));
        }
        self.expect(">")?;
        Ok(ty)
    }

    fn list(&mut self) -> R<Vec<i64>> {
        self.expect("[")?;
        let mut out = Vec::new();
        if self.eat("]") {
            return Ok(out);
        }
        loop {
            out.push(self.int()?);
            if self.eat("]") {
                return Ok(out);
            }
            self.expect(",")?;
        }
    }

    fn ulist(&mut self) -> R<Vec<u32>> {
        let at = self.pos;
        let v = self.list()?;
        v.into_iter()
            .map(|x| u32::try_from(x).or_else(|_| self.err_at(at, "negative in a layout")))
            .collect()
    }

    fn layout(&mut self) -> R<Layout> {
        let at = self.pos;
        if self.eat("#blocked<{") {
            let mut fields: [Vec<u32>; 4] = Default::default();
            for (i, key) in ["sizePerThread", "threadsPerWarp", "warpsPerCTA", "order"]
                .iter()
                .enumerate()
            {
                if i > 0 {
                    self.expect(",")?;
                }
                self.expect(key)?;
                self.expect("=")?;
                fields[i] = self.ulist()?;
            }
            self.expect("}>")?;
            let [spt, tpw, wpc, order] = fields;
            let rank = order.len();
            let pow2 = |v: &[u32]| v.iter().all(|&x| x > 0 && x.is_power_of_two());
            let mut sorted = order.clone();
            sorted.sort();
            let order_ok = sorted.iter().enumerate().all(|(i, &d)| d as usize == i);
            if spt.len() != rank
                || tpw.len() != rank
                || wpc.len() != rank
                || rank == 0
                || rank > MAX_RANK
                || !pow2(&spt)
                || !pow2(&tpw)
                || !pow2(&wpc)
                || !order_ok
                || tpw.iter().product::<u32>() != 32
                || spt.iter().map(|&x| x as u64).product::<u64>() > 1 << 16
            {
                return self.err_at(at, "malformed blocked layout");
            }
            return Ok(Layout::Blocked(BlockedLayout {
                size_per_thread: spt,
                threads_per_warp: tpw,
                warps_per_cta: wpc,
                order,
            }));
        }
        if self.eat("#slice<{") {
            self.expect("dim")?;
            self.expect("=")?;
            let dim = self.uint()?;
            self.expect(",")?;
            self.expect("parent")?;
            self.expect("=")?;
            let parent = self.layout()?;
            self.expect("}>")?;
            if dim as usize >= parent.rank() {
                return self.err_at(at, "slice dimension out of range");
            }
            return Ok(Layout::Slice {
                dim,
                parent: Box::new(parent),
            });
        }
        if self.eat("#mma<{") {
            self.expect("versionMajor")?;
            self.expect("=")?;
            let version = self.uint()?;
            if !matches!(version, 2 | 3) {
                return self.err_at(at, "mma versions are 2 and 3");
            }
            self.expect(",")?;
            self.expect("warpsPerCTA")?;
            self.expect("=")?;
            let wpc = self.ulist()?;
            self.expect(",")?;
            self.expect("instrShape")?;
            self.expect("=")?;
            let instr = self.ulist()?;
            self.expect("}>")?;
            let pow2 = wpc.iter().all(|&x| x > 0 && x.is_power_of_two() && x <= 64);
            let ok = wpc.len() == 2
                && pow2
                && if version == 2 {
                    instr == [16, 8]
                } else {
                    wpc[1] == 1
                        && wpc[0] >= 4
                        && instr.len() == 2
                        && instr[0] == 64
                        && (8..=256).contains(&instr[1])
                        && instr[1].is_multiple_of(8)
                };
            if !ok {
                return self.err_at(at, "malformed mma layout");
            }
            let instr_n = if version == 2 { 8 } else { instr[1] };
            return Ok(Layout::Mma(MmaLayout {
                warps_per_cta: wpc,
                version,
                instr_n,
            }));
        }
        if self.eat("#dot_op<{") {
            self.expect("opIdx")?;
            self.expect("=")?;
            let op_idx = self.uint()?;
            self.expect(",")?;
            self.expect("parent")?;
            self.expect("=")?;
            let parent = self.layout()?;
            self.expect(",")?;
            self.expect("kWidth")?;
            self.expect("=")?;
            let k_width = self.uint()?;
            self.expect("}>")?;
            let parent_ok = match &parent {
                Layout::Mma(_) => matches!(k_width, 1 | 2 | 4),
                Layout::Blocked(_) => k_width == 1,
                _ => false,
            };
            if op_idx > 1 || parent.rank() != 2 || !parent_ok {
                return self.err_at(at, "malformed dot operand layout");
            }
            return Ok(Layout::DotOperand {
                op_idx,
                parent: Box::new(parent),
                k_width,
            });
        }
        self.err("expected #blocked<{...}>, #slice<{...}>, #mma<{...}> or #dot_op<{...}>")
    }

    // -- attributes -------------------------------------------------------------------------------
    fn attrs(&mut self) -> R<HashMap<String, Attr>> {
        let mut out = HashMap::new();
        if !self.eat("{") {
            return Ok(out);
        }
        loop {
            let key = self.ident()?;
            let v = if self.eat("=") {
                match self.peek() {
                    Some(b'"') => Attr::Str(self.string()?),
                    Some(b'[') => Attr::List(self.list()?),
                    _ => Attr::Word(self.word()?),
                }
            } else {
                Attr::Flag
            };
            out.insert(key, v);
            if self.eat("}") {
                return Ok(out);
            }
            self.expect(",")?;
        }
    }

    fn attr_int(&self, attrs: &HashMap<String, Attr>, key: &str, at: usize) -> R<i64> {
        match attrs.get(key) {
            Some(Attr::Word(w)) => w
                .parse::<i64>()
                .or_else(|_| self.err_at(at, format!("`{key}` must be an integer"))),
            _ => self.err_at(at, format!("missing integer attribute `{key}`")),
        }
    }

    fn attr_word<'b>(&self, attrs: &'b HashMap<String, Attr>, key: &str, at: usize) -> R<&'b str> {
        match attrs.get(key) {
            Some(Attr::Word(w)) => Ok(w),
            _ => self.err_at(at, format!("missing attribute `{key}`")),
        }
    }

    fn attr_str(&self, attrs: &HashMap<String, Attr>, key: &str, at: usize) -> R<String> {
        match attrs.get(key) {
            Some(Attr::Str(s)) => Ok(s.clone()),
            _ => self.err_at(at, format!("missing string attribute `{key}`")),
        }
    }

    fn small(&self, v: i64, at: usize) -> R<u8> {
        u8::try_from(v).or_else(|_| self.err_at(at, format!("{v} is out of range")))
    }

    /// The op kind for a name and its attributes (and, for constants, the result type).
    fn kind(
        &mut self,
        name: &str,
        attrs: &HashMap<String, Attr>,
        at: usize,
        first_ty: Option<&Type>,
    ) -> R<OpKind> {
        let flag = |k: &str| matches!(attrs.get(k), Some(Attr::Flag));
        let axis = |p: &Self| -> R<u8> { p.small(p.attr_int(attrs, "axis", at)?, at) };
        Ok(match name {
            "constant" => {
                let w = self.attr_word(attrs, "value", at)?;
                let is_float = first_ty
                    .and_then(|t| t.dtype())
                    .is_some_and(|d| d.is_float());
                if is_float {
                    match w.parse::<f64>() {
                        Ok(x) => OpKind::Constant(Const::Float(x)),
                        Err(_) => return self.err_at(at, format!("bad float `{w}`")),
                    }
                } else {
                    match w.parse::<i64>() {
                        Ok(x) => OpKind::Constant(Const::Int(x)),
                        Err(_) => return self.err_at(at, format!("bad integer `{w}`")),
                    }
                }
            }
            "program_id" => OpKind::ProgramId(axis(self)?),
            "num_programs" => OpKind::NumPrograms(axis(self)?),
            "arange" => {
                let start = self.attr_int(attrs, "start", at)?;
                let end = self.attr_int(attrs, "end", at)?;
                match (i32::try_from(start), i32::try_from(end)) {
                    (Ok(start), Ok(end)) => OpKind::Arange { start, end },
                    _ => return self.err_at(at, "arange bounds out of range"),
                }
            }
            "splat" => OpKind::Splat,
            "expand_dims" => OpKind::ExpandDims(axis(self)?),
            "gather" => OpKind::Gather(axis(self)?),
            "broadcast" => OpKind::Broadcast,
            "cmp" => {
                let p = self.attr_word(attrs, "pred", at)?;
                let run = match attrs.get("run") {
                    Some(_) => self.small(self.attr_int(attrs, "run", at)?, at)?,
                    None => 0,
                };
                match CmpPred::from_name(p) {
                    Some(p) => OpKind::Compare(p, run),
                    None => return self.err_at(at, format!("unknown predicate `{p}`")),
                }
            }
            "fma" => OpKind::Fma,
            "select" => OpKind::Select,
            "cast" => OpKind::Cast,
            "bitcast" => OpKind::Bitcast,
            "addptr" => OpKind::AddPtr,
            "load" | "store" => {
                let vector = match attrs.get("vector") {
                    Some(_) => self.small(self.attr_int(attrs, "vector", at)?, at)?,
                    None => 0,
                };
                let mut runs = [0u8; MAX_RANK];
                if let Some(v) = attrs.get("runs") {
                    let Attr::List(list) = v else {
                        return self.err_at(at, "`runs` must be a list");
                    };
                    if list.len() > MAX_RANK {
                        return self.err_at(at, "`runs` has more entries than dimensions");
                    }
                    for (r, &x) in runs.iter_mut().zip(list) {
                        *r = self.small(x, at)?;
                    }
                }
                let index_of = |key: &str, table: &[&str]| -> R<u8> {
                    match attrs.get(key) {
                        None => Ok(0),
                        Some(Attr::Word(w)) => match table.iter().position(|t| t == w) {
                            Some(i) if i > 0 => Ok(i as u8),
                            _ => self.err_at(at, format!("unknown `{key}` {w}")),
                        },
                        Some(_) => self.err_at(at, format!("`{key}` must be a word")),
                    }
                };
                let m = MemAttrs {
                    masked: flag("masked"),
                    has_other: flag("other"),
                    vector,
                    volatile: flag("volatile"),
                    runs,
                    whole_granules: flag("whole_granules"),
                    prefix_mask: flag("prefix_mask"),
                    cache: index_of("cache", &crate::CACHE_MODIFIERS)?,
                    evict: index_of("evict", &crate::EVICTION_POLICIES)?,
                };
                if name == "load" {
                    OpKind::Load(m)
                } else {
                    OpKind::Store(m)
                }
            }
            "for" => OpKind::For {
                stages: match attrs.get("stages") {
                    Some(_) => self.small(self.attr_int(attrs, "stages", at)?, at)?,
                    None => 0,
                },
            },
            "if" => OpKind::If,
            "while" => OpKind::While,
            "yield" => OpKind::Yield,
            "return" => OpKind::Return,
            "convert_layout" => OpKind::ConvertLayout,
            "barrier" => OpKind::Barrier,
            "async_copy" => OpKind::AsyncCopy(AsyncCopyAttrs {
                buf: self.small(self.attr_int(attrs, "buf", at)?, at)?,
                stages: self.small(self.attr_int(attrs, "stages", at)?, at)?,
                masked: flag("masked"),
                vector: self.small(self.attr_int(attrs, "vector", at)?, at)?,
                prefix_mask: flag("prefix_mask"),
            }),
            "async_commit" => OpKind::AsyncCommit,
            "async_wait" => OpKind::AsyncWait {
                pending: self.small(self.attr_int(attrs, "pending", at)?, at)?,
            },
            "local_view" => OpKind::LocalView {
                buf: self.small(self.attr_int(attrs, "buf", at)?, at)?,
                stages: self.small(self.attr_int(attrs, "stages", at)?, at)?,
                trans: flag("trans"),
            },
            "local_load" => OpKind::LocalLoad {
                buf: self.small(self.attr_int(attrs, "buf", at)?, at)?,
                stages: self.small(self.attr_int(attrs, "stages", at)?, at)?,
            },
            "dot" => {
                let w = self.attr_word(attrs, "precision", at)?;
                match DotPrecision::from_name(w) {
                    Some(precision) => OpKind::Dot { precision },
                    None => return self.err_at(at, format!("unknown precision `{w}`")),
                }
            }
            "reduce" => OpKind::Reduce { axis: axis(self)? },
            "scan" => OpKind::Scan {
                axis: axis(self)?,
                reverse: flag("reverse"),
            },
            "permute" => {
                let Some(Attr::List(v)) = attrs.get("perm") else {
                    return self.err_at(at, "missing `perm`");
                };
                let mut perm = [0u8; MAX_RANK];
                if v.is_empty() || v.len() > MAX_RANK {
                    return self.err_at(at, format!("`perm` needs 1 to {MAX_RANK} entries"));
                }
                for (i, &x) in v.iter().enumerate() {
                    perm[i] = self.small(x, at)?;
                }
                OpKind::Permute { perm }
            }
            "hint" => {
                let Some((kind, v)) =
                    crate::ops::HintKind::ALL
                        .iter()
                        .find_map(|k| match attrs.get(k.name()) {
                            Some(Attr::List(v)) => Some((*k, v)),
                            _ => None,
                        })
                else {
                    return self.err_at(
                        at,
                        "hint needs multiple_of, max_contiguous or max_constancy",
                    );
                };
                if v.is_empty() || v.len() > MAX_RANK {
                    return self.err_at(at, format!("hint values need 1 to {MAX_RANK} entries"));
                }
                let mut values = [0u32; MAX_RANK];
                for (i, &x) in v.iter().enumerate() {
                    values[i] = u32::try_from(x)
                        .or_else(|_| self.err_at(at, format!("{x} is out of range")))?;
                }
                OpKind::Hint { kind, values }
            }
            "reshape" => OpKind::Reshape,
            "join" => OpKind::Join,
            "split" => OpKind::Split,
            "atomic" => {
                let op = self.attr_word(attrs, "op", at)?;
                let Some(op) = AtomicOp::from_name(op) else {
                    return self.err_at(at, format!("unknown atomic `{op}`"));
                };
                let sem = match self.attr_word(attrs, "sem", at)? {
                    "relaxed" => MemSem::Relaxed,
                    "acquire" => MemSem::Acquire,
                    "release" => MemSem::Release,
                    "acqrel" => MemSem::AcqRel,
                    other => return self.err_at(at, format!("unknown sem `{other}`")),
                };
                let scope = match self.attr_word(attrs, "scope", at)? {
                    "cta" => MemScope::Cta,
                    "gpu" => MemScope::Gpu,
                    "sys" => MemScope::Sys,
                    other => return self.err_at(at, format!("unknown scope `{other}`")),
                };
                OpKind::Atomic(AtomicAttrs {
                    op,
                    masked: flag("masked"),
                    sem,
                    scope,
                })
            }
            "inline_asm" => {
                let asm = self.attr_str(attrs, "asm", at)?;
                let cons = self.attr_str(attrs, "constraints", at)?;
                let pack = self.small(self.attr_int(attrs, "pack", at)?, at)?;
                OpKind::InlineAsm {
                    asm: self.func.intern_string(&asm),
                    constraints: self.func.intern_string(&cons),
                    pack: pack.max(1),
                    pure: flag("pure"),
                }
            }
            "print" => {
                let p = self.attr_str(attrs, "prefix", at)?;
                OpKind::Print {
                    prefix: self.func.intern_string(&p),
                    hex: flag("hex"),
                }
            }
            "assert" => {
                let m = self.attr_str(attrs, "msg", at)?;
                OpKind::Assert {
                    msg: self.func.intern_string(&m),
                }
            }
            other => {
                if let Some(b) = BinaryOp::from_name(other) {
                    OpKind::Binary(b)
                } else if let Some(u) = UnaryOp::from_name(other) {
                    OpKind::Unary(u)
                } else {
                    return self.err_at(at, format!("unknown op `{other}`"));
                }
            }
        })
    }

    // -- ops and blocks ---------------------------------------------------------------------------
    fn op(&mut self, block: Block) -> R<Op> {
        let mut result_names = Vec::new();
        if self.peek() == Some(b'%') {
            loop {
                result_names.push(self.value_name()?);
                if !self.eat(",") {
                    break;
                }
            }
            self.expect("=")?;
        }
        self.skip_ws();
        let at = self.pos;
        let name = self.ident()?;
        // An op's operands are on its own line: `barrier` followed by `%3 = ...` has none.
        let eol = self.s[self.pos..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(self.s.len(), |n| self.pos + n);
        let attrs = self.attrs()?;
        let mut operands = Vec::new();
        if self.peek() == Some(b'%') && self.pos < eol {
            loop {
                operands.push(self.lookup()?);
                if !self.eat(",") {
                    break;
                }
            }
        }
        let mut types = Vec::new();
        if self.eat(":") {
            loop {
                types.push(self.ty()?);
                if !self.eat(",") {
                    break;
                }
            }
        }
        if types.len() != result_names.len() {
            return self.err_at(
                at,
                format!("{} results but {} types", result_names.len(), types.len()),
            );
        }
        let kind = self.kind(&name, &attrs, at, types.first())?;
        let op = self.func.create_op(kind, operands, &types, Loc::default());
        self.func.blocks[block].ops.push(op);
        while self.peek() == Some(b'(') {
            let body = self.func.add_region(op);
            self.expect("(")?;
            self.names.push(HashMap::new());
            if !self.eat(")") {
                loop {
                    let n = self.value_name()?;
                    self.expect(":")?;
                    let t = self.ty()?;
                    let v = self.func.add_block_arg(body, t);
                    self.define(n, v)?;
                    if self.eat(")") {
                        break;
                    }
                    self.expect(",")?;
                }
            }
            self.expect("{")?;
            while self.peek() != Some(b'}') {
                if self.peek().is_none() {
                    return self.err("unexpected end of text inside a region");
                }
                self.op(body)?;
            }
            self.expect("}")?;
            self.names.pop();
        }
        if self.eat("loc(") {
            let line = self.uint()?;
            self.expect(":")?;
            let col = self.uint()?;
            self.expect(")")?;
            self.func.ops[op].loc = Loc { line, col };
        }
        let results = self.func.ops[op].results.clone();
        for (n, v) in result_names.into_iter().zip(results) {
            self.define(n, v)?;
        }
        Ok(op)
    }

    fn parse_file(mut self) -> R<Function> {
        self.expect("kernel")?;
        self.expect("@")?;
        let name = self.ident()?;
        self.func.name = name;
        self.names.push(HashMap::new());
        self.expect("(")?;
        if !self.eat(")") {
            loop {
                let vname = self.value_name()?;
                self.expect(":")?;
                let at = self.pos;
                let ty = self.ty()?;
                if !ty.is_scalar() {
                    return self.err_at(at, "kernel parameters are scalars");
                }
                let attrs = self.attrs()?;
                let pname = self.attr_str(&attrs, "name", at)?;
                let div = match attrs.get("divisibility") {
                    Some(_) => {
                        u32::try_from(self.attr_int(&attrs, "divisibility", at)?).unwrap_or(1)
                    }
                    None => 1,
                };
                let v = self.func.add_param(&pname, ty, div);
                self.define(vname, v)?;
                if self.eat(")") {
                    break;
                }
                self.expect(",")?;
            }
        }
        self.expect("num_warps")?;
        self.expect("=")?;
        let at = self.pos;
        let nw = self.uint()?;
        if nw == 0 || !nw.is_power_of_two() || nw > 32 {
            return self.err_at(at, "num_warps must be a power of two up to 32");
        }
        self.func.num_warps = nw;
        if self.eat("num_stages") {
            self.expect("=")?;
            let at = self.pos;
            let ns = self.uint()?;
            if ns == 0 || ns > 16 {
                return self.err_at(at, "num_stages must be 1 to 16");
            }
            self.func.num_stages = ns;
        }
        if self.eat("file") {
            self.expect("=")?;
            self.func.file = self.string()?;
        }
        self.expect("{")?;
        let entry = self.func.entry;
        while self.peek() != Some(b'}') {
            if self.peek().is_none() {
                return self.err("unexpected end of text inside the kernel");
            }
            self.op(entry)?;
        }
        self.expect("}")?;
        // The layout table.
        let mut n = 0u32;
        while self.peek() == Some(b'#') {
            self.expect("#")?;
            let at = self.pos;
            let id = self.uint()?;
            if id != n {
                return self.err_at(at, format!("expected layout #{n}"));
            }
            self.expect("=")?;
            let l = self.layout()?;
            if self.func.intern_layout(l) != LayoutId(n) {
                return self.err_at(at, "a layout is listed twice");
            }
            n += 1;
        }
        if self.peek().is_some() {
            return self.err("unexpected text after the kernel");
        }
        for &(id, at) in &self.layout_refs {
            if id >= n {
                return self.err_at(at, format!("layout #{id} is not defined"));
            }
        }
        Ok(self.func)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_located() {
        let e = parse("kernel @k() num_warps = 4 {\n  %0 = frobnicate : i32\n}").unwrap_err();
        assert_eq!((e.line, e.col), (2, 8));
        assert!(e.message.contains("unknown op"));
        let e = parse("kernel @k() num_warps = 4 {\n  %0 = add %1, %1 : i32\n}").unwrap_err();
        assert!(e.message.contains("%1 is not defined"), "{e}");
        assert!(parse("").is_err());
        assert!(parse("kernel @k() num_warps = 3 {}").is_err());
    }

    #[test]
    fn a_while_condition_yielding_the_wrong_state_type_is_refused() {
        // Found by mutating texts: the condition passes an i32 where the body takes an fp32.
        let text = |state: &str| {
            format!(
                "kernel @k(%0: i32 {{name = \"n\"}}) num_warps = 4 {{\n  \
                 %1 = constant {{value = 0}} : i32\n  \
                 %2 = constant {{value = 0.0}} : fp32\n  \
                 %3, %4 = while %2, %1 : fp32, i32 (%5: fp32, %6: i32) {{\n    \
                 %7 = cmp {{pred = lt}} %6, %0 : i1\n    \
                 yield %7, {state}, %6\n  \
                 }} (%8: fp32, %9: i32) {{\n    \
                 yield %8, %9\n  \
                 }}\n  \
                 return\n}}"
            )
        };
        assert!(crate::verify(&parse(&text("%5")).unwrap()).is_ok());
        let e = crate::verify(&parse(&text("%6")).unwrap()).unwrap_err();
        assert!(
            format!("{e:?}").contains("not of the loop state's type"),
            "{e:?}"
        );
    }

    #[test]
    fn load_runs_round_trip() {
        let text = "kernel @k(%0: *fp32 {name = \"p\", divisibility = 16}) num_warps = 4 {\n  \
                    %1 = splat %0 : <64x*fp32>\n  \
                    %2 = load {vector = 1, runs = [16]} %1 : <64xfp32>\n  \
                    return\n}";
        let f = parse(text).unwrap();
        let printed = f.to_string();
        assert!(
            printed.contains("load {vector = 1, runs = [16]}"),
            "{printed}"
        );
        assert_eq!(parse(&printed).unwrap().to_string(), printed);
        assert!(crate::verify(&f).is_ok());
        let bad = parse(&text.replace("runs = [16]", "runs = [128]")).unwrap();
        assert!(crate::verify(&bad).is_err());
    }

    #[test]
    fn local_load_round_trip() {
        let text = "kernel @k(%0: *i8 {name = \"p\", divisibility = 16}) num_warps = 4 {\n  \
                    %1 = splat %0 : <64x64x*i8, #0>\n  \
                    %2 = constant {value = 0} : i32\n  \
                    async_copy {buf = 0, stages = 2, vector = 16} %1, %2\n  \
                    async_commit\n  \
                    async_wait {pending = 0}\n  \
                    barrier\n  \
                    %3 = local_load {buf = 0, stages = 2} %2 : <64x64xi8, #0>\n  \
                    return\n}\n\
                    #0 = #blocked<{sizePerThread = [1, 16], threadsPerWarp = [8, 4], \
                    warpsPerCTA = [4, 1], order = [1, 0]}>\n";
        let f = parse(text).unwrap();
        assert!(crate::verify(&f).is_ok(), "{:?}", crate::verify(&f));
        let printed = f.to_string();
        assert!(
            printed.contains("local_load {buf = 0, stages = 2}"),
            "{printed}"
        );
        assert_eq!(parse(&printed).unwrap().to_string(), printed);
        // A ring nothing writes, and a register read of a ring of another shape, are refused.
        let unwritten = parse(&text.replace("local_load {buf = 0", "local_load {buf = 1")).unwrap();
        assert!(crate::verify(&unwritten).is_err());
        let reshaped = parse(&text.replace(
            "%3 = local_load {buf = 0, stages = 2} %2 : <64x64xi8, #0>",
            "%3 = local_load {buf = 0, stages = 2} %2 : <64x32xi8, #0>",
        ))
        .unwrap();
        assert!(crate::verify(&reshaped).is_err());
    }

    #[test]
    fn gather_and_rank_8_round_trip() {
        let text = "kernel @k(%0: *fp32 {name = \"p\"}) num_warps = 4 {\n  \
                    %1 = splat %0 : <16x8x*fp32>\n  \
                    %2 = load %1 : <16x8xfp32>\n  \
                    %3 = constant {value = 3} : i32\n  \
                    %4 = splat %3 : <32x8xi32>\n  \
                    %5 = gather {axis = 0} %2, %4 : <32x8xfp32>\n  \
                    %6 = reshape %5 : <2x2x2x2x2x2x2x2xfp32>\n  \
                    %7 = permute {perm = [7, 6, 5, 4, 3, 2, 1, 0]} %6 : <2x2x2x2x2x2x2x2xfp32>\n  \
                    return\n}";
        let f = parse(text).unwrap();
        assert!(crate::verify(&f).is_ok(), "{:?}", crate::verify(&f));
        let printed = f.to_string();
        assert!(printed.contains("gather {axis = 0}"), "{printed}");
        assert!(
            printed.contains("perm = [7, 6, 5, 4, 3, 2, 1, 0]"),
            "{printed}"
        );
        assert_eq!(parse(&printed).unwrap().to_string(), printed);
        // The index must keep the source's other dimensions.
        let gather_only = text
            .lines()
            .filter(|l| !l.contains("reshape") && !l.contains("permute"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(crate::verify(&parse(&gather_only).unwrap()).is_ok());
        let bad = parse(
            &gather_only
                .replace("x8xi32>", "x4xi32>")
                .replace("<32x8xfp32>", "<32x4xfp32>"),
        )
        .unwrap();
        assert!(crate::verify(&bad).is_err());
    }
}
