"""Arrow arrays of the dataset's row columns, assembled from their buffers.

pyarrow's conversion of Python values (``pa.array`` of a list or tuple, ``pa.scalar``, a Python number
given to a compute function) first asks whether the value is a pandas object, and the first time it
asks in a process it imports pandas when pandas is installed: about 0.4 s of CPU and 45 MiB of
RSS for a build that never uses it (``pyarrow/array.pxi``, ``_is_array_like``, and
``pyarrow/pandas-shim.pxi``). The row columns hold few kinds of values (``parquet_rows.py``), so
:func:`column` assembles their arrays from buffers (Python's ``array`` for numbers, texts joined and
cut by Arrow, bitmaps packed from binary digits) with ``pa.Array.from_buffers``, which converts nothing
and asks nothing: the arrays are equal to those ``pa.array(values, type)`` makes
(``tests/test_parquet.py`` compares them), so the files are the same bytes.

A column holding anything else (an ``int`` in a float column, a ``bool`` in an integer one, a number
too large for int64, a lone surrogate) is left to ``pa.array``, which converts it, or raises, as it
always did.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

OFFSET_LIMIT = 2**31 - 1
"""The most bytes (or list items) a column's int32 offsets address; beyond, ``pa.array`` converts it."""
_INT32 = next(code for code in "ilh" if array(code).itemsize == 4)
"""The ``array`` type code of a 32-bit integer (``i`` on the platforms Python builds for)."""
_NONE = type(None)
STRING = pa.string()


def column(values: Sequence[Any], kind: pa.DataType) -> pa.Array:
    """The Arrow array of ``values`` as ``kind``: ``pa.array(values, type=kind)``, assembled from
    buffers where the values are of the kinds :func:`_assembled` knows.

    Raises:
        pyarrow.ArrowInvalid, pyarrow.ArrowTypeError, OverflowError: As ``pa.array`` does for a
            value it cannot convert to ``kind``.
    """
    made = _assembled(values, kind)
    return made if made is not None else pa.array(values, type=kind)


def texts(values: Sequence[bytes | None], kind: pa.DataType = STRING) -> pa.Array:
    """A string (or binary) array of ``values``, UTF-8 texts already encoded (``None`` is null),
    without decoding them: one data buffer of the texts joined, their running lengths as the int32
    offsets. Texts of more than 2 GiB together go through ``pa.array``."""
    made = _text_array(values, kind)
    return made if made is not None else pa.array(values, type=pa.binary()).view(kind)


def scalar(value: float) -> pa.Scalar:
    """A float64 Arrow scalar (for compute functions, which would convert a Python float with
    ``pa.scalar``)."""
    return pa.Array.from_buffers(pa.float64(), 1, [None, pa.py_buffer(array("d", [value]))])[0]


NULL_FLOAT: pa.Scalar = pa.nulls(1, pa.float64())[0]
"""A null float64 scalar."""


def _assembled(values: Sequence[Any], kind: pa.DataType) -> pa.Array | None:
    """``values`` as ``kind`` from buffers, or ``None`` when a value is not of the Python type the
    column holds (``str``, exactly ``int`` for int64, ``float`` for float64, ``bool``, ``dict`` for a
    struct of those, ``list`` for a list of those; each or ``None``) or does not fit."""
    if kind == STRING:
        return _strings(values)
    found = set(map(type, values))
    nullable = _NONE in found
    found.discard(_NONE)
    if kind == pa.int64():
        return _numbers(values, kind, "q", nullable) if found <= {int} else None
    if kind == pa.float64():
        return _numbers(values, kind, "d", nullable) if found <= {float} else None
    if kind == pa.bool_():
        return _booleans(values, nullable) if found <= {bool} else None
    if pa.types.is_struct(kind):
        return _structs(values, kind, nullable) if found <= {dict} else None
    if pa.types.is_list(kind):
        return _lists(values, kind, nullable) if found <= {list} else None
    return None


def _numbers(values: Sequence[Any], kind: pa.DataType, code: str, nullable: bool) -> pa.Array | None:
    try:
        data = array(code, [0 if value is None else value for value in values] if nullable else values)
    except OverflowError:
        return None
    validity, nulls = _validity(values, nullable)
    return pa.Array.from_buffers(kind, len(values), [validity, pa.py_buffer(data)], null_count=nulls)


def _strings(values: Sequence[str | None]) -> pa.Array | None:
    """A string array: the texts joined by NUL and encoded once, then cut at each NUL by Arrow's
    ``split_pattern`` (Arrow's speed, no length per value in Python); texts holding a NUL themselves
    are encoded one by one."""
    nullable = False
    try:
        joined = _SEPARATOR.join(values)
    except TypeError:  # a null (or something else, which pa.array reports)
        nullable = True
        try:
            joined = _SEPARATOR.join(["" if value is None else value for value in values])
        except TypeError:
            return None
    if not values or joined.count(_SEPARATOR) != len(values) - 1:
        return _encoded_each(values)
    try:
        data = joined.encode()
    except UnicodeEncodeError:  # lone surrogates: pa.array reports them
        return None
    if len(data) > OFFSET_LIMIT:
        return None
    whole = pa.Array.from_buffers(STRING, 1, [None, pa.py_buffer(array(_INT32, [0, len(data)])), pa.py_buffer(data)])
    pieces = pc.split_pattern(whole, _SEPARATOR).values
    validity, nulls = _validity(values, nullable)
    buffers = [validity, *pieces.buffers()[1:]]
    return pa.Array.from_buffers(STRING, len(values), buffers, null_count=nulls, offset=pieces.offset)


_SEPARATOR = "\x00"


def _encoded_each(values: Sequence[str | None]) -> pa.Array | None:
    try:
        encoded = [None if value is None else value.encode() for value in values]
    except (UnicodeEncodeError, AttributeError):  # lone surrogates, not text: pa.array reports them
        return None
    return _text_array(encoded, STRING)


def _text_array(values: Sequence[bytes | None], kind: pa.DataType) -> pa.Array | None:
    validity, nulls = _validity(values, True)
    present = values if not nulls else [b"" if value is None else value for value in values]
    data = b"".join(present)
    if len(data) > OFFSET_LIMIT:
        return None
    buffers = [validity, _offsets(map(len, present)), pa.py_buffer(data)]
    return pa.Array.from_buffers(kind, len(values), buffers, null_count=nulls)


def _booleans(values: Sequence[bool | None], nullable: bool) -> pa.Array:
    validity, nulls = _validity(values, nullable)
    data = _bitmap("".join(["1" if value is True else "0" for value in values]))
    return pa.Array.from_buffers(pa.bool_(), len(values), [validity, data], null_count=nulls)


def _structs(values: Sequence[dict[str, Any] | None], kind: pa.StructType, nullable: bool) -> pa.Array | None:
    """A struct array: each field's values from the dicts (a missing key, or a null struct, is null
    in the field, as ``pa.array`` has it)."""
    children = []
    for field in kind:
        name = field.name
        child = _assembled([None if value is None else value.get(name) for value in values], field.type)
        if child is None:
            return None
        children.append(child)
    validity, nulls = _validity(values, nullable)
    return pa.Array.from_buffers(kind, len(values), [validity], null_count=nulls, children=children)


def _lists(values: Sequence[list[Any] | None], kind: pa.ListType, nullable: bool) -> pa.Array | None:
    items = [item for value in values if value for item in value]
    if len(items) > OFFSET_LIMIT:
        return None
    child = _assembled(items, kind.value_type)
    if child is None:
        return None
    validity, nulls = _validity(values, nullable)
    buffers = [validity, _offsets(len(value) if value else 0 for value in values)]
    return pa.Array.from_buffers(kind, len(values), buffers, null_count=nulls, children=[child])


def _offsets(lengths: Iterable[int]) -> pa.Buffer:
    """Arrow's int32 offsets of values of ``lengths`` (0, then the running sums; Arrow's cumulative
    sum, the callers having checked that the total fits)."""
    counts = array(_INT32, [0])
    counts.extend(lengths)
    running = pc.cumulative_sum(pa.Array.from_buffers(pa.int32(), len(counts), [None, pa.py_buffer(counts)]))
    return running.buffers()[1]


def _validity(values: Sequence[Any], nullable: bool) -> tuple[pa.Buffer | None, int]:
    """Arrow's validity bitmap of ``values`` (bit set where the value is not ``None``) and the count of
    nulls; no bitmap without nulls (``nullable`` false: none among ``values``)."""
    if not nullable:
        return None, 0
    digits = "".join(["0" if value is None else "1" for value in values])
    nulls = digits.count("0")
    return (_bitmap(digits) if nulls else None), nulls


def _bitmap(digits: str) -> pa.Buffer:
    """One digit per value (``0`` or ``1``) packed into Arrow's bitmap of one bit per value (value ``i``
    at bit ``i % 8`` of byte ``i // 8``): the digits read as one binary integer, lowest first."""
    bits = int(digits[::-1], 2) if digits else 0
    return pa.py_buffer(bits.to_bytes((len(digits) + 7) // 8, "little"))
