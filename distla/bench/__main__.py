"""``python -m distla.bench NAME [options]``: run a benchmark (see :mod:`distla.bench`)."""
from . import main

if __name__ == "__main__":
    main()
