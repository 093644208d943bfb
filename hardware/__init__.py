"""Wires, cameras and the emulators that stand in for them. Knows nothing of learning."""
