"""The two revisions of ``ng_trajectory`` 1.0, and the keys that tell them apart.

Both carry ``schema_version: "1.0"``, so the version alone does not say which models accept a
record. nemo-gym 0.7.0 added:

* ``model_calls[].response_metadata``: ``upstream_attempted``, ``response_source``,
  ``upstream_status_code``, ``local_response_reason`` (the model server's execution outcome),
  which earlier releases' models reject (``extra="forbid"``);
* conversation ``message`` items: ``phase``; ``function_call`` items: ``namespace`` (written by
  the models nemo-gym 0.7.0 uses, null unless the provider set them), which earlier releases'
  item models ignore (and so drop);
* conversation item types earlier releases' item union has no member for (apply-patch, hosted
  shell, compaction, tool search, additional tools), and so rejects.

ng-traj writes the 0.7.0 revision by default; the earlier one is the same record with those keys
left out, and those item types left out of conversations (``build --gym-release pre-0.7``). Records
of either revision validate.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

from ng_traj.contract.trajectory import TrajectoryRecord, TrajectoryResponseMetadata

Release = Literal["0.7", "pre-0.7"]
RELEASES: tuple[Release, ...] = ("0.7", "pre-0.7")
"""``0.7``: nemo-gym 0.7.0 and later (the default). ``pre-0.7``: releases before it (commit 07d6b0d)."""

_CONVERSATION = "ng_traj.contract.conversation"
"""The module of the conversation item models (imported only where items are, with the openai SDK)."""

METADATA_KEYS_0_7 = ("upstream_attempted", "response_source", "upstream_status_code", "local_response_reason")
ITEM_KEYS_0_7 = {"message": ("phase",), "function_call": ("namespace",)}
"""Conversation item type -> the keys nemo-gym 0.7.0 added to it."""
ITEM_TYPES_0_7 = frozenset(
    {
        "apply_patch_call",
        "apply_patch_call_output",
        "compaction",
        "shell_call",
        "shell_call_output",
        "tool_search_call",
        "tool_search_output",
        "compaction_trigger",
        "additional_tools",
    }
)
"""Conversation item types nemo-gym 0.7.0 added to its item union (earlier releases reject them)."""


def _listed(value: Any) -> list[Any]:
    """``value`` when it is a list, else none: a record whose shape is wrong is checked elsewhere."""
    return value if isinstance(value, list) else []


def _items(record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for invocation in _listed(record.get("invocations")):
        if isinstance(invocation, dict):
            yield from (item for item in _listed(invocation.get("conversation")) if isinstance(item, dict))


def _metadata(record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for call in _listed(record.get("model_calls")):
        metadata = call.get("response_metadata") if isinstance(call, dict) else None
        if isinstance(metadata, dict):
            yield metadata


def keys_0_7(record: Mapping[str, Any]) -> list[str]:
    """The 0.7-only keys a trajectory value carries (sorted, each named once), e.g. ``["phase"]``."""
    found = {key for metadata in _metadata(record) for key in METADATA_KEYS_0_7 if key in metadata}
    for item in _items(record):
        kind = item.get("type", "message")
        if not isinstance(kind, str):
            continue
        found.update(key for key in ITEM_KEYS_0_7.get(kind, ()) if key in item)
        if kind in ITEM_TYPES_0_7:
            found.add(f"{kind} item")
    return sorted(found)


NO_RECORDS = "no records: nothing to measure"
"""What :func:`revision_needed` says of no record at all: no revision is claimed."""


def revision_needed(with_0_7_keys: int, records: int | None = None) -> str:
    """What a file needs, said for people and programs alike, from how many records carry 0.7.0 keys
    (:data:`NO_RECORDS` when ``records`` says there was none)."""
    if records == 0:
        return NO_RECORDS
    if with_0_7_keys:
        return "0.7 fields present (needs nemo-gym 0.7.0 or later)"
    return "fits both revisions (nemo-gym 0.7.0 and earlier)"


def earlier_exclusions(model: type) -> frozenset[str]:
    """The fields of a contract model class the earlier revision has no place for (empty for most)."""
    owners: dict[type, tuple[str, ...]] = {TrajectoryResponseMetadata: METADATA_KEYS_0_7}
    if any(base.__module__ == _CONVERSATION for base in model.__mro__):  # an item model: its module is loaded
        from ng_traj.contract.conversation import EasyInputMessage, FunctionCall, OutputMessage

        owners.update({EasyInputMessage: ("phase",), OutputMessage: ("phase",), FunctionCall: ("namespace",)})
    return frozenset(key for base in model.__mro__ for key in owners.get(base, ()))


def lost_in_earlier(record: TrajectoryRecord) -> list[str]:
    """The 0.7-only fields of a ``TrajectoryRecord`` that hold a value (not null), and the 0.7-only
    conversation item types it holds (as ``"<type> items"``), sorted.

    Writing the earlier revision leaves these values and items out; the build reports them.
    """
    lost = {
        key
        for call in record.model_calls
        for key in METADATA_KEYS_0_7
        if getattr(call.response_metadata, key) is not None
    }
    for invocation in record.invocations:
        for item in invocation.conversation:
            lost.update(key for key in earlier_exclusions(type(item)) if getattr(item, key, None) is not None)
            if getattr(item, "type", None) in ITEM_TYPES_0_7:
                lost.add(f"{item.type} items")
    return sorted(lost)


def in_earlier(item: Any) -> bool:
    """Whether a conversation item (a model) has a place in the earlier revision's item union."""
    return getattr(item, "type", None) not in ITEM_TYPES_0_7


def earlier_loss(lost: list[str]) -> str:
    """What :func:`lost_in_earlier` found, said in a sentence: ``values of phase and compaction items
    left out (nemo-gym before 0.7.0 has no place for them)``."""
    fields = [key for key in lost if not key.endswith(" items")]
    items = [key.removesuffix(" items") for key in lost if key.endswith(" items")]
    parts = [f"values of {', '.join(fields)}"] * bool(fields) + [f"{', '.join(items)} items"] * bool(items)
    return f"{' and '.join(parts)} left out (nemo-gym before 0.7.0 has no place for them)"
