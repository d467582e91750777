"""Payload decoders of the data source: payloads (an Arrow binary array) to typed columns.

A decoder is called once per fetched batch, on the executors, with the batch's payloads and
the Arrow schema of the columns it must produce (the columns of the query's schema that are
not the source's own: topic, broker_id, partition, offset, next_offset, payload, crc_valid).
It returns a ``pyarrow.RecordBatch`` (or Table, or StructArray) with those columns, one row
per payload, in order.

Built in:

- ``json``: each payload is one JSON object; its fields fill the columns of the same name
  (missing fields are null, extra fields ignored). The whole batch is parsed by Arrow's JSON
  reader as JSON lines in one call (payload newlines, which JSON allows only as whitespace,
  are blanked first); only a batch Arrow rejects is retried payload by payload, to find the
  bad one;
- ``text``: the payload as UTF-8, into the one string column;
- ``package.module:function``: any importable function ``f(payloads, schema)``, imported on
  the executors (so it must be installed there, like this package).

A payload is null only for a damaged message that a broker refused to serve (``crc=mark``);
the built-in decoders make its columns null.

``decoder.errors``: ``fail`` raises, naming the message's offset; ``null`` makes every decoded
column of that message null.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from twisted_broker.spark.options import DECODER_JSON, DECODER_NONE, DECODER_TEXT, OptionError

# (payloads, offsets of the messages for error messages) -> the decoded columns
Decoder = Callable[[pa.Array, pa.Array], pa.RecordBatch]


class DecodeError(ValueError):
    """A payload the decoder cannot turn into the requested columns."""


def make_decoder(spec: str, schema: pa.Schema, errors: str) -> Decoder | None:
    """The decoder ``spec`` names, producing ``schema``; None for ``none``.

    Raises OptionError when the spec and the schema do not fit (checked on the driver, before
    any executor starts), or the function cannot be imported.
    """
    if spec == DECODER_NONE:
        if len(schema):
            raise OptionError(f"columns {', '.join(schema.names)} are not columns of twisted_broker; "
                              "to fill them from the payload, set the option decoder")
        return None
    if not len(schema):
        raise OptionError(f"decoder {spec} has no column to fill: give the query a schema with "
                          ".schema(...) naming the decoded columns beside the source's own")
    if spec == DECODER_JSON:
        return _JsonDecoder(schema, errors)
    if spec == DECODER_TEXT:
        if len(schema) != 1 or not pa.types.is_string(schema.field(0).type):
            raise OptionError(f"decoder text fills one string column; the schema asks for {schema}")
        return _TextDecoder(schema, errors)
    return _FunctionDecoder(spec, schema, errors)


class _JsonDecoder:
    def __init__(self, schema: pa.Schema, errors: str) -> None:
        self.schema, self.errors = schema, errors

    def __call__(self, payloads: pa.Array, offsets: pa.Array) -> pa.RecordBatch:
        count = len(payloads)
        if not count:
            return pa.RecordBatch.from_pylist([], schema=self.schema)
        lines = pc.binary_join_element_wise(
            pc.replace_substring(pc.replace_substring(payloads, "\n", " "), "\r", " "), b"", b"\n")
        size = pc.sum(pc.binary_length(lines)).as_py() or 0
        # The joined lines are contiguous in the result's data buffer, from its first offset.
        first = int.from_bytes(lines.buffers()[1][4 * lines.offset:4 * lines.offset + 4], "little", signed=True)
        data = lines.buffers()[2].slice(first, size) if size else pa.py_buffer(b"")
        try:
            table = pa_json.read_json(
                pa.BufferReader(data),
                read_options=pa_json.ReadOptions(use_threads=False, block_size=max(size + 1, 1 << 20)),
                parse_options=pa_json.ParseOptions(explicit_schema=self.schema, unexpected_field_behavior="ignore"))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            table = None
        if table is not None and table.num_rows == count:
            return _one_batch(table.select(self.schema.names), self.schema)
        # Arrow rejected the batch (or skipped a blank payload): find the culprit row by row.
        return self._row_by_row(payloads, offsets)

    def _row_by_row(self, payloads: pa.Array, offsets: pa.Array) -> pa.RecordBatch:
        names = self.schema.names
        rows = []
        for payload, offset in zip(payloads.to_pylist(), offsets.to_pylist()):
            if payload is None:  # a damaged message the broker would not serve (crc=mark)
                rows.append({})
                continue
            try:
                value = json.loads(payload)
                if not isinstance(value, dict):
                    raise ValueError(f"a JSON {type(value).__name__}, not an object")
                row = {name: value.get(name) for name in names}
                pa.RecordBatch.from_pylist([row], schema=self.schema)  # the types fit?
            except (ValueError, pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                if self.errors == "fail":
                    raise DecodeError(f"the payload at offset {offset} does not decode as JSON into "
                                      f"{', '.join(names)}: {exc}") from None
                row = {}
            rows.append(row)
        return pa.RecordBatch.from_pylist(rows, schema=self.schema)


class _TextDecoder:
    def __init__(self, schema: pa.Schema, errors: str) -> None:
        self.schema, self.errors = schema, errors

    def __call__(self, payloads: pa.Array, offsets: pa.Array) -> pa.RecordBatch:
        try:
            text = payloads.cast(pa.string())  # validates UTF-8
        except pa.ArrowInvalid:
            values = []
            for payload, offset in zip(payloads.to_pylist(), offsets.to_pylist()):
                try:
                    values.append(None if payload is None else payload.decode("utf-8"))
                except UnicodeDecodeError as exc:
                    if self.errors == "fail":
                        raise DecodeError(f"the payload at offset {offset} is not UTF-8: {exc}") from None
                    values.append(None)
            text = pa.array(values, pa.string())
        return pa.RecordBatch.from_arrays([text.cast(self.schema.field(0).type)], schema=self.schema)


class _FunctionDecoder:
    def __init__(self, spec: str, schema: pa.Schema, errors: str) -> None:
        module_name, _, function_name = spec.partition(":")
        try:
            self.function = getattr(importlib.import_module(module_name), function_name)
        except (ImportError, AttributeError) as exc:
            raise OptionError(f"decoder {spec}: cannot import it: {exc}") from None
        self.spec, self.schema, self.errors = spec, schema, errors

    def __call__(self, payloads: pa.Array, offsets: pa.Array) -> pa.RecordBatch:
        result = self.function(payloads, self.schema)
        if isinstance(result, pa.StructArray):
            result = pa.RecordBatch.from_struct_array(result)
        if isinstance(result, pa.Table):
            result = _one_batch(result, self.schema)
        if not isinstance(result, pa.RecordBatch) or result.num_rows != len(payloads):
            raise DecodeError(f"decoder {self.spec} returned {type(result).__name__} "
                              f"({getattr(result, 'num_rows', '?')} rows) for {len(payloads)} payloads; "
                              "it must return a RecordBatch with one row per payload")
        try:
            return pa.RecordBatch.from_arrays([result.column(name).cast(field.type)
                                               for name, field in zip(self.schema.names, self.schema)],
                                              schema=self.schema)
        except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise DecodeError(f"decoder {self.spec} returned columns {result.schema.names} that do "
                              f"not fit {self.schema}: {exc}") from None


def _one_batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    table = table.combine_chunks()
    batches = table.to_batches()
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=schema)
    return pa.RecordBatch.from_arrays([batches[0].column(i).cast(field.type) for i, field in enumerate(schema)],
                                      schema=schema)
