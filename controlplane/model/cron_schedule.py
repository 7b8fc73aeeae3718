"""EAS's scheduled scaler (CronHPA): jobs that set a service's instance count at times
given by 6-field cron expressions (seconds first), except at times ``ExcludeDates`` match.

Pure: the API validates a body with :func:`parse` (every problem named by its field) and
keeps the result as given; :class:`controlplane.elasticity.cron_loop.CronScaling` asks
:func:`fired` which job, if any, fired in the seconds since it last looked.

Beside an autoscaler, a job does not set the instance count but the autoscaler's range,
as Alibaba's CronHPA does to an HPA: ``min`` becomes ``TargetSize``, and ``max`` too when
below it; the count moves into the new range, and the autoscaler scales from there.

Cron fields: ``second minute hour day-of-month month day-of-week`` (0 or 7 is Sunday);
each ``*``, ``?``, a number, ``a-b``, a list ``a,b``, and steps ``*/n`` or ``a-b/n``.
A job with both day fields restricted fires when either matches, as cron does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from controlplane.model.errors import FieldProblem, InvalidSpec

# (lowest, highest) of each field, in order.
_RANGES = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_NAMES = ("second", "minute", "hour", "day of month", "month", "day of week")
# How far back a look may reach: a leader that was away longer does not replay old jobs.
MAX_CATCH_UP = timedelta(minutes=2)


class CronError(ValueError):
    pass


@dataclass(frozen=True)
class Cron:
    """A parsed 6-field cron expression."""

    fields: tuple[frozenset[int], ...]
    any_dom: bool
    any_dow: bool

    def matches(self, t: datetime) -> bool:
        second, minute, hour, dom, month, dow = self.fields
        if t.second not in second or t.minute not in minute or t.hour not in hour:
            return False
        if t.month not in month:
            return False
        day_dom = t.day in dom
        day_dow = (t.isoweekday() % 7) in dow
        if self.any_dom or self.any_dow:
            return day_dom and day_dow
        return day_dom or day_dow


def parse_cron(text: str) -> Cron:
    parts = text.split()
    if len(parts) != 6:
        raise CronError(
            f"{text!r} has {len(parts)} fields; write 6: second minute hour day-of-month "
            "month day-of-week (e.g. '0 0 8 * * *' for 08:00:00 every day)"
        )
    fields = tuple(
        _field(p, lo, hi, n) for p, (lo, hi), n in zip(parts, _RANGES, _NAMES, strict=True)
    )
    dow = frozenset({d % 7 for d in fields[5]})
    return Cron((*fields[:5], dow), any_dom=parts[3] in ("*", "?"), any_dow=parts[5] in ("*", "?"))


def _field(text: str, lo: int, hi: int, name: str) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        body, _, step_text = item.partition("/")
        step = _number(step_text, name) if step_text else 1
        if step < 1:
            raise CronError(f"the {name} step in {item!r} must be 1 or more")
        if body in ("*", "?"):
            start, end = lo, hi
        elif "-" in body:
            a, _, b = body.partition("-")
            start, end = _number(a, name), _number(b, name)
        else:
            start = _number(body, name)
            end = hi if step_text else start
        if not lo <= start <= end <= hi:
            raise CronError(f"{item!r} is outside the {name} range {lo}-{hi}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


def _number(text: str, name: str) -> int:
    if not text.isdigit():
        raise CronError(f"{text!r} is not a number (in the {name} field)")
    return int(text)


class ScaleJob(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    Name: str = Field(default="", max_length=63)
    Schedule: str = Field(min_length=1, max_length=200)
    TargetSize: int = Field(ge=0, le=100)
    TimeZone: str = Field(default="UTC", max_length=64)

    @field_validator("Schedule")
    @classmethod
    def _schedule(cls, v: str) -> str:
        parse_cron(v)
        return v

    @field_validator("TimeZone")
    @classmethod
    def _zone(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise ValueError(
                f"unknown time zone {v!r}: use an IANA name such as 'Asia/Shanghai' or 'UTC'"
            ) from e
        return v


class CronScaler(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    ScaleJobs: list[ScaleJob] = Field(min_length=1, max_length=32)
    ExcludeDates: list[str] = Field(default_factory=list, max_length=32)

    @field_validator("ExcludeDates")
    @classmethod
    def _excludes(cls, v: list[str]) -> list[str]:
        for text in v:
            parse_cron(text)
        return v


def parse(body: Any) -> dict[str, Any]:
    """The body of Create/UpdateServiceCronScaler as kept: jobs named (``job-<n>`` where
    the caller gave none, names unique), each with its time zone."""
    try:
        scaler = CronScaler.model_validate(body)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            field = ".".join(
                f"[{p}]" if isinstance(p, int) else str(p) for p in err["loc"]
            ).replace(".[", "[")
            message = str(err["msg"]).removeprefix("Value error, ")
            problems.append(FieldProblem(field, message, _fix(err["type"])))
        raise InvalidSpec(problems) from e
    jobs = [
        j.model_copy(update={"Name": j.Name or f"job-{i + 1}"})
        for i, j in enumerate(scaler.ScaleJobs)
    ]
    names = [j.Name for j in jobs]
    if len(set(names)) != len(names):
        raise InvalidSpec(
            [FieldProblem("ScaleJobs", "job names repeat", "give each job its own Name")]
        )
    return {"ScaleJobs": [j.model_dump() for j in jobs], "ExcludeDates": scaler.ExcludeDates}


def _fix(kind: str) -> str:
    if kind == "extra_forbidden":
        return "remove it; allowed: ScaleJobs[{Name, Schedule, TargetSize, TimeZone}], ExcludeDates"
    if kind == "missing":
        return "add it"
    return ""


@dataclass(frozen=True)
class Firing:
    job: str
    target: int
    at: datetime


def fired(scaler: dict[str, Any], after: datetime, until: datetime) -> Firing | None:
    """The last job that fired in the whole seconds of (``after``, ``until``] (UTC), at a
    time no ``ExcludeDates`` expression matches (read in the job's time zone)."""
    start = max(after, until - MAX_CATCH_UP).replace(microsecond=0) + timedelta(seconds=1)
    excludes = [parse_cron(e) for e in scaler.get("ExcludeDates", [])]
    jobs = [(j, parse_cron(j["Schedule"]), ZoneInfo(j["TimeZone"])) for j in scaler["ScaleJobs"]]
    last: Firing | None = None
    t = start
    while t <= until:
        for job, cron, zone in jobs:
            local = t.astimezone(zone)
            if cron.matches(local) and not any(x.matches(local) for x in excludes):
                last = Firing(job["Name"], job["TargetSize"], t)
        t += timedelta(seconds=1)
    return last


def now() -> datetime:
    return datetime.now(UTC)
