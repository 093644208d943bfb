"""Emulated robots: a pseudo-terminal and MJPEG cameras driven by a reality model."""
