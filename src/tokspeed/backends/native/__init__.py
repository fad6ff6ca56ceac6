"""Servers' native streaming APIs as targets: `--api tgi|triton|ollama|ollama-chat|llamacpp|sglang`.

    native_protocol("tgi")            the NativeProtocol for an --api value (None for chat/completions)
    NativeHTTPBackend(url, protocol)  the Backend that speaks it
    NATIVE_APIS                       the --api values served here
    workload_api("ollama-chat")       the prompt form ("chat" or "completions") the workload builds for it
"""

from __future__ import annotations

from tokspeed.backends.native.backend import NativeHTTPBackend, server_root
from tokspeed.backends.native.llamacpp import LlamaCpp
from tokspeed.backends.native.ollama import Ollama
from tokspeed.backends.native.protocol import TIMING_KEYS, NativeProtocol, NativeState
from tokspeed.backends.native.sglang import SGLang
from tokspeed.backends.native.tgi import TGI
from tokspeed.backends.native.triton import Triton

NATIVE_APIS = ("tgi", "triton", "ollama", "ollama-chat", "llamacpp", "sglang")


def native_protocol(api: str) -> NativeProtocol | None:
    """The protocol for an `--api` value, or None when it is an OpenAI-compatible API."""
    if api == "tgi":
        return TGI()
    if api == "triton":
        return Triton()
    if api in ("ollama", "ollama-chat"):
        return Ollama(chat=api == "ollama-chat")
    if api == "llamacpp":
        return LlamaCpp()
    if api == "sglang":
        return SGLang()
    return None


__all__ = ["NATIVE_APIS", "TIMING_KEYS", "NativeHTTPBackend", "NativeProtocol", "NativeState", "native_protocol",
           "server_root", "workload_api"]


def workload_api(api: str) -> str:
    """The prompt form a workload builds for `api`: chat messages for chat APIs, plain prompts otherwise."""
    if api in NATIVE_APIS:
        return "chat" if api == "ollama-chat" else "completions"
    return api
