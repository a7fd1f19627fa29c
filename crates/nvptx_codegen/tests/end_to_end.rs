//! Builds kernels with the builder API, compiles them, and checks the PTX; when a `ptxas` is
//! found (`PTXAS` or on PATH) it must accept the PTX too.

use nvptx_codegen::{compile, Target};
use tile_ir::{BinaryOp, Builder, CmpPred, DType, Elem, Function};

fn vector_add(block: i32) -> Function {
    let mut b = Builder::new("add_kernel", 4);
    let x = b.param("x_ptr", Elem::Ptr(DType::F32), 16);
    let y = b.param("y_ptr", Elem::Ptr(DType::F32), 16);
    let out = b.param("out_ptr", Elem::Ptr(DType::F32), 16);
    let n = b.param("n", Elem::Num(DType::I32), 16);
    let pid = b.program_id(0).unwrap();
    let bs = b
        .constant(
            tile_ir::Const::Int(block as i64),
            tile_ir::Type::num(DType::I32),
        )
        .unwrap();
    let start = b.binary(BinaryOp::Mul, pid, bs).unwrap();
    let r = b.arange(0, block).unwrap();
    let shape = b.func.ty(r).shape;
    let s = b.splat(start, shape).unwrap();
    let offs = b.binary(BinaryOp::Add, s, r).unwrap();
    let ns = b.splat(n, shape).unwrap();
    let mask = b.compare(CmpPred::Lt, offs, ns).unwrap();
    let mut load = |p| {
        let ps = b.splat(p, shape).unwrap();
        let a = b.addptr(ps, offs).unwrap();
        (b.load(a, Some(mask), None, false).unwrap(), a)
    };
    let (xv, _) = load(x);
    let (yv, _) = load(y);
    let sum = b.binary(BinaryOp::Add, xv, yv).unwrap();
    let os = b.splat(out, shape).unwrap();
    let op = b.addptr(os, offs).unwrap();
    b.store(op, sum, Some(mask)).unwrap();
    b.finish()
}

/// Runs ptxas on the PTX if one is available.
pub fn ptxas_accepts(ptx: &str, arch: &str) {
    let ptxas = std::env::var("PTXAS").unwrap_or_else(|_| "ptxas".into());
    let dir = std::env::temp_dir().join(format!("tiles-ptx-{}-{arch}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("k.ptx");
    std::fs::write(&file, ptx).unwrap();
    match std::process::Command::new(&ptxas)
        .arg(format!("-arch={arch}"))
        .arg(&file)
        .arg("-o")
        .arg(dir.join("k.cubin"))
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "ptxas rejected the PTX:\n{}\n{ptx}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(_) => eprintln!("no ptxas found; PTX not assembled"),
    }
}

#[test]
fn vector_add_uses_128_bit_masked_accesses() {
    for target in ["sm_80", "sm_90", "sm_90a"] {
        let mut f = vector_add(1024);
        let out = compile(
            &mut f,
            &Target::parse(target).unwrap(),
            &Default::default(),
            |_, _| {},
        )
        .unwrap();
        assert!(out.ptx.contains(".entry add_kernel"), "{}", out.ptx);
        assert!(out.ptx.contains("ld.global.v4.b32"), "{}", out.ptx);
        assert!(out.ptx.contains("st.global.v4.b32"), "{}", out.ptx);
        assert!(out.ptx.contains(".reqntid 128"), "{}", out.ptx);
        ptxas_accepts(&out.ptx, target);
    }
}

#[test]
fn bad_target_is_an_error() {
    assert!(Target::parse("sm_9x").is_err());
    assert!(Target::parse("gfx90a").is_err());
}

#[test]
fn compiles_on_many_threads_at_once() {
    let handles: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let mut f = vector_add(256 << (i % 3));
                let t = Target::parse(if i % 2 == 0 { "sm_80" } else { "sm_90a" }).unwrap();
                compile(&mut f, &t, &Default::default(), |_, _| {})
                    .unwrap()
                    .ptx
            })
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap().contains(".entry add_kernel"));
    }
}

#[test]
fn a_thread_reuses_its_target_machines_without_mixing_targets() {
    // Each thread keeps one target machine per target: alternating targets in one thread
    // must give each target's own PTX, the same as a fresh thread's.
    let ptx = |target: &str| {
        let mut f = vector_add(1024);
        compile(
            &mut f,
            &Target::parse(target).unwrap(),
            &Default::default(),
            |_, _| {},
        )
        .unwrap()
        .ptx
    };
    let fresh: Vec<String> = ["sm_80", "sm_90a"]
        .iter()
        .map(|t| {
            let t = t.to_string();
            std::thread::spawn(move || ptx(&t)).join().unwrap()
        })
        .collect();
    for _ in 0..2 {
        for (t, want) in ["sm_80", "sm_90a"].iter().zip(&fresh) {
            let got = ptx(t);
            assert!(got.contains(&format!(".target {t}")), "{t}: {got}");
            assert_eq!(
                &got, want,
                "{t} compiled differently on a reused target machine"
            );
        }
    }
}

#[test]
fn parsed_text_compiles_like_built_ir() {
    let built = vector_add(1024);
    let text = built.to_string();
    let mut parsed = tile_ir::parse(&text).unwrap();
    assert_eq!(parsed.to_string(), text);
    let mut built = built;
    let t = Target::parse("sm_90a").unwrap();
    let a = compile(&mut built, &t, &Default::default(), |_, _| {}).unwrap();
    let b = compile(&mut parsed, &t, &Default::default(), |_, _| {}).unwrap();
    assert_eq!(a.ptx, b.ptx);
    assert_eq!(a.params.len(), 4);
}

#[test]
fn vector_atomics_raise_the_ptx_version_of_their_kernel_only() {
    // A kernel whose inline asm holds Hopper's 16-bit vector atomics is PTX ISA 8.1 (their
    // minimum); the same thread's next kernel without them is 8.0 again.
    let text = |asm: &str| {
        format!(
            "kernel @k(%0: *i32 {{name = \"x\", divisibility = 16}}) num_warps = 4 {{\n\
  %1 = arange {{start = 0, end = 128}} : <128xi32>\n\
  %2 = splat %0 : <128x*i32>\n\
  %3 = addptr %2, %1 : <128x*i32>\n\
  %4 = load %3 : <128xi32>\n\
  %5 = inline_asm {{asm = \"{asm}\", constraints = \"=r,r\", pack = 1}} %4 : <128xi32>\n\
  store %3, %5\n\
  return\n\
}}\n"
        )
    };
    let t = Target::parse("sm_90a").unwrap();
    let ptx = |asm: &str| {
        let mut f = tile_ir::parse(&text(asm)).unwrap();
        compile(&mut f, &t, &Default::default(), |_, _| {})
            .unwrap()
            .ptx
    };
    let vector = "{ .reg .b16 %a, %b; mov.b32 {%a, %b}, $1; \
atom.global.min.noftz.v2.f16 {%a, %b}, [0], {%a, %b}; mov.b32 $0, 0; }";
    assert!(ptx(vector).contains(".version 8.1"));
    let plain = ptx("mov.b32 $0, $1;");
    assert!(plain.contains(".version 8.0"), "{plain}");
}
