"""Alembic environment: online migrations against the URL set by offsets_db.migrate."""

from alembic import context
from sqlalchemy import create_engine, pool

from offsets_db.models import Base
from streamfill.pg import connect_args

url = context.config.get_main_option("sqlalchemy.url")
engine = create_engine(url, poolclass=pool.NullPool, connect_args=connect_args())
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=Base.metadata, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
