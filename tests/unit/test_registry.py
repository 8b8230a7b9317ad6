"""An entry's `schema_registry:`: what it accepts, and the columns an Avro schema gives."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from streamfill.spark_jobs.pipelines.registry import columns_of
from streamfill.spark_jobs.pipelines.spec import PipelineSpec

pytestmark = pytest.mark.unit


def test_an_avro_record_gives_columns_of_matching_types_required_unless_nullable_or_defaulted():
    schema = {"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "string"},
        {"name": "count", "type": "long"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "flag", "type": "boolean", "default": False},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "place", "type": {"type": "record", "name": "P", "fields": [{"name": "site", "type": "string"}]}},
        {"name": "attrs", "type": {"type": "map", "values": "string"}},
    ]}
    assert columns_of(schema) == {
        "id": {"type": "string", "required": True}, "count": {"type": "bigint", "required": True},
        "price": {"type": "decimal(12,2)", "required": True}, "at": {"type": "timestamp", "required": True},
        "note": {"type": "string", "required": False}, "flag": {"type": "boolean", "required": False},
        "tags": {"type": "array<string>", "required": True}, "place": {"type": "struct<site:string>",
                                                                        "required": True},
        "attrs": {"type": "json", "required": True}}
    spec = PipelineSpec(name="o", topic="o", format="avro", schema_registry={}, table="o", key=["id"])
    resolved = spec.with_columns(columns_of(schema), schema)
    assert list(resolved.columns) == list(columns_of(schema)) and resolved.registry_reader_schema == schema
    assert resolved.wire_format == "confluent" and resolved.registry_subject == "o-value"
    with pytest.raises(ValidationError, match="key column"):
        spec.model_copy(update={"key": ["nope"]}).with_columns(columns_of(schema), schema)


@pytest.mark.parametrize("body, words", [
    ({"format": "json", "columns": {"a": {"type": "int"}}}, "schema_registry is for Avro values"),
    ({"format": "avro", "avro_wire_format": "plain"}, "remove avro_wire_format: plain"),
    ({"format": "avro", "topic": None, "topics": ["a", "b"]}, "needs a subject"),
    ({"format": "avro", "schema_registry": {"url": "ftp://x"}}, "should match pattern"),
])
def test_a_registry_entry_that_cannot_work_is_refused_with_its_fix(body, words):
    fields = {"name": "o", "topic": "o", "table": "o", "schema_registry": {}, **body}
    with pytest.raises(ValidationError, match=words):
        PipelineSpec(**{k: v for k, v in fields.items() if v is not None})
