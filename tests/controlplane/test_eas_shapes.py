"""The pure parts behind the EAS SDK's actions, as tables: 6-field cron and which job fires,
the scheduled scaler's validation, the safety lock's levels, the SDK's query parameters,
and the mapping of replicas and failures to the SDK's shapes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.api import eas_shapes, sdk_query
from controlplane.model import cron_schedule
from controlplane.model.errors import InvalidSpec
from controlplane.model.spec import StoredSpec
from controlplane.store import safety_lock
from controlplane.store.tables import ServiceRow

T0 = datetime(2026, 12, 7, 7, 59, 58, tzinfo=UTC)  # a Monday


@pytest.mark.parametrize(
    ("expr", "when", "matches"),
    [
        ("0 0 8 * * *", datetime(2026, 12, 7, 8, 0, 0), True),
        ("0 0 8 * * *", datetime(2026, 12, 7, 8, 0, 1), False),
        ("*/15 * * * * *", datetime(2026, 12, 7, 1, 2, 45), True),
        ("*/15 * * * * *", datetime(2026, 12, 7, 1, 2, 46), False),
        ("0 15,45 * * * *", datetime(2026, 12, 7, 3, 45, 0), True),
        ("0 0 9-17/4 * * *", datetime(2026, 12, 7, 13, 0, 0), True),
        ("0 0 9-17/4 * * *", datetime(2026, 12, 7, 11, 0, 0), False),
        ("0 0 8 * * 1-5", datetime(2026, 12, 7, 8, 0, 0), True),  # Monday
        ("0 0 8 * * 1-5", datetime(2026, 12, 6, 8, 0, 0), False),  # Sunday
        ("0 0 8 * * 0", datetime(2026, 12, 6, 8, 0, 0), True),  # Sunday as 0
        ("0 0 8 * * 7", datetime(2026, 12, 6, 8, 0, 0), True),  # and as 7
        ("0 0 8 ? * 6,0", datetime(2026, 12, 5, 8, 0, 0), True),  # Saturday
        ("0 0 0 1 1 *", datetime(2027, 1, 1, 0, 0, 0), True),
        # both day fields restricted: either one (cron's rule)
        ("0 0 0 1 * 1", datetime(2026, 12, 7, 0, 0, 0), True),
        ("0 0 0 1 * 1", datetime(2026, 12, 1, 0, 0, 0), True),
        ("0 0 0 1 * 1", datetime(2026, 12, 2, 0, 0, 0), False),
    ],
)
def test_cron_matches(expr: str, when: datetime, matches: bool) -> None:
    assert cron_schedule.parse_cron(expr).matches(when) is matches


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("0 8 * * *", "has 5 fields; write 6"),
        ("0 0 8 * * * *", "has 7 fields"),
        ("60 * * * * *", "outside the second range 0-59"),
        ("0 0 24 * * *", "outside the hour range 0-23"),
        ("0 0 8 0 * *", "outside the day of month range 1-31"),
        ("0 0 8 * 13 *", "outside the month range 1-12"),
        ("0 0 8 * * 8", "outside the day of week range 0-7"),
        ("0 0 8 * * MON", "'MON' is not a number"),
        ("*/0 * * * * *", "step in '*/0' must be 1 or more"),
        ("0 0 9-5 * * *", "outside the hour range"),
    ],
)
def test_bad_cron_says_what_is_wrong(expr: str, says: str) -> None:
    with pytest.raises(cron_schedule.CronError) as e:
        cron_schedule.parse_cron(expr)
    assert says in str(e.value)


JOBS: dict[str, Any] = {
    "ScaleJobs": [
        {"Name": "up", "Schedule": "0 0 8 * * *", "TargetSize": 4, "TimeZone": "UTC"},
        {"Name": "down", "Schedule": "0 0 20 * * *", "TargetSize": 1, "TimeZone": "UTC"},
        {"Name": "sh", "Schedule": "0 0 16 * * *", "TargetSize": 2, "TimeZone": "Asia/Shanghai"},
    ],
    "ExcludeDates": ["* * * 25 12 *"],
}


@pytest.mark.parametrize(
    ("after", "until", "fired"),
    [
        (T0, T0 + timedelta(seconds=1), None),  # 07:59:59
        (T0, T0 + timedelta(seconds=2), ("up", 4)),  # 08:00:00 is in (after, until]
        (T0 + timedelta(seconds=2), T0 + timedelta(seconds=3), None),  # not twice
        # 16:00 in Shanghai is 08:00 UTC: both fire; the later job in the list wins
        (
            datetime(2026, 12, 7, 7, 59, 59, tzinfo=UTC),
            datetime(2026, 12, 7, 8, 0, tzinfo=UTC),
            ("sh", 2),
        ),
        (
            datetime(2026, 12, 7, 19, 59, 0, tzinfo=UTC),
            datetime(2026, 12, 7, 20, 0, 30, tzinfo=UTC),
            ("down", 1),
        ),
        # an excluded day: nothing fires
        (
            datetime(2026, 12, 25, 7, 59, 0, tzinfo=UTC),
            datetime(2026, 12, 25, 8, 1, tzinfo=UTC),
            None,
        ),
        # a leader back after an hour does not replay what it missed (2 minutes at most)
        (datetime(2026, 12, 7, 7, 0, tzinfo=UTC), datetime(2026, 12, 7, 9, 0, tzinfo=UTC), None),
    ],
)
def test_which_job_fired(after: datetime, until: datetime, fired: tuple[str, int] | None) -> None:
    # The Shanghai job only where it is the subject (it fires at 08:00 UTC too).
    jobs = {**JOBS, "ScaleJobs": JOBS["ScaleJobs"] if fired == ("sh", 2) else JOBS["ScaleJobs"][:2]}
    firing = cron_schedule.fired(jobs, after, until)
    if fired is None:
        assert firing is None
    else:
        assert firing is not None and (firing.job, firing.target) == fired


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({}, "ScaleJobs", "Field required"),
        ({"ScaleJobs": []}, "ScaleJobs", "at least 1"),
        (
            {"ScaleJobs": [{"Schedule": "0 8 * * *", "TargetSize": 1}]},
            "ScaleJobs[0].Schedule",
            "write 6",
        ),
        (
            {"ScaleJobs": [{"Schedule": "0 0 8 * * *", "TargetSize": -1}]},
            "ScaleJobs[0].TargetSize",
            "greater than or equal to 0",
        ),
        (
            {"ScaleJobs": [{"Schedule": "0 0 8 * * *", "TargetSize": "2"}]},
            "ScaleJobs[0].TargetSize",
            "valid integer",
        ),
        (
            {"ScaleJobs": [{"Schedule": "0 0 8 * * *", "TargetSize": 1, "TimeZone": "Mars/Base"}]},
            "ScaleJobs[0].TimeZone",
            "unknown time zone",
        ),
        (
            {"ScaleJobs": [{"Schedule": "0 0 8 * * *", "TargetSize": 1, "Size": 2}]},
            "ScaleJobs[0].Size",
            "Extra inputs",
        ),
        (
            {"ScaleJobs": [{"Schedule": "0 0 8 * * *", "TargetSize": 1}], "ExcludeDates": ["x"]},
            "ExcludeDates",
            "has 1 fields",
        ),
        (
            {
                "ScaleJobs": [
                    {"Name": "a", "Schedule": "0 0 8 * * *", "TargetSize": 1},
                    {"Name": "a", "Schedule": "0 0 9 * * *", "TargetSize": 1},
                ]
            },
            "ScaleJobs",
            "job names repeat",
        ),
    ],
)
def test_bad_cron_scalers_name_the_field(body: Any, field: str, says: str) -> None:
    with pytest.raises(InvalidSpec) as e:
        cron_schedule.parse(body)
    assert any(p.field == field and says in p.message for p in e.value.problems), e.value


def test_a_cron_scaler_is_kept_with_named_jobs_and_zones() -> None:
    body = {"ScaleJobs": [{"Schedule": "0 0 8 * * *", "TargetSize": 2}]}
    assert cron_schedule.parse(body) == {
        "ScaleJobs": [
            {"Name": "job-1", "Schedule": "0 0 8 * * *", "TargetSize": 2, "TimeZone": "UTC"}
        ],
        "ExcludeDates": [],
    }


@pytest.mark.parametrize(
    ("lock", "action", "refused"),
    [
        ("", "DeleteService", False),
        ("none", "DeleteService", False),
        ("dangerous", "DeleteService", True),
        ("dangerous", "StopService", True),
        ("dangerous", "RestartService", True),
        ("dangerous", "DeleteServiceInstances", True),
        ("dangerous", "UpdateServiceVersion", True),
        ("dangerous", "DeleteServiceAutoScaler", True),
        ("dangerous", "UpdateService", False),
        ("dangerous", "StartService", False),
        ("dangerous", "UpdateServiceLabel", False),
        ("all", "UpdateService", True),
        ("all", "StartService", True),
        ("all", "ScaleService", True),
        ("all", "UpdateServiceSafetyLock", False),  # else a lock could never be lifted
        ("dangerous", "UpdateServiceSafetyLock", False),
    ],
)
def test_safety_lock_levels(lock: str, action: str, refused: bool) -> None:
    assert safety_lock.refuses(lock, action) is refused


@pytest.mark.parametrize(
    ("given", "key"),
    [
        ("CreateTime", "createTime"),
        ("createTime", "createTime"),
        ("create_time", "createTime"),
        ("UpdateTime", "updateTime"),
        ("ServiceName", "name"),
        ("Status", "status"),
    ],
)
def test_sort_keys_in_either_spelling(given: str, key: str) -> None:
    assert sdk_query.sort_key(given) == key


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        (None, None),
        ("", None),
        ('{"team":"search"}', {"team": "search"}),
        ('{"a":"1","b":"2"}', {"a": "1", "b": "2"}),
    ],
)
def test_label_filter(given: str | None, parsed: dict[str, str] | None) -> None:
    assert sdk_query.label_filter(given) == parsed


@pytest.mark.parametrize("given", ["team=search", "[1]", '{"a":1}', "{"])
def test_bad_label_filters_name_the_field(given: str) -> None:
    with pytest.raises(InvalidSpec) as e:
        sdk_query.label_filter(given)
    assert e.value.problems[0].field == "Label"


@pytest.mark.parametrize(
    ("given", "names"),
    [
        (None, []),
        ("a", ["a"]),
        ("a,b", ["a", "b"]),
        (" a , b ,", ["a", "b"]),
        ('["a","b"]', ["a", "b"]),
    ],
)
def test_list_parameters(given: str | None, names: list[str]) -> None:
    assert sdk_query.names(given, "Keys") == names


@pytest.mark.parametrize(
    ("replica", "expected"),
    [
        (
            {
                "name": "svc-0",
                "state": "Running",
                "endpoint": "http://10.0.0.5:8000",
                "restarts": 2,
                "reason": "",
                "message": "",
                "current": True,
            },
            {
                "InstanceName": "svc-0",
                "Status": "Running",
                "InnerIP": "10.0.0.5",
                "InstancePort": 8000,
                "ReadyProcesses": 1,
                "RestartCount": 2,
                "Role": "Current",
                "LastState": [],
            },
        ),
        (
            {
                "name": "svc-1",
                "state": "Pending",
                "endpoint": None,
                "restarts": 0,
                "reason": "Pulling",
                "message": "pulling 1 GB",
                "current": False,
            },
            {
                "InstanceName": "svc-1",
                "Status": "Pending",
                "InnerIP": "",
                "InstancePort": 0,
                "ReadyProcesses": 0,
                "Reason": "Pulling",
                "Role": "Old",
                "LastState": [{"Message": "pulling 1 GB"}],
            },
        ),
        (
            {"name": "svc-2", "state": "CrashLoopBackOff", "restarts": 5},
            {"Status": "CrashLoopBackOff", "ReadyProcesses": 0, "RestartCount": 5},
        ),
    ],
)
def test_replicas_as_instances(replica: dict[str, Any], expected: dict[str, Any]) -> None:
    shaped = eas_shapes.instance(replica, T0)
    assert {k: shaped[k] for k in expected} == expected
    assert shaped["StartAt"] == "2026-12-07T07:59:58Z"


def _row(**fields: Any) -> ServiceRow:
    spec = StoredSpec.model_validate(
        {"name": "svc", "processor": "triton", "processor_params": ["--model-repository=/m"]}
    )
    base: dict[str, Any] = {
        "name": "svc",
        "status": "Running",
        "reason": "",
        "message": "",
        "stopped": False,
        "replicas": [],
        "running_instances": 1,
        "total_instances": 1,
        "generation": 1,
        "observed_generation": 1,
        "spec": spec,
    }
    return ServiceRow(**{**base, **fields})


@pytest.mark.parametrize(
    ("fields", "errors"),
    [
        ({}, []),
        ({"stopped": True, "status": "Stopped"}, ["ServiceStopped"]),
        (
            {"status": "Failed", "reason": "ModelPullFailed", "message": "bucket is empty"},
            ["ModelPullFailed"],
        ),
        (
            {
                "status": "Waiting",
                "replicas": [
                    {
                        "name": "svc-0",
                        "state": "CrashLoopBackOff",
                        "reason": "CrashLoopBackOff",
                        "message": "exit 1: no module numpy",
                    }
                ],
            },
            ["svc-0: CrashLoopBackOff"],
        ),
        ({"status": "Waiting", "running_instances": 0}, ["Waiting"]),
    ],
)
def test_diagnosis(fields: dict[str, Any], errors: list[str]) -> None:
    found = eas_shapes.diagnosis(_row(**fields), [])
    assert [d["Error"] for d in found] == errors
    for d in found:
        assert d["Causes"] and d["Advices"]


def test_service_fields_are_the_sdks() -> None:
    row = _row(
        labels={"b": "2", "a": "1"}, safety_lock="", current_version=2, latest_version=3, uid="u-1"
    )
    fields = eas_shapes.service_fields(row)
    assert fields["Labels"] == [
        {"LabelKey": "a", "LabelValue": "1"},
        {"LabelKey": "b", "LabelValue": "2"},
    ]
    assert isinstance(fields["ServiceConfig"], str)
    assert (fields["SafetyLock"], fields["CurrentVersion"], fields["LatestVersion"]) == (
        "none",
        2,
        3,
    )


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        (None, None),
        ("2026-01-02 15:04:05", datetime(2026, 1, 2, 15, 4, 5, tzinfo=UTC)),
        ("2026-01-02T15:04:05Z", datetime(2026, 1, 2, 15, 4, 5, tzinfo=UTC)),
        ("2026-01-02T23:04:05+08:00", datetime(2026, 1, 2, 15, 4, 5, tzinfo=UTC)),
    ],
)
def test_times(given: str | None, parsed: datetime | None) -> None:
    assert sdk_query.time(given, "StartTime") == parsed


def test_a_bad_time_names_the_field() -> None:
    with pytest.raises(InvalidSpec) as e:
        sdk_query.time("yesterday", "EndTime")
    assert e.value.problems[0].field == "EndTime"
