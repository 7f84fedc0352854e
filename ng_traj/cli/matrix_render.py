"""Rendering the matrix report (``matrix_report.report``) as a table, Markdown, JSON or CSV."""

from __future__ import annotations

import csv
import io
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ng_traj.diagnostics import plural, printable
from ng_traj.views.meanings import CRITERIA_MEANINGS, VALUE_MEANINGS, legend_lines

STYLES = {"V": "green", "O": "yellow", "X": "red", "NA": "dim"}
DIFFERS = "≠"


def cell_text(cell: dict[str, Any]) -> str:
    """``V 5/5``, ``O 37/50``, ``X 0/5`` (records that are V / records the criterion applies to), or ``n/a``."""
    if cell["value"] == "NA":
        return "n/a"
    return f"{cell['value']} {cell['V']}/{cell['applicable']}"


def documented_text(cell: dict[str, Any]) -> str:
    """The documented value, marked when it disagrees with the computed one."""
    if cell["reference"] is None:
        return ""
    return f"{cell['reference']} {DIFFERS}" if cell["agrees"] is False else cell["reference"]


def _title(data: dict[str, Any]) -> str:
    title = f"C1–C7 by {data['by']} over {plural(data['records'], 'record')}"
    about = data["reference"]
    if about is not None:
        title += (
            f"; documented matrix: {about['source']} at {about['commit'][:9]} (last changed {about['last_changed']})"
        )
    return title


def reasons(data: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """``(group, criterion, cell, main reason, share)`` for every O or X cell; share is ``k of n records``."""
    lines = []
    for group in data["groups"]:
        for criterion, cell in group["cells"].items():
            if cell["value"] in ("O", "X"):
                share = f"{cell['reason_records']} of {plural(cell['applicable'], 'record')}"
                lines.append((group["group"], criterion, cell_text(cell), cell["reason"], share))
    return lines


def collapsed(data: dict[str, Any]) -> list[tuple[str, list[tuple[str, list[str]]]]]:
    """The reasons of :func:`reasons` with repeats merged: per distinct reason (most cells first, then
    by name), the groups whose cells with that reason read alike share one entry,
    ``("C4 X 0/5 (5 of 5 records), C7 X 0/5 (5 of 5 records)", [group, ...])``."""
    by_reason: dict[str, dict[str, list[str]]] = {}
    for name, criterion, cell, why, share in reasons(data):
        by_reason.setdefault(why, {}).setdefault(name, []).append(f"{criterion} {cell} ({share})")
    out = []
    for why, groups in sorted(by_reason.items(), key=lambda item: (-sum(map(len, item[1].values())), item[0])):
        alike: dict[str, list[str]] = {}
        for name, cells in groups.items():
            alike.setdefault(", ".join(cells), []).append(name)
        out.append((why, sorted(alike.items(), key=lambda item: (-len(item[1]), item[0]))))
    return out


def _groups_text(names: list[str]) -> str:
    return ", ".join(names) + (f" ({len(names)} groups)" if len(names) > 1 else "")


REASONS_HEAD = "Main reason of each cell that is not V (repeated reasons merged):"


def _documented_label(group: dict[str, Any]) -> str:
    return f"  documented: {group['reference_row'] or 'no row'}"


def _shown_groups(data: dict[str, Any], markdown: bool = False) -> dict[str, Any]:
    """``data`` with its group names as text to show: control characters escaped (a name comes from
    the records: an agent or producer name), and for Markdown a ``|`` too, so a name cannot forge
    lines or cells."""
    groups = []
    for group in data["groups"]:
        name = printable(group["group"])
        groups.append({**group, "group": name.replace("|", "\\|") if markdown else name})
    return {**data, "groups": groups}


def table(data: dict[str, Any], console: Console) -> None:
    """A rich table (colours on a terminal), then the reasons."""
    data = _shown_groups(data)
    grid = Table(title=_title(data), title_justify="left")
    for header in (data["by"], "records", *data["criteria"]):
        grid.add_column(header, justify="right" if header == "records" else "left", no_wrap=True)
    for group in data["groups"]:
        cells = [Text(cell_text(c), style=STYLES[c["value"]]) for c in group["cells"].values()]
        grid.add_row(Text(group["group"]), str(group["records"]), *cells)
        if data["reference"] is not None:
            marks = [
                Text(documented_text(c), style="bold" if c["agrees"] is False else "dim")
                for c in group["cells"].values()
            ]
            grid.add_row(Text(_documented_label(group), style="dim"), "", *marks)
    console.print(grid)
    lines = collapsed(data)
    if lines:
        console.print(REASONS_HEAD, markup=False)
        for why, alike in lines:
            console.print(f"  {why}:", highlight=False, markup=False)
            for cells, names in alike:
                console.print(f"    {_groups_text(names)}: {cells}", highlight=False, markup=False)
    console.print("\n".join(legend_lines()), highlight=False, markup=False)


def markdown(data: dict[str, Any]) -> str:
    """A Markdown table, then the reasons as a list."""
    data = _shown_groups(data, markdown=True)
    header = [data["by"], "records", *data["criteria"]]
    out = [f"**{_title(data)}**", "", "| " + " | ".join(header) + " |", "|---|---:|" + "---|" * len(data["criteria"])]
    for group in data["groups"]:
        cells = [cell_text(c) for c in group["cells"].values()]
        out.append(f"| `{group['group']}` | {group['records']} | " + " | ".join(cells) + " |")
        if data["reference"] is not None:
            marks = [documented_text(c) for c in group["cells"].values()]
            out.append(f"| ↳ documented: `{group['reference_row'] or 'no row'}` |  | " + " | ".join(marks) + " |")
    lines = collapsed(data)
    if lines:
        out += ["", REASONS_HEAD, ""]
        for why, alike in lines:
            out.append(f"- `{why}`:")
            out += [f"  - {_groups_text([f'`{n}`' for n in names])}: {cells}" for cells, names in alike]
    out += ["", "Criteria:", ""] + [f"- **{name}** {text}" for name, text in CRITERIA_MEANINGS.items()]
    out += ["", "Cells:", ""] + [f"- **{value}** {text}" for value, text in VALUE_MEANINGS.items()]
    return "\n".join(out) + "\n"


CSV_COLUMNS = ("group", "records", "criterion", "value", "V", "O", "X", "NA", "applicable", "reason", "reason_records")
REFERENCE_COLUMNS = ("reference_row", "reference", "agrees")


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else value


def csv_text(data: dict[str, Any]) -> str:
    """One line per group and criterion (long format), with the reference columns when asked for."""
    buffer = io.StringIO()
    columns = CSV_COLUMNS + (REFERENCE_COLUMNS if data["reference"] is not None else ())
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for group in data["groups"]:
        for criterion, cell in group["cells"].items():
            row = {**cell, "criterion": criterion, **{k: group[k] for k in ("group", "records", "reference_row")}}
            writer.writerow([_csv_value(row[column]) for column in columns])
    return buffer.getvalue()


def json_bytes(data: dict[str, Any]) -> bytes:
    """The report as indented JSON."""
    return orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n"
