"""The memory ceiling a GPU reaches, measured: a flat copy and a read-only Triton kernel
timed at power-of-two sizes from 1 MiB to 4 GiB, beside the device's L2 size.

    python bench/ceiling.py [--out FOLDER]       (or: make ceiling; a GPU only)

Writes FOLDER/ceiling/<device>.json (FOLDER: profiling_results), replaced atomically:
{"device", "arch", "sm_count", "memory_bus_bits", "l2_bytes", "triton", "torch",
"sizes": [{"bytes", "copy_gbps", "read_gbps"}]}, where arch, sm_count and memory_bus_bits
name the model as Proton's captures do, `bytes` is the buffer read, and copy_gbps counts
the bytes read plus the bytes written. Each time is the median of CUDA-graph replays
(do_bench_cudagraph), the way a benchmark replays a kernel: a buffer that fits the L2 is
read from it, and its rate can pass the memory's own. Sizes that do not fit the free
memory are left out.
Exit status: 0 written, 2 no GPU or a folder that cannot be written.
"""

import argparse
import json
import re
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.testing import do_bench_cudagraph

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from summary.files import Refused, write_output  # noqa: E402

SIZES = [2**k for k in range(20, 33)]  # 1 MiB to 4 GiB
BLOCK = 4096


@triton.jit
def copy_kernel(dst_ptr, src_ptr, n, BLOCK: tl.constexpr):  # noqa: ANN001 - Triton's
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def read_kernel(sums_ptr, src_ptr, n, BLOCK: tl.constexpr):  # noqa: ANN001 - Triton's
    # Each program's sum is stored, so that no load is dead code: 4 bytes a BLOCK read.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(sums_ptr + tl.program_id(0), tl.sum(tl.load(src_ptr + offs, mask=offs < n)))


def slug(device: str) -> str:
    """A device's name as a file name: NVIDIA H100 80GB HBM3 -> nvidia-h100-80gb-hbm3."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")


def rate(size: int) -> dict | None:
    """copy_gbps and read_gbps over a float32 buffer of size bytes, or None where it and
    a copy of it do not fit the free memory."""
    if 2 * size + 2**28 > torch.cuda.mem_get_info()[0]:
        return None
    n = size // 4
    src = torch.rand(n, device="cuda")  # random, not zeros: zeros can run faster
    dst = torch.empty_like(src)
    grid = (triton.cdiv(n, BLOCK),)
    sums = torch.empty(grid[0], device="cuda")
    copy_ms = do_bench_cudagraph(
        lambda: copy_kernel[grid](dst, src, n, BLOCK=BLOCK, num_warps=8), return_mode="median"
    )
    read_ms = do_bench_cudagraph(
        lambda: read_kernel[grid](sums, src, n, BLOCK=BLOCK, num_warps=8), return_mode="median"
    )
    return {"bytes": size, "copy_gbps": 2 * size / copy_ms / 1e6, "read_gbps": size / read_ms / 1e6}


def measure() -> dict:
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    # The memory bus as Proton's own captures record it: the H100 and H200 share an arch
    # and an SM count, and differ in it.
    bus = triton.runtime.driver.active.utils.get_device_properties(index).get("mem_bus_width")
    sizes = []
    for size in SIZES:
        if (r := rate(size)) is not None:
            sizes.append(r)
        torch.cuda.empty_cache()  # this size's buffers, before the next is allocated
    hip = torch.version.hip is not None
    return {
        "device": torch.cuda.get_device_name(),
        "arch": props.gcnArchName.split(":")[0] if hip else f"{props.major}{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_bus_bits": bus,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        "triton": triton.__version__,
        "torch": torch.__version__,
        "sizes": sizes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("profiling_results"))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("ceiling: error: no GPU visible; the ceiling times real kernels", file=sys.stderr)
        return 2
    result = measure()
    path = args.out / "ceiling" / f"{slug(result['device'])}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_output(path, json.dumps(result, indent=1) + "\n")
    except (OSError, Refused) as e:
        print(f"ceiling: error: cannot write {path}: {e}", file=sys.stderr)
        return 2
    for r in result["sizes"]:
        print(
            f"ceiling: {r['bytes']:>11} bytes  copy {r['copy_gbps']:7.0f} GB/s  "
            f"read {r['read_gbps']:7.0f} GB/s"
        )
    print(f"ceiling: wrote {path}")
    return 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)
