"""The settings a pipeline entry nests under a key of its own: `health:` and `schema_registry:`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictInt


class HealthSpec(BaseModel):
    """`health:`: how often the stream's health is checked, and the commit age and lag that count as unhealthy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every_minutes: StrictInt = Field(5, ge=1)
    max_commit_age_minutes: StrictInt = Field(15, ge=1)
    max_lag: StrictInt = Field(500_000, ge=0)


class RegistrySpec(BaseModel):
    """`schema_registry:` of an Avro entry (or an Avro Debezium one) in Confluent's wire format: each value's
    schema id gives its writer's schema. Credentials never go here: they come from the connection
    streamfill_schema_registry or the STREAMFILL_SCHEMA_REGISTRY_* settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    subject: str | None = Field(None, min_length=1)  # Confluent's default: <topic>-value
    url: str | None = Field(None, pattern=r"^https?://")  # default: the connection's or the setting's
