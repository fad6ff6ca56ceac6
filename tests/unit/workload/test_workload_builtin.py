"""The built-in prompt set and the workload built on it."""

from __future__ import annotations

import pytest

from tokspeed.errors import ConfigError, WorkloadError
from tokspeed.records import TokenSource
from tokspeed.workload import builtin_prompts, load_workload
from tokspeed.workload.tokens import approx_token_count

SEED_PROMPTS = [
    "解释一下量子计算的基本原理。",
    "用Python写一个快速排序函数，并添加注释。",
    "如何有效地学习一门新的编程语言？请给出具体步骤。",
    "简述Transformer模型在自然语言处理中的核心贡献。",
    "写一封简洁的商务邮件，向客户推迟项目交付日期。",
    "什么是递归？请举一个编程中的例子。",
    "比较一下微服务和单体架构的优缺点。",
    "列出5个提高代码可读性的最佳实践。",
]


def test_builtin_set_is_large_and_unique() -> None:
    prompts = builtin_prompts()
    assert len(prompts) >= 45
    assert len({p.prompt for p in prompts}) == len(prompts)
    assert len({p.id for p in prompts}) == len(prompts)


def test_seed_prompts_come_first_verbatim() -> None:
    prompts = builtin_prompts()
    assert [p.prompt for p in prompts[:8]] == SEED_PROMPTS
    assert all(p.origin == "seed" for p in prompts[:8])
    assert all(p.origin == "tokspeed" for p in prompts[8:])


def test_both_languages_and_many_categories() -> None:
    prompts = builtin_prompts()
    langs = [p.lang for p in prompts]
    assert set(langs) == {"zh", "en"}
    assert min(langs.count("zh"), langs.count("en")) >= 15
    assert len({p.category for p in prompts}) >= 10


def test_language_tags_match_the_text() -> None:
    for p in builtin_prompts():
        wide = sum("\u4e00" <= c <= "\u9fff" for c in p.prompt)
        assert (wide > 0) == (p.lang == "zh"), p.id


def test_prompt_lengths_spread_from_one_line_to_long_context() -> None:
    lengths = sorted(approx_token_count(p.prompt) for p in builtin_prompts())
    assert lengths[0] < 20
    assert lengths[-1] >= 600
    assert sum(n < 40 for n in lengths) >= 10  # short questions
    assert sum(40 <= n < 200 for n in lengths) >= 10  # a few sentences
    assert sum(n >= 300 for n in lengths) >= 8  # pasted logs, code, notes
    assert lengths[-1] <= 1000


def test_every_pass_sends_every_prompt_once() -> None:
    wl = load_workload("builtin")
    n = wl.describe()["items"]
    all_prompts = {p.prompt for p in builtin_prompts()}
    for first in (0, n, 5 * n):
        sent = [wl.request(i).prompt_text() for i in range(first, first + n)]
        assert set(sent) == all_prompts


def test_builtin_order_is_shuffled_per_pass_and_seeded() -> None:
    wl = load_workload("builtin")
    n = wl.describe()["items"]
    first_pass = [wl.request(i).prompt_text() for i in range(n)]
    second_pass = [wl.request(i).prompt_text() for i in range(n, 2 * n)]
    assert first_pass != second_pass
    assert first_pass != [p.prompt for p in builtin_prompts()]
    again = load_workload("builtin")
    assert [again.request(i).prompt_text() for i in reversed(range(n))][::-1] == first_pass
    other_seed = load_workload("builtin", seed=1)
    assert [other_seed.request(i).prompt_text() for i in range(n)] != first_pass


def test_builtin_in_file_order_when_asked() -> None:
    wl = load_workload("builtin", shuffle=False)
    assert [wl.request(i).prompt_text() for i in range(8)] == SEED_PROMPTS


def test_chat_api_sends_messages_and_completions_a_prompt() -> None:
    chat = load_workload("builtin", shuffle=False).request(0)
    assert chat.prompt is None
    assert chat.messages == ({"role": "user", "content": SEED_PROMPTS[0]},)
    completions = load_workload("builtin", api="completions", shuffle=False).request(0)
    assert completions.messages is None
    assert completions.prompt == SEED_PROMPTS[0]


def test_requests_carry_index_lengths_and_approx_source() -> None:
    wl = load_workload("builtin", output_tokens="uniform:10,20", seed=3)
    for i in (0, 1, 99, 1000):
        spec = wl.request(i)
        assert spec.index == i
        assert spec.max_tokens is not None and 10 <= spec.max_tokens <= 20
        assert spec.input_tokens == approx_token_count(spec.prompt_text())
        assert spec.input_tokens_source is TokenSource.APPROX


def test_requests_are_deterministic_and_order_independent() -> None:
    a = load_workload("builtin", output_tokens="normal:200,50", seed=9)
    b = load_workload("builtin", output_tokens="normal:200,50", seed=9)
    forward = [a.request(i) for i in range(120)]
    backward = [b.request(i) for i in reversed(range(120))][::-1]
    assert forward == backward


def test_max_tokens_depend_on_seed() -> None:
    lengths = [load_workload("builtin", output_tokens="uniform:1,100000", seed=s) for s in (0, 1)]
    zero, one = ([wl.request(i).max_tokens for i in range(10)] for wl in lengths)
    assert zero != one


def test_messages_are_fresh_per_request() -> None:
    wl = load_workload("builtin", shuffle=False)
    first = wl.request(0)
    assert first.messages is not None
    first.messages[0]["content"] = "changed by a backend"
    assert wl.request(0).prompt_text() == SEED_PROMPTS[0]


def test_describe_names_everything_run_json_needs() -> None:
    d = load_workload("builtin", output_tokens="uniform:1,9", seed=4).describe()
    assert d["name"] == "builtin" and d["kind"] == "builtin"
    assert d["items"] == len(builtin_prompts())
    assert d["order"] == "shuffled per pass (seeded)"
    assert d["input_tokens"] == "dataset"
    assert d["input_tokens_source"] == "approx" and d["tokenizer"] == "approx"
    assert d["output_tokens"] == "uniform:1,9"
    assert d["api"] == "chat" and d["seed"] == 4


def test_dataset_name_is_case_and_space_insensitive() -> None:
    assert load_workload(" Builtin ").name == "builtin"


def test_builtin_refuses_dataset_output_lengths_and_input_tokens() -> None:
    with pytest.raises(WorkloadError, match="no output lengths") as info:
        load_workload("builtin", output_tokens="dataset")
    assert info.value.hint is not None
    with pytest.raises(ConfigError, match="only to the synthetic dataset"):
        load_workload("builtin", input_tokens="128")


def test_bad_api_and_bad_output_spec_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown api"):
        load_workload("builtin", api="embeddings")
    with pytest.raises(ConfigError, match="cannot parse length"):
        load_workload("builtin", output_tokens="lots")


def test_negative_index_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        load_workload("builtin").request(-1)
