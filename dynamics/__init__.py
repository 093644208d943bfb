"""Learned residual dynamics: what the fitted simulator still gets wrong.

`dynamics.train.train_residual` fits a `realsim.residual` model on logs plus fitted
parameters; the network, its checkpoint and the hybrid simulator that runs it live in
`realsim/` (`realsim.residual`, `realsim.sim`) so that every consumer gets the corrected
simulator the same way. `load_residual` is re-exported for callers that look here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LR_SCHEDULES", "load_residual"]

# the learning rate within one training pass (dynamics.lightning.ResidualModule); here, not
# there, so the CLI offers the same names without importing torch
LR_SCHEDULES = ("constant", "cosine")


def __getattr__(name: str) -> Any:
    # lazy: importing dynamics (the CLI builds its parser from dynamics.cli) must not
    # import torch, or every `realsim` call, even a bad-input exit, pays seconds for it
    if name == "load_residual":
        from realsim.residual import load_residual

        return load_residual
    raise AttributeError(name)
