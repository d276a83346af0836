"""The test cluster's store procedure, as a platform team's own script would be: backup, restore,
destroy, recreate and health of the PostgreSQL state store, for a kubernetes target profile's
``workload.store`` commands (pg_dump and pg_restore underneath).

    store_ops.py --dsn DSN --dir BACKUPS [--lie noop-destroy|noop-restore]
                 backup | restore NAME|latest | destroy | recreate | healthy

--lie makes it a procedure that lies, for tests that expect not-PASS: `noop-destroy` answers
success and destroys nothing; `noop-restore` names the backup it chose, answers success and
restores nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from drillbook.errors import DrillbookError
from drillbook.sandbox.store import PostgresStore


def main() -> int:
    parser = argparse.ArgumentParser(prog="store_ops")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("op", choices=["backup", "restore", "destroy", "recreate", "healthy"])
    parser.add_argument("name", nargs="?", default="latest")
    parser.add_argument("--lie", choices=["noop-destroy", "noop-restore"])
    args = parser.parse_args()
    store = PostgresStore(args.dsn)
    try:
        if args.op == "backup":
            print(store.backup(args.dir).id)
        elif args.op == "restore":
            dumps = sorted(args.dir.glob("*.dump"), key=lambda p: p.stat().st_mtime)
            chosen = dumps[-1] if args.name == "latest" and dumps else args.dir / f"{args.name}.dump"
            if not chosen.exists():
                print(f"no backup {args.name!r} in {args.dir}", file=sys.stderr)
                return 1
            if args.lie != "noop-restore":
                store.restore(chosen)
            print(chosen.stem)
        elif args.op == "destroy":
            if args.lie != "noop-destroy":
                store.destroy()
        elif args.op == "recreate":
            store.init_schema()
        else:
            store.counts()
    except DrillbookError as error:
        print(f"store_ops {args.op}: {error}", file=sys.stderr)
        return 1
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
