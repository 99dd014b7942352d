"""CPU and memory of a process and its descendants, read from ``/proc`` (Linux).

CPU is utime + stime of ``/proc/<pid>/stat`` (every thread), the steadiest figure a shared
machine gives; RSS counts shared pages once per process; ``RssAnon`` is what a process
allocated itself (heap, stacks, arenas), without the file-backed pages of the libraries it
maps, whose share depends on the page cache.
"""
from __future__ import annotations

import os
from pathlib import Path

import psutil

__all__ = ["descendants", "process_cpu_seconds", "tree_cpu_seconds", "tree_rss_anon_mb", "tree_rss_mb"]


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used, all threads (``/proc/<pid>/stat``, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (empty when it is gone)."""
    try:
        return [pid] + [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_cpu_seconds(pid: int) -> float:
    """``process_cpu_seconds`` of ``pid`` and its descendants."""
    seconds = 0.0
    for member in descendants(pid):
        try:
            seconds += process_cpu_seconds(member)
        except OSError:  # the process ended since the tree was listed
            continue
    return seconds


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants, MB."""
    total = 0
    for member in descendants(pid):
        try:
            total += psutil.Process(member).memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 1e6


def tree_rss_anon_mb(pid: int) -> float:
    """Anonymous resident memory (``RssAnon`` of ``/proc/<pid>/status``) of ``pid`` and its descendants, MB."""
    total = 0.0
    for member in descendants(pid):
        try:
            lines = Path(f"/proc/{member}/status").read_text().splitlines()
        except OSError:
            continue
        anon = next((line.split(":", 1)[1] for line in lines if line.startswith("RssAnon")), "0 kB")
        total += int(anon.split()[0]) / 1e3
    return total
