"""The gateway's own cost per predict call, against a replica that costs next to nothing.

Run by hand (``python bench/hotpath.py``; needs ``nginx``, ``wrk`` and, for ``--callgrind``,
``valgrind`` from Debian). Where ``bench/gateway.py`` measures the proxies in front of real
Triton (what a user meets), this one takes Triton's time and its noise out, to read changes
to the gateway's request path:

- a *canned replica* (``--serve-replica``, its own process on the client core) answers every
  request with the same ``add_sub``-shaped Triton response, whatever it was sent;
- the gateway (``bench/gateway.py --serve-gateway``: a static route table) and ``nginx``
  (the same configuration as there) run in front of it, pinned to the server core; with
  ``--base`` also the gateway of another checkout;
- ``wrk`` drives each (``--model``: add_sub's 361 B request, or inception's 1 MB one) at 1,
  8 and 64 connections in interleaved rounds; printed are each
  proxy's CPU per request (user + system from ``/proc``, the least of the rounds) and the
  ratio to nginx's, measured in the same run;
- ``--callgrind N``: each gateway runs under ``valgrind --tool=callgrind`` and N sequential
  calls on one connection are counted in instructions per call, which does not move with
  whatever else the machine is doing (the same binary and inputs give the same count);
  with ``--floor`` also the blind TCP forwarder of ``bench/gateway.py``, what uvloop alone
  costs per call; with ``--keep DIR`` each profile stays there, for
  ``callgrind_annotate --inclusive=yes DIR/callgrind.gateway.out`` (where a call's
  instructions go). With the 1 MB request, ``memcpy`` (uvloop's copy of each read into a
  ``bytes``) is four fifths of the count, far more than its share of the time (reading
  without it was measured and left out: docs/architecture.md);
- ``--new-connections``: every call on a connection of its own with ``Connection: close``
  (wrk's rounds and the callgrind count alike), as from a client without keep-alive: the
  accept, the connection's objects, a head parsed in full and the close, per call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

# bench/builds.py: a --base checkout's gateway compiled like this one's
from builds import announce

# bench/deploy.py: what the benches share (run as scripts: their folder is on the path)
from deploy import cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
# bench/gateway.py's harness (nginx's configuration, wrk), loaded under another
# name: as "gateway" it would hide the project's package of that name.
_here = Path(__file__).with_name("gateway.py")
_spec = importlib.util.spec_from_file_location("bench_gateway", _here)
assert _spec is not None and _spec.loader is not None
bg = sys.modules["bench_gateway"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bg)

# What Triton answers an add_sub infer with binary outputs (head fields as it sends them).
_JSON = (
    b'{"model_name":"add_sub","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":'
    b'"FP32","shape":[4],"parameters":{"binary_data_size":16}},{"name":"OUTPUT1","datatype":'
    b'"FP32","shape":[4],"parameters":{"binary_data_size":16}}]}'
)
_BODY = _JSON + bytes(32)
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
    b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n%b"
    % (len(_JSON), len(_BODY), _BODY)
)


def serve_replica(port: int) -> None:
    """``--serve-replica``: answer each complete request with :data:`RESPONSE`."""
    import uvloop

    class Replica(asyncio.Protocol):
        def __init__(self) -> None:
            self.buf = b""  # a head not yet complete
            self.body_left = 0  # body bytes still to come (skipped, not kept: 1 MB bodies)
            self.transport: asyncio.Transport | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport  # type: ignore[assignment]

        def data_received(self, data: bytes) -> None:
            buf = self.buf + data if self.buf else data
            answers, at = 0, 0
            while True:
                if self.body_left:
                    took = min(self.body_left, len(buf) - at)
                    self.body_left -= took
                    at += took
                    if self.body_left:
                        break
                    answers += 1
                end = buf.find(b"\r\n\r\n", at)
                if end == -1:
                    break
                m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", buf[at:end])
                at = end + 4
                self.body_left = int(m.group(1)) if m else 0
                if not self.body_left:
                    answers += 1
            self.buf = buf[at:]
            if answers and self.transport is not None:
                self.transport.write(RESPONSE * answers)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Replica, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    uvloop.run(main())


def request_bytes(
    path: str, body: bytes, header_len: int, token: str, close: bool = False
) -> bytes:
    """The request wrk sends (the same head fields, in the same order); ``close``: with
    ``Connection: close``, as ``--new-connections`` sends it."""
    return (
        b"POST %b HTTP/1.1\r\nHost: 127.0.0.1\r\nInference-Header-Content-Length: %d\r\n"
        b"Content-Type: application/octet-stream\r\nAuthorization: %b\r\n%b"
        b"Content-Length: %d\r\n\r\n%b"
        % (
            path.encode(),
            header_len,
            token.encode(),
            b"Connection: close\r\n" if close else b"",
            len(body),
            body,
        )
    )


def sequential_calls(port: int, request: bytes, n: int, fresh: bool = False) -> None:
    """``n`` calls one after another, each answer read whole: on one connection, or
    (``fresh``) each on a connection of its own, closed after its answer."""
    conn = None
    try:
        for _ in range(n):
            if conn is None:
                conn = socket.create_connection(("127.0.0.1", port))
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sendall(request)
            got = b""
            while len(got) < len(RESPONSE) - len(_BODY) or not got.endswith(_BODY):
                chunk = conn.recv(65536)
                if not chunk:
                    raise RuntimeError("the gateway closed the connection")
                got += chunk
            if not got.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"unexpected answer: {got[:200]!r}")
            if fresh:
                conn.close()
                conn = None
    finally:
        if conn is not None:
            conn.close()


def callgrind_count(
    tree: Path,
    tmp: Path,
    name: str,
    replica: str,
    token: str,
    request: bytes,
    n: int,
    cpu: int,
    fresh: bool = False,
) -> float:
    """Instructions per call of the gateway in ``tree`` (``name`` "floor": the blind TCP
    forwarder instead), ``n`` sequential calls after a warm-up, counted by callgrind with
    instrumentation on for the calls only (``fresh``: each on a new connection)."""
    port = bg.free_port()
    out = tmp / f"callgrind.{name}.out"
    if name == "floor":  # it answers whatever the canned replica does
        serve = ["--serve-floor", str(port), replica.rsplit(":", 1)[1]]
        ready = f"http://127.0.0.1:{port}/"
    else:
        serve = ["--serve-gateway", str(port), replica, token]
        ready = f"http://127.0.0.1:{port}/gateway/healthz"
    argv = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}",
        sys.executable,
        str(tree / "bench" / "gateway.py"),
        *serve,
    ]
    env = dict(os.environ, PYTHONPATH=str(tree))
    with bg.process(bg.pinned(cpu, argv), tmp / f"{name}.callgrind.log", env=env) as proc:
        bg.wait_http(ready, proc, timeout=600)
        sequential_calls(port, request, 300, fresh)  # warm: caches, memos, pools
        control = ["callgrind_control"]
        subprocess.run([*control, "-i", "on", str(proc.pid)], check=True, capture_output=True)
        sequential_calls(port, request, n, fresh)
        subprocess.run([*control, "-i", "off", str(proc.pid)], check=True, capture_output=True)
    text = out.read_text(errors="replace")
    m = re.search(r"^totals: *(\d+)", text, re.M)
    if m is None or int(m.group(1)) == 0:
        # callgrind_control exits 0 even when it finds no such process (e.g. a wrapper
        # script ran under valgrind instead of Python): nothing was counted.
        raise RuntimeError(f"callgrind counted nothing in {out}")
    return int(m.group(1)) / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved wrk runs per point")
    ap.add_argument("--connections", default="1,8,64")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument(
        "--base",
        type=Path,
        help="another checkout, measured beside this one (compiled in place first when it "
        "has no build of its own: bench/builds.py)",
    )
    ap.add_argument(
        "--model",
        choices=("add_sub", "inception_graphdef"),
        default="add_sub",
        help="whose request the callers send (inception_graphdef: a 1 MB body); the canned "
        "replica's answer is add_sub's either way",
    )
    ap.add_argument(
        "--callgrind",
        type=int,
        metavar="N",
        default=0,
        help="instead of wrk: instructions per call over N sequential calls, per gateway",
    )
    ap.add_argument(
        "--floor",
        action="store_true",
        help="with --callgrind, also count the blind TCP forwarder (bench/gateway.py "
        "--serve-floor): what uvloop alone costs per call, two reads and two writes",
    )
    ap.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="with --callgrind, copy each gateway's profile to DIR/callgrind.<name>.out, "
        "to read with callgrind_annotate",
    )
    ap.add_argument(
        "--new-connections",
        action="store_true",
        help="every call on a new connection (Connection: close), as bench/gateway.py's "
        "flag: what a client without keep-alive costs the gateway per call",
    )
    ap.add_argument("--serve-replica", type=int, metavar="PORT")
    args = ap.parse_args(argv)
    if args.serve_replica:
        serve_replica(args.serve_replica)
        return 0
    os.sched_setaffinity(0, {args.client_cpu})
    announce(ROOT, args.base)
    token = secrets.token_hex(16)
    trees = {"gateway": ROOT} | ({"base": args.base.resolve()} if args.base else {})
    with tempfile.TemporaryDirectory(prefix="openeas-hotpath-") as tmpdir:
        tmp = Path(tmpdir)
        (workload,) = [w for w in bg.make_bodies(tmp, 0, 0) if w.model == args.model]
        body = workload.body.read_bytes()
        path = f"/api/predict/{bg.SERVICE}/v2/models/add_sub/infer"
        request = request_bytes(path, body, workload.header_len, token, args.new_connections)
        replica_port = bg.free_port()
        replica = f"http://127.0.0.1:{replica_port}"
        with contextlib.ExitStack() as stack:
            rep = stack.enter_context(
                bg.process(
                    bg.pinned(
                        args.client_cpu,
                        [sys.executable, __file__, "--serve-replica", str(replica_port)],
                    ),
                    tmp / "replica.log",
                )
            )
            bg.wait_http(f"{replica}/", rep)  # it answers any request
            if args.callgrind:
                if shutil.which("valgrind") is None:
                    print("bench: valgrind not found (apt-get install valgrind)", file=sys.stderr)
                    return 2
                print(f"instructions per call, {args.callgrind} sequential calls (callgrind):")
                if args.floor:
                    trees["floor"] = ROOT
                counts = {
                    name: callgrind_count(
                        tree,
                        tmp,
                        name,
                        replica,
                        token,
                        request,
                        args.callgrind,
                        args.server_cpu,
                        args.new_connections,
                    )
                    for name, tree in trees.items()
                }
                if args.keep:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    for name in counts:
                        shutil.copy(tmp / f"callgrind.{name}.out", args.keep)
                for name, ir in counts.items():
                    line = f"  {name:8s} {ir:12,.0f}"
                    if name == "gateway" and "base" in counts:
                        line += f"  ({ir / counts['base']:.3f}x base)"
                    print(line, flush=True)
                return 0
            return wrk_rounds(args, stack, tmp, trees, replica, replica_port, token, workload)


def wrk_rounds(
    args: argparse.Namespace,
    stack: contextlib.ExitStack,
    tmp: Path,
    trees: dict[str, Path],
    replica: str,
    replica_port: int,
    token: str,
    workload: bg.Workload,
) -> int:
    """CPU per request of nginx and each gateway under wrk, interleaved rounds."""
    lua = tmp / "post.lua"
    lua.write_text(bg.WRK_LUA)
    nginx_port = bg.free_port()
    (tmp / "nginx.conf").write_text(
        bg.NGINX_CONF.format(
            tmp=tmp, token=token, triton_port=replica_port, port=nginx_port, service=bg.SERVICE
        )
    )
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    ngx = stack.enter_context(
        bg.process(
            bg.pinned(args.server_cpu, [nginx, "-c", str(tmp / "nginx.conf"), "-p", str(tmp)]),
            tmp / "nginx.log",
        )
    )
    ports = {"nginx": nginx_port}
    pids = {"nginx": ngx.pid}
    for name, tree in trees.items():
        port = bg.free_port()
        argv = [sys.executable, str(tree / "bench" / "gateway.py"), "--serve-gateway"]
        argv += [str(port), replica, token]
        proc = stack.enter_context(
            bg.process(
                bg.pinned(args.server_cpu, argv),
                tmp / f"{name}.log",
                env=dict(os.environ, PYTHONPATH=str(tree)),
            )
        )
        bg.wait_http(f"http://127.0.0.1:{port}/gateway/healthz", proc)
        ports[name], pids[name] = port, proc.pid
    bg.wait_http(f"http://127.0.0.1:{nginx_port}/", ngx)
    prefix = f"/api/predict/{bg.SERVICE}"
    print(
        f"canned replica; proxies pinned to CPU {args.server_cpu}, wrk and the replica to "
        f"CPU {args.client_cpu}; CPU µs per request, least of {args.repeat} rounds:"
    )
    failures = 0
    for c in (int(x) for x in args.connections.split(",")):
        cpu: dict[str, list[float]] = {name: [] for name in ports}
        rps: dict[str, list[float]] = {name: [] for name in ports}
        p50: dict[str, list[float]] = {name: [] for name in ports}
        for round_no in range(args.repeat):
            for name in bg.round_order(list(ports), round_no):
                port = ports[name]
                base = f"http://127.0.0.1:{port}"
                path = f"{prefix}/v2/models/add_sub/infer"
                wrk = (args.client_cpu, base, path, workload, token, c)
                bg.run_wrk(*wrk, 1.0, lua, args.new_connections)  # warm
                before = cpu_seconds(pids[name])
                r = bg.run_wrk(*wrk, args.duration, lua, args.new_connections)
                after = cpu_seconds(pids[name])
                failures += r.non200 + r.sockerr
                cpu[name].append((after - before) * 1e6 / max(1, r.requests))
                rps[name].append(r.rps)
                p50[name].append(r.p50_ms)
        nginx_us = min(cpu["nginx"])
        parts = []
        for name in ports:
            us = min(cpu[name])
            part = f"{name} {us:5.1f}"
            if name != "nginx":
                part += f" ({us / nginx_us:.2f}x nginx"
                if name == "gateway" and "base" in cpu:
                    part += f", {us / min(cpu['base']):.2f}x base"
                part += ")"
            mid = len(rps[name]) // 2
            part += f" [{sorted(rps[name])[mid]:.0f} rps, p50 {sorted(p50[name])[mid]:.3f} ms]"
            parts.append(part)
        print(f"  c={c:<3d} " + " | ".join(parts), flush=True)
    if failures:
        print(f"\n{failures} requests failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
