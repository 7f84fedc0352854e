"""Masking secrets in output copies (``--redact``).

Keys are matched by *exact* name (case-insensitive, ``-`` and ``_`` treated alike), never by
substring, so ``max_output_tokens``, ``prompt_tokens``, a log-probability's ``token`` and every other
usage field stay intact. String values anywhere are scanned for the credential shapes of
:data:`SECRET_PATTERNS` (and ``--redact-pattern``), and only the matching part is replaced: the whole
match, or only its ``secret`` group when the pattern has one (a URL keeps its scheme, user and host;
an ``Authorization:`` header in text keeps its name). Redaction works on the output copy; inputs and
the values ng-traj parses are never touched.

Values are walked with an explicit stack, not recursion, so a value nested any depth is masked like
any other; dictionaries keep their key order, so the output stays byte-identical between runs.
"""

from __future__ import annotations

import enum
import functools
import re
import types
import typing
from collections.abc import Iterable, Iterator
from typing import Any, Literal

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
        "x_auth_token",
        "bearer_token",
        "session_token",
        "private_token",
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
        "proxy_password",
        "private_key",
        "cookie",
        "set_cookie",
        "aws_secret_access_key",
        "aws_session_token",
        "openai_api_key",
        "anthropic_api_key",
        "nvidia_api_key",
        "ngc_api_key",
        "google_api_key",
        "gemini_api_key",
        "github_token",
        "gh_token",
        "gitlab_token",
        "slack_token",
        "hf_token",
        "huggingface_token",
    }
)
"""Key names whose values are masked whole (normalised: lower case, ``-`` as ``_``)."""

_DIGIT = r"(?=[A-Za-z0-9._~+/=-]*[0-9])"
"""Lookahead: the token ahead holds a digit (random tokens do; English words after ``bearer`` do not)."""

SECRET_PATTERNS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    # OpenAI (sk-, sk-proj-, sk-svcacct-) and Anthropic (sk-ant-api03-, sk-ant-admin01-) keys
    (("sk-",), re.compile(r"\bsk-" + _DIGIT + r"[A-Za-z0-9_-]{20,}")),
    # NVIDIA API catalogue / NGC keys
    (("nvapi-",), re.compile(r"\bnvapi-[A-Za-z0-9_-]{20,}")),
    # GitHub tokens: classic (ghp_, gho_, ghu_, ghs_, ghr_) and fine-grained
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b")),
    (("github_pat_",), re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}\b")),
    # GitLab personal access tokens
    (("glpat-",), re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    # AWS access key ids (long-term AKIA, temporary ASIA) and secret keys written as assignments
    (("akia", "asia"), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    (
        ("secret",),
        re.compile(
            r"(?i)\baws_?secret_?access_?key\b[\"']?\s*[:=]\s*[\"']?(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
        ),
    ),
    # Google API keys and OAuth access tokens
    (("aiza",), re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])")),
    (("ya29.",), re.compile(r"\bya29\.[0-9A-Za-z_-]{20,}")),
    # Slack tokens
    (("xox",), re.compile(r"\bxox[abeposr]-[A-Za-z0-9-]{10,}")),
    # Hugging Face tokens
    (("hf_",), re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")),
    # Stripe secret and restricted keys, webhook secrets
    (("k_live_", "k_test_"), re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b")),
    (("whsec_",), re.compile(r"\bwhsec_[A-Za-z0-9]{24,}\b")),
    # JSON Web Tokens: base64url header and payload (both JSON objects, so "eyJ"), signature
    (("eyj",), re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")),
    # Authorization header values in text (curl -H, logs), whatever the scheme
    (
        ("authorization",),
        re.compile(
            r"(?i)\b(?:proxy-)?authorization\b[\"']?\s*[:=]\s*[\"']?(?P<secret>"
            r"(?:bearer|basic|token|digest|negotiate|apikey)\s+[^\s\"',;]+|(?=[^\s\"',;]*[0-9+/=])[^\s\"',;]{8,})"
        ),
    ),
    # Bearer tokens in any case; Basic credentials (base64 with a digit, +, / or padding)
    (("bearer",), re.compile(r"(?i)\bbearer\s+" + _DIGIT + r"[A-Za-z0-9._~+/-]{8,}=*")),
    (("basic",), re.compile(r"(?i)\bbasic\s+(?=[A-Za-z0-9+/]*[0-9+/=])[A-Za-z0-9+/]{8,}={0,2}")),
    # Credentials in a URL's userinfo: https://user:password@host keeps user and host
    (("://",), re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]+:(?P<secret>[^\s/?#@]+)@")),
    # PEM and PGP private key blocks; a block cut before its END line is masked to its end
    (
        ("private key",),
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=:\s\\-]*)"
        ),
    ),
)
"""``(needles, pattern)``: each pattern is replaced wherever it occurs inside a string (the ``secret``
group only, if any); it is tried only on text whose lower-case form holds one of its needles, so
text without secrets costs a few substring searches, not a regular-expression scan per shape."""


def _contract_fields() -> Iterator[tuple[str, Any]]:
    """``(name, annotation)`` of every field of every model and typed dictionary a trajectory record
    can hold, each class once, walked from ``TrajectoryRecord`` and the conversation item union (the
    record's conversation fields stand for the union until their schema is built, so it is walked
    from its own definition: ``contract/observations.py``)."""
    from ng_traj.contract.conversation import ConversationItem
    from ng_traj.contract.trajectory import TrajectoryRecord

    seen: set[int] = set()
    pending: list[Any] = [TrajectoryRecord, ConversationItem]
    while pending:
        annotation = pending.pop()
        if typing.get_origin(annotation) is not None:  # a union, list, dict, Annotated...: what it is made of
            pending.extend(typing.get_args(annotation))
            continue
        if not isinstance(annotation, type) or id(annotation) in seen:
            continue
        seen.add(id(annotation))
        if typing.is_typeddict(annotation):
            try:
                fields = list(typing.get_type_hints(annotation, include_extras=True).items())
            except (NameError, TypeError):  # a forward reference the SDK leaves unresolved
                continue
        elif issubclass(annotation, BaseModel):
            fields = [(name, field.annotation) for name, field in annotation.model_fields.items()]
        else:
            continue
        yield from fields
        pending.extend(field_annotation for _, field_annotation in fields)


def _fixed_values(annotation: Any) -> Iterator[str]:
    """The text values a field's annotation allows from a fixed set (a ``Literal``'s, an enumeration's),
    through unions, lists and the like; a model or typed dictionary inside is not entered (its own
    fields are :func:`_contract_fields`)."""
    if typing.get_origin(annotation) is Literal:
        yield from (value for value in typing.get_args(annotation) if isinstance(value, str))
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        yield from (member.value for member in annotation if isinstance(member.value, str))
    elif typing.get_origin(annotation) is not None:
        for arg in typing.get_args(annotation):
            yield from _fixed_values(arg)


@functools.cache
def constrained_values() -> dict[str, frozenset[str]]:
    """The text values the trajectory contract allows a key, for each key whose values it constrains
    to a fixed set (a ``Literal`` or an enumeration: type tags such as ``output_text``, roles,
    statuses, ``schema_version``), gathered from every model and typed dictionary a record can hold
    (:func:`_contract_fields`). Built once, on first use.
    """
    found: dict[str, set[str]] = {}
    for name, annotation in _contract_fields():
        values = set(_fixed_values(annotation))
        if values:
            found.setdefault(name, set()).update(values)
    return {key: frozenset(values) for key, values in found.items()}


def _accepts_text(annotation: Any) -> bool:
    """Whether a field of this annotation accepts any text (so the mask): ``str``, ``Any``,
    ``object``, or a union holding one of them."""
    if annotation is str or annotation is Any or annotation is object:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Annotated, typing.Required, typing.NotRequired):
        return _accepts_text(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return any(_accepts_text(arg) for arg in typing.get_args(annotation))
    return False


@functools.cache
def unmaskable_keys() -> frozenset[str]:
    """The key names (normalised) that name, somewhere in the trajectory contract, a field that does not
    accept any text: a fixed set of values (a type tag, ``role``, ``status``) or another type (a number,
    a list, an object). A ``--redact-key`` among them is refused (:func:`check_keys`): masking a value
    there whole would make the record no longer one. A key that is free text in one model and
    constrained in another (``content``: text in a message, a list of parts in an output message) is
    among them, since the mask would be invalid where it is constrained. Built once, on first use,
    from :func:`_contract_fields`.
    """
    return frozenset(_normalise(name) for name, annotation in _contract_fields() if not _accepts_text(annotation))


JOINING_KEYS = frozenset(
    {
        "rollout_id",
        "task_id",
        "invocation_id",
        "parent_invocation_id",
        "model_call_id",
        "tool_call_id",
        "spawned_by_tool_call_id",
        "response_id",
        "call_id",
    }
)
"""The ids a trajectory names its rollout and its parts by, and joins them with (a turn's model calls,
a sub-agent's spawning tool call, a function call's output): masked, every rollout would have the
same id and every reference would name nothing. Refused as ``--redact-key`` (:func:`check_keys`)."""


def check_keys(keys: Iterable[str]) -> None:
    """Refuse ``--redact-key`` names that cannot be masked: checked before any input is read.

    Raises:
        ValueError: A key is empty or only spaces (it names no key a record has), names an id records
            are joined by (:data:`JOINING_KEYS`) or a field the trajectory contract constrains
            (:func:`unmaskable_keys`); the message names the key, says why, and points to
            ``--redact-pattern``.
    """
    keys = list(keys)
    for key in keys:
        if not key.strip():
            raise ValueError(
                f"--redact-key {key!r} is empty or only spaces, so it names no key to mask: "
                "give the exact name of a key (--redact-key api_key)"
            )
    if not keys:
        return
    unmaskable = unmaskable_keys()
    for key in keys:
        if _normalise(key) in JOINING_KEYS:
            raise ValueError(
                f"--redact-key {key}: {key} is an id that names rollouts or their parts and joins them, so masking "
                "it would make them indistinguishable and every reference to them dangle; to mask a secret "
                "inside an id, use --redact-pattern"
            )
        if _normalise(key) in unmaskable:
            constrained = constrained_values().get(_normalise(key))
            what = (
                f"in at least one place to a fixed set of {len(constrained)} values"
                if constrained
                else "in at least one place to numbers, lists or objects rather than text"
            )
            raise ValueError(
                f"--redact-key {key}: the trajectory contract constrains the values of {key} ({what}), so masking "
                "it would make the records invalid; to mask secrets in text, use --redact-pattern"
            )


def _normalise(key: str) -> str:
    return key.lower().replace("-", "_")


def _mask(match: re.Match[str]) -> str:
    """The match with its ``secret`` group (else all of it) masked; an empty match is left as it is."""
    if "secret" not in match.re.groupindex:
        return MASK if match.end() > match.start() else ""
    start, end = match.span("secret")
    if start < 0 or end == start:
        return match.group(0)
    whole = match.group(0)
    return whole[: start - match.start()] + MASK + whole[end - match.start() :]


def compile_patterns(patterns: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    """Compile ``--redact-pattern`` values (Python regular expressions).

    A pattern with a group named ``secret`` masks only that group; any other masks its whole match.

    Raises:
        ValueError: A pattern is not a valid regular expression, or matches the empty string (``''``,
            ``a*``: it would match at every position of every string); the message names it.
    """
    compiled = []
    for pattern in patterns:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"--redact-pattern {pattern!r} is not a regular expression: {exc}") from None
        if regex.fullmatch("") is not None:
            raise ValueError(
                f"--redact-pattern {pattern!r} matches the empty string, so it would match everywhere: "
                "give a pattern that needs at least one character"
            )
        compiled.append(regex)
    return tuple(compiled)


class Redactor:
    """Masks secrets in JSON values.

    Args:
        extra_keys: More exact key names to mask (``--redact-key``).
        extra_patterns: More value patterns to mask (``--redact-pattern``), applied after the built-in ones.
    """

    def __init__(self, extra_keys: Iterable[str] = (), extra_patterns: Iterable[re.Pattern[str]] = ()) -> None:
        self.keys = SECRET_KEYS | {_normalise(key) for key in extra_keys}
        self.patterns = tuple(extra_patterns)
        self.constrained = constrained_values()

    def text(self, value: str) -> str:
        """``value`` with every credential pattern replaced by the mask."""
        lowered = value.lower()
        for needles, pattern in SECRET_PATTERNS:
            if any(needle in lowered for needle in needles):
                value = pattern.sub(_mask, value)
        for pattern in self.patterns:
            value = pattern.sub(_mask, value)
        return value

    def value(self, value: Any) -> Any:
        """A redacted copy of a JSON value, key order kept.

        Text a pattern matches is masked except where it is a value the contract allows a key from a
        fixed set (:func:`constrained_values`: ``"type": "output_text"``, ``"role": "user"``): such a
        value is no secret, and masking it would make the record no longer one. A key named by
        ``--redact-key`` is masked whatever its value (the commands refuse one the contract constrains
        before any input is read: :func:`check_keys`).

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
                    copy = item if item in self.constrained.get(key, ()) else self.text(item)
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
