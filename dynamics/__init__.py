"""Learned residual dynamics: what the fitted simulator still gets wrong."""
