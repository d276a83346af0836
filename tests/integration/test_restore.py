"""Backup, disaster and restore through the supervisor's control API, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from drillbook.errors import ControlApiError
from drillbook.sandbox.chain import verify_chain
from drillbook.sandbox.client import TenantClient
from drillbook.sandbox.store import Turn
from tests.helpers import wait_for

pytestmark = pytest.mark.integration


def read_all(client: TenantClient, session_ids: list[str]) -> dict[str, list[dict]]:
    return {sid: client.read_session(sid)["turns"] for sid in session_ids}


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_backup_destroy_restore_gives_identical_sessions(sandbox_factory, request, store):
    dsn = request.getfixturevalue("pg_dsn") if store == "postgres" else None
    handle = sandbox_factory(tokens_per_second=0, store=store, dsn=dsn)
    with handle.control() as control, TenantClient(handle.gateway_url, handle.tenant_keys["tenant-a"]) as client:
        sessions = [client.create_session() for _ in range(3)]
        for sid in sessions:
            for i in range(3):
                client.turn(sid, f"turn {i}")
        before = read_all(client, sessions)
        backup = control.backup()["backup"]
        assert (backup["sessions"], backup["turns"]) == (3, 9)

        client.turn(sessions[0], "written after the backup: lost by the restore")
        control.destroy_store()
        assert control.store()["healthy"] is False
        wait_for(lambda: control.status()["services"]["agent"]["ready"] == 0)  # replicas report unready

        control.restore("latest")
        wait_for(lambda: control.status()["services"]["agent"]["ready"] == 2)
        assert read_all(client, sessions) == before
        for sid in sessions:
            assert verify_chain(sid, [Turn(**t) for t in before[sid]]).ok
        assert client.turn(sessions[0], "the platform works again")["seq"] == 4
        kinds = [e["kind"] for e in control.events()]
    assert kinds.index("backup_created") < kinds.index("store_destroyed") < kinds.index("store_restored")
    # the sessions, their backups and the folder they are in are the user's alone
    made = [Path(backup["path"]), *([handle.state_dir / "store" / "state.db"] if store == "sqlite" else [])]
    assert [str(p) for p in made if not p.exists() or p.stat().st_mode & 0o077] == []


def test_restore_refuses_a_tampered_backup(sandbox_factory):
    handle = sandbox_factory(tokens_per_second=0)
    with handle.control() as control:
        path = control.backup()["backup"]["path"]
        with open(path, "r+b") as backup_file:
            backup_file.seek(200)
            backup_file.write(b"\x00tampered")
        with pytest.raises(ControlApiError, match="sha256"):
            control.restore("latest")
        assert control.store()["healthy"] is True
