"""Which device kernels a job compiles that ``distla warmup`` did not (one GPU rank).

    mpirun -n 1 python3 benchmarks/gpu/kernel_misses.py --dir D --n 32768 --nb 1024 [--n-large N]

Runs :func:`distla.warmup.warmup` in this process (filling ``CUPY_CACHE_DIR``), then one
``distla bench job`` at the given size with NVRTC's compile call wrapped: every kernel that is
still compiled then is a miss of the warmup's kernel cache. Prints, per miss, the kernel's name
(from the CUDA source being compiled), the seconds it took and the distla lines that asked for
it. A warm cache prints no miss.
"""
import argparse
import re
import sys
import time
import traceback

from mpi4py import MPI


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--nb", type=int, default=1024)
    p.add_argument("--method", default="cholesky")
    p.add_argument("--n-large", type=int, default=None,
                   help="the warmup's second size (default: distla.warmup.large_size)")
    a = p.parse_args()
    from cupy_backends.cuda.libs import nvrtc

    from distla.bench import main_argv
    from distla.warmup import warmup
    t = time.perf_counter()
    warmup(MPI.COMM_WORLD, "gpu", say=lambda s: None, n_large=a.n_large)
    print(f"warmup in this process: {time.perf_counter() - t:.1f} s")
    misses = []
    orig = nvrtc.compileProgram

    def compile_program(*args, **kw):
        t0 = time.perf_counter()
        try:
            return orig(*args, **kw)
        finally:
            name, where = "?", []
            for fr, line in traceback.walk_stack(None):
                src = fr.f_locals.get("source") or fr.f_locals.get("src")
                if name == "?" and isinstance(src, str):
                    m = re.findall(r"__global__\s+void\s+(\w+)", src)
                    name = ",".join(m[:3]) if m else src[:60].replace("\n", " ")
                fn = fr.f_code.co_filename
                if "/distla/" in fn:
                    where.append(f"{fn.split('/distla/')[-1]}:{line}:{fr.f_code.co_name}")
            misses.append((name, time.perf_counter() - t0, where[:4]))
    nvrtc.compileProgram = compile_program
    main_argv(["job", "--device", "gpu", "--n", str(a.n), "--nb", str(a.nb), "--dir", a.dir,
               "--method", a.method, "--repeat", "1", "--no-floors", "--quiet"])
    nvrtc.compileProgram = orig
    print(f"{len(misses)} kernel(s) compiled after warmup, {sum(m[1] for m in misses):.2f} s")
    for name, s, where in misses:
        print(f"  {s:6.3f} s  {name[:70]}\n           <- {' <- '.join(where)}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
