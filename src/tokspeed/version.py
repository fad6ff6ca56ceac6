"""tokspeed's version: one literal, importable from every layer without importing anything else."""

__version__ = "0.1.0"
