"""Builders for store tests: a database left at an older schema revision, as an older crossrail wrote it."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine

from crossrail.store.engine import MIGRATIONS


def engine_at(url: str, revision: str) -> Engine:
    """An engine on `url` whose schema has been migrated up to `revision` and no further."""
    engine = create_engine(url)
    with engine.begin() as conn:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    return engine
