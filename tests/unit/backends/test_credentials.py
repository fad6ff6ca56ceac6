"""A target URL's user:password@ becomes one Basic header, for aiohttp and the lean HTTP/1.1 client alike."""

from __future__ import annotations

from base64 import b64decode

import pytest

from tokspeed.backends.credentials import basic_credential, strip_userinfo, url_auth_replacing, with_url_auth
from tokspeed.backends.http1 import Endpoint, request_head
from tokspeed.backends.openai_http import OpenAIHTTPBackend
from tokspeed.errors import ConfigError


def test_user_info_is_percent_decoded_into_a_basic_credential() -> None:
    assert b64decode(basic_credential("http://bob:p%40ss%22w@h/v1") or "") == b'bob:p@ss"w'
    assert b64decode(basic_credential("http://tok@h/v1") or "") == b"tok:"
    assert basic_credential("http://h/v1") is None


def test_with_url_auth_strips_the_user_info_and_adds_the_header() -> None:
    url, headers = with_url_auth("http://bob:pw12@h:8000/v1", {"X-A": "1"})
    assert url == "http://h:8000/v1" and headers["X-A"] == "1"
    assert headers["Authorization"] == "Basic " + "Ym9iOnB3MTI="
    assert with_url_auth("http://h/v1", {"X-A": "1"}) == ("http://h/v1", {"X-A": "1"})
    assert strip_userinfo("https://a:b@h/v1") == "https://h/v1"


def test_url_credentials_beside_an_authorization_header_are_refused() -> None:
    with pytest.raises(ConfigError, match="only one"):
        with_url_auth("http://bob:pw12@h/v1", {"authorization": "Bearer sk-1234"})


def test_a_separate_urls_own_credentials_replace_the_targets() -> None:
    url, headers = url_auth_replacing("http://admin:m3trics@h/metrics", {"Authorization": "Bearer sk-1234", "X": "y"})
    assert url == "http://h/metrics" and headers == {"X": "y", "Authorization": "Basic YWRtaW46bTN0cmljcw=="}
    assert url_auth_replacing("http://h/metrics", {"Authorization": "Bearer k"}) == ("http://h/metrics", {"Authorization": "Bearer k"})


def test_the_load_requests_carry_the_urls_credentials_and_the_url_does_not() -> None:
    backend = OpenAIHTTPBackend("http://bob:pw12@h:8000/v1", model="m")
    head = backend._head.decode("latin-1")
    assert "Authorization: Basic Ym9iOnB3MTI=\r\n" in head  # what http1 sends on every load request
    assert backend._headers["Authorization"] == "Basic Ym9iOnB3MTI="  # what the aiohttp session sends
    assert backend.base_url == "http://h:8000/v1" and "pw12" not in backend._url
    assert backend._redact("Basic Ym9iOnB3MTI= pw12") == "*** ***"


def test_request_head_has_no_user_info() -> None:
    head = request_head("POST", "/v1/chat/completions", Endpoint("http://bob:pw12@h:8000/v1"), {}).decode()
    assert "pw12" not in head and "Host: h:8000\r\n" in head
