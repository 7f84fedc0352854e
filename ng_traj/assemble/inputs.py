"""Discovering and classifying the build's inputs.

Every named path (file or directory) is walked in sorted order and each file is claimed by exactly
one reader (``sources/detect.py``) or forced with ``--as``. Unclaimed, ambiguous and recognised-but-
unsupported inputs are reported, never guessed. Capture files are indexed by rollout id (their file
name, or the manifest's rollout id) and store folder; nothing is read yet beyond a first line.
"""

from __future__ import annotations

import os
import stat
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ng_traj.diagnostics import Diagnostic, DiagnosticSink, RunError
from ng_traj.io.compression import CompressedStreamError, is_compressed, logical_name, logical_path, open_input
from ng_traj.io.files import check_inputs, check_regular, note_regular, os_reason, resolved
from ng_traj.io.lines import BOM, STREAM_INVALID, UTF16_CODE, file_utf16, iter_json_lines
from ng_traj.sources.capture.store import INCOMPLETE_SUFFIX, CaptureFiles, capture_rollout_id
from ng_traj.sources.detect import claims, forcible_kinds, skipped_link, walk
from ng_traj.sources.detect import unreadable as unreadable_diagnostic
from ng_traj.sources.manifest import ManifestEntry
from ng_traj.sources.native import READERS
from ng_traj.sources.rollouts.attached import ATTACH_OUTPUT, earlier_attach_outputs
from ng_traj.sources.rollouts.rows import run_name
from ng_traj.sources.sniff import Claim, first_problem, first_record, json_named
from ng_traj.writers.dataset_paths import DATASET_KIND, is_dataset


@dataclass(frozen=True, slots=True)
class RolloutFile:
    """A rollouts file, the run it belongs to, and the named input it was found under."""

    path: Path
    run: str
    named: str


@dataclass
class CaptureKey:
    """Where a capture artifact attaches: a rollout id, and a run when the manifest names one."""

    rollout_id: str
    run: str | None = None


@dataclass
class Inputs:
    """The classified inputs of a build.

    Attributes:
        rollout_files: Rollouts files, sorted by path.
        capture: Capture files and markers per (rollout id, manifest run): one per store, in the order
            the stores were found (a tuple, not a dict by store: most rollouts have two or three).
        capture_named: The named input each marker, and each capture file found under another named
            input than the first file of its store, was found under.
        store_named: The named input the first capture file of each store was found under.
        native: Files claimed by each native reader (``sources/native.py``), by reader name, as text
            (``str`` of the walked path, the one string ``native_named`` and the readers' units key by;
            a ``Path`` per file would cost about 300 bytes more, and ``pathlib`` interns every part).
        native_named: The named input each native file was found under.
        by_kind: Files per kind (``rollouts``, ``capture``, ``unsupported``, ``unclaimed``, ``ambiguous``).
        named: Every named input, for the "yielded nothing" check.
        unsupported: ``(path, description)`` of recognised inputs not read.
        capture_enabled: The build was given any capture store.
        overlaps: Named inputs some of whose files were found first under other named inputs (those).
    """

    rollout_files: list[RolloutFile] = field(default_factory=list)
    capture: dict[tuple[str, str | None], tuple[CaptureFiles, ...]] = field(default_factory=dict)
    capture_named: dict[str, str] = field(default_factory=dict)
    store_named: dict[str, str] = field(default_factory=dict)
    by_kind: Counter[str] = field(default_factory=Counter)
    named: list[str] = field(default_factory=list)
    unsupported: list[tuple[str, str]] = field(default_factory=list)
    native: dict[str, list[str]] = field(default_factory=dict)
    native_named: dict[str, str] = field(default_factory=dict)
    capture_enabled: bool = False
    overlaps: dict[str, set[str]] = field(default_factory=dict)
    reattributed: list[tuple[str, str, ManifestEntry]] = field(default_factory=list)
    """``(capture file, rollout id its name names, manifest entry)`` of each capture file the manifest
    gives another rollout than its name names (planning checks that rollout's other capture files for
    the same calls); empty without a manifest."""
    capture_entries: dict[CaptureFiles, CaptureFiles] = field(default_factory=dict)
    """One object per distinct entry (a store's own capture file: one for all its rollouts)."""
    rollout_ids: dict[str, str] = field(default_factory=dict)
    """One string per capture rollout id while discovering (however many stores hold a file of it);
    emptied at its end. Not ``sys.intern``: the interpreter's table of interned strings keeps the size
    it grew to."""

    def planned(self) -> None:
        """Drop the per-file indexes once the plan has consumed them: they grow with the corpus, and
        the slots hold what the build needs (memory per rollout is one index entry)."""
        for index in (
            self.rollout_files,
            self.capture,
            self.capture_named,
            self.store_named,
            self.native,
            self.native_named,
            self.reattributed,
            self.capture_entries,
        ):
            index.clear()

    def named_for(self, rollout_id: str, files: CaptureFiles) -> str:
        """The named input a store's capture artifacts for rollout ``rollout_id`` were found under."""
        if capture := files.capture(rollout_id):
            return self.capture_named.get(capture) or self.store_named[files.store]
        return self.capture_named.get(files.marker(rollout_id), files.store)

    def add_capture(self, path: Path, key: CaptureKey, named: str) -> None:
        """Index the capture file or marker ``path`` under ``key``, found under the named input ``named``.

        A store's entry for a rollout holds one capture file; a second capture file of that store for
        the same rollout (one the manifest gives it besides its own ``<rollout_id>.capture.jsonl``, or
        a compressed copy beside it) gets an entry of its own, so that both are read (never the later
        silently in place of the earlier).
        """
        self.capture_enabled = True
        store = sys.intern(os.path.dirname(path) or ".")  # str(path.parent), without a Path; one string per store
        slot = (key.rollout_id, key.run)
        stores = self.capture.get(slot, ())
        marker = path.name.endswith(INCOMPLETE_SUFFIX)
        place = next(
            (index for index, files in enumerate(stores) if files.store == store and (marker or files.file is None)),
            len(stores),
        )
        current = stores[place] if place < len(stores) else CaptureFiles(store)
        if marker:
            current = CaptureFiles(store, current.file, True)
            self.capture_named[str(path)] = named
        else:
            current = CaptureFiles.of(store, key.rollout_id, str(path), current.incomplete)
            if self.store_named.setdefault(store, named) != named:  # most files share their store's
                self.capture_named[str(path)] = named
        current = self.capture_entries.setdefault(current, current)  # one object per equal entry
        self.capture[slot] = (*stores[:place], current, *stores[place + 1 :])


def _has_content(path: Path) -> bool:
    """Whether the file holds anything but whitespace and a leading UTF-8 byte-order mark (read until
    the first byte that is neither; a compressed file's text, up to where its stream breaks)."""
    try:
        with open_input(path) as handle:
            first = True
            while chunk := handle.read(1 << 16):
                if (chunk.removeprefix(BOM) if first else chunk).strip():
                    return True
                first = False
    except CompressedStreamError:
        return True
    return False


def _report_broken_stream(path: Path, sink: DiagnosticSink) -> None:
    """Report where a compressed file's stream breaks, when no reader reads it to tell (no JSON before it)."""
    if is_compressed(path):
        for line in iter_json_lines(path):
            if line.problem is not None and line.problem.code == STREAM_INVALID:
                sink.add(line.problem)


def _report(sink: DiagnosticSink, code: str, path: Path, message: str, named_directly: bool) -> None:
    severity = "warning" if named_directly else "info"
    sink.add(Diagnostic(severity, code, message, path=str(path)))  # type: ignore[arg-type]


def discover(
    paths: list[Path],
    sink: DiagnosticSink,
    *,
    force_kind: str | None = None,
    manifest: list[ManifestEntry] = (),  # type: ignore[assignment]
    exclude: Path | None = None,
    offer_as: bool = False,
) -> Inputs:
    """Classify every file under ``paths`` (and the manifest's paths), except ``exclude`` and, found
    under a named folder, the ``--manifest`` file itself (the file its entries were read from: not an
    artifact, so not reported as one no reader recognises). ``offer_as``: the command has ``--as``,
    so the warning of a named file no reader claims says it reads one.

    Raises:
        RunError: A named path cannot be read (``io.files.check_inputs``: missing, a loop of symbolic
            links, no permission).
    """
    check_inputs(paths)
    inputs = Inputs()
    attributed = {resolved(entry.path): entry for entry in manifest}
    inputs.named = [str(path) for path in paths]
    output = _stat_identity(exclude) if exclude is not None else None
    held: tuple[Path, Path] | None = None  # the output, a rows file under a named folder: an earlier --attach?
    manifests = {_file_identity(real, _lstat(real)) for real in _manifest_files(manifest)}
    seen: dict[object, str] = {}
    capture_folders: dict[str, list[Claim]] = {}  # what the sniffers make of a capture file's name, by folder

    def unreadable(exc: OSError) -> None:
        inputs.by_kind["unreadable"] += 1
        sink.add(unreadable_diagnostic(exc))

    for named in [*paths, *(entry.path for entry in manifest)]:
        if is_dataset(named):
            inputs.by_kind["unsupported"] += 1
            inputs.unsupported.append((str(named), DATASET_KIND))
            _report(sink, "input_unsupported", named, f"recognised as {DATASET_KIND}; skipped", True)
            continue
        named_entry = attributed.get(resolved(named)) if attributed else None
        named_text = str(named)  # one string per named input, shared by the index entries of its files
        for file in walk(named, unreadable, lambda folder: sink.add(skipped_link(folder))):
            link = _lstat(file)
            identity = _file_identity(file, link)
            if output is not None and (identity == output or (_is_link(link) and _stat_identity(file) == output)):
                if _refuse_output(file, named, exclude):  # type: ignore[arg-type]
                    held = (file, named)
                continue
            if identity in seen:
                if seen[identity] != named_text:
                    inputs.overlaps.setdefault(named_text, set()).add(seen[identity])
                continue
            seen[identity] = named_text
            directly = file is named  # walk hands out a named file itself, never a Path equal to it
            if identity in manifests and not directly:
                continue
            entry = (attributed.get(resolved(file)) or named_entry) if attributed else None
            mode = link.st_mode if link is not None and not stat.S_ISLNK(link.st_mode) else None
            _classify(inputs, file, named_text, directly, force_kind, entry, sink, mode, capture_folders, offer_as)
    inputs.rollout_ids.clear()
    inputs.rollout_files.sort(key=lambda f: str(f.path))
    if held is not None:
        _check_held_output(inputs, *held, exclude)  # type: ignore[arg-type]
    if len(inputs.rollout_files) > 1:
        _skip_attach_outputs(inputs, sink)
    return inputs


def refuse_output_among_inputs(paths: list[Path], output: Path) -> bool:
    """Stop before anything is written or any input read when the output file ``output`` (the file
    the output replaces, ``io.atomic.written_path``) is one of the inputs ``paths`` (named ones and
    the manifest's): the same file by any path it is named by (a symbolic link to it, a hard link of
    it), or a file at its own path under a named folder that a reader claims. Only ``output`` itself
    is read (its first record, which tells the claim).

    Discovery applies the same rule to every file it walks (:func:`_refuse_output`), which catches
    what only a walk finds (a link inside a folder to the output, a hard link of it there).

    Returns:
        ``True`` when the verdict needs the other inputs: ``output`` is rollout rows carrying
        ``ng_trajectory`` under a named folder, an earlier ``build --attach`` output only if it
        matches the rows of another rollouts file of the build (decided by :func:`discover`).

    Raises:
        RunError: As above, naming the output (and the folder it is under).
    """
    target = _stat_identity(output)
    if target is None:  # nothing there yet, or no regular file: nothing an input could be
        return False
    for named in paths:
        if _stat_identity(named) == target:
            _refuse_output(named, named, output)
    pending = False
    for named in paths:
        walked = _walked_as(named, output)
        if walked is not None:
            pending = _refuse_output(walked, named, output) or pending
    return pending


def _walked_as(named: Path, file: Path) -> Path | None:
    """The path under which walking the named folder ``named`` (``detect.walk``: hidden entries
    skipped, links to folders not followed) finds ``file``, or ``None`` when it does not."""
    if not named.is_dir() or is_dataset(named):
        return None
    try:
        below = Path(os.path.realpath(file)).relative_to(os.path.realpath(named))
    except ValueError:
        return None
    if not below.parts or any(part.startswith(".") for part in below.parts):
        return None
    return named / below


def _stat_identity(path: Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the regular file ``path`` names (through symbolic links), else ``None``."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    return (found.st_dev, found.st_ino) if stat.S_ISREG(found.st_mode) else None


def _is_link(link: os.stat_result | None) -> bool:
    return link is not None and stat.S_ISLNK(link.st_mode)


def _manifest_files(manifest: list[ManifestEntry]) -> set[Path]:
    """The manifest files the entries were read from, resolved (one, the build's ``--manifest``)."""
    return {Path(os.path.realpath(entry.where[0])) for entry in manifest if entry.where is not None}


def _skip_attach_outputs(inputs: Inputs, sink: DiagnosticSink) -> None:
    """Skip each rollouts file that is an earlier ``build --attach`` output of another one
    (``sources/rollouts/attached.py``): built again, its rollouts would be counted twice."""
    earlier = earlier_attach_outputs(rollouts.path for rollouts in inputs.rollout_files)
    if not earlier:
        return
    inputs.rollout_files = [rollouts for rollouts in inputs.rollout_files if rollouts.path not in earlier]
    for path, source in earlier.items():
        inputs.by_kind["rollouts"] -= 1
        inputs.by_kind["unsupported"] += 1
        inputs.unsupported.append((str(path), ATTACH_OUTPUT.format(source=source)))
        message = f"recognised as {ATTACH_OUTPUT.format(source=source)}; skipped, so its rollouts are not built twice"
        sink.add(Diagnostic("warning", "input_unsupported", message, path=str(path)))


def _refuse_output(file: Path, named: Path, output: Path) -> bool:
    """The output file was found among the inputs: skipped when it is an earlier output, else refused.

    Returns:
        ``True`` when ``file`` is rollout rows found under the folder ``named`` whose first row carries
        ``ng_trajectory``: an earlier ``build --attach`` output, if it matches the rows of another
        rollouts file of the build (decided once every file is found: :func:`_check_held_output`).

    Raises:
        RunError: ``file`` was named directly, or would be read as an input (writing would replace it).
    """
    if file == named:
        raise RunError(_OUTPUT_IS_INPUT.format(output=output, where=""))
    kinds = [claim.kind for claim in claims(file) if claim.kind != "unsupported"]
    if kinds == ["rollouts"]:
        first = first_record(file)
        if isinstance(first, dict) and "ng_trajectory" in first:
            return True
    if kinds:
        raise RunError(_OUTPUT_IS_INPUT.format(output=output, where=_where(file, named, kinds)))
    return False


_OUTPUT_IS_INPUT = "output {output} is one of the inputs{where}; writing would replace it: name another file"


def _where(file: Path, named: Path, kinds: list[str]) -> str:
    return "" if file == named else f" (a {kinds[0]} file under {named})"


def _check_held_output(inputs: Inputs, file: Path, named: Path, output: Path) -> None:
    """Skip the output ``file`` (rollout rows with trajectories, found under ``named``) when it is an
    earlier ``build --attach`` output of another rollouts file of the build (``sources/rollouts/attached.py``):
    the same ``--attach`` run again replaces it, as a plain build replaces its earlier output.

    Raises:
        RunError: It is not: its rows are an input (a collector's rows carrying trajectories) that
            writing would replace.
    """
    if file not in earlier_attach_outputs([file, *(rollouts.path for rollouts in inputs.rollout_files)]):
        raise RunError(_OUTPUT_IS_INPUT.format(output=output, where=_where(file, named, ["rollouts"])))


def _file_identity(file: Path, link: os.stat_result | None) -> object:
    """The same file reached by two paths (overlapping inputs) has one identity, ``(st_dev, st_ino)``
    of its ``lstat`` (``link``, ``None`` when it cannot be taken: then its absolute path); a symlink
    is its own file (it may be refused while its target is read)."""
    return (link.st_dev, link.st_ino) if link is not None else file.absolute()


def _lstat(file: Path) -> os.stat_result | None:
    try:
        return os.lstat(file)
    except OSError:
        return None


def _classify(
    inputs: Inputs,
    file: Path,
    named: str,
    directly: bool,
    force_kind: str | None,
    entry: ManifestEntry | None,
    sink: DiagnosticSink,
    mode: int | None = None,
    capture_folders: dict[str, list[Claim]] | None = None,
    offer_as: bool = False,
) -> None:
    """Claim ``file`` for one reader and index it in ``inputs`` (or report why not); ``mode`` is its
    ``st_mode`` when the caller has it (saves a ``stat``); ``capture_folders`` as for ``detect.claims``."""
    try:
        if not stat.S_ISREG(os.stat(file).st_mode if mode is None else mode):
            message = "not a regular file (a pipe, device or socket): inputs are read by byte offset; skipped"
            inputs.by_kind["unclaimed"] += 1
            _report(sink, "input_unclaimed", file, message, True)
            return
        check_regular(file)
    except OSError as exc:
        inputs.by_kind["unreadable"] += 1
        sink.add(Diagnostic("error", "unreadable_file", os_reason(exc, str(file)), path=str(file)))
        return
    found = claims(file, capture_folders)
    forced = entry.kind if entry is not None and entry.kind in forcible_kinds() else force_kind
    kinds = [forced] if forced else [claim.kind for claim in found]
    if forced and found and forced not in [claim.kind for claim in found]:  # nothing claims it: nothing to contradict
        looks = ", ".join(claim.description for claim in found)
        _report(sink, "forced_kind_mismatch", file, f"read as {forced} as asked, though it looks like {looks}", True)
    if not kinds:
        inputs.by_kind["unclaimed"] += 1
        if json_named(file) and not _has_content(file):
            _report(sink, "input_unclaimed", file, "empty (or blank lines only); skipped", directly)
        elif json_named(file) and first_record(file) is None and (utf16 := file_utf16(file)) is not None:
            sink.add(Diagnostic("error", UTF16_CODE, utf16, path=str(file)))
        elif json_named(file) and first_record(file) is None:
            _report_broken_stream(file, sink)
            what = "not JSON" if logical_path(file).suffix == ".json" else "no line is JSON"
            why = f"{reason}; " if (reason := first_problem(file)) else ""
            message = f"{what} ({why}corrupt or truncated?); no reader can tell what it is; skipped"
            sink.add(Diagnostic("error", "input_unclaimed", message, path=str(file)))
        else:
            message = "no reader recognises this file (readers go by its name, then its first record); skipped"
            _report(
                sink,
                "input_unclaimed",
                file,
                message + ("; --as KIND reads it as one kind" * (directly and offer_as)),
                directly,
            )
        return
    if len(kinds) > 1:
        inputs.by_kind["ambiguous"] += 1
        names = ", ".join(claim.description for claim in found)
        _report(sink, "input_ambiguous", file, f"claimed by several readers ({names}); skipped", True)
        return
    kind = kinds[0]
    inputs.by_kind[kind] += 1
    if kind == "unsupported":
        inputs.unsupported.append((str(file), found[0].description))
        _report(sink, "input_unsupported", file, f"recognised as {found[0].description}; skipped", directly)
    elif kind == "rollouts":
        inputs.rollout_files.append(RolloutFile(file, run_name(file), named))
    elif kind in READERS:
        if mode is not None:  # its lstat found a regular file: planning need not take it again
            note_regular(file)
        text = str(file)  # the Path caches its text: one string shared by these and note_regular
        inputs.native.setdefault(kind, []).append(text)
        inputs.native_named[text] = named
    elif kind == "capture":
        own = capture_rollout_id(file.name)  # the rollout id the file's name names, parsed once
        rollout = entry.rollout_id if entry else (own or logical_name(file.name).removesuffix(".jsonl"))
        rollout = inputs.rollout_ids.setdefault(rollout, rollout)  # one string per rollout id
        own = own if entry else None
        if own is not None and own != rollout and not file.name.endswith(INCOMPLETE_SUFFIX):
            inputs.reattributed.append((str(file), own, entry))  # type: ignore[arg-type]
        inputs.add_capture(file, CaptureKey(rollout, entry.run if entry else None), named)
