"""Masking secrets in output copies (``--redact``).

Keys are matched by *exact* name (case-insensitive, ``-`` and ``_`` treated alike), never by
substring, so ``max_output_tokens``, ``prompt_tokens`` and every other usage field stay intact
(bug-shapes.md B17). String values anywhere are scanned for well-known credential patterns (API keys,
bearer tokens, private key blocks), and only the matching part is replaced. Redaction works on the
output copy; inputs and the values ng-traj parses are never touched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from ng_traj.writers.jsonl import model_fields

MASK = "[REDACTED]"

SECRET_KEYS = frozenset(
    {
        "api_key",
        "apikey",
        "api_token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth_token",
        "authorization",
        "proxy_authorization",
        "x_api_key",
        "x_goog_api_key",
        "api_secret",
        "client_secret",
        "secret",
        "secret_key",
        "password",
        "passwd",
        "private_key",
        "cookie",
        "set_cookie",
        "aws_secret_access_key",
        "aws_session_token",
        "openai_api_key",
        "anthropic_api_key",
        "hf_token",
    }
)
"""Key names whose values are masked whole (normalised: lower case, ``-`` as ``_``)."""

SECRET_PATTERNS = (
    re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"),
    re.compile(r"\b(?:Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
)
"""Value patterns replaced wherever they occur inside a string."""


def _normalise(key: str) -> str:
    return key.lower().replace("-", "_")


class Redactor:
    """Masks secrets in JSON values.

    Args:
        extra_keys: More exact key names to mask (``--redact-key``).
    """

    def __init__(self, extra_keys: Iterable[str] = ()) -> None:
        self.keys = SECRET_KEYS | {_normalise(key) for key in extra_keys}

    def text(self, value: str) -> str:
        """``value`` with every credential pattern replaced by the mask."""
        for pattern in SECRET_PATTERNS:
            value = pattern.sub(MASK, value)
        return value

    def value(self, value: Any) -> Any:
        """A redacted copy of a JSON value, key order kept.

        The walk keeps its own stack instead of recursing, so a value nested as deep as the line reader
        accepts (1,024 levels) is redacted like any other. Contract models in it (a whole trajectory
        record) are walked as their fields, as they are written (``writers/jsonl.model_fields``): pydantic's
        own dump stops at about 255 levels, which a captured payload can exceed.
        """
        root: list[Any] = []
        pending = [([value], root)]
        while pending:
            source, target = pending.pop()
            pairs = source.items() if isinstance(source, dict) else enumerate(source)
            for key, item in pairs:
                if isinstance(item, BaseModel):
                    item = model_fields(item)
                if isinstance(source, dict) and self._secret(key, item):
                    copy: Any = MASK
                elif isinstance(item, str):
                    copy = self.text(item)
                elif isinstance(item, list | dict):
                    copy = type(item)()
                    pending.append((item, copy))
                else:
                    copy = item
                if isinstance(target, dict):
                    target[key] = copy
                else:
                    target.append(copy)
        return root[0]

    def _secret(self, key: Any, item: Any) -> bool:
        return isinstance(key, str) and _normalise(key) in self.keys and item is not None and item != ""
