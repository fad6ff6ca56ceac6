"""With a real tokenizer: exact synthetic lengths and tokenizer-counted datasets.

A tiny byte-level BPE tokenizer is trained in-process (no download) and saved as
tokenizer.json, as a model directory would hold it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tokspeed.errors import ConfigError
from tokspeed.records import TokenSource
from tokspeed.workload import load_workload

tokenizers = pytest.importorskip("tokenizers")  # tokenizer_file (conftest) is trained with it


def _count(path: Path, text: str) -> int:
    tok = tokenizers.Tokenizer.from_file(str(path))
    return len(tok.encode(text, add_special_tokens=False).ids)


def test_synthetic_prompts_are_exactly_n_tokens(tokenizer_file: Path) -> None:
    wl = load_workload("synthetic", input_tokens="uniform:1,300", tokenizer=str(tokenizer_file), seed=5)
    for i in range(60):
        spec = wl.request(i)
        assert spec.input_tokens_source is TokenSource.TOKENIZER
        assert spec.input_tokens is not None
        assert _count(tokenizer_file, spec.prompt_text()) == spec.input_tokens


@pytest.mark.parametrize("n", [1, 2, 5, 1000])
def test_fixed_synthetic_lengths_hit_n(tokenizer_file: Path, n: int) -> None:
    wl = load_workload("synthetic", input_tokens=str(n), tokenizer=str(tokenizer_file.parent))
    texts = [wl.request(i).prompt_text() for i in (0, 7, 123_456)]
    assert [_count(tokenizer_file, t) for t in texts] == [n, n, n]
    assert len(set(texts)) == 3


def test_dataset_counts_use_the_tokenizer(tokenizer_file: Path) -> None:
    wl = load_workload("builtin", tokenizer=str(tokenizer_file))
    for i in range(10):
        spec = wl.request(i)
        assert spec.input_tokens_source is TokenSource.TOKENIZER
        assert spec.input_tokens == _count(tokenizer_file, spec.prompt_text())
    d = wl.describe()
    assert d["tokenizer"] == str(tokenizer_file) and d["input_tokens_source"] == "tokenizer"


def test_missing_tokenizer_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no tokenizer\.json"):
        load_workload("builtin", tokenizer=str(tmp_path))


def test_tokenizer_that_cannot_read_english_is_a_workload_error(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models

    from tokspeed.errors import WorkloadError

    path = tmp_path / "tokenizer.json"
    Tokenizer(models.BPE(vocab={"#": 0}, merges=[])).save(str(path))
    wl = load_workload("synthetic", input_tokens="5", tokenizer=str(path))
    with pytest.raises(WorkloadError, match="no tokens"):
        wl.request(0)
