"""realsim/logs."""
