"""Synthetic prompts: exact lengths under the approximation, uniqueness, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from tokspeed.errors import ConfigError, WorkloadError
from tokspeed.records import TokenSource
from tokspeed.workload import load_workload, parse_length_spec
from tokspeed.workload.lengths import Stream
from tokspeed.workload.synthetic import WORDS, ApproxPromptBuilder, random_words, request_tag
from tokspeed.workload.tokens import approx_token_count


def test_word_pool_is_one_approx_token_per_word() -> None:
    assert len(WORDS) >= 150
    assert all(w.isascii() and w.isalpha() and 1 <= len(w) <= 4 for w in WORDS)


@pytest.mark.parametrize("n", [1, 2, 3, 17, 256, 4096])
def test_fixed_length_is_exact_under_approx(n: int) -> None:
    wl = load_workload("synthetic", input_tokens=str(n), api="completions")
    for i in (0, 1, 35, 36, 1_679_615, 1_679_616, 10**12):
        spec = wl.request(i)
        assert spec.prompt is not None
        assert approx_token_count(spec.prompt) == n == spec.input_tokens
        assert spec.input_tokens_source is TokenSource.APPROX


def test_builder_handles_tags_longer_than_the_prompt() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 3):
        text, count = ApproxPromptBuilder().build(request_tag(10**15), n, rng)
        assert approx_token_count(text) == count == n


def test_sampled_lengths_follow_the_spec_and_the_seed() -> None:
    wl = load_workload("synthetic", input_tokens="uniform:5,60", seed=11)
    spec = parse_length_spec("uniform:5,60")
    for i in range(100):
        request = wl.request(i)
        assert request.input_tokens == spec.draw(11, i, Stream.INPUT_LENGTH)
        assert approx_token_count(request.prompt_text()) == request.input_tokens


def test_prompts_are_unique_and_differ_from_the_first_word() -> None:
    wl = load_workload("synthetic", input_tokens="64")
    prompts = [wl.request(i).prompt_text() for i in range(2000)]
    assert len(set(prompts)) == len(prompts)
    assert len({p.split()[0] for p in prompts}) == len(prompts)


def test_request_tags_are_base36_and_distinct() -> None:
    assert [request_tag(i) for i in (0, 9, 10, 35, 36, 1295, 1296)] == ["0", "9", "A", "Z", "10", "ZZ", "100"]
    assert len({request_tag(i) for i in range(5000)}) == 5000


def test_synthetic_is_deterministic_for_a_seed_and_changes_with_it() -> None:
    first = load_workload("synthetic", input_tokens="normal:100,30", output_tokens="uniform:1,50", seed=0)
    again = load_workload("synthetic", input_tokens="normal:100,30", output_tokens="uniform:1,50", seed=0)
    other = load_workload("synthetic", input_tokens="normal:100,30", output_tokens="uniform:1,50", seed=1)
    built = [first.request(i) for i in range(50)]
    assert built == [again.request(i) for i in reversed(range(50))][::-1]
    assert [r.prompt_text() for r in built] != [other.request(i).prompt_text() for i in range(50)]


def test_words_vary_within_a_prompt() -> None:
    words = random_words(np.random.default_rng(5), 500).split()
    assert len(words) == 500
    assert len(set(words)) > 100


def test_chat_api_wraps_the_prompt_in_one_user_message() -> None:
    spec = load_workload("synthetic", input_tokens="8").request(3)
    assert spec.prompt is None
    assert spec.messages is not None and len(spec.messages) == 1
    assert spec.messages[0]["role"] == "user"
    assert approx_token_count(spec.messages[0]["content"]) == 8


def test_describe_for_synthetic() -> None:
    d = load_workload("synthetic", input_tokens="uniform:8,16", output_tokens="32", seed=2).describe()
    assert d["kind"] == "synthetic" and d["name"] == "synthetic"
    assert d["items"] is None
    assert d["input_tokens"] == "uniform:8,16" and d["output_tokens"] == "32"
    assert d["input_tokens_source"] == "approx"


def test_synthetic_needs_input_tokens() -> None:
    with pytest.raises(WorkloadError, match="needs input_tokens") as info:
        load_workload("synthetic")
    assert info.value.hint is not None and "uniform" in info.value.hint


def test_synthetic_rejects_bad_input_spec_and_dataset_output() -> None:
    with pytest.raises(ConfigError, match="cannot parse length"):
        load_workload("synthetic", input_tokens="0")
    with pytest.raises(WorkloadError, match="no recorded output lengths"):
        load_workload("synthetic", input_tokens="8", output_tokens="dataset")
