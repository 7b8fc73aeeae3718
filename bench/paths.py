"""The modules a path passes through, and how often it comes back to one it already left.

Run by hand from a checkout (``python bench/paths.py predict|create``); the figures go into
a layering change's closing note (docs/performance.md). A profile hook follows the innermost
frame of the project's packages on every call and return, in every thread, and counts:

- ``predict``: one call ``POST /api/predict/<service>/…`` through the gateway (a static
  route table, as ``bench/gateway.py --serve-gateway``) to a canned replica
  (``bench/hotpath.py --serve-replica``) and back, after five that warm it up;
- ``create``: ``eascmd create`` until the service is Running, against the control plane with
  a runtime whose replicas are ready at once (the console tests' ``Platform``).

Printed: the modules, the module visits (a visit ends when another module runs) and the
returns (visits to a module already left). The ``create`` count moves a little with the
reconciler's polling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OURS = ("contract", "startup", "processors", "controlplane", "gateway", "eascmd", "openeas")


class Trace:
    """Each thread's sequence of modules, one entry per visit."""

    def __init__(self) -> None:
        self.visits: dict[int, list[str]] = {}

    @staticmethod
    def _ours(frame: FrameType | None) -> str | None:
        while frame is not None:
            name = str(frame.f_globals.get("__name__", ""))
            if name.split(".")[0] in OURS:
                return name
            frame = frame.f_back
        return None

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        module = self._ours(frame if event == "call" else frame.f_back)
        if module is None:
            return
        seq = self.visits.setdefault(threading.get_ident(), [])
        if not seq or seq[-1] != module:
            seq.append(module)

    def on(self) -> None:
        self.visits.clear()
        threading.setprofile(self.hook)
        sys.setprofile(self.hook)

    def off(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]

    def report(self, path: str) -> str:
        modules = {m for seq in self.visits.values() for m in seq}
        visits = sum(len(seq) for seq in self.visits.values())
        return (
            f"{path}: {len(modules)} modules, {visits} module visits, "
            f"{visits - len(modules)} returns to a module already left\n  "
            + " ".join(sorted(modules))
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def predict(trace: Trace) -> None:
    from contract.wire import Route, RouteTable, token_digest
    from gateway.app import start_gateway
    from gateway.route_source import StaticRouteSource
    from gateway.settings import GatewaySettings

    port = free_port()
    replica = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "hotpath.py"), "--serve-replica", str(port)]
    )
    route = Route(
        service="svc",
        token_sha256=token_digest("token"),
        endpoints=[f"http://127.0.0.1:{port}"],
        timeout_ms=60_000,
        status="Running",
    )
    body = b'{"inputs":[]}'
    head = b"POST /api/predict/svc/v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
    request = head + b"Authorization: token\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)

    async def main() -> None:
        gport = free_port()
        source = StaticRouteSource(RouteTable(version=1, routes=[route]))
        runner = await start_gateway(GatewaySettings(), source, host="127.0.0.1", port=gport)
        for _ in range(100):  # the replica starts
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", gport)
                break
            except OSError:
                await asyncio.sleep(0.05)

        async def call() -> None:
            writer.write(request)
            answer = await reader.readuntil(b"\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200"), answer
            length = next(
                int(line.split(b":")[1])
                for line in answer.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)

        await asyncio.sleep(1.0)
        for _ in range(5):
            await call()
        trace.on()
        await call()
        trace.off()
        writer.close()
        await runner.close()

    try:
        asyncio.run(main())
    finally:
        replica.terminate()
        replica.wait()


def create(trace: Trace) -> None:
    from eascmd import cli
    from tests.console.conftest import Platform
    from tests.controlplane import conftest as cp

    loops: list[asyncio.AbstractEventLoop] = []
    serve = cp.LiveServer._serve

    async def _serve(self: cp.LiveServer, sock: socket.socket) -> None:
        loops.append(asyncio.get_running_loop())
        await serve(self, sock)

    cp.LiveServer._serve = _serve  # type: ignore[method-assign]
    tmp = Path(tempfile.mkdtemp(prefix="openeas-paths-"))
    os.environ["HOME"] = str(tmp / "home")
    platform = Platform(tmp / "data")
    try:
        assert cli.main(["config", "-e", platform.url, "-k", cp.ADMIN]) == 0
        config = tmp / "service.json"
        config.write_text(json.dumps(cp.seed_spec(name="paths_probe")))
        trace.on()
        loops[0].call_soon_threadsafe(sys.setprofile, trace.hook)  # the server's thread
        time.sleep(0.3)
        code = cli.main(["create", str(config)])
        loops[0].call_soon_threadsafe(sys.setprofile, None)
        time.sleep(0.3)
        trace.off()
        assert code == 0
    finally:
        platform.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", choices=["predict", "create"])
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    trace = Trace()
    (predict if args.path == "predict" else create)(trace)
    print(trace.report(args.path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
