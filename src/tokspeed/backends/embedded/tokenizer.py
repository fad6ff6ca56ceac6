"""The embedded model's tokenizer: a byte-level BPE trained locally, cached on disk.

Trained with `tokenizers` on the shipped corpus (corpus.py) the first time it
is needed (well under a second), then loaded from the user cache dir. The cache
entry is a directory any Hugging Face loader can open: tokenizer.json,
tokenizer_config.json (tokenizer_class PreTrainedTokenizerFast, a ChatML chat
template) and special_tokens_map.json. `format_chat` is the chat template in
Python, used in-process; a test keeps the two identical.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any

from tokspeed.backends.embedded.cache import build_once, cache_root
from tokspeed.backends.embedded.corpus import corpus_digest, corpus_texts
from tokspeed.backends.embedded.sizes import VOCAB_SIZE

END_OF_TEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)  # ids 0, 1, 2
TOKENIZER_VERSION = 1  # bump when the recipe below changes (new cache entry)
MODEL_MAX_LENGTH = 4096

# Llama-3 / Qwen2-style pre-tokenisation: contractions, letter runs, 1-3 digit groups, punctuation, spaces.
_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def format_chat(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """CHAT_TEMPLATE rendered in Python (ChatML)."""
    parts = [f"{IM_START}{m.get('role', 'user')}\n{m.get('content', '')}{IM_END}\n" for m in messages]
    if add_generation_prompt:
        parts.append(f"{IM_START}assistant\n")
    return "".join(parts)


@dataclass(frozen=True)
class TokenizerBundle:
    """A loaded tokenizer, where it lives on disk, and how it got there."""

    tokenizer: Any  # tokenizers.Tokenizer
    directory: Path
    built: bool  # True: trained by this call; False: loaded from the cache
    seconds: float

    def token_id(self, token: str) -> int:
        tid = self.tokenizer.token_to_id(token)
        if tid is None:
            raise ValueError(f"{token} is not in the embedded tokenizer")
        return int(tid)


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE) -> Any:
    """Train the byte-level BPE (deterministic for the same texts and vocab size)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,  # the corpus is small: take every merge up to the vocabulary size
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() != vocab_size:
        raise ValueError(f"the corpus gave {tok.get_vocab_size()} tokens, not {vocab_size}")
    return tok


def tokenizer_config() -> dict[str, Any]:
    """tokenizer_config.json: what transformers (and servers built on it) need to load it."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": END_OF_TEXT,
        "unk_token": None,
        "additional_special_tokens": [IM_START, IM_END],
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MODEL_MAX_LENGTH,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(i): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for i, t in enumerate(SPECIAL_TOKENS)
        },
    }


def write_tokenizer_files(tokenizer: Any, directory: Path) -> None:
    """Write tokenizer.json, tokenizer_config.json, special_tokens_map.json and chat_template.jinja."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    _write_json(directory / "tokenizer_config.json", tokenizer_config())
    _write_json(
        directory / "special_tokens_map.json",
        {"eos_token": IM_END, "pad_token": END_OF_TEXT, "additional_special_tokens": [IM_START, IM_END]},
    )
    (directory / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")


def load_tokenizer(cache_dir: Path | None = None) -> TokenizerBundle:
    """The cached tokenizer, trained and cached first if this corpus has no entry yet."""
    from tokenizers import Tokenizer

    t0 = perf_counter()
    texts = corpus_texts()
    key = f"tokenizer-v{TOKENIZER_VERSION}-{VOCAB_SIZE}-{corpus_digest(texts)}"
    directory = (cache_dir or cache_root()) / "embedded" / key
    built = build_once(directory, lambda tmp: write_tokenizer_files(train_tokenizer(texts), tmp))
    tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    return TokenizerBundle(tokenizer=tok, directory=directory, built=built, seconds=perf_counter() - t0)


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
