"""The public face of tokspeed.workload: exports, signatures, immutability."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import tokspeed.workload as workload
from tokspeed.workload import Workload, load_workload


def test_all_is_sorted_and_every_name_exists() -> None:
    assert workload.__all__ == sorted(workload.__all__)
    for name in workload.__all__:
        assert hasattr(workload, name), name


def test_load_workload_signature() -> None:
    params = inspect.signature(load_workload).parameters
    assert list(params) == ["dataset", "api", "input_tokens", "output_tokens", "tokenizer", "seed", "shuffle"]
    assert all(p.kind is p.KEYWORD_ONLY for name, p in params.items() if name != "dataset")
    defaults = {name: p.default for name, p in params.items() if name != "dataset"}
    assert defaults == {
        "api": "chat",
        "input_tokens": None,
        "output_tokens": "256",
        "tokenizer": None,
        "seed": 0,
        "shuffle": None,
    }


def test_workload_is_frozen() -> None:
    wl = load_workload("builtin")
    with pytest.raises(dataclasses.FrozenInstanceError):
        wl.seed = 1  # type: ignore[misc]
    assert isinstance(wl, Workload)


def test_api_accepts_the_config_enum() -> None:
    from tokspeed.config import Api

    assert load_workload("builtin", api=Api.COMPLETIONS).api == "completions"
