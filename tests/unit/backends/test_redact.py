"""Secrets never survive an error message: key, secret headers, URL passwords."""

from __future__ import annotations

from tokspeed.backends.credentials import redact_url
from tokspeed.backends.redact import Redactor, secret_values

KEY = "sk-live-0123456789abcdef"


def test_api_key_and_bearer_header_are_masked() -> None:
    redact = Redactor.for_target("http://h/v1", KEY, {"Authorization": f"Bearer {KEY}"})
    assert redact(f"invalid key Bearer {KEY} (got {KEY})") == "invalid key *** (got ***)"


def test_secret_headers_and_their_credentials_are_masked_but_others_are_not() -> None:
    values = secret_values("http://h/v1", None, {"X-Api-Key": "hdr-secret-1", "Cookie": "s=abc123", "X-Trace": "visible"})
    assert "hdr-secret-1" in values and "s=abc123" in values and "visible" not in values
    redact = Redactor(values)
    assert redact("hdr-secret-1 s=abc123 visible") == "*** *** visible"


def test_url_password_is_masked() -> None:
    url = "http://alice:p%40ssw0rd@host:8000/v1"
    redact = Redactor.for_target(url, None, {})
    assert redact("cannot reach http://alice:p%40ssw0rd@host:8000/v1 p@ssw0rd") == "cannot reach http://alice:***@host:8000/v1 ***"
    assert redact_url(url) == "http://alice:***@host:8000/v1"
    assert redact_url("http://host/v1") == "http://host/v1"


def test_tiny_values_are_not_treated_as_secrets() -> None:
    assert Redactor(["ab", ""])("ab cd") == "ab cd"


def test_longest_secret_first_leaves_no_fragment() -> None:
    redact = Redactor(["abcd", "abcdefgh"])
    assert redact("abcdefgh") == "***"


# --- issue 22: escaped forms, URL user-info, trees ---------------------------------------------

import json  # noqa: E402

import orjson  # noqa: E402
import pytest  # noqa: E402

from tokspeed.backends.redact import escaped_forms  # noqa: E402

ODD_KEY = 'sk-se\\cr"et-\'1é'  # a backslash, both quotes and a non-ASCII letter


@pytest.mark.parametrize("shown", [
    ODD_KEY,
    orjson.dumps(ODD_KEY).decode(),  # a JSON body that echoes the key
    json.dumps(ODD_KEY),  # ... with \\uXXXX escapes
    repr(ODD_KEY),  # a repr'd message
    repr({"error": ODD_KEY}),
    repr(orjson.dumps({"error": ODD_KEY})),  # a raw body quoted as bytes
    orjson.dumps(orjson.dumps({"error": ODD_KEY}).decode()).decode(),  # JSON inside JSON
    repr(orjson.dumps({"error": ODD_KEY}).decode()),  # JSON inside a repr
    "https://h/v1?k=" + __import__("urllib.parse").parse.quote(ODD_KEY, safe=""),
], ids=["raw", "json", "json-ascii", "repr", "repr-dict", "repr-bytes", "json-json", "repr-json", "percent"])
def test_a_key_with_backslash_and_quotes_is_masked_in_every_escaped_form(shown: str) -> None:
    redact = Redactor.for_target("http://h/v1", ODD_KEY, {})
    out = redact(f"error: {shown} end")
    assert "***" in out
    for piece in ("se\\", "cr", "et-"):  # no fragment of the key is left
        assert piece not in out.replace("error", ""), out


def test_escaped_forms_of_a_plain_key_are_just_the_key() -> None:
    assert escaped_forms("sk-abc123") == {"sk-abc123"}


def test_basic_credential_of_the_url_and_a_token_user_are_secrets() -> None:
    from base64 import b64encode

    values = secret_values("http://bob:p%40ss-w0rd@h/v1", None, {})
    assert "p@ss-w0rd" in values and b64encode(b"bob:p@ss-w0rd").decode() in values
    assert "tok-1234567" in secret_values("https://tok-1234567@h/v1", None, {})


def test_url_user_info_without_password_is_masked_whole() -> None:
    assert redact_url("https://tok-1234567@h/v1") == "https://***@h/v1"
    assert redact_url("http://bob:@h/v1") == "http://bob:***@h/v1"
    assert redact_url("http://bob:pw@[::1/v1") == "http://***@[::1/v1"  # unparseable: user-info dropped


def test_a_tree_is_redacted_in_keys_and_values_and_other_values_kept() -> None:
    redact = Redactor([KEY])
    tree = {"version": f"v1 ({KEY})", KEY: [1, None, {"x": f"Bearer {KEY}"}], "n": 2.5}
    assert redact.tree(tree) == {"version": "v1 (***)", "***": [1, None, {"x": "Bearer ***"}], "n": 2.5}


def test_config_dump_masks_url_passwords_of_target_and_server_metrics() -> None:
    from tokspeed.config import RunConfig

    cfg = RunConfig(target="http://bob:hunter22@h:8000/v1", server_metrics="http://admin:metr1cs@h:9000/metrics")
    d = cfg.redacted_dump()
    assert d["target"] == "http://bob:***@h:8000/v1" and d["server_metrics"] == "http://admin:***@h:9000/metrics"
    assert "hunter22" not in orjson.dumps(d).decode() and "metr1cs" not in orjson.dumps(d).decode()
    assert cfg.target == "http://bob:hunter22@h:8000/v1"  # the run itself still has the credentials


def test_a_bad_server_metrics_value_is_not_echoed_with_its_password() -> None:
    from pydantic import ValidationError

    from tokspeed.config import RunConfig

    with pytest.raises(ValidationError) as exc:
        RunConfig(server_metrics="ftp://admin:metr1cs@h/metrics")
    assert "metr1cs" not in str(exc.value).split("input_value")[0]
