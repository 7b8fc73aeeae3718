"""EAS's own control-plane SDK (``alibabacloud_eas20210701``, unmodified) against a real
uvicorn control plane: every service, scaler, label, lock, group and region action it has
that OpenEAS serves, each answer read by the SDK's own response model and checked against
the types that model declares. Both databases; instances, logs and restarts against real
replica processes of the local runtime (a stand-in processor, no Triton)."""

from __future__ import annotations

import asyncio
import json
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from alibabacloud_eas20210701 import models as m
from alibabacloud_eas20210701.client import Client
from alibabacloud_tea_openapi.models import Config
from Tea.model import TeaModel

from controlplane.server import ControlPlane, bind
from controlplane.settings import Settings
from controlplane.store import migrate
from processors import registry
from processors.base import Processor
from testing.waiting import wait_until
from tests.controlplane.conftest import ADMIN, LiveServer, seed_spec
from tests.controlplane.test_local_runtime import fake_plan
from tests.gateway.harness import LoopThread


def sdk_client(port: int, cluster: str, token: str = ADMIN) -> Client:
    config = Config(
        endpoint=f"127.0.0.1:{port}",
        protocol="http",
        region_id=cluster,
        type="bearer",
        bearer_token=token,
    )
    return Client(config)


def conforms(value: Any, hint: Any, where: str) -> None:
    """``value`` is of the type the SDK's model declares (ints are not bools, floats may be
    ints, nested models recursively)."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return
    if isinstance(hint, type) and issubclass(hint, TeaModel):
        assert isinstance(value, hint), f"{where}: {value!r} is not a {hint.__name__}"
        check(value, where)
    elif origin is list:
        assert isinstance(value, list), f"{where}: {value!r} is not a list"
        (item,) = typing.get_args(hint)
        for i, v in enumerate(value):
            conforms(v, item, f"{where}[{i}]")
    elif origin is dict:
        assert isinstance(value, dict), f"{where}: {value!r} is not an object"
    elif hint is float:
        assert isinstance(value, int | float) and not isinstance(value, bool), where
    elif hint is int:
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: {value!r}"
    else:
        assert isinstance(value, hint), f"{where}: {value!r} is not a {hint.__name__}"


def check(model: TeaModel, where: str = "body") -> TeaModel:
    """Every field the answer set has the type the SDK's model declares for it."""
    hints = typing.get_type_hints(type(model).__init__)
    for attr, hint in hints.items():
        value = getattr(model, attr, None)
        if value is not None and attr != "return":
            conforms(value, hint, f"{where}.{attr}")
    return model


def refused(call: Any, *args: Any) -> Any:
    """The SDK's exception for a refused call (its status and our problem body)."""
    with pytest.raises(Exception) as caught:
        call(*args)
    return caught.value


@pytest.fixture
def sdk(live_api: LiveServer, settings: Settings) -> Client:
    return sdk_client(live_api.port, settings.cluster_id)


def create(sdk: Client, name: str, labels: dict[str, str] | None = None, **meta: Any) -> Any:
    spec = seed_spec(name=name)
    spec["metadata"] = {**spec["metadata"], "instance": 0, **meta}
    request = m.CreateServiceRequest(body=json.dumps(spec), labels=labels)
    return check(sdk.create_service(request).body)


def test_describe_regions_is_the_cluster(sdk: Client) -> None:
    body = check(sdk.describe_regions().body)
    assert [(r.region_id, r.region_name) for r in body.regions] == [
        ("local", "OpenEAS cluster local")
    ]


def test_create_describe_list_and_delete(sdk: Client) -> None:
    made = create(sdk, "svc_a", {"team": "search"}, group="g")
    assert (made.service_name, made.region, made.status) == ("svc_a", "local", "Creating")
    create(sdk, "svc_b", {"team": "ads"})

    svc = check(sdk.describe_service("local", "svc_a").body)
    assert isinstance(svc.service_config, str)
    assert json.loads(svc.service_config)["processor"] == "triton"
    assert [(lb.label_key, lb.label_value) for lb in svc.labels] == [("team", "search")]
    assert (svc.cpu, svc.gpu, svc.memory, svc.service_group) == (4, 1, 10000, "g")
    assert svc.internet_endpoint == "http://gateway.example:8080/api/predict/svc_a"
    ends = check(sdk.describe_service_endpoints("local", "svc_a").body)
    assert svc.access_token and svc.access_token == ends.access_token  # the admin sees it
    assert ends.endpoints[0].internet_endpoints == [svc.internet_endpoint]

    def names(**query: Any) -> list[str]:
        body = check(sdk.list_services(m.ListServicesRequest(**query)).body)
        return [s.service_name for s in body.services]

    assert names(label={"team": "search"}) == ["svc_a"]
    assert names(label={"team": "nobody"}) == []
    assert names(service_name="svc_b") == ["svc_b"]
    assert names(filter="_a") == ["svc_a"]
    assert names(group_name="g") == ["svc_a"]
    assert names(sort="CreateTime", order="asc") == ["svc_a", "svc_b"]
    assert names(sort="CreateTime", order="desc", page_number=2, page_size=1) == ["svc_a"]
    listed = sdk.list_services(m.ListServicesRequest(page_size=1)).body
    assert (listed.total_count, listed.page_size, len(listed.services)) == (2, 1, 1)
    assert listed.services[0].access_token is None  # a list never shows tokens

    e = refused(sdk.list_services, m.ListServicesRequest(sort="Colour"))
    assert e.status_code == 422 and "Sort" in str(e.data)

    gone = check(sdk.delete_service("local", "svc_b").body)
    assert gone.request_id
    # No reconciler here: the service waits for its replicas to go, then the row does.
    assert sdk.describe_service("local", "svc_b").body.status == "Deleting"


def test_update_versions_start_stop_restart_events_and_diagnosis(sdk: Client) -> None:
    create(sdk, "svc")
    body = json.dumps({"metadata": {"cpu": 2}})
    check(sdk.update_service("local", "svc", m.UpdateServiceRequest(body=body)).body)
    svc = sdk.describe_service("local", "svc").body
    assert (svc.cpu, svc.current_version, svc.latest_version) == (2, 2, 2)

    versions = check(sdk.list_service_versions("local", "svc", m.ListServiceVersionsRequest()).body)
    assert [v.image_id for v in versions.versions] == [2, 1]
    assert json.loads(versions.versions[1].service_config)["metadata"]["cpu"] == 4
    check(sdk.update_service_version("local", "svc", m.UpdateServiceVersionRequest(version=1)).body)
    svc = sdk.describe_service("local", "svc").body
    assert (svc.cpu, svc.current_version, svc.latest_version) == (4, 1, 2)
    e = refused(
        sdk.update_service_version, "local", "svc", m.UpdateServiceVersionRequest(version=9)
    )
    assert e.status_code == 422 and "Version" in str(e.data)

    # replace: the body is the whole spec
    whole = seed_spec(name="svc")
    whole["metadata"] = {**whole["metadata"], "instance": 0, "cpu": 3}
    request = m.UpdateServiceRequest(body=json.dumps(whole), update_type="replace")
    sdk.update_service("local", "svc", request)
    assert sdk.describe_service("local", "svc").body.cpu == 3

    for call in (sdk.stop_service, sdk.start_service, sdk.restart_service):
        assert check(call("local", "svc").body).request_id
    sdk.stop_service("local", "svc")
    events = check(
        sdk.describe_service_event(
            "local", "svc", m.DescribeServiceEventRequest(page_num=1, page_size=100)
        ).body
    )
    reasons = [e.reason for e in events.events]
    assert {"Created", "Updated", "VersionChanged", "Restarting", "Stopping"} <= set(reasons)
    assert events.total_count == len(reasons) and events.total_page_num == 1
    later = m.DescribeServiceEventRequest(start_time="2100-01-01 00:00:00")
    assert sdk.describe_service_event("local", "svc", later).body.events == []
    warnings = m.DescribeServiceEventRequest(event_type="Warning")
    assert sdk.describe_service_event("local", "svc", warnings).body.events == []
    found = check(sdk.describe_service_diagnosis("local", "svc").body)
    assert found.diagnosis_list[0].error == "ServiceStopped"
    assert "eascmd start svc" in found.diagnosis_list[0].advices[0]


def test_autoscaler_actions(sdk: Client) -> None:
    create(sdk, "svc")
    strategy = m.CreateServiceAutoScalerRequestScaleStrategies(
        metric_name="qps", threshold=100, service="svc"
    )
    request = m.CreateServiceAutoScalerRequest(min=1, max=3, scale_strategies=[strategy])
    check(sdk.create_service_auto_scaler("local", "svc", request).body)
    auto = check(sdk.describe_service_auto_scaler("local", "svc").body)
    assert (auto.min_replica, auto.max_replica, auto.service_name) == (1, 3, "svc")
    assert [(s.metric_name, s.threshold) for s in auto.scale_strategies] == [("qps", 100)]

    update = m.UpdateServiceAutoScalerRequest(
        min=2,
        max=4,
        scale_strategies=[
            m.UpdateServiceAutoScalerRequestScaleStrategies(metric_name="qps", threshold=50)
        ],
    )
    check(sdk.update_service_auto_scaler("local", "svc", update).body)
    assert sdk.describe_service_auto_scaler("local", "svc").body.max_replica == 4
    other = m.CreateServiceAutoScalerRequestScaleStrategies(
        metric_name="qps", threshold=1, service="another"
    )
    e = refused(
        sdk.create_service_auto_scaler,
        "local",
        "svc",
        m.CreateServiceAutoScalerRequest(min=1, max=2, scale_strategies=[other]),
    )
    assert e.status_code == 422 and "scaleStrategies[0].service" in str(e.data)
    check(sdk.delete_service_auto_scaler("local", "svc").body)
    assert refused(sdk.describe_service_auto_scaler, "local", "svc").status_code == 404


def test_cron_scaler_actions(sdk: Client) -> None:
    create(sdk, "svc")
    assert refused(sdk.describe_service_cron_scaler, "local", "svc").status_code == 404
    jobs = [
        m.CreateServiceCronScalerRequestScaleJobs(
            name="morning", schedule="0 0 8 * * 1-5", target_size=3
        ),
        m.CreateServiceCronScalerRequestScaleJobs(schedule="0 0 20 * * *", target_size=1),
    ]
    request = m.CreateServiceCronScalerRequest(scale_jobs=jobs, exclude_dates=["* * * 1 1 *"])
    check(sdk.create_service_cron_scaler("local", "svc", request).body)
    cron = check(sdk.describe_service_cron_scaler("local", "svc").body)
    assert [(j.name, j.schedule, j.target_size, j.state) for j in cron.scale_jobs] == [
        ("morning", "0 0 8 * * 1-5", 3, "Waiting"),
        ("job-2", "0 0 20 * * *", 1, "Waiting"),
    ]
    assert cron.exclude_dates == ["* * * 1 1 *"]

    bad = m.UpdateServiceCronScalerRequest(
        scale_jobs=[m.UpdateServiceCronScalerRequestScaleJobs(schedule="0 8 * * *", target_size=1)]
    )
    e = refused(sdk.update_service_cron_scaler, "local", "svc", bad)
    assert e.status_code == 422
    assert "ScaleJobs[0].Schedule" in str(e.data) and "6" in str(e.data)
    good = m.UpdateServiceCronScalerRequest(
        scale_jobs=[
            m.UpdateServiceCronScalerRequestScaleJobs(
                name="noon", schedule="0 0 12 * * *", target_size=2
            )
        ]
    )
    check(sdk.update_service_cron_scaler("local", "svc", good).body)
    assert [j.name for j in sdk.describe_service_cron_scaler("local", "svc").body.scale_jobs] == [
        "noon"
    ]
    check(sdk.delete_service_cron_scaler("local", "svc").body)
    assert refused(sdk.describe_service_cron_scaler, "local", "svc").status_code == 404


def test_mirror_release_and_groups(sdk: Client) -> None:
    create(sdk, "v1", group="g")
    create(sdk, "v2", group="g")
    request = m.CreateServiceMirrorRequest(ratio=10, target=["v2"])
    check(sdk.create_service_mirror("local", "v1", request).body)
    mirror = check(sdk.describe_service_mirror("local", "v1").body)
    assert (mirror.ratio, mirror.target, mirror.service_name) == ("10", "v2", "v1")
    update = m.UpdateServiceMirrorRequest(ratio=20, target=["v2"])
    check(sdk.update_service_mirror("local", "v1", update).body)
    assert sdk.describe_service_mirror("local", "v1").body.ratio == "20"
    check(sdk.delete_service_mirror("local", "v1").body)
    assert sdk.describe_service_mirror("local", "v1").body.ratio == "0"

    release = m.ReleaseServiceRequest(weight=30, traffic_state="grouping")
    check(sdk.release_service("local", "v2", release).body)
    svc = sdk.describe_service("local", "v2").body
    assert (svc.weight, svc.traffic_state) == (30, "grouping")

    groups = check(sdk.list_groups(m.ListGroupsRequest(page_number=1, page_size=10)).body)
    assert [(g.name, g.cluster_id) for g in groups.groups] == [("g", "local")]
    assert groups.groups[0].access_token is None
    group = check(sdk.describe_group("local", "g").body)
    assert group.name == "g" and group.access_token
    assert group.internet_endpoint.endswith("/api/predict/g")
    ends = check(sdk.describe_group_endpoints("local", "g").body)
    assert ends.access_token == group.access_token
    assert ends.endpoints[0].internet_endpoints == [group.internet_endpoint]


def test_labels_lock_and_clone(sdk: Client) -> None:
    create(sdk, "svc", {"team": "search"})
    check(
        sdk.update_service_label(
            "local", "svc", m.UpdateServiceLabelRequest(labels={"env": "prod"})
        ).body
    )
    labels = sdk.describe_service("local", "svc").body.labels
    assert [(lb.label_key, lb.label_value) for lb in labels] == [
        ("env", "prod"),
        ("team", "search"),
    ]
    check(sdk.delete_service_label("local", "svc", m.DeleteServiceLabelRequest(keys=["team"])).body)
    assert [lb.label_key for lb in sdk.describe_service("local", "svc").body.labels] == ["env"]

    def lock(level: str) -> None:
        request = m.UpdateServiceSafetyLockRequest(lock=level)
        check(sdk.update_service_safety_lock("local", "svc", request).body)

    lock("dangerous")
    assert sdk.describe_service("local", "svc").body.safety_lock == "dangerous"
    for call in (sdk.delete_service, sdk.stop_service, sdk.restart_service):
        e = refused(call, "local", "svc")
        assert e.status_code == 403 and "UpdateServiceSafetyLock" in str(e.data)
    body = json.dumps({"metadata": {"cpu": 2}})
    sdk.update_service("local", "svc", m.UpdateServiceRequest(body=body))  # not dangerous
    lock("all")
    e = refused(sdk.update_service, "local", "svc", m.UpdateServiceRequest(body=body))
    assert e.status_code == 403
    e = refused(
        sdk.update_service_label,
        "local",
        "svc",
        m.UpdateServiceLabelRequest(labels={"a": "b"}),
    )
    assert e.status_code == 403
    e = refused(
        sdk.update_service_safety_lock,
        "local",
        "svc",
        m.UpdateServiceSafetyLockRequest(lock="everything"),
    )
    assert e.status_code == 422 and "Lock" in str(e.data)

    clone = m.CloneServiceRequest(body=json.dumps({"name": "svc_copy"}), labels={"k": "v"})
    made = check(sdk.clone_service("local", "svc", clone).body)
    assert made.service_name == "svc_copy"
    copy = sdk.describe_service("local", "svc_copy").body
    assert json.loads(copy.service_config)["metadata"]["cpu"] == 2
    assert [(lb.label_key, lb.label_value) for lb in copy.labels] == [("k", "v")]
    assert copy.access_token != sdk.describe_service("local", "svc").body.access_token

    lock("none")
    check(sdk.delete_service("local", "svc").body)


# -- real replicas ---------------------------------------------------------------------------


@pytest.fixture
def plane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    monkeypatch.setitem(registry._LOADED, "fake", Processor("fake", validate=list, plan=fake_plan))
    settings = Settings(data_dir=tmp_path, admin_token=ADMIN)
    migrate.upgrade(settings.sqlalchemy_url)
    loop = LoopThread()
    control = ControlPlane(settings)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    serving = loop.run(_start(control, sock))
    try:
        yield sdk_client(port, settings.cluster_id)
    finally:
        control.stop()
        loop.run(asyncio.wait_for(serving, 30), timeout=40)
        loop.close()


async def _start(control: ControlPlane, sock: Any) -> asyncio.Task[None]:
    return asyncio.create_task(control.serve(sock))


def instances(sdk: Client, name: str) -> list[Any]:
    body = sdk.list_service_instances("local", name, m.ListServiceInstancesRequest()).body
    check(body)
    return list(body.instances)


def test_instances_logs_restarts_and_diagnosis_with_real_replicas(plane: Client) -> None:
    sdk = plane
    spec = {
        "name": "fake_svc",
        "processor": "fake",
        "processor_params": ["serve"],
        "metadata": {"instance": 2},
    }
    sdk.create_service(m.CreateServiceRequest(body=json.dumps(spec)))
    wait_until(lambda: [i.status for i in instances(sdk, "fake_svc")] == ["Running"] * 2, 30)
    first, second = instances(sdk, "fake_svc")
    assert first.ready_processes == 1 and first.inner_ip == "127.0.0.1" and first.instance_port
    assert sdk.describe_service("local", "fake_svc").body.status == "Running"
    assert sdk.describe_service_diagnosis("local", "fake_svc").body.diagnosis_list == []

    logs = check(
        sdk.describe_service_log(
            "local", "fake_svc", m.DescribeServiceLogRequest(instance_name=first.instance_name)
        ).body
    )
    assert any("fake replica on" in line for line in logs.logs)
    assert logs.total_count == len(logs.logs)

    e = refused(
        sdk.delete_service_instances,
        "local",
        "fake_svc",
        m.DeleteServiceInstancesRequest(instance_list="fake_svc-99"),
    )
    assert e.status_code == 404 and first.instance_name in str(e.data)
    request = m.DeleteServiceInstancesRequest(instance_list=first.instance_name)
    check(sdk.delete_service_instances("local", "fake_svc", request).body)

    def replaced() -> bool:
        now = {i.instance_name: i.status for i in instances(sdk, "fake_svc")}
        return (
            len(now) == 2
            and set(now.values()) == {"Running"}
            and first.instance_name not in now
            and second.instance_name in now  # the other one is left alone
        )

    wait_until(replaced, 30)

    check(sdk.restart_service("local", "fake_svc").body)  # every replica

    def rolled() -> bool:
        now = {i.instance_name: i.status for i in instances(sdk, "fake_svc")}
        return (
            len(now) == 2 and set(now.values()) == {"Running"} and second.instance_name not in now
        )

    wait_until(rolled, 30)

    broken = {"name": "broken", "processor": "fake", "processor_params": ["exit:3"]}
    sdk.create_service(m.CreateServiceRequest(body=json.dumps(broken)))

    def diagnosed() -> list[Any]:
        return list(sdk.describe_service_diagnosis("local", "broken").body.diagnosis_list)

    wait_until(lambda: any("model pull failed" in str(d.causes) for d in diagnosed()), 30)
    check(sdk.describe_service_diagnosis("local", "broken").body)


def test_access_token_shown_to_admin_and_developer_not_to_viewer(
    sdk: Client, live_api: LiveServer, settings: Settings
) -> None:
    create(sdk, "svc")

    def key(role: str) -> Client:
        made = httpx.post(
            f"{live_api.url}/api/v2/accesskeys",
            json={"Role": role},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert made.status_code == 200, made.text
        pair = made.json()
        return sdk_client(
            live_api.port, "local", f"{pair['AccessKeyId']}:{pair['AccessKeySecret']}"
        )

    token = sdk.describe_service("local", "svc").body.access_token
    assert token
    assert key("developer").describe_service("local", "svc").body.access_token == token
    viewer = key("viewer")
    shown = viewer.describe_service("local", "svc").body
    assert shown.service_name == "svc" and shown.access_token is None
    assert viewer.describe_service_endpoints("local", "svc").body.access_token is None
    assert refused(viewer.restart_service, "local", "svc").status_code == 403
