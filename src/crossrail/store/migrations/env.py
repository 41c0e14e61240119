"""Alembic environment: always handed a live connection by crossrail.store.migrate."""

from __future__ import annotations

from alembic import context

from crossrail.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
