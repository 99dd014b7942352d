"""The REST front-end's drain: the listener closes at once, running requests get ``grace`` seconds.

aiohttp's ``AppRunner.cleanup()`` closes the listening sockets, waits up to
its shutdown timeout for the requests being handled, then closes every
connection. The timeout is fixed when the runner is made and has no public
setter; :func:`drain` sets it to the caller's ``grace`` (the one place that
touches aiohttp's private ``_shutdown_timeout``).
"""
from __future__ import annotations

import asyncio

from aiohttp import web

__all__ = ["drain"]


def drain(runner: web.AppRunner, loop: asyncio.AbstractEventLoop, grace: float) -> None:
    """Close ``runner``'s listener now, wait up to ``grace`` seconds for running requests (from another thread
    than ``loop``'s), then close the connections."""
    runner._shutdown_timeout = grace  # aiohttp reads it in cleanup(); no public setter
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(grace + 10)
