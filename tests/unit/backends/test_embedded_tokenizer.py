"""The embedded tokenizer: shipped corpus, deterministic training, the on-disk cache, the chat template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")

from tokspeed.backends.embedded.corpus import corpus_digest, corpus_texts
from tokspeed.backends.embedded.sizes import VOCAB_SIZE
from tokspeed.backends.embedded.tokenizer import (
    CHAT_TEMPLATE,
    SPECIAL_TOKENS,
    format_chat,
    load_tokenizer,
    train_tokenizer,
)


def test_corpus_is_shipped_and_mixes_english_and_chinese() -> None:
    texts = corpus_texts()
    joined = "".join(texts)
    assert len(joined.encode("utf-8")) > 50_000
    assert "the" in joined and "的" in joined
    assert corpus_digest(texts) == corpus_digest(corpus_texts())
    assert corpus_digest(texts) != corpus_digest(texts[1:])


def test_training_is_deterministic() -> None:
    texts = corpus_texts()[:40]
    first = train_tokenizer(texts, vocab_size=1000).to_str()
    second = train_tokenizer(texts, vocab_size=1000).to_str()
    assert first == second


def test_full_tokenizer_has_the_model_vocabulary_and_special_ids() -> None:
    tok = train_tokenizer(corpus_texts())
    assert tok.get_vocab_size() == VOCAB_SIZE
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2]
    for text in ("Why is the sky blue? 请解释首字延迟。", "def f(x):\n    return x + 12345\n"):
        assert tok.decode(tok.encode(text).ids) == text


def test_chat_special_tokens_encode_as_single_tokens() -> None:
    tok = train_tokenizer(corpus_texts())
    ids = tok.encode(format_chat([{"role": "user", "content": "Hi"}]), add_special_tokens=False).ids
    assert ids[0] == 1  # <|im_start|>
    assert 2 in ids  # <|im_end|>


def test_load_tokenizer_trains_once_then_reads_the_cache(tmp_path: Path) -> None:
    first = load_tokenizer(tmp_path)
    second = load_tokenizer(tmp_path)
    assert first.built is True and second.built is False
    assert first.directory == second.directory
    assert first.directory.parent == tmp_path / "embedded"
    assert second.tokenizer.to_str() == first.tokenizer.to_str()
    config = json.loads((first.directory / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["chat_template"] == CHAT_TEMPLATE


def test_load_tokenizer_uses_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    bundle = load_tokenizer()
    assert bundle.directory.is_relative_to(tmp_path / "tokspeed" / "embedded")


def test_python_chat_format_matches_the_shipped_template() -> None:
    jinja2 = pytest.importorskip("jinja2")
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "你好\nHow are you?"},
        {"role": "assistant", "content": "Fine."},
        {"role": "user", "content": "And now?"},
    ]
    template = jinja2.Environment().from_string(CHAT_TEMPLATE)
    for add in (True, False):
        assert template.render(messages=messages, add_generation_prompt=add) == format_chat(messages, add)
