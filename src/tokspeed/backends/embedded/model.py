"""Build the embedded model: a transformers Llama with seeded random weights.

Random weights are the accepted way to measure speed without a checkpoint
(vLLM's `--load-format dummy`): the compute per token is the same as for
trained weights of the same shapes. torch and transformers are imported here,
lazily, never when tokspeed itself is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter
from typing import Any

from tokspeed.backends.embedded.sizes import ModelSize
from tokspeed.backends.embedded.tokenizer import END_OF_TEXT, IM_END, TokenizerBundle


@dataclass(frozen=True)
class BuiltModel:
    """The model in eval mode, its size, and what building it took."""

    model: Any  # transformers.LlamaForCausalLM
    size: ModelSize
    dtype: str
    parameters: int
    seconds: float


def build_model(size: ModelSize, tokenizer: TokenizerBundle, *, dtype: str, seed: int = 0) -> BuiltModel:
    """A LlamaForCausalLM of `size` with weights drawn from a generator seeded with `seed`.

    The global torch RNG is left as it was (the draw happens inside fork_rng).
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    t0 = perf_counter()
    eos, pad = tokenizer.token_id(IM_END), tokenizer.token_id(END_OF_TEXT)
    config = LlamaConfig(**size.llama_config(bos_token_id=None, eos_token_id=[eos, pad], pad_token_id=pad))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model = model.to(getattr(torch, dtype)).eval()
    model.generation_config.eos_token_id = [eos, pad]
    model.generation_config.pad_token_id = pad
    parameters = sum(p.numel() for p in model.parameters())
    return BuiltModel(model=model, size=size, dtype=dtype, parameters=parameters, seconds=perf_counter() - t0)
