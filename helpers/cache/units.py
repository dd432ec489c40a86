"""Byte sizes and times as people read and type them, and the size totals of a set of items:
shared by the scan, its plans and archives, and the text views (helpers.cache.render)."""
from __future__ import annotations

import datetime as _dt
import re

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: int | float) -> str:
    n = float(n)
    for unit in _UNITS:
        if abs(n) < 1024 or unit == _UNITS[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def parse_size(text: str) -> int:
    """'500M', '5G', '5GiB', '1.5 T', '1234' -> bytes (K/M/G/T are powers of 1024); > 0."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"size {text!r}: expected e.g. 500M, 5G or 1.5T (powers of 1024)")
    size = int(float(m[1]) * 1024 ** " KMGT".index(m[2].upper() or " "))
    if size <= 0:
        raise ValueError(f"size {text!r}: a size budget must be more than 0 bytes "
                         "(to remove every entry use --older-than-days 0)")
    return size


def iso_time(t: float) -> str | None:
    return _dt.datetime.fromtimestamp(t).isoformat(timespec="seconds") if t else None


def short_time(t: float) -> str:
    return _dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M") if t else "-"


class SizeTotals:
    """size_bytes (apparent) and disk_bytes (allocated) summed over `_sized()`."""

    def _sized(self):
        raise NotImplementedError

    @property
    def size_bytes(self) -> int:
        return sum(p.size_bytes for p in self._sized())

    @property
    def disk_bytes(self) -> int:
        return sum(p.disk_bytes for p in self._sized())
