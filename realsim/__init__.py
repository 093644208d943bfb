"""realsim: train in simulation, let reality correct the simulator."""

__version__ = "0.1.0"
