"""Prompt files on disk, in every accepted format, and the errors for bad ones."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from tokspeed.errors import WorkloadError
from tokspeed.records import TokenSource
from tokspeed.workload import load_workload
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


def _write_json(path: Path, data: Any) -> str:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")
    return str(path)


def _write_jsonl(path: Path, rows: list[Any]) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _sharegpt() -> list[dict[str, Any]]:
    return [
        {
            "id": "a",
            "conversations": [
                {"from": "human", "value": "What is a mutex?"},
                {"from": "gpt", "value": "A mutex is a lock that only one thread can hold at a time."},
                {"from": "human", "value": "And a semaphore?"},
                {"from": "gpt", "value": "A counter of permits."},
            ],
        },
        {
            "id": "b",
            "conversations": [
                {"from": "system", "value": "You are terse."},
                {"from": "human", "value": "Name a sorting algorithm."},
                {"from": "gpt", "value": "Merge sort."},
            ],
        },
        {"id": "c", "conversations": [{"from": "human", "value": "Unanswered question?"}]},
        {"id": "d", "conversations": [{"from": "gpt", "value": "A reply with no question."}]},
        {"id": "e", "conversations": []},
    ]


# --- the seed article's prompts.json -------------------------------------------------------


def test_seed_prompts_json_list_of_strings(tmp_path: Path) -> None:
    path = _write_json(tmp_path / "prompts.json", SEED_PROMPTS)
    wl = load_workload(path, api="completions")
    sent = [wl.request(i) for i in range(len(SEED_PROMPTS))]
    assert [s.prompt for s in sent] == SEED_PROMPTS  # a file keeps its order
    assert all(s.max_tokens == 256 for s in sent)
    assert all(s.input_tokens == approx_token_count(s.prompt or "") for s in sent)
    assert all(s.input_tokens_source is TokenSource.APPROX for s in sent)
    assert wl.request(8).prompt == SEED_PROMPTS[0]  # then cycles
    d = wl.describe()
    assert d["name"] == path and d["kind"] == "file" and d["format"] == "json"
    assert d["items"] == 8 and d["order"] == "file order" and d["skipped"] == 0


def test_file_can_be_shuffled_per_pass(tmp_path: Path) -> None:
    path = _write_json(tmp_path / "prompts.json", SEED_PROMPTS)
    wl = load_workload(path, shuffle=True, seed=3)
    first = [wl.request(i).prompt_text() for i in range(8)]
    assert sorted(first) == sorted(SEED_PROMPTS) and first != SEED_PROMPTS
    assert wl.describe()["order"] == "shuffled per pass (seeded)"


# --- objects, messages, JSONL ----------------------------------------------------------------


def test_json_objects_with_prompt_and_own_max_tokens(tmp_path: Path) -> None:
    rows = [
        {"prompt": "first", "max_tokens": 12},
        {"text": "second"},
        {"question": "third?", "max_tokens": 3},
    ]
    wl = load_workload(_write_json(tmp_path / "p.json", rows), output_tokens="uniform:100,200")
    specs = [wl.request(i) for i in range(3)]
    assert [s.prompt_text() for s in specs] == ["first", "second", "third?"]
    assert specs[0].max_tokens == 12 and specs[2].max_tokens == 3  # the item's own length wins
    assert specs[1].max_tokens is not None and 100 <= specs[1].max_tokens <= 200


def test_jsonl_with_chat_messages(tmp_path: Path) -> None:
    rows = [
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Describe"}]}], "max_tokens": 9},
        {"prompt": "plain prompt"},
    ]
    path = _write_jsonl(tmp_path / "chat.jsonl", rows)
    chat = load_workload(path)
    first = chat.request(0)
    assert first.messages == (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there"},
    )
    assert first.input_tokens == approx_token_count("Be brief.\nHi there")
    assert chat.request(1).messages == ({"role": "user", "content": "Describe"},)
    assert chat.request(1).max_tokens == 9
    assert chat.request(2).messages == ({"role": "user", "content": "plain prompt"},)
    completions = load_workload(path, api="completions")
    assert completions.request(0).prompt == "Be brief.\nHi there"  # contents joined
    assert completions.describe()["format"] == "jsonl"


def test_jsonl_skips_blank_lines_and_keeps_unicode_line_separators(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a\u2028b"}\n\n  \n{"prompt": "c"}\r\n', encoding="utf-8")
    wl = load_workload(str(path))
    assert [wl.request(i).prompt_text() for i in range(2)] == ["a\u2028b", "c"]


def test_json_extension_holding_json_lines_is_read_as_jsonl(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "lines.json", [{"prompt": "x"}, {"prompt": "y"}])
    wl = load_workload(path)
    assert wl.describe()["format"] == "jsonl"
    assert wl.describe()["items"] == 2


def test_unknown_extension_is_sniffed(tmp_path: Path) -> None:
    path = tmp_path / "prompts.data"
    path.write_text(json.dumps(["one", "two"]), encoding="utf-8")
    assert load_workload(str(path)).describe()["items"] == 2


def test_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_text(json.dumps(["with bom"]), encoding="utf-8-sig")
    assert load_workload(str(path)).request(0).prompt_text() == "with bom"


# --- CSV, TSV, text --------------------------------------------------------------------------


def test_csv_with_prompt_and_max_tokens_columns(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", " Prompt ", "max_tokens"])
        writer.writerow(["1", "Summarise this:\nline one, line two", "40"])
        writer.writerow(["2", "比较一下微服务和单体架构的优缺点。", ""])
    wl = load_workload(str(path), output_tokens="77")
    assert wl.request(0).prompt_text() == "Summarise this:\nline one, line two"
    assert wl.request(0).max_tokens == 40
    assert wl.request(1).max_tokens == 77
    assert wl.describe()["format"] == "csv"


@pytest.mark.parametrize("column", ["text", "question", "QUESTION"])
def test_csv_alternative_prompt_columns(tmp_path: Path, column: str) -> None:
    path = tmp_path / "q.csv"
    path.write_text(f"{column},answer\nWhat is 2+2?,4\n", encoding="utf-8")
    assert load_workload(str(path)).request(0).prompt_text() == "What is 2+2?"


def test_tsv(tmp_path: Path) -> None:
    path = tmp_path / "p.tsv"
    path.write_text("prompt\tmax_tokens\nhello, world\t5\n", encoding="utf-8")
    spec = load_workload(str(path)).request(0)
    assert (spec.prompt_text(), spec.max_tokens) == ("hello, world", 5)


def test_text_file_one_prompt_per_line(tmp_path: Path) -> None:
    path = tmp_path / "p.txt"
    path.write_text("first\n\n second \nthird\n", encoding="utf-8")
    wl = load_workload(str(path))
    assert [wl.request(i).prompt_text() for i in range(3)] == ["first", "second", "third"]


# --- ShareGPT --------------------------------------------------------------------------------


def test_sharegpt_takes_the_first_human_turn(tmp_path: Path) -> None:
    wl = load_workload(_write_json(tmp_path / "sg.json", _sharegpt()), output_tokens="64")
    assert wl.request(0).messages == ({"role": "user", "content": "What is a mutex?"},)
    assert wl.request(1).messages == (
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a sorting algorithm."},
    )
    assert wl.request(2).prompt_text() == "Unanswered question?"
    assert {wl.request(i).max_tokens for i in range(3)} == {64}  # replies unused without "dataset"
    d = wl.describe()
    assert d["format"] == "sharegpt-json" and d["items"] == 3 and d["skipped"] == 2


def test_sharegpt_dataset_lengths_come_from_the_first_reply(tmp_path: Path) -> None:
    wl = load_workload(_write_json(tmp_path / "sg.json", _sharegpt()), output_tokens="dataset")
    reply = "A mutex is a lock that only one thread can hold at a time."
    assert wl.request(0).max_tokens == approx_token_count(reply)
    assert wl.request(1).max_tokens == approx_token_count("Merge sort.")
    d = wl.describe()
    assert d["items"] == 2 and d["skipped"] == 3 and d["output_tokens"] == "dataset"


def test_sharegpt_as_jsonl(tmp_path: Path) -> None:
    wl = load_workload(_write_jsonl(tmp_path / "sg.jsonl", _sharegpt()), api="completions")
    assert wl.request(1).prompt == "You are terse.\nName a sorting algorithm."
    assert wl.describe()["format"] == "sharegpt-jsonl"


def test_dataset_lengths_from_explicit_max_tokens(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "p.jsonl", [{"prompt": "a", "max_tokens": 5}, {"prompt": "b", "max_tokens": 6}]
    )
    wl = load_workload(path, output_tokens="dataset")
    assert [wl.request(i).max_tokens for i in range(4)] == [5, 6, 5, 6]


# --- errors ----------------------------------------------------------------------------------


def _error(path: str, **kwargs: Any) -> WorkloadError:
    with pytest.raises(WorkloadError) as info:
        load_workload(path, **kwargs)
    return info.value


def test_missing_file_lists_the_accepted_formats(tmp_path: Path) -> None:
    err = _error(str(tmp_path / "nope.json"))
    assert "not found" in str(err) and "nope.json" in str(err)
    assert err.hint is not None
    for word in ("builtin", "synthetic", ".json", ".jsonl", ".csv", "ShareGPT", "messages"):
        assert word in err.hint


def test_directory_is_not_a_dataset(tmp_path: Path) -> None:
    assert "is not a file" in str(_error(str(tmp_path)))


@pytest.mark.parametrize("name", ["empty.json", "empty.jsonl", "empty.csv", "empty.txt"])
def test_empty_files(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("  \n", encoding="utf-8")
    err = _error(str(path))
    assert name in str(err) and "empty" in str(err)


def test_empty_json_list_and_header_only_csv(tmp_path: Path) -> None:
    assert "no prompts" in str(_error(_write_json(tmp_path / "e.json", [])))
    header_only = tmp_path / "h.csv"
    header_only.write_text("prompt,max_tokens\n", encoding="utf-8")
    assert "no prompts" in str(_error(str(header_only)))


def test_bad_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('[\n  "ok",\n  "missing comma"\n  "x"\n]\n', encoding="utf-8")
    err = str(_error(str(path)))
    assert "bad.json" in err and "line 4" in err and "not valid JSON" in err


def test_bad_jsonl_line_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n\n{"prompt": "broken"\n', encoding="utf-8")
    err = _error(str(path))
    assert "bad.jsonl: line 3: not valid JSON" in str(err)
    assert err.hint is not None and "one complete JSON object per line" in err.hint


def test_entry_without_prompt_names_the_line(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "p.jsonl", [{"prompt": "ok"}, {"input": "where is the prompt"}])
    err = str(_error(path))
    assert "p.jsonl: line 2: no prompt" in err and "input" in err


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"prompt": ""}, "the prompt is empty"),
        ({"prompt": "   "}, "the prompt is empty"),
        ({"prompt": 42}, "must be a string"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens must be a whole number"),
        ({"prompt": "x", "max_tokens": "lots"}, "max_tokens must be a whole number"),
        ({"prompt": "x", "max_tokens": True}, "max_tokens must be a whole number"),
        ({"messages": []}, "non-empty list"),
        ({"messages": [{"content": "no role"}]}, "message 1 needs a 'role'"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "list of text parts"),
        ({"messages": [{"role": "user", "content": ""}]}, "every message is empty"),
        ({"conversations": "not a list"}, "'conversations' must be a list"),
        (7, "expected a string or an object"),
    ],
)
def test_bad_entries_name_the_item(tmp_path: Path, entry: Any, message: str) -> None:
    err = str(_error(_write_json(tmp_path / "p.json", ["fine", entry])))
    assert "p.json: item 2:" in err and message in err


def test_csv_without_prompt_column(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("id,body\n1,hello\n", encoding="utf-8")
    err = _error(str(path))
    assert "no prompt column" in str(err) and "'body'" in str(err)
    assert err.hint is not None and "prompt" in err.hint


def test_csv_row_without_prompt_names_the_row(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text('prompt,max_tokens\nfine,1\n"",2\n', encoding="utf-8")
    assert "p.csv: row 2 (line 3): the prompt is empty" in str(_error(str(path)))


def test_csv_bad_max_tokens_names_the_row(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("prompt,max_tokens\nfine,ten\n", encoding="utf-8")
    assert "row 1 (line 2): max_tokens must be a whole number" in str(_error(str(path)))


def test_json_top_level_must_be_a_list(tmp_path: Path) -> None:
    err = _error(_write_json(tmp_path / "obj.json", {"prompts": ["a"]}))
    assert "expected a JSON list" in str(err)


def test_unrecognised_content(tmp_path: Path) -> None:
    path = tmp_path / "prompts.bin"
    path.write_text("hello", encoding="utf-8")
    assert "cannot tell the file's format" in str(_error(str(path)))


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("café\n".encode("latin-1"))
    err = _error(str(path))
    assert "not UTF-8" in str(err)


def test_dataset_lengths_need_lengths_in_the_file(tmp_path: Path) -> None:
    path = _write_json(tmp_path / "prompts.json", SEED_PROMPTS)
    err = _error(path, output_tokens="dataset")
    assert "records no output lengths" in str(err)
    assert err.hint is not None and "max_tokens" in err.hint


def test_dataset_lengths_name_the_first_item_without_one(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a", "max_tokens": 5}, {"prompt": "b"}])
    assert "p.jsonl: line 2: no max_tokens" in str(_error(path, output_tokens="dataset"))


def test_sharegpt_without_any_usable_conversation(tmp_path: Path) -> None:
    convs = [{"conversations": [{"from": "gpt", "value": "hi"}]}, {"conversations": []}]
    err = str(_error(_write_json(tmp_path / "sg.json", convs)))
    assert "none of its 2 conversations has a human turn" in err
    only_questions = [{"conversations": [{"from": "human", "value": "q?"}]}]
    err = str(_error(_write_json(tmp_path / "q.json", only_questions), output_tokens="dataset"))
    assert "has a human turn and a reply" in err


def test_input_tokens_with_a_file_is_refused(tmp_path: Path) -> None:
    from tokspeed.errors import ConfigError

    with pytest.raises(ConfigError, match="only to the synthetic dataset"):
        load_workload(_write_json(tmp_path / "p.json", ["a"]), input_tokens="100")


# --- iterations over a prompt file, through the CLI --------------------------------------------


def test_each_iteration_is_one_pass_over_the_file_against_a_server(tmp_path: Path, start_sim: Any) -> None:
    """`--dataset prompts.json --iterations 3` sends the 8 prompts once per iteration (it sent 100 before)."""
    import orjson

    from harness import records, run_cli

    sim = start_sim("--ttft-ms", "1", "--itl-ms", "0")
    path = _write_json(tmp_path / "prompts.json", SEED_PROMPTS)
    out = tmp_path / "r"
    p = run_cli("run", "--target", sim.url, "--dataset", path, "--iterations", "3", "--max-tokens", "4",
                "--out", str(out), "--plain")
    assert p.returncode == 0, p.stderr
    measured = [r for r in records(out) if not r["warmup"]]
    assert sorted(r["iteration"] for r in measured) == [1] * 8 + [2] * 8 + [3] * 8
    bench = orjson.loads((out / "run.json").read_bytes())["benchmarks"][0]
    assert bench["profile"]["kind"] == "synchronous" and len(bench["iterations"]) == 3
    assert "Iteration 3: total" in p.stdout and "Averaged over 3 iterations" in p.stdout
    # the mean latency across iterations carries its spread and interval, as the throughput does
    import re

    # (a t interval over 3 noisy iterations can reach below zero on a busy machine: the sign is allowed)
    assert re.search(r"mean latency [\d.,]+ ± [\d.,]+ s \(95% CI -?[\d.,]+–-?[\d.,]+\)", p.stdout), p.stdout
    assert "Sample prompt:" in p.stdout and SEED_PROMPTS[0] in p.stdout and "Sample response:" in p.stdout


def test_offline_submits_each_pass_at_once_against_a_server(tmp_path: Path, start_sim: Any) -> None:
    import orjson

    from harness import records, run_cli

    sim = start_sim("--ttft-ms", "1", "--itl-ms", "0")
    path = _write_json(tmp_path / "prompts.json", SEED_PROMPTS)
    out = tmp_path / "r"
    p = run_cli("run", "--target", sim.url, "--dataset", path, "--iterations", "2", "--offline", "--max-tokens", "4",
                "--out", str(out), "--plain")
    assert p.returncode == 0, p.stderr
    assert "offline throughput on the target: all 8 requests of each iteration submitted at once" in p.stdout
    recs = records(out)
    assert sum(r["warmup"] for r in recs) == 1 and len(recs) == 1 + 2 * 8
    bench = orjson.loads((out / "run.json").read_bytes())["benchmarks"][0]
    assert bench["profile"]["kind"] == "concurrency" and bench["profile"]["concurrency"] == 8
