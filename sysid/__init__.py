"""System identification: logs in, fitted simulator parameters out."""
