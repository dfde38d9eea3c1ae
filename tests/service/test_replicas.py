"""Several API replicas on one database (issue 30): refused on SQLite with a clear message; on PostgreSQL, replicas
that start together migrate one at a time (an advisory lock), and every one of them ends at head."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from app.db import create_db_engine, current_revision, head_revision
from app.settings import ReplicaSettingsError
from tests.support.service_db import empty_postgres


def test_several_replicas_on_sqlite_are_refused_with_what_to_set(make_app):
    with pytest.raises(ReplicaSettingsError, match="needs PostgreSQL") as refused:
        make_app(api_replicas=2)
    assert "ADVISOR_DATABASE_URL=postgresql" in str(refused.value)
    assert make_app(api_replicas=1) is not None


def test_replicas_starting_together_migrate_once_and_all_reach_head(tmp_path):
    """Four processes (replicas) migrate an empty PostgreSQL database at the same moment."""
    go = tmp_path / "go"
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from app.db import create_db_engine, upgrade_database\n"
        "engine = create_db_engine(sys.argv[1])\n"
        "with engine.connect():\n"  # connected and imported: only the migration itself is left to race
        "    pass\n"
        "while not Path(sys.argv[2]).exists():\n"
        "    time.sleep(0.01)\n"
        "print(upgrade_database(engine))\n"
    )
    with empty_postgres() as url:
        replicas = [
            subprocess.Popen([sys.executable, "-c", code, url, str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(4)
        ]
        time.sleep(3)  # every replica has started and waits for the signal
        go.touch()
        outcomes = []
        for replica in replicas:
            try:
                out, err = replica.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                replica.kill()
                out, err = replica.communicate()
                err += b"\n(timed out: replicas that migrate at once lock each other up)"
            outcomes.append((replica.returncode, out.decode().strip(), err.decode()[-1500:]))
        failed = [outcome for outcome in outcomes if outcome[0] != 0]
        assert not failed, f"{len(failed)} of 4 replicas failed to migrate: {failed[0]}"
        assert {out for _, out, _ in outcomes} == {head_revision()}
        engine = create_db_engine(url)
        try:
            assert current_revision(engine) == head_revision()
        finally:
            engine.dispose()
