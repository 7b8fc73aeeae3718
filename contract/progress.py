"""What a replica reports while its model repository is pulled and its warm-up requests are
replayed: the shape the processor writes, the runtimes publish in a replica's status
(``progress`` in ``Replicas`` of a describe) and ``eascmd`` (and the console) render with
:func:`describe`. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

# pulling -> pulled (the pull's last word) -> loading (the runtime's: pulled, not ready yet)
# -> warming up (Triton ready, ``warm_up_data_path`` being replayed) -> warmed up (the
# replica's last word before it reports ready; it carries ``warm_up_seconds``).
Phase = Literal["pulling", "pulled", "loading", "warming up", "warmed up"]
WARMING_UP: Phase = "warming up"
WARMED_UP: Phase = "warmed up"


@dataclass(frozen=True)
class Progress:
    phase: Phase
    files_done: int
    files_total: int
    bytes_done: int  # reused bytes count as done: they are there
    bytes_total: int
    rate: float = 0.0  # bytes/s fetched by this pull so far
    eta_s: float | None = None  # None until a rate is known
    # Warm-up: requests replayed so far and in all, when the phase began (Unix seconds) and,
    # once warmed up, how long the replay took (the cold-start breakdown's "warm-up").
    requests_done: int = 0
    requests_total: int = 0
    started_at: float | None = None
    warm_up_seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Progress:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def describe(p: Progress | Mapping[str, Any]) -> str:
    """``pulling 1.2 GB of 4.0 GB (30%), 3/10 files, 25.0 MB/s, ETA 1m52s``."""
    if not isinstance(p, Progress):
        p = Progress.from_dict(p)
    if p.phase == WARMING_UP:
        return f"warming up: {p.requests_done}/{p.requests_total} requests replayed"
    if p.phase == WARMED_UP:
        took = duration(p.warm_up_seconds or 0.0)
        return f"warmed up: {p.requests_total} requests replayed in {took}"
    if p.phase != "pulling":
        done = f"pulled {size(p.bytes_total)}, {p.files_total} files"
        return f"loading models ({done})" if p.phase == "loading" else done
    share = f" ({100 * p.bytes_done // p.bytes_total}%)" if p.bytes_total else ""
    parts = [
        f"pulling {size(p.bytes_done)} of {size(p.bytes_total)}{share}",
        f"{p.files_done}/{p.files_total} files",
    ]
    if p.rate:
        parts.append(f"{size(p.rate)}/s")
    if p.eta_s is not None:
        parts.append(f"ETA {duration(p.eta_s)}")
    return ", ".join(parts)


def size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def duration(seconds: float) -> str:
    s = int(seconds + 0.5)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


# A pull without a progress file (a Kubernetes init container) logs each report as a line
# a person can read that ends in this mark and the fields as JSON; the runtime reads the
# last such line from the tail of the log (:func:`from_log`).
LOG_MARK = " openeas-progress="


def log_line(p: Progress) -> str:
    """``openeas: pulling 1.2 GB of 4.0 GB (30%), … openeas-progress={"phase": …}``."""
    return f"openeas: {describe(p)}{LOG_MARK}{json.dumps(p.as_dict(), separators=(',', ':'))}"


def from_log(text: str) -> Progress | None:
    """The last progress report in a log's tail; None when it holds none (not started, or
    the lines scrolled past the tail)."""
    for line in reversed(text.splitlines()):
        _, mark, fields = line.rpartition(LOG_MARK)
        if not mark:
            continue
        try:
            data = json.loads(fields)
            return Progress.from_dict(data) if isinstance(data, dict) else None
        except (ValueError, TypeError):
            return None  # a cut line (limitBytes) or another version's: nothing to show
    return None
