"""Model-directory checks on crafted directories: each breakage gives its own precise error (or warning)."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import pytest

from tokspeed.backends.model_dir import (
    check_before_load,
    inspect_model_dir,
    render_report,
    require_loadable,
)
from tokspeed.backends.model_files import read_safetensors_header
from tokspeed.cli import main
from tokspeed.errors import ConfigError

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "bfloat16", "max_position_embeddings": 2048}
TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"

# these judge the architecture against the installed transformers' model classes; without it the check says it
# cannot (test_unknown_model_type_without_transformers_is_not_called_loadable) and they have nothing to judge
needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="transformers is not installed (pip install 'tokspeed[hf]')")


def safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]], truncate: int = 0) -> int:
    """A real safetensors file (header + zero data); returns the parameter count."""
    width = {"BF16": 2, "F32": 4}
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset, params = 0, 0
    for name, (dtype, shape) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n * width[dtype]]}
        offset, params = offset + n * width[dtype], params + n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset - truncate))
    return params


@pytest.fixture
def good(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA))
    safetensors(d / "model.safetensors", {"embed": ("BF16", [64, 16]), "head": ("BF16", [16, 64]), "norm": ("F32", [16])})
    (d / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}))
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    return d


def codes(d: Path, engine: str = "hf", **kw: object) -> dict[str, str]:
    report = inspect_model_dir(d, engine, **kw)  # type: ignore[arg-type]
    return {p.code: p.message for p in report.problems}


@needs_transformers
def test_a_complete_directory_passes_with_exact_facts(good: Path) -> None:
    report = inspect_model_dir(good, "hf", api="chat")
    assert report.ok and not report.problems, report.problems
    assert report.parameters == 64 * 16 * 2 + 16 and report.parameters_exact
    assert report.weights.format == "safetensors" and report.weights.files == ["model.safetensors"]
    assert report.checkpoint_dtype == "bfloat16" and report.max_context == 2048
    assert report.tokenizer.kind == "tokenizers-json" and report.tokenizer.chat_template == "tokenizer_config.json"
    assert report.support.supported is True and report.support.engine_class == "LlamaForCausalLM"
    assert report.as_dict()["ok"] is True and json.dumps(report.as_dict())
    assert render_report(report)[-1] == "Verdict: looks loadable (0 errors, 0 warnings)"
    assert require_loadable(report) == []


def test_missing_config(good: Path) -> None:
    (good / "config.json").unlink()
    assert "has no config.json" in codes(good)["no_config"]


def test_corrupt_config_says_where(good: Path) -> None:
    (good / "config.json").write_text('{"model_type": "llama",, }')
    message = codes(good)["bad_json"]
    assert message.startswith("config.json is not valid JSON") and "line 1 column" in message


def test_no_weights(good: Path) -> None:
    (good / "model.safetensors").unlink()
    assert "no weight files" in codes(good)["no_weights"]


def test_missing_shards_are_named(good: Path) -> None:
    (good / "model.safetensors").unlink()
    safetensors(good / "model-00001-of-00003.safetensors", {"a": ("BF16", [4, 4])})
    names = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    index = {"metadata": {}, "weight_map": {"a": names[0], "b": names[1], "c": names[2], "d": names[2]}}
    (good / "model.safetensors.index.json").write_text(json.dumps(index))
    report = inspect_model_dir(good, "hf")
    assert report.weights.missing_shards == names[1:]
    assert [p.message for p in report.errors] == [
        f"model.safetensors.index.json names 3 shard files; 2 are missing: {names[1]}, {names[2]}"
    ]
    assert report.parameters is None  # not counted from an incomplete set


def test_truncated_safetensors(good: Path) -> None:
    safetensors(good / "model.safetensors", {"embed": ("BF16", [64, 16])}, truncate=100)
    message = codes(good)["truncated_weights"]
    assert "model.safetensors is truncated" in message and f"the file has {8 + len(_header(good)) + 64 * 16 * 2 - 100:,}" in message


def _header(d: Path) -> bytes:
    raw = (d / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return raw[8 : 8 + n]


def test_lfs_pointer_weights(good: Path) -> None:
    (good / "model.safetensors").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 123\n")
    report = inspect_model_dir(good, "hf")
    assert [p.code for p in report.errors] == ["lfs_pointer"]
    assert "git lfs pull" in (report.errors[0].hint or "")
    header, problem = read_safetensors_header(good / "model.safetensors")
    assert header is None and problem is not None and "Git LFS pointer" in problem.message


def test_no_tokenizer(good: Path) -> None:
    (good / "tokenizer.json").unlink()
    assert "no tokenizer files" in codes(good)["no_tokenizer"]
    (good / "vocab.json").write_text("{}")
    assert codes(good)["no_tokenizer"] == "vocab.json is there but merges.txt is missing: a BPE tokenizer needs both"
    (good / "merges.txt").write_text("#version: 0.2\n")
    assert "no_tokenizer" not in codes(good)


@needs_transformers
def test_chat_template_is_an_error_only_for_chat(good: Path) -> None:
    (good / "tokenizer_config.json").write_text("{}")
    assert inspect_model_dir(good, "hf", api="chat").errors[0].code == "no_chat_template"
    report = inspect_model_dir(good, "hf", api="completions")
    assert report.ok and [p.code for p in report.warnings] == ["no_chat_template"]
    (good / "chat_template.jinja").write_text(TEMPLATE)
    assert inspect_model_dir(good, "hf", api="chat").ok


def test_auto_map_needs_trust_remote_code(good: Path) -> None:
    config = {**LLAMA, "model_type": "my_secret_lm", "architectures": ["MyLM"],
              "auto_map": {"AutoConfig": "configuration_my.MyConfig", "AutoModelForCausalLM": "modeling_my.MyLM"}}
    (good / "config.json").write_text(json.dumps(config))
    report = inspect_model_dir(good, "hf")
    assert [p.code for p in report.errors] == ["remote_code"]
    assert "needs --trust-remote-code" in report.errors[0].message and "modeling_my.MyLM" in report.errors[0].message
    assert "--trust-remote-code" in (report.errors[0].hint or "")
    trusted = inspect_model_dir(good, "hf", trust_remote_code=True)  # the code files are not there
    assert [p.code for p in trusted.errors] == ["remote_code_missing"]
    assert "configuration_my.py, modeling_my.py" in trusted.errors[0].message
    (good / "configuration_my.py").write_text("")
    (good / "modeling_my.py").write_text("")
    assert inspect_model_dir(good, "hf", trust_remote_code=True).ok


@needs_transformers
def test_auto_map_beside_a_builtin_model_type_is_a_warning(good: Path) -> None:
    (good / "config.json").write_text(json.dumps({**LLAMA, "auto_map": {"AutoModelForCausalLM": "modeling_x.X"}}))
    report = inspect_model_dir(good, "hf")
    assert report.ok and [p.code for p in report.warnings] == ["remote_code_unused"]


@needs_transformers
def test_unsupported_architectures(good: Path) -> None:
    (good / "config.json").write_text(json.dumps({**LLAMA, "model_type": "t5", "architectures": ["T5ForConditionalGeneration"]}))
    assert "has no AutoModelForCausalLM class" in codes(good)["not_causal_lm"]
    (good / "config.json").write_text(json.dumps({**LLAMA, "model_type": "quantum_llm_9000"}))
    assert "does not know model_type 'quantum_llm_9000'" in codes(good)["unknown_model_type"]
    (good / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert "no model_type" in codes(good)["no_model_type"]


def test_gguf_only_needs_the_file_named(good: Path) -> None:
    (good / "model.safetensors").unlink()
    (good / "m.Q4_K_M.gguf").write_bytes(b"GGUF" + bytes(60))
    assert "--engine-arg gguf_file=m.Q4_K_M.gguf" in (inspect_model_dir(good, "hf").errors[0].hint or "")
    assert inspect_model_dir(good, "hf", engine_args={"gguf_file": "m.Q4_K_M.gguf"}).ok
    assert codes(good, "vllm")["gguf_directory"].startswith("the only weights are GGUF")


def test_require_loadable_lists_every_error(good: Path) -> None:
    (good / "model.safetensors").unlink()
    (good / "tokenizer.json").unlink()
    with pytest.raises(ConfigError) as info:
        require_loadable(inspect_model_dir(good, "hf"), target=f"hf:{good}")
    text = str(info.value)
    assert text.startswith(f"hf:{good} cannot be loaded: no weight files") and "no tokenizer files" in text
    assert "tokspeed check-model" in text and info.value.exit_code == 2


@needs_transformers
def test_check_model_command(good: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-model", str(good)]) == 0
    assert "Verdict: looks loadable" in capsys.readouterr().out
    (good / "config.json").write_text("[1, 2")
    assert main(["check-model", f"hf:{good}", "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["problems"][0]["code"] == "bad_json"
    assert main(["check-model", str(good), "--engine", "tgi"]) == 2


def test_before_a_load_file_errors_skip_the_engine_and_dummy_weights_need_none(good: Path) -> None:
    (good / "model.safetensors").unlink()
    quick = inspect_model_dir(good, "hf", quick=True)
    assert quick.support.supported is None and quick.support.source == "not checked"  # no transformers import needed
    with pytest.raises(ConfigError, match=f"--target vllm:{good} cannot be loaded: no weight files"):
        check_before_load(good, "vllm", trust_remote_code=False, api="chat", engine_args={})
    report = check_before_load(good, "vllm", trust_remote_code=False, api="chat", engine_args={}, load_format="dummy")
    assert report.ok and "no_weights" not in {p.code for p in report.problems}
    (good / "tokenizer.json").unlink()
    check_before_load(good, "vllm", trust_remote_code=False, api="chat", engine_args={"tokenizer": "/elsewhere"},
                      load_format="dummy")


def test_unknown_model_type_without_transformers_is_not_called_loadable(good: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: an unknown model_type 'looked loadable' when transformers was absent."""
    import tokspeed.backends.model_dir as model_dir
    from tokspeed.backends.model_support import Support

    monkeypatch.setattr(model_dir, "transformers_support", lambda *_: Support(None, "transformers is not installed here"))
    (good / "config.json").write_text(json.dumps({**LLAMA, "model_type": "quantum_llm_9000"}))
    report = inspect_model_dir(good, "hf")
    assert report.verdict == "unchecked" and report.as_dict()["verdict"] == "unchecked"
    last = render_report(report)[-1]
    assert "looks loadable" not in last and "was not checked (transformers is not installed here)" in last


def test_remote_code_trusted_says_how_it_is_supported(good: Path) -> None:
    """Issue 24: 'supported: no' beside 'looks loadable (0 errors)' for remote code with --trust-remote-code."""
    config = {**LLAMA, "model_type": "my_secret_lm", "architectures": ["MyLM"],
              "auto_map": {"AutoConfig": "configuration_my.MyConfig", "AutoModelForCausalLM": "modeling_my.MyLM"}}
    (good / "config.json").write_text(json.dumps(config))
    (good / "configuration_my.py").write_text("")
    (good / "modeling_my.py").write_text("")
    lines = render_report(inspect_model_dir(good, "hf", trust_remote_code=True))
    (supported,) = [line for line in lines if line.strip().startswith("supported")]
    assert "by the directory's own code" in supported and lines[-1].startswith("Verdict: looks loadable")
