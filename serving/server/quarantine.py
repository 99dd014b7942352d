"""``python -m serving.server.quarantine``: list or clear the versions that crashed the embedded server.

    python -m serving.server.quarantine --quarantine_dir DIR list
    python -m serving.server.quarantine --quarantine_dir DIR clear NAME VERSION

The server logs its ``--quarantine_dir`` at start and in each quarantined version's
error. A cleared version is loaded again at the server's next start, so
clear it only once it is fixed or removed (``core.quarantine`` has the rules).
Exit codes: 0 done, 1 nothing to clear, 2 bad arguments.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from serving.server.core.quarantine import VersionQuarantine

__all__ = ["main"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serving.server.quarantine", description=__doc__.splitlines()[0])
    parser.add_argument("--quarantine_dir", required=True, help="the server's --quarantine_dir (it logs it at start)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the quarantined versions")
    clear = commands.add_parser("clear", help="let a fixed version load again")
    clear.add_argument("name")
    clear.add_argument("version", type=int)
    args = parser.parse_args(argv)
    if not os.path.isdir(args.quarantine_dir):
        print(f"no quarantine directory at {args.quarantine_dir}", file=sys.stderr)
        return 1 if args.command == "clear" else 0
    quarantine = VersionQuarantine(args.quarantine_dir)
    if args.command == "list":
        for record in quarantine.open():
            print(f"{record.name}\t{record.version}\t{record.path}\tcrashed pid {record.pid} (load began {record.since})")
        return 0
    removed = quarantine.clear(args.name, args.version)
    if not removed:
        print(f"version {args.version} of model {args.name} is not quarantined in {args.quarantine_dir}",
              file=sys.stderr)
        return 1
    print(f"cleared version {args.version} of model {args.name}: it loads at the server's next start")
    return 0


if __name__ == "__main__":
    sys.exit(main())
