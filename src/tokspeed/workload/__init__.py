"""The workload: which prompts are sent, and with which input and output lengths.

    load_workload("builtin" | "synthetic" | PATH, api=..., input_tokens=..., output_tokens=...,
                  tokenizer=..., seed=...) -> Workload
    Workload.request(i) -> RequestSpec      any i >= 0, deterministic for a seed
    Workload.describe() -> dict             what run.json records about it
    parse_length_spec("256" | "uniform:a,b" | "normal:mean,sd") -> LengthSpec

Modules: `source` (Workload, load_workload), `lengths` (length specs and seeded
draws), `builtin` (the shipped prompt set), `files` and `formats` (prompt files),
`dataset` (cycling over items), `synthetic` (generated prompts), `items` (the
item types), `tokens` (token counting).
"""

from __future__ import annotations

from tokspeed.workload.builtin import BuiltinPrompt, builtin_prompts
from tokspeed.workload.lengths import FixedLength, LengthSpec, NormalLength, UniformLength, parse_length_spec
from tokspeed.workload.source import Workload, load_workload

__all__ = [
    "BuiltinPrompt",
    "FixedLength",
    "LengthSpec",
    "NormalLength",
    "UniformLength",
    "Workload",
    "builtin_prompts",
    "load_workload",
    "parse_length_spec",
]
