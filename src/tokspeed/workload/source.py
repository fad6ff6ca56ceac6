"""The Workload: which prompt request i sends, and with which lengths; `load_workload` builds one.

`Workload.request(i)` is deterministic for a seed and valid for any i >= 0:
- the prompt comes from the source (a dataset cycled pass after pass, or a
  synthetic prompt generated for i; see `dataset` and `synthetic`);
- `max_tokens` is the item's own length when its file gave one (or, with
  `output_tokens="dataset"`, its recorded reply's length); otherwise it is drawn
  from the `output_tokens` spec with a generator seeded by (seed, i), so it does
  not depend on the order requests are built in;
- `input_tokens` is counted with the tokenizer when one is given (source
  `tokenizer`), else with `approx_token_count` (source `approx`), once per item.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tokspeed.errors import ConfigError, WorkloadError
from tokspeed.records import RequestSpec
from tokspeed.workload.builtin import builtin_items
from tokspeed.workload.dataset import DatasetSource
from tokspeed.workload.files import PromptFile, read_prompt_file
from tokspeed.workload.items import APIS, CountedPrompt, PromptItem
from tokspeed.workload.lengths import LENGTH_FORMS, LengthSpec, Stream, parse_length_spec
from tokspeed.workload.synthetic import (
    ApproxPromptBuilder,
    PromptBuilder,
    SyntheticSource,
    TokenizerPromptBuilder,
)
from tokspeed.workload.tokens import HFTokenizerCounter, TokenCounter, load_counter

BUILTIN = "builtin"
SYNTHETIC = "synthetic"
FROM_DATASET = "dataset"  # output_tokens value: use the lengths recorded in the file


class PromptSource(Protocol):
    def prompt(self, index: int) -> CountedPrompt: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Workload:
    """Request i's prompt and lengths, for any i >= 0. Build one with `load_workload`."""

    name: str  # "builtin", "synthetic", or the file path as given
    kind: str  # "builtin", "file" or "synthetic"
    source: PromptSource
    output_tokens: LengthSpec | None  # None: every item carries its own length
    api: str = "chat"
    seed: int = 0
    tokenizer: str | None = None
    details: tuple[tuple[str, Any], ...] = ()  # extra facts for describe(), e.g. file format

    def request(self, index: int) -> RequestSpec:
        """The request at position `index` of the run (warm-up included)."""
        if index < 0:
            raise ValueError(f"request index must be >= 0, got {index}")
        counted = self.source.prompt(index)
        return counted.to_spec(index, self.api, self._max_tokens(index, counted))

    def describe(self) -> dict[str, Any]:
        """What run.json records about the workload."""
        source = self.source.describe()
        counted_with = "tokenizer" if self.tokenizer else "approx"
        return {
            "name": self.name,
            "kind": self.kind,
            "api": self.api,
            "seed": self.seed,
            "items": source.get("items"),
            "order": source.get("order"),
            "input_tokens": source.get("input_tokens", FROM_DATASET),
            "input_tokens_source": counted_with,
            "tokenizer": self.tokenizer or "approx",
            "output_tokens": str(self.output_tokens) if self.output_tokens else FROM_DATASET,
            **dict(self.details),
        }

    def _max_tokens(self, index: int, counted: CountedPrompt) -> int:
        if counted.max_tokens is not None:
            return counted.max_tokens
        if self.output_tokens is None:  # load_workload makes sure this cannot happen
            raise WorkloadError(f"{self.name}: item {counted.item.origin} has no output length")
        return self.output_tokens.draw(self.seed, index, Stream.OUTPUT_LENGTH)


def load_workload(
    dataset: str,
    *,
    api: str = "chat",
    input_tokens: str | None = None,
    output_tokens: str = "256",
    tokenizer: str | None = None,
    seed: int = 0,
    shuffle: bool | None = None,
) -> Workload:
    """The workload for `dataset`: "builtin", "synthetic", or a prompt file path.

    `output_tokens` is a length spec, or "dataset" to use the lengths the file
    records. `shuffle` permutes each pass over a dataset (default: the built-in
    set is shuffled, a file keeps its order).
    """
    api = _check_api(api)
    from_dataset = str(output_tokens).strip().lower() == FROM_DATASET
    output = None if from_dataset else parse_length_spec(output_tokens)
    counter = load_counter(tokenizer)
    key = dataset.strip().lower()
    source: PromptSource
    if key == SYNTHETIC:
        source = _synthetic_source(input_tokens, counter, seed, from_dataset)
        return Workload(SYNTHETIC, SYNTHETIC, source, output, api, seed, tokenizer)
    _refuse_input_tokens(dataset, input_tokens)
    if key == BUILTIN:
        source = _builtin_source(counter, seed, shuffle, from_dataset)
        return Workload(BUILTIN, BUILTIN, source, output, api, seed, tokenizer)
    prompts = read_prompt_file(dataset, need_reply=from_dataset)
    source = _file_source(dataset, prompts, counter, seed, bool(shuffle), from_dataset)
    details = (("format", prompts.format), ("skipped", prompts.skipped))
    return Workload(dataset, "file", source, output, api, seed, tokenizer, details)


def _builtin_source(
    counter: TokenCounter, seed: int, shuffle: bool | None, from_dataset: bool
) -> DatasetSource:
    if from_dataset:
        raise WorkloadError(
            "the built-in prompts carry no output lengths", hint=f"give output_tokens as {LENGTH_FORMS}"
        )
    return DatasetSource(builtin_items(), counter, seed, shuffle is not False)


def _file_source(
    path: str, prompts: PromptFile, counter: TokenCounter, seed: int, shuffle: bool, from_dataset: bool
) -> DatasetSource:
    if from_dataset:
        _check_lengths(path, prompts.items)
    return DatasetSource(prompts.items, counter, seed, shuffle, use_reference=from_dataset)


def _refuse_input_tokens(dataset: str, input_tokens: str | None) -> None:
    if input_tokens is not None:
        raise ConfigError(
            f"input_tokens applies only to the synthetic dataset, not {dataset!r}",
            hint="drop input_tokens, or use dataset 'synthetic' to choose prompt lengths",
        )


def _check_lengths(path: str, items: tuple[PromptItem, ...]) -> None:
    """With output_tokens="dataset", every item must carry a length."""
    missing = [i for i in items if i.max_tokens is None and i.reference_output is None]
    if not missing:
        return
    if len(missing) == len(items):
        message = f"{path}: output_tokens is 'dataset' but the file records no output lengths"
    else:
        message = f"{path}: {missing[0].origin}: no max_tokens, and output_tokens is 'dataset'"
    raise WorkloadError(
        message,
        hint="give each entry a max_tokens (or use ShareGPT conversations with replies), "
        "or set output_tokens to a length such as 256",
    )


def _synthetic_source(
    input_tokens: str | None, counter: TokenCounter, seed: int, from_dataset: bool
) -> SyntheticSource:
    if input_tokens is None:
        raise WorkloadError(
            "the synthetic dataset needs input_tokens (the prompt length)",
            hint=f"set input_tokens: {LENGTH_FORMS}",
        )
    if from_dataset:
        raise WorkloadError(
            "synthetic prompts have no recorded output lengths",
            hint=f"give output_tokens as {LENGTH_FORMS}",
        )
    builder: PromptBuilder = (
        TokenizerPromptBuilder(counter) if isinstance(counter, HFTokenizerCounter) else ApproxPromptBuilder()
    )
    return SyntheticSource(parse_length_spec(input_tokens), builder, seed)


def _check_api(api: str) -> str:
    value = str(getattr(api, "value", api)).strip().lower()
    if value not in APIS:
        raise ConfigError(f"unknown api {api!r}", hint="use 'chat' or 'completions'")
    return value
