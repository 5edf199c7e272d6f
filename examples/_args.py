"""Command-line checking shared by the examples: argument types that refuse what the example
cannot run (a block size of 0, a NaN tolerance...) and a parser whose error is one line on
rank 0 and exit code 2 on every rank, before MPI work starts (so a bad option never ends in a
traceback and MPI_Abort).

    from _args import Parser, positive_int
    p = Parser(description=...)
    p.add_argument("--nb", type=positive_int, default=64)
"""
import argparse
import math
import sys

from distla.runtime import env_rank  # the launcher's rank, without starting MPI


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, ``PROG: error: MESSAGE``, printed by rank 0 only;
    every rank exits with code 2 (parsing is deterministic: every rank fails alike)."""

    def error(self, message):
        self.fail(message)

    def fail(self, message, code: int = 2):
        """Exit ``code`` on every rank with one line (rank 0) naming the problem."""
        if env_rank() == 0:
            sys.stderr.write(f"{self.prog}: error: {message}\n")
            sys.stderr.flush()
        sys.exit(code)

    def parse_args(self, *a, **kw):
        """As argparse's; a ``--device gpu`` that this rank cannot serve (no CuPy or no CUDA
        device) is a one-line error too, before any MPI work (every rank of a job on such
        hosts fails alike)."""
        args = super().parse_args(*a, **kw)
        if getattr(args, "device", None) == "gpu":
            from distla.device import gpu_available
            if not gpu_available():
                self.fail("--device gpu needs CuPy and a CUDA GPU on every rank (pip install "
                          "'distla[gpu]'); none was found here")
        return args

    def _print_message(self, message, file=None):
        if env_rank() == 0:
            super()._print_message(message, file)


def _int(lo, what):
    def conv(s):
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, not {s!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be {what}, not {v}")
        return v
    conv.__name__ = what
    return conv


positive_int = _int(1, "an int >= 1")
nonnegative_int = _int(0, "an int >= 0")


def _float(ok, what):
    def conv(s):
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, not {s!r}") from None
        if not (math.isfinite(v) and ok(v)):
            raise argparse.ArgumentTypeError(f"must be {what}, not {s}")
        return v
    conv.__name__ = what
    return conv


positive_float = _float(lambda v: v > 0, "a finite number > 0")
nonnegative_float = _float(lambda v: v >= 0, "a finite number >= 0")
unit_interval = _float(lambda v: 0 < v < 1, "a number in (0, 1)")


def length_scale(s):
    """A covariance kernel's sigma or beta: squared in float64, so the square must be a
    normal, finite float64 (distla.covariance.SCALE_RANGE)."""
    from distla.covariance import SCALE_RANGE
    lo, hi = SCALE_RANGE
    return _float(lambda v: lo <= v <= hi,
                  f"a number in [{lo:.2g}, {hi:.2g}] (its square a normal float64)")(s)
