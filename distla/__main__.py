"""``python -m distla``: the distla command line (see :mod:`distla.cli`)."""
from .cli import main

if __name__ == "__main__":
    main()
