"""The reference join."""

from __future__ import annotations

from ng_traj.assemble.join import join_model_call_observations
from ng_traj.contract import AgentObservationBundle, ModelCallRecord

POLICY = {"type": "responses_api_models", "name": "policy"}
JUDGE = {"type": "responses_api_models", "name": "judge"}


def _call(call_id: str, response_id: str | None, index: int, ref=POLICY) -> ModelCallRecord:
    return ModelCallRecord(model_call_id=call_id, response_id=response_id, call_index=index, model_ref=ref)


def _bundle(*records, gaps=()) -> AgentObservationBundle:
    return AgentObservationBundle(source="pi", records=list(records), gaps=list(gaps))


def _inv(invocation_id: str, *refs) -> dict:
    return {"kind": "agent_invocation", "invocation_id": invocation_id, "model_calls": list(refs)}


def _gaps(bundle: AgentObservationBundle) -> list[tuple]:
    return [(g.code, g.invocation_id, g.detail) for g in bundle.gaps]


def test_exact_ref_is_canonicalised_stale_capture_gaps_removed_unowned_reported():
    bundle = _bundle(
        _inv("root", {"model_ref": POLICY, "response_id": "resp_1"}),
        gaps=[
            {"code": "model_call_ownership_unavailable", "detail": "capture:old:call_index=9"},
            {"code": "no_sandbox_runtime"},
        ],
    )
    calls = [_call("c1", "resp_1", 0), _call("c2", "resp_j", 2, JUDGE)]
    joined = join_model_call_observations(bundle, calls)
    ref = joined.records[0].model_calls[0]
    assert (ref.model_call_id, ref.response_id, ref.model_ref.name) == ("c1", "resp_1", "policy")
    assert _gaps(joined) == [
        ("no_sandbox_runtime", None, None),
        ("model_call_ownership_unavailable", None, "capture:c2:call_index=2"),
    ]
    assert bundle.records[0].model_calls[0].model_call_id is None  # input untouched


def test_duplicate_response_ids_are_ambiguous_and_leave_both_unowned():
    bundle = _bundle(_inv("root", {"model_ref": POLICY, "response_id": "dup"}))
    joined = join_model_call_observations(bundle, [_call("a", "dup", 0), _call("b", "dup", 1)])
    assert _gaps(joined) == [
        ("model_call_reference_ambiguous", "root", "dup"),
        ("model_call_ownership_unavailable", None, "capture:a:call_index=0"),
        ("model_call_ownership_unavailable", None, "capture:b:call_index=1"),
    ]
    assert joined.records[0].model_calls[0].model_call_id is None


def test_conflict_unmatched_and_idempotence():
    bundle = _bundle(
        _inv("a", {"model_call_id": "c1"}),
        _inv("b", {"model_call_id": "c1"}, {"model_ref": POLICY, "response_id": "missing"}),
    )
    calls = [_call("c1", "resp_1", 0)]
    once = join_model_call_observations(bundle, calls)
    assert _gaps(once) == [
        ("model_call_reference_conflict", "b", "c1"),
        ("model_call_reference_unmatched", "b", "missing"),
    ]
    twice = join_model_call_observations(once, calls)
    assert twice == once


def test_ref_with_call_id_must_agree_with_its_response_id():
    bundle = _bundle(_inv("a", {"model_call_id": "c1", "response_id": "other"}))
    joined = join_model_call_observations(bundle, [_call("c1", "resp_1", 0)])
    assert _gaps(joined)[0] == ("model_call_reference_unmatched", "a", "c1")


def test_compaction_refs_resolve_when_owned_by_the_same_invocation():
    compaction = {
        "kind": "context_compaction",
        "invocation_id": "a",
        "before_model_call": {"model_call_id": "c1"},
        "model_calls": [{"model_call_id": "c2"}],
        "after_model_call": {"model_call_id": "c3"},
    }
    bundle = _bundle(_inv("a", {"model_call_id": "c1"}, {"model_call_id": "c2"}, {"model_call_id": "c3"}), compaction)
    joined = join_model_call_observations(bundle, [_call("c1", "r1", 0), _call("c2", "r2", 1), _call("c3", "r3", 2)])
    assert _gaps(joined) == []
    assert joined.records[1].after_model_call.response_id == "r3"


def test_cross_invocation_compaction_refs_are_rejected_with_prefixed_details():
    compaction = {
        "kind": "context_compaction",
        "invocation_id": "a",
        "before_model_call": {"model_call_id": "c2"},
        "model_calls": [{"model_call_id": "c2"}, {"model_call_id": "c3"}, {"model_call_id": "zz"}],
        "after_model_call": {"model_call_id": "c3"},
    }
    bundle = _bundle(_inv("a"), _inv("b", {"model_call_id": "c2"}), compaction)
    joined = join_model_call_observations(bundle, [_call("c2", "r2", 0), _call("c3", "r3", 1)])
    assert _gaps(joined) == [
        ("model_call_reference_conflict", "a", "model_calls:c2"),
        ("model_call_ownership_unavailable", "a", "model_calls:c3"),
        ("model_call_reference_unmatched", "a", "model_calls:zz"),
        ("model_call_reference_conflict", "a", "before_model_call:c2"),
        ("model_call_ownership_unavailable", None, "capture:c3:call_index=1"),
    ]
    assert joined.records[2].after_model_call.response_id == "r3"  # unowned: canonicalised


def test_joining_twice_keeps_the_gaps_of_a_compaction_ref_no_invocation_owns_in_place():
    """Found by the property test: the compaction's ownership gap was not a stale join gap, so a
    second join kept it in front of the gaps it made again (same gaps, other order)."""
    compaction = {
        "kind": "context_compaction",
        "invocation_id": "root",
        "model_calls": [{"model_ref": JUDGE, "response_id": "r1"}],
    }
    bundle = _bundle(_inv("root"), _inv("a", {"model_call_id": "c1"}), compaction)
    calls = [ModelCallRecord(response_id="r1", call_index=0, model_ref=JUDGE)]
    once = join_model_call_observations(bundle, calls)
    assert _gaps(once) == [
        ("model_call_reference_unmatched", "a", "c1"),
        ("model_call_ownership_unavailable", "root", "model_calls:r1"),
        ("model_call_ownership_unavailable", None, "capture:r1:call_index=0"),
    ]
    assert join_model_call_observations(once, calls) == once


def _as_pydantic(joined: AgentObservationBundle) -> AgentObservationBundle:
    """The bundle pydantic makes from the joined bundle's parts (records with refs assigned through it)."""
    records = []
    for record in joined.records:
        if record.kind == "agent_invocation":
            copy = record.model_copy(update={"model_calls": []})
            copy.__pydantic_fields_set__.discard("model_calls")
            copy.model_calls = list(record.model_calls)
            record = copy
        records.append(record)
    return AgentObservationBundle(source=joined.source, records=records, gaps=list(joined.gaps))


def test_joined_bundle_and_its_refs_are_those_pydantic_makes():
    bundle = _bundle(
        _inv("root", {"model_ref": POLICY, "response_id": "resp_1"}, {"model_call_id": "missing"}),
        _inv("child", {"model_call_id": "c2"}),
        {"kind": "agent_invocation", "invocation_id": "quiet"},
        {"kind": "tool_call", "invocation_id": "root", "tool_call_id": "t1"},
        gaps=[{"code": "no_sandbox_runtime"}],
    )
    joined = join_model_call_observations(bundle, [_call("c1", "resp_1", 0), _call("c2", None, 1)])
    expected = _as_pydantic(joined)
    assert joined.model_dump() == expected.model_dump()
    assert joined.model_fields_set == expected.model_fields_set
    for got, want in zip(joined.records, expected.records, strict=True):
        assert type(got) is type(want)
        assert got.model_fields_set == want.model_fields_set
        assert list(got.__dict__) == list(want.__dict__)  # declaration order, as the JSON writer follows
    invocation = joined.records[0]
    assert "model_calls" in invocation.model_fields_set
    assert [type(ref).__name__ for ref in invocation.model_calls] == ["ModelCallRef", "ModelCallRef"]
    assert "model_calls" in joined.records[2].model_fields_set  # assigned by the join, as pydantic marks it
    assert "model_calls" not in bundle.records[2].model_fields_set
    assert bundle.records[0].model_calls[1].model_call_id == "missing"  # input untouched
    assert "model_calls" in bundle.records[1].model_fields_set and bundle.records[1].model_calls[0].model_ref is None


def test_joined_bundle_that_breaks_the_contract_is_rejected_by_pydantic():
    import pytest
    from pydantic import ValidationError

    from ng_traj.assemble.join import join_bundles

    one = _bundle(_inv("root"))
    duplicate = AgentObservationBundle.model_construct(source="pi", records=[*one.records, *one.records], gaps=[])
    with pytest.raises(ValidationError, match="'root' is not unique in the bundle") as caught:
        join_bundles([duplicate], [])
    assert caught.value.errors()[0]["type"] == "duplicate_invocation_id"


def test_a_ref_that_is_not_a_model_call_ref_is_assigned_through_pydantic():
    from ng_traj.assemble.join import _set_model_calls

    invocation = _bundle(_inv("root")).records[0]
    _set_model_calls(invocation, [{"model_call_id": "c1"}])
    assert type(invocation.model_calls[0]).__name__ == "ModelCallRef"
    assert invocation.model_calls[0].model_call_id == "c1"
