"""Engine options from a scenario file's `engine:` mapping, merged under the engine flags."""

from __future__ import annotations


def test_scenario_engine_mapping_takes_the_flag_names_and_flags_win() -> None:
    from tokspeed.backends.engine_options import EngineOptions

    scenario = EngineOptions.from_mapping(
        {"dtype": "bf16", "max-num-seqs": 8, "engine_arg": ["enable_prefix_caching=false"], "enforce_eager": True}
    )
    assert scenario.max_num_seqs == 8 and scenario.engine_args == {"enable_prefix_caching": False}
    flags = EngineOptions(dtype="fp32", engine_args={"seed": 3})
    merged = flags.over(scenario)
    assert merged.dtype == "fp32" and merged.max_num_seqs == 8 and merged.enforce_eager
    assert merged.engine_args == {"enable_prefix_caching": False, "seed": 3}
    assert merged.as_mapping()["dtype"] == "fp32" and "device" not in merged.as_mapping()


def test_scenario_engine_mapping_refuses_unknown_keys_and_bad_values() -> None:
    import pytest

    from tokspeed.backends.engine_options import EngineOptions
    from tokspeed.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown option 'max_seqs'"):
        EngineOptions.from_mapping({"max_seqs": 4})
    with pytest.raises(ConfigError, match="gpu-memory-utilization"):
        EngineOptions.from_mapping({"gpu_memory_utilization": 1.5})
