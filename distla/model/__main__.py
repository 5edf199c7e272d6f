"""``python -m distla.model``: the same as ``distla model``."""
import sys

from ..runtime import apply_runtime_defaults
from .cli import main_argv

apply_runtime_defaults()
code = main_argv(sys.argv[1:], prog="python -m distla.model")
sys.stdout.flush()
sys.exit(code)
