"""The one Kafka connector core of streamfill: `kafka/` plans and reads (plain Python), `spark/` adapts it."""
