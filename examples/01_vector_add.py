"""Vector addition: the first kernel of Triton's tutorials, unchanged but for the import.

Runs on the GPU when one is present, else in the interpreter (TILES_INTERPRET=1).
"""

import numpy as np

import tiles as triton
import tiles.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = x + y
    tl.store(output_ptr + offsets, output, mask=mask)


def add(x, y):
    output = x.new_empty(x.shape) if hasattr(x, "new_empty") else np.empty_like(x)
    n_elements = output.numel() if hasattr(output, "numel") else output.size
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)  # noqa: E731
    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=1024)
    return output


def main():
    from tiles.runtime.jit import interpreting

    size = 98432
    rng = np.random.default_rng()
    xs = rng.standard_normal(size, dtype=np.float32)
    ys = rng.standard_normal(size, dtype=np.float32)
    if interpreting(add_kernel):
        out = add(xs, ys)
        where = "interpreter (CPU, numpy)"
    else:
        import torch

        x, y = torch.from_numpy(xs).cuda(), torch.from_numpy(ys).cuda()
        out = add(x, y).cpu().numpy()
        where = "GPU"
    err = np.max(np.abs(out - (xs + ys)))
    print(f"vector add of {size} elements on the {where}: max |error| = {err:.3g}")
    assert err == 0.0, "mismatch"


if __name__ == "__main__":
    main()
