"""The embedded model's pure parts: sizes, dtype and thread choice, cache dir, run defaults, the extra check."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tokspeed.backends.embedded import (
    EMBEDDED_OUTPUT_TOKENS,
    EMBEDDED_REQUESTS,
    SIZES,
    choose_dtype,
    choose_threads,
    embedded_size,
    get_size,
    is_embedded_target,
    normalise_embedded_target,
    requirements,
)
from tokspeed.backends.embedded.cache import build_once, cache_root
from tokspeed.backends.embedded.hardware import cpu_flags, dtype_label
from tokspeed.config import config_from_sources
from tokspeed.errors import ConfigError
from tokspeed.runner.passes import embedded_defaults

INTEL_BF16 = """processor\t: 0
vendor_id\t: GenuineIntel
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512bw avx512_bf16 avx512_vnni
"""
AMX = "flags\t\t: fpu avx512f amx_tile amx_bf16 amx_int8\n"
NO_BF16 = "processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes crc32 bf16\n"


@pytest.mark.parametrize(("name", "target"), [("tiny", 20e6), ("small", 60e6)])
def test_parameter_counts_are_within_15_percent_of_the_nominal_size(name: str, target: float) -> None:
    assert abs(SIZES[name].parameter_count() - target) / target <= 0.15


def test_sizes_are_consistent_llama_shapes() -> None:
    for size in SIZES.values():
        assert size.hidden_size % size.num_heads == 0
        assert size.num_heads % size.num_kv_heads == 0
        cfg = size.llama_config(bos_token_id=None, eos_token_id=[2, 0], pad_token_id=0)
        assert cfg["head_dim"] * cfg["num_attention_heads"] == cfg["hidden_size"]
        assert cfg["tie_word_embeddings"] is False
    assert SIZES["tiny"].parameter_count() < SIZES["small"].parameter_count()


def test_unknown_size_is_a_config_error_naming_the_choices() -> None:
    with pytest.raises(ConfigError) as info:
        get_size("huge")
    assert "embedded:tiny" in (info.value.hint or "")


@pytest.mark.parametrize(
    ("cpuinfo", "dtype"),
    [(INTEL_BF16, "bfloat16"), (AMX, "bfloat16"), (NO_BF16, "float32"), (ARM, "float32"), ("", "float32")],
)
def test_bf16_only_where_the_cpu_has_native_bf16(cpuinfo: str, dtype: str) -> None:
    assert choose_dtype(cpuinfo) == dtype


def test_cpu_flags_reads_every_flags_line() -> None:
    flags = cpu_flags(INTEL_BF16 + "\n" + NO_BF16)
    assert {"avx512_bf16", "fma", "sse2"} <= flags
    assert "GenuineIntel" not in flags


@pytest.mark.parametrize(("cpus", "threads"), [(1, 1), (2, 1), (4, 3), (16, 15)])
def test_torch_threads_leave_a_core_for_the_client(cpus: int, threads: int) -> None:
    assert choose_threads(cpus) == threads


def test_dtype_labels() -> None:
    assert [dtype_label(d) for d in ("bfloat16", "float32", "float16")] == ["bf16", "fp32", "fp16"]


def test_cache_root_honours_xdg_cache_home(tmp_path: Path) -> None:
    assert cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "tokspeed"
    assert cache_root({}) == Path.home() / ".cache" / "tokspeed"


def test_build_once_builds_a_directory_once(tmp_path: Path) -> None:
    calls: list[Path] = []

    def build(d: Path) -> None:
        calls.append(d)
        (d / "file.txt").write_text("x")

    final = tmp_path / "a" / "entry"
    assert build_once(final, build) is True
    assert build_once(final, build) is False
    assert len(calls) == 1
    assert (final / "file.txt").read_text() == "x"
    assert [p.name for p in final.parent.iterdir()] == ["entry"]


def test_build_once_leaves_nothing_behind_when_the_build_fails(tmp_path: Path) -> None:
    def build(d: Path) -> None:
        (d / "half").write_text("x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        build_once(tmp_path / "entry", build)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("target", "expected"),
    [(None, True), ("embedded", True), ("embedded:tiny", True), ("http://127.0.0.1:8000/v1", False), ("embeddedx", False)],
)
def test_embedded_targets(target: str | None, expected: bool) -> None:
    assert is_embedded_target(target) is expected


def test_embedded_size_and_normal_form() -> None:
    assert embedded_size(None) == "small"
    assert embedded_size("embedded") == "small"
    assert embedded_size("embedded:tiny") == "tiny"
    assert normalise_embedded_target(None) == "embedded:small"
    with pytest.raises(ConfigError):
        embedded_size("embedded:huge")


def test_embedded_defaults_fill_only_what_the_user_did_not_set() -> None:
    cfg = embedded_defaults(config_from_sources(None, {}))
    assert cfg.target == "embedded:small"
    assert cfg.requests == EMBEDDED_REQUESTS
    assert cfg.output_tokens == EMBEDDED_OUTPUT_TOKENS
    assert cfg.profile == "synchronous"

    given = embedded_defaults(
        config_from_sources(None, {"target": "embedded:tiny", "requests": 7, "output_tokens": "256", "concurrency": 3})
    )
    assert (given.target, given.requests, given.output_tokens, given.concurrency) == ("embedded:tiny", 7, "256", 3)
    assert given.profile == "concurrency"

    timed = embedded_defaults(config_from_sources(None, {"duration_s": "10s"}))
    assert timed.requests is None and timed.duration_s == 10.0


def test_embedded_defaults_leave_server_targets_alone() -> None:
    cfg = config_from_sources(None, {"target": "http://127.0.0.1:8000/v1"})
    assert embedded_defaults(cfg) is cfg


def test_missing_extra_is_a_config_error_with_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(requirements, "missing_modules", lambda: ["torch", "transformers"])
    with pytest.raises(ConfigError) as info:
        requirements.require_extra()
    assert "torch, transformers" in str(info.value)
    assert "pip install 'tokspeed[embedded]'" in (info.value.hint or "")
    assert info.value.exit_code == 2


def test_run_without_target_and_without_the_extra_exits_2_with_a_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tokspeed.cli import main

    monkeypatch.setattr(requirements, "missing_modules", lambda: ["torch"])
    monkeypatch.delenv("TOKSPEED_TARGET", raising=False)
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), "--plain"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: the embedded default model needs torch")
    assert "Hint: pip install 'tokspeed[embedded]'" in err
    assert not out.exists()


def test_importing_the_package_does_not_import_torch() -> None:
    import subprocess

    code = "import tokspeed.backends.embedded, tokspeed.cli, sys; print('torch' in sys.modules, 'transformers' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_the_plan_says_the_weights_are_random_and_the_text_is_noise() -> None:
    from tokspeed.config import config_from_sources
    from tokspeed.runner.passes import describe_embedded

    first, second = describe_embedded(embedded_defaults(config_from_sources(None, {}))).splitlines()
    assert first.startswith("embedded model small") and "random weights" in first and "--target URL" in first
    assert second == "Its weights are random, so the text it generates is noise: only its speed means something."
