"""Arrow batches to COPY ... FROM STDIN (FORMAT binary): the fast way rows reach Postgres, never one at a time.

Binary COPY (pgpq) skips formatting and parsing text. Binary input is strict about types, so each column is
staged in the type its Arrow encoding has (`target.Column.staged`), and the move casts where the target's declared
type differs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
from pgpq import ArrowToPostgresBinaryEncoder
from pgpq._pgpq import Jsonb
from pgpq.encoders import StringEncoderBuilder

WRITE_ID = "_sf_write_id"


def _json(col: pa.Array) -> pa.Array:
    """Arrays, structs and maps become jsonb; bytes inside them become hex strings."""
    def default(v: object) -> str:
        if isinstance(v, bytes):
            return v.hex()
        return str(v)

    return pa.array([None if v is None else json.dumps(v, default=default) for v in col.to_pylist()], pa.string())


def _prepare(batch: pa.RecordBatch, columns: Sequence[str], write_id: str | None) -> pa.RecordBatch:
    arrays, names = [], []
    for name in columns:
        col = batch.column(name)
        if pa.types.is_nested(col.type):
            col = _json(col)
        arrays.append(col)
        names.append(name)
    if write_id is not None:
        arrays.append(pa.array([write_id] * batch.num_rows, pa.string()))
        names.append(WRITE_ID)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _encoder(schema: pa.Schema, nested: set[str]) -> ArrowToPostgresBinaryEncoder:
    encoders = {f.name: (StringEncoderBuilder.new_with_output(f, Jsonb()) if f.name in nested
                         else ArrowToPostgresBinaryEncoder.infer_encoder(f)) for f in schema}
    return ArrowToPostgresBinaryEncoder.new_with_encoders(schema, encoders)


def encode(batches: Iterable[pa.RecordBatch], columns: Sequence[str], write_id: str | None) -> Iterator[bytes]:
    """COPY binary input of `columns` in order with the write id last (when given), one chunk per batch (empty
    batches and empty chunks skipped: copy_expert takes an empty read for the end of the input)."""
    encoder = None
    for batch in batches:
        if not batch.num_rows:
            continue
        if encoder is None:
            nested = {n for n in columns if pa.types.is_nested(batch.schema.field(n).type)}
            prepared = _prepare(batch, columns, write_id)
            encoder = _encoder(prepared.schema, nested)
            chunk = encoder.write_header() + encoder.write_batch(prepared)
        else:
            chunk = encoder.write_batch(_prepare(batch, columns, write_id))
        if chunk:
            yield chunk
    if encoder is not None:
        yield encoder.finish()


class CopySource:
    """A file-like over encoded chunks for copy_expert: one chunk per read, nothing joined."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks

    def read(self, size: int = -1) -> bytes:
        return next(self._chunks, b"")

    readline = read
