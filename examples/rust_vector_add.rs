//! Embedding the compiler in a Rust program, no Python involved: build a vector-add kernel with
//! the builder API, compile it for sm_90a and print the PTX (which ptxas accepts).
//!
//! Run with: `cargo run -p nvptx_codegen --example vector_add [sm_80|sm_90|sm_90a]`

use nvptx_codegen::{compile, Target};
use tile_ir::{BinaryOp, Builder, CmpPred, Const, DType, Elem, Type};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const BLOCK: i32 = 1024;
    let mut b = Builder::new("add_kernel", 4);
    let x = b.param("x_ptr", Elem::Ptr(DType::F32), 16);
    let y = b.param("y_ptr", Elem::Ptr(DType::F32), 16);
    let out = b.param("output_ptr", Elem::Ptr(DType::F32), 16);
    let n = b.param("n_elements", Elem::Num(DType::I32), 16);

    // offsets = program_id(0) * BLOCK + arange(0, BLOCK); mask = offsets < n
    let pid = b.program_id(0)?;
    let block = b.constant(Const::Int(BLOCK as i64), Type::num(DType::I32))?;
    let start = b.binary(BinaryOp::Mul, pid, block)?;
    let range = b.arange(0, BLOCK)?;
    let shape = b.func.ty(range).shape;
    let start = b.splat(start, shape)?;
    let offsets = b.binary(BinaryOp::Add, start, range)?;
    let n = b.splat(n, shape)?;
    let mask = b.compare(CmpPred::Lt, offsets, n)?;

    // out[offsets] = x[offsets] + y[offsets]
    let mut at = |base| -> Result<_, tile_ir::BuildError> {
        let base = b.splat(base, shape)?;
        b.addptr(base, offsets)
    };
    let (xp, yp, op) = (at(x)?, at(y)?, at(out)?);
    let xv = b.load(xp, Some(mask), None, false)?;
    let yv = b.load(yp, Some(mask), None, false)?;
    let sum = b.binary(BinaryOp::Add, xv, yv)?;
    b.store(op, sum, Some(mask))?;
    let mut kernel = b.finish();
    tile_ir::verify(&kernel)?;

    let target = Target::parse(&std::env::args().nth(1).unwrap_or_else(|| "sm_90a".into()))?;
    let out = compile(&mut kernel, &target, &Default::default(), |_, _| {})?;
    eprintln!(
        "// kernel {} ({} threads, {} bytes of shared memory), parameters {:?}",
        out.kernel_name, out.num_threads, out.shared_bytes, out.params
    );
    print!("{}", out.ptx);
    Ok(())
}
