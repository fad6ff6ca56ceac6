"""Telemetry sampled beside the load: GPU (NVML), the client process and host, the server's /metrics."""
