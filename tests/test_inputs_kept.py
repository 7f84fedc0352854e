"""Commands that read trajectories never replace or remove what they read, and a run that writes
nothing leaves an earlier output as it was."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli

BUILT = FIXTURES / "build" / "retained_run" / "expected.jsonl"


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "command",
    [("export", "--format", "otlp"), ("export", "--format", "atif"), ("report",)],
    ids=["export-otlp", "export-atif", "report"],
)
@pytest.mark.parametrize("linked", [False, True], ids=["same-path", "hard-link"])
def test_an_input_named_as_the_output_is_refused(tmp_path, command, linked):
    """By its own path, or by another name of the same file (a hard link), as build refuses it."""
    source = tmp_path / "in.jsonl"
    shutil.copy(BUILT, source)
    output = tmp_path / "link.jsonl" if linked else source
    if linked:
        os.link(source, output)
    before = _digest(source)
    result = run_cli(*command, source, "-o", output)
    assert result.exit_code == 2, result.stderr
    if command[-1] != "atif":  # an ATIF export is a folder: a file there is refused as not one
        assert f"output {output} is one of the inputs" in result.stderr
    assert _digest(source) == before


@pytest.mark.parametrize("format_", ["atif", "otlp"])
def test_an_output_folder_holding_an_input_is_refused(tmp_path, format_):
    folder = tmp_path / "out"
    folder.mkdir()
    source = folder / ("in.json" if format_ == "atif" else "in.jsonl")
    shutil.copy(BUILT, source)
    extra = ("--split",) if format_ == "otlp" else ()
    result = run_cli("export", folder, "--format", format_, *extra, "-o", folder)
    assert result.exit_code == 2, result.stderr
    assert f"is a folder holding the input {source}" in result.stderr
    assert sorted(p.name for p in folder.iterdir()) == [source.name]
    assert source.read_bytes() == BUILT.read_bytes()


@pytest.mark.parametrize("format_", ["atif", "otlp"])
def test_an_export_of_nothing_leaves_the_earlier_export(tmp_path, format_):
    out = tmp_path / ("atif" if format_ == "atif" else "traces.jsonl")
    # exit 1 for OTLP: three rollouts have no time, so no trace (the rest is written)
    assert run_cli("export", BUILT, "--format", format_, "-o", out).exit_code in (0, 1, 3)
    assert out.exists()
    report = tmp_path / f"{out.name}.completeness.json"
    kept = {p: p.read_bytes() for p in [*(out.iterdir() if out.is_dir() else [out]), report]}
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    result = run_cli("export", bad, "--format", format_, "-o", out)
    assert result.exit_code == 1
    assert f"nothing written: {out} was left as it was" in result.stderr
    assert {p: p.read_bytes() for p in kept} == kept
    never = tmp_path / "never"
    result = run_cli("export", bad, "--format", format_, "-o", never)
    assert result.exit_code == 1 and f"nothing written: {never} was not made" in result.stderr
    assert not never.exists()
    assert sorted(out.iterdir() if out.is_dir() else [out]) == sorted(p for p in kept if p != report)


@pytest.mark.parametrize("command", [("show",), ("report", "-o", "r.html"), ("export", "-f", "atif", "-o", "x")])
def test_a_table_folder_or_file_of_a_dataset_names_the_dataset(tmp_path, command, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dataset = tmp_path / "d.parquet"
    assert run_cli("convert", BUILT, "-o", dataset).exit_code == 0
    for named in (dataset / "trajectories", dataset / "trajectories" / "part-00000.parquet"):
        result = run_cli(command[0], named, *command[1:])
        assert result.exit_code == 2, result.stderr
        assert f"name the dataset folder {dataset}" in result.stderr


@pytest.mark.parametrize(
    ("command", "output"),
    [
        (("report",), "report.html"),
        (("export", "--format", "otlp"), "traces.jsonl"),
        (("export", "--format", "atif"), "atif"),
    ],
    ids=["report", "export-otlp", "export-atif"],
)
def test_the_same_command_run_again_with_its_output_in_the_input_folder_reads_only_the_input(tmp_path, command, output):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(BUILT, folder / "trajectories.jsonl")
    args = (*command, folder, "-o", folder / output)
    first = run_cli(*args)
    assert first.exit_code != 2 and (folder / output).exists(), first.stderr
    again = run_cli(*args)
    assert again.exit_code == first.exit_code, again.stderr
    assert again.stderr.splitlines()[-1] == first.stderr.splitlines()[-1]
    assert "error[" not in again.stderr


def test_an_output_under_the_input_folder_that_holds_trajectories_is_still_refused(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(BUILT, folder / "trajectories.jsonl")
    before = _digest(folder / "trajectories.jsonl")
    result = run_cli("report", folder, "-o", folder / "trajectories.jsonl")
    assert result.exit_code == 2 and "is one of the inputs" in result.stderr, result.stderr
    assert _digest(folder / "trajectories.jsonl") == before


@pytest.mark.parametrize("link", ["same", "symlink", "hardlink"])
@pytest.mark.parametrize("attach", [False, True], ids=["trajectories", "attach"])
def test_build_refuses_to_write_over_its_manifest(tmp_path, link, attach):
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text('{"_ng_task_index": 0, "_ng_rollout_index": 0, "response": {"output": []}}\n')
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"rollout_id": "0-0", "path": "rollouts.jsonl"}\n')
    before = _digest(manifest)
    output = manifest if link == "same" else tmp_path / "out.jsonl"
    if link == "symlink":
        output.symlink_to(manifest)
    elif link == "hardlink":
        output.hardlink_to(manifest)
    extra = ("--attach",) if attach else ()
    result = run_cli("build", rollouts, "--manifest", manifest, *extra, "-o", output)
    assert result.exit_code == 2, result.stderr
    assert f"error: output {output} is the --manifest file {manifest}; writing would replace it" in result.stderr
    assert _digest(manifest) == before


OWN_OUTPUTS = {  # what the export and report below leave in the folder, and how each is named when skipped
    "atif.completeness.json": "an ng-traj export's completeness report",
    "report.html": "an HTML report ng-traj report wrote",
    "traces.jsonl": "OpenTelemetry traces ng-traj export wrote",
    "traces.jsonl.completeness.json": "an ng-traj export's completeness report",
    **{f"atif/{rollout}.json": "an ATIF document ng-traj export wrote" for rollout in ("0-0", "5-1", "s7.eval-0")},
}


def _skipped_as_own(stderr: str, folder) -> dict[str, str]:
    """``relative path -> description`` of the ``info[input_unsupported]`` lines naming ng-traj's own outputs."""
    found = {}
    for line in stderr.splitlines():
        path, sep, rest = line.partition(": info[input_unsupported]: recognised as ")
        if sep and rest.endswith(" (ng-traj's own output, not an input); skipped"):
            found[str(Path(path).relative_to(folder))] = rest.removesuffix(
                " (ng-traj's own output, not an input); skipped"
            )
    return found


@pytest.mark.parametrize(
    "command",
    [
        ("show",),
        ("report", "-o", "REPORT2"),
        ("export", "-f", "atif", "-o", "ATIF2"),
        ("export", "-f", "otlp", "-o", "OTLP2"),
        ("matrix",),
    ],
    ids=["show", "report", "export-atif", "export-otlp", "matrix"],
)
def test_outputs_of_export_and_report_in_a_named_folder_are_skipped_as_ng_trajs_own(tmp_path, command):
    """An export's ATIF documents, traces and completeness reports, and a report's page, left in the
    input folder, were read as foreign input: an ``input_not_trajectories`` error each (export exited
    1), or for matrix an ``input_unclaimed`` warning each. Each is now one info line naming it as
    ng-traj's own output."""
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(BUILT, folder / "trajectories.jsonl")
    assert run_cli("export", folder, "-f", "atif", "-o", folder / "atif").exit_code == 0
    assert run_cli("report", folder, "-o", folder / "report.html").exit_code == 0
    assert run_cli("export", folder, "-f", "otlp", "-o", folder / "traces.jsonl").exit_code == 1  # 3 untimed
    named = {"REPORT2": tmp_path / "r.html", "ATIF2": tmp_path / "atif", "OTLP2": tmp_path / "t.jsonl"}
    verbose = () if command[0] == "show" else ("--verbose",)  # show summarises infos, naming the first
    result = run_cli(*command[:1], folder, *(named.get(arg, arg) for arg in command[1:]), *verbose)
    assert "error[" not in result.stderr and "warning[input_" not in result.stderr, result.stderr
    assert result.exit_code == (1 if command[-1] == "OTLP2" else 0), result.stderr  # otlp: the 3 untimed rollouts
    if command[0] == "show":
        assert "info[input_unsupported]: 17 times: " in result.stderr
        assert f"(the first: {folder / 'atif.completeness.json'})" in result.stderr
        return
    skipped = _skipped_as_own(result.stderr, folder)
    assert {path: skipped.get(path) for path in OWN_OUTPUTS} == OWN_OUTPUTS
    assert len(skipped) == 17  # 13 ATIF documents, 2 completeness reports, the traces and the page


def test_a_foreign_html_page_or_json_document_in_a_folder_is_not_taken_for_ng_trajs_own(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(BUILT, folder / "trajectories.jsonl")
    (folder / "notes.html").write_text("<html><title>ng-traj report</title></html>")
    (folder / "other.json").write_text('{"schema_version": "ATIF-v1.8", "steps": []}')
    result = run_cli("report", folder, "-o", tmp_path / "r.html", "--verbose")
    assert _skipped_as_own(result.stderr, folder) == {}
    assert f"{folder / 'notes.html'}: info[input_unclaimed]" in result.stderr
    assert f"{folder / 'other.json'}:1: error[schema_version_unsupported]" in result.stderr  # read, as before


RUN = FIXTURES / "build" / "retained_run" / "input"
OLD = (1_000_000_000, 1_000_000_000)  # 2001: a folder time no run of these tests leaves


def _refusals(tmp: Path) -> dict[str, tuple[tuple, Path]]:
    """Each refused command line (``name -> (arguments, the output it names)``) over a copy of the
    retained run in ``tmp/run``, with its trajectories at ``run/t.json`` and a manifest there."""
    run = tmp / "run"
    shutil.copytree(RUN, run)
    (run / "sub").mkdir()
    shutil.copy(run / "rollouts.jsonl", run / "sub" / "out.jsonl")
    shutil.copy(BUILT, run / "t.json")
    (run / "m.jsonl").write_text('{"rollout_id": "0-0", "path": "capture/0-0.capture.jsonl"}\n')
    (tmp / "link.jsonl").symlink_to(run / "rollouts.jsonl")
    capture = run / "capture" / "0-0.capture.jsonl"
    return {
        "build-under-folder": (("build", run, "-o", run / "sub" / "out.jsonl"), run / "sub" / "out.jsonl"),
        "build-named": (("build", run / "rollouts.jsonl", "-o", run / "rollouts.jsonl"), run / "rollouts.jsonl"),
        "build-link-named": (("build", tmp / "link.jsonl", "-o", run / "rollouts.jsonl"), run / "rollouts.jsonl"),
        "build-manifest": (("build", run, "--manifest", run / "m.jsonl", "-o", run / "m.jsonl"), run / "m.jsonl"),
        "build-manifest-path": (("build", run / "sub", "--manifest", run / "m.jsonl", "-o", capture), capture),
        "report": (("report", run / "t.json", "-o", run / "t.json"), run / "t.json"),
        "convert": (("convert", run / "t.json", "-o", run / "t.json"), run / "t.json"),
        "export": (("export", run / "t.json", "--format", "otlp", "-o", run / "t.json"), run / "t.json"),
    }


REFUSED = ("build-under-folder", "build-named", "build-link-named", "build-manifest", "build-manifest-path")


@pytest.mark.parametrize("name", [*REFUSED, "report", "convert", "export"])
def test_an_output_that_is_an_input_is_refused_before_anything_is_made_or_read(tmp_path, name, monkeypatch):
    """The refusal comes first. Before, build, report and convert made and removed a probe file
    beside the output (inside the input folder, whose time it changed) and build sniffed every
    input, before refusing; a build of a symbolic link to the output was not refused at all, and
    replaced the file the link names."""
    import ng_traj.assemble.inputs as inputs

    args, output = _refusals(tmp_path)[name]
    folders = [tmp_path / "run", *(p for p in (tmp_path / "run").rglob("*") if p.is_dir())]
    for folder in folders:
        os.utime(folder, OLD)
    kept = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    sniffed = []
    real_claims = inputs.claims
    monkeypatch.setattr(inputs, "claims", lambda file, *rest: sniffed.append(Path(file)) or real_claims(file, *rest))
    result = run_cli(*args)
    assert result.exit_code == 2, result.stderr
    assert f"error: output {output} is " in result.stderr, result.stderr
    assert "built " not in result.stderr
    assert {folder: os.stat(folder).st_mtime for folder in folders} == {folder: OLD[1] for folder in folders}
    assert {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()} == kept
    assert set(sniffed) <= {output}  # the output alone, to tell whether a reader claims it
