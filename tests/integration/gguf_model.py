"""A tiny random-weight Llama written as GGUF, for serving with llama.cpp in tests.

`write_tiny_llama_gguf(PATH)` (or `python gguf_model.py PATH`, e.g. with the
server's venv) writes, with the `gguf` package and numpy only (no torch, no
download, well under a second), a 2-layer Llama (hidden 64, 4 heads,
feed-forward 128, float32) with a SentencePiece-style ("llama") vocabulary
in the GGUF metadata: <unk>, <s>, </s>, the 256 byte-fallback tokens
<0x00>..<0xFF>, "▁", the printable ASCII characters and "▁a".."▁z".

Random weights alone would sometimes pick </s> (short answers) or a byte token
(invalid UTF-8 that a server holds back or drops). So the weights carry a
logit bias: embedding dimension 0 is a constant that no layer reads or writes,
and the output matrix's column 0 is strongly negative for every control and
byte token, so generation only emits printable text and runs to `max_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 4
N_LAYER = 2
N_FF = 128
N_CTX = 4096  # the longest builtin prompt is ~2,500 tokens of this vocabulary (CJK text: 3 byte tokens a character)
BANNED_LOGIT = -40.0

# llama.cpp token types (gguf.TokenType): NORMAL=1, UNKNOWN=2, CONTROL=3, BYTE=6
_NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6


@dataclass(frozen=True)
class Vocab:
    tokens: list[str]
    scores: list[float]
    types: list[int]

    @property
    def banned(self) -> list[int]:
        """Ids generation must never pick: control, unknown and byte tokens."""
        return [i for i, t in enumerate(self.types) if t != _NORMAL]


def tiny_vocab() -> Vocab:
    tokens = ["<unk>", "<s>", "</s>"]
    types = [_UNKNOWN, _CONTROL, _CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [_BYTE] * 256
    normal = ["▁"] + [chr(c) for c in range(0x21, 0x7F)] + [f"▁{chr(c)}" for c in range(ord("a"), ord("z") + 1)]
    tokens += normal
    types += [_NORMAL] * len(normal)
    # SentencePiece merges the highest-scoring pair first: longer pieces score higher
    scores = [0.0] * (3 + 256) + [-1000.0 + len(t) for t in normal]
    assert len(set(tokens)) == len(tokens)
    return Vocab(tokens, scores, types)


def write_tiny_llama_gguf(path: str | Path, *, seed: int = 0) -> Path:
    """Write the tiny random Llama to `path` (a .gguf file); returns the path."""
    import gguf

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    vocab = tiny_vocab()
    n_vocab = len(vocab.tokens)
    rng = np.random.default_rng(seed)

    def rand(*shape: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def linear(n_out: int, n_in: int) -> np.ndarray:
        w = rand(n_out, n_in)
        w[:, 0] = 0.0  # no layer reads the constant dimension 0 ...
        return w

    def writes_residual(w: np.ndarray) -> np.ndarray:
        w[0, :] = 0.0  # ... and none writes to it, so it stays constant in the residual stream
        return w

    head_dim = N_EMBD // N_HEAD
    tensors: dict[str, np.ndarray] = {}
    # numpy shapes are (rows, cols) as in Hugging Face; gguf stores them reversed, as ggml expects
    embd = rand(n_vocab, N_EMBD, std=1.0)
    embd[:, 0] = 1.0
    tensors["token_embd.weight"] = embd
    for i in range(N_LAYER):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        tensors[p + "attn_q.weight"] = linear(N_HEAD * head_dim, N_EMBD)
        tensors[p + "attn_k.weight"] = linear(N_HEAD_KV * head_dim, N_EMBD)
        tensors[p + "attn_v.weight"] = linear(N_HEAD_KV * head_dim, N_EMBD)
        tensors[p + "attn_output.weight"] = writes_residual(rand(N_EMBD, N_HEAD * head_dim))
        tensors[p + "ffn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        tensors[p + "ffn_gate.weight"] = linear(N_FF, N_EMBD)
        tensors[p + "ffn_up.weight"] = linear(N_FF, N_EMBD)
        tensors[p + "ffn_down.weight"] = writes_residual(rand(N_EMBD, N_FF))
    tensors["output_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
    head = rand(n_vocab, N_EMBD, std=0.1)
    head[:, 0] = 0.0
    head[vocab.banned, 0] = BANNED_LOGIT  # the logit bias, through the constant dimension
    tensors["output.weight"] = head

    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name("tokspeed-tiny-random")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)  # all float32
    w.add_tokenizer_model("llama")
    w.add_token_list(vocab.tokens)
    w.add_token_scores(vocab.scores)
    w.add_token_types(vocab.types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


if __name__ == "__main__":  # `python gguf_model.py OUT.gguf`, with whichever Python has gguf (the server's venv)
    import sys

    print(write_tiny_llama_gguf(sys.argv[1]))
