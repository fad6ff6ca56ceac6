"""Save the embedded model as a standard Hugging Face model directory.

The directory (config.json, model.safetensors with the random weights,
generation_config.json, tokenizer.json, tokenizer_config.json with
`tokenizer_class: PreTrainedTokenizerFast` and a ChatML chat template) loads
with `AutoModelForCausalLM`/`AutoTokenizer`, `transformers serve` and vLLM,
so the same model can be benchmarked in-process and behind a real server.
"""

from __future__ import annotations

from pathlib import Path

from tokspeed.backends.embedded.model import build_model
from tokspeed.backends.embedded.requirements import require_extra
from tokspeed.backends.embedded.sizes import DEFAULT_SIZE, get_size
from tokspeed.backends.embedded.tokenizer import load_tokenizer, write_tokenizer_files


def export_model(
    path: str | Path,
    size: str = DEFAULT_SIZE,
    *,
    seed: int = 0,
    dtype: str = "bfloat16",
    cache_dir: Path | None = None,
) -> Path:
    """Write the `size` model (weights drawn with `seed`, stored as `dtype`) to `path`; returns it.

    The weights are identical to the ones the in-process engine generates with
    for the same size and seed (before its own dtype cast).
    """
    require_extra()
    out = Path(path)
    tokenizer = load_tokenizer(cache_dir)
    built = build_model(get_size(size), tokenizer, dtype=dtype, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    built.model.save_pretrained(out, safe_serialization=True)
    write_tokenizer_files(tokenizer.tokenizer, out)
    return out
