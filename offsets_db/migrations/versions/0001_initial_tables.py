"""initial tables

Revision ID: 0001
Revises: 
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('jobs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('config', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.CheckConstraint("kind IN ('stream', 'backfill', 'interval')", name='jobs_kind'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_table('runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('dag_id', sa.String(length=250), nullable=True),
    sa.Column('airflow_run_id', sa.String(length=250), nullable=True),
    sa.Column('spark_app_id', sa.String(length=250), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index(op.f('ix_runs_job_id'), 'runs', ['job_id'], unique=False)
    op.create_table('batches',
    sa.Column('id', sa.BigInteger(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('spark_batch_id', sa.BigInteger(), nullable=True),
    sa.Column('run_id', sa.Integer(), nullable=True),
    sa.Column('planned_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('committed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('rows_written', sa.BigInteger(), nullable=True),
    sa.Column('dead_letters', sa.BigInteger(), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('job_id', 'seq', name='batches_job_seq')
    )
    op.create_index('batches_job_committed', 'batches', ['job_id', 'committed_at'], unique=False)
    op.create_table('quality_results',
    sa.Column('id', sa.BigInteger(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=True),
    sa.Column('run_id', sa.Integer(), nullable=True),
    sa.Column('suite', sa.String(length=200), nullable=False),
    sa.Column('table_name', sa.String(length=200), nullable=False),
    sa.Column('success', sa.Boolean(), nullable=False),
    sa.Column('statistics', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('result', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('checked_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index(op.f('ix_quality_results_job_id'), 'quality_results', ['job_id'], unique=False)
    op.create_table('batch_offsets',
    sa.Column('batch_id', sa.BigInteger(), nullable=False),
    sa.Column('topic', sa.String(length=249), nullable=False),
    sa.Column('partition', sa.Integer(), nullable=False),
    sa.Column('start_offset', sa.BigInteger(), nullable=False),
    sa.Column('end_offset', sa.BigInteger(), nullable=False),
    sa.Column('log_start', sa.BigInteger(), nullable=True),
    sa.Column('log_end', sa.BigInteger(), nullable=True),
    sa.ForeignKeyConstraint(['batch_id'], ['batches.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('batch_id', 'topic', 'partition')
    )
    op.create_index('batch_offsets_tp_range', 'batch_offsets', ['topic', 'partition', 'start_offset', 'end_offset'], unique=False)
    op.create_table('data_loss_events',
    sa.Column('id', sa.BigInteger(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('batch_id', sa.BigInteger(), nullable=True),
    sa.Column('topic', sa.String(length=249), nullable=False),
    sa.Column('partition', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=40), nullable=False),
    sa.Column('lost_from', sa.BigInteger(), nullable=False),
    sa.Column('lost_to', sa.BigInteger(), nullable=False),
    sa.Column('detected_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['batch_id'], ['batches.id'], ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index(op.f('ix_data_loss_events_job_id'), 'data_loss_events', ['job_id'], unique=False)
    op.create_table('dead_letters',
    sa.Column('id', sa.BigInteger(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('batch_id', sa.BigInteger(), nullable=True),
    sa.Column('topic', sa.String(length=249), nullable=False),
    sa.Column('partition', sa.Integer(), nullable=False),
    sa.Column('offset', sa.BigInteger(), nullable=False),
    sa.Column('raw_value', sa.LargeBinary(), nullable=True),
    sa.Column('error', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['batch_id'], ['batches.id'], ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('job_id', 'topic', 'partition', 'offset', name='dead_letters_key')
    )
    op.create_table('snapshots',
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('topic', sa.String(length=249), nullable=False),
    sa.Column('partition', sa.Integer(), nullable=False),
    sa.Column('next_offset', sa.BigInteger(), nullable=False),
    sa.Column('batch_id', sa.BigInteger(), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['batch_id'], ['batches.id'], ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', 'topic', 'partition')
    )


def downgrade() -> None:
    op.drop_table('snapshots')
    op.drop_table('dead_letters')
    op.drop_index(op.f('ix_data_loss_events_job_id'), table_name='data_loss_events')
    op.drop_table('data_loss_events')
    op.drop_index('batch_offsets_tp_range', table_name='batch_offsets')
    op.drop_table('batch_offsets')
    op.drop_index(op.f('ix_quality_results_job_id'), table_name='quality_results')
    op.drop_table('quality_results')
    op.drop_index('batches_job_committed', table_name='batches')
    op.drop_table('batches')
    op.drop_index(op.f('ix_runs_job_id'), table_name='runs')
    op.drop_table('runs')
    op.drop_table('jobs')
