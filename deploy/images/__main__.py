"""``python -m deploy.images build|list|run``: the local stand-in images (see the package doc).

- ``build [NAME ...] [--force]`` (``make images``): make sure an engine answers
  (starting Debian's ``dockerd`` if needed, and leaving it running), then build
  what changed.
- ``list``: each image with its content hash: up to date, stale or missing.
- ``run -- CMD ...`` (``make test``): an engine (installed and started if
  needed), the images, then ``CMD``; the engine this run started is stopped at
  the end, and ``CMD``'s exit status is returned. Without an engine ``CMD``
  still runs, and the Docker tests skip with the reason.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Optional, Sequence

from deploy.images.build import HASH_LABEL, IMAGES, build_images, content_hash
from serving.stack.docker import image_id, image_label
from deploy.images.engine import start_engine

# What the tests read to learn why no engine answers (the Docker tests' skip reason).
NO_ENGINE_ENV = "TFS_STACK_NO_DOCKER_REASON"


def _build(names: Sequence[str], force: bool) -> int:
    engine = start_engine()
    if not engine.answers:
        print(f"images: not built: {engine.reason}", file=sys.stderr)
        return 2
    try:
        build_images(only=names, force=force)
    except RuntimeError as exc:
        print(f"images: {exc}", file=sys.stderr)
        return 1
    return 0


def _list() -> int:
    hashes: dict[str, str] = {}
    for image in IMAGES:
        hashes[image.name] = content_hash(image, hashes.get(image.base, ""))
        label = image_label(image.name, HASH_LABEL)
        state = "missing" if image_id(image.name) is None else "up to date" if label == hashes[image.name] else "stale"
        print(f"{image.name:42} {hashes[image.name][:12]}  {state}")
    return 0


def _run(cmd: Sequence[str]) -> int:
    engine = start_engine()
    env = dict(os.environ)
    try:
        if engine.answers:
            build_images()
        else:
            print(f"engine: none: {engine.reason}; the Docker tests skip", flush=True)
            env[NO_ENGINE_ENV] = engine.reason
        return subprocess.run(list(cmd), env=env).returncode
    except RuntimeError as exc:
        print(f"images: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.stop()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.images", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the local images that changed (make images)")
    build.add_argument("names", nargs="*", metavar="NAME", help="only these images (and their bases)")
    build.add_argument("--force", action="store_true", help="rebuild even when the content hash matches")
    sub.add_parser("list", help="each image, its content hash: up to date, stale or missing")
    run = sub.add_parser("run", help="engine + images, then run CMD (make test)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    args = parser.parse_args(argv)
    if args.command == "build":
        return _build(args.names, args.force)
    if args.command == "list":
        return _list()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("run needs a command after --")
    return _run(cmd)


if __name__ == "__main__":
    sys.exit(main())
