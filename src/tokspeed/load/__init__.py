"""Load profiles: when requests start (closed loop or precomputed open-loop arrivals)."""

from tokspeed.load.plan import LoadPlan, arrival_offsets_ns

__all__ = ["LoadPlan", "arrival_offsets_ns"]
