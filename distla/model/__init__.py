"""Performance model of distla's factorizations (alpha-beta-gamma, step by step, as the drivers
are written): :func:`predict` -> :class:`Prediction`; machines as :class:`Machine` (JSON files,
shipped profiles ``PROFILES``, or measured by :func:`calibrate`). docs/model.md has the
equations. Everything here but :func:`calibrate` is local (not collective)."""
from .calibrate import calibrate
from .drivers import ALGORITHMS, Prediction, nominal_flops, predict
from .machine import PROFILES, Machine, load_machine

__all__ = [
           "ALGORITHMS",
           "PROFILES",
           "Machine",
           "Prediction",
           "calibrate",
           "load_machine",
           "nominal_flops",
           "predict",
]
