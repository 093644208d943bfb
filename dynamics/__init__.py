"""Learned residual dynamics: what the fitted simulator still gets wrong.

`dynamics.train.train_residual` fits a `realsim.residual` model on logs plus fitted
parameters; the network, its checkpoint and the hybrid simulator that runs it live in
`realsim/` (`realsim.residual`, `realsim.sim`) so that every consumer gets the corrected
simulator the same way. `load_residual` is re-exported for callers that look here.
"""

from __future__ import annotations

from realsim.residual import load_residual

__all__ = ["load_residual"]
