"""offsets_db: every planned and committed offset range, resume snapshot, data-loss event, dead letter and
quality result in PostgreSQL (SQLAlchemy 2 typed models, Alembic migrations, SQL views)."""
