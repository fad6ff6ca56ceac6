"""Fixtures of the workload tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokspeed.workload import builtin_prompts
from tokspeed.workload.synthetic import WORDS


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny byte-level BPE trained in-process (no download) on the synthetic words and the builtin prompts, saved
    as tokenizer.json as a model directory holds it: words often take more than one token. Skips without `tokenizers`."""
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(0, len(WORDS), 7)]
    corpus += [p.prompt for p in builtin_prompts()]
    tok.train_from_iterator(corpus, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path
