"""Today's EAS JSON for Triton, as written (issue 58's config): an image whose command runs
``tritonserver --model-repository=/models`` with the repository mounted from OSS. On the
local runtime (``openeas up``) it runs through the local Triton processor, its repository
pulled from the OSS stand-in into the folder standing for ``/models``, and the seed's client
is answered through the gateway; describe shows the spec as written and says why the image
itself does not run here."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_up import Platform, platform, seed_client
from tests.fixtures_triton import check_example_models

pytestmark = pytest.mark.slow
__all__ = ["platform"]


def test_image_config_with_an_oss_mount_serves_the_seed_client(
    platform: Platform, oss_model_repo: str
) -> None:
    config = {
        "metadata": {
            "name": "triton_mnist",
            "instance": 1,
            "cpu": 2,
            "memory": 4000,
            "workspace_id": "ws-58",
            "rpc.keepalive": 30000,
        },
        "cloud": {"computing": {"instance_type": "ecs.gn6i-c4g1.xlarge"}},
        "containers": [
            {
                "image": "eas-registry-vpc.cn-shanghai.cr.aliyuncs.com/pai-eas/"
                "tritonserver:25.03-py3",
                "command": "tritonserver --model-repository=/models",
                "port": 8000,
            }
        ],
        "storage": [
            {"mount_path": "/models", "oss": {"path": oss_model_repo + "/", "readOnly": False}}
        ],
        "labels": {"$SYSTEM_SERVICE_DEPLOY_TYPE": "triton"},
    }
    path = platform.tmp / "triton.config"
    path.write_text(json.dumps(config))
    out = platform.eascmd("create", str(path))
    assert "[OK] Service is running" in out, out
    token = out.splitlines()[4].split("|")[2].strip()
    endpoint = f"127.0.0.1:{platform.port}/api/predict/triton_mnist"

    body = seed_client(endpoint, token)
    assert body["model_name"] == "inception_graphdef"
    assert body["outputs"][0]["shape"] == [1, 1001]
    check_example_models(endpoint, {"Authorization": token})

    desc = platform.describe("triton_mnist")
    written = json.loads(desc["ServiceConfig"])  # a JSON string, as EAS answers it
    assert written["containers"] == config["containers"]
    assert written["storage"] == config["storage"]
    assert written["labels"] == config["labels"]
    assert written["metadata"]["workspace_id"] == "ws-58"
    assert written["metadata"]["rpc"]["keepalive"] == 30000
    notes = {n["field"]: n["reason"] for n in desc["NotHonoured"]}
    assert "runs no images" in notes["containers[].image"]
    assert "instance types" in notes["cloud.computing.instance_type"]
    assert "workspaces" in notes["metadata.workspace_id"]
    # the pull went through today's pull: the replica's log says where it served from
    log = platform.eascmd("logs", "triton_mnist", "--tail", "400")
    assert f"serving {oss_model_repo}/" in log, log[-2000:]
