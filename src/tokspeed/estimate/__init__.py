"""Expectations from first principles: model and GPU numbers, speed-of-light bounds, efficiency and cost.

    model.py           ModelSpec from a config.json or a builtin name
    quantization.py    the stored weight format from a config's quantization_config
    hardware.py        GPUSpec datasheet table
    bounds.py          pure formulas: bytes, memory sizing, one engine step's lower bound
    speed_of_light.py  a workload's estimate per concurrency
    efficiency.py      MBU/MFU of a saved run
    cost.py            price per GPU-hour → cost per token and per request
"""
