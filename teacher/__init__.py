"""Privileged (GOD-mode) teachers: read every simulator state, solve the task."""
