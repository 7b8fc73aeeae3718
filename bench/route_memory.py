"""The gateway's route table: memory per route as a gateway builds it, in-process.

Run by hand (``python bench/route_memory.py --routes 10000 --page 500 --base DIR``); the
figures go to docs/performance.md. For each checkout, a fresh interpreter with that
checkout's code builds ``--routes`` routes of services at zero as the control plane sends
them (tokens included), serialises them in answers of ``--page`` routes, then parses and
applies each to a :class:`gateway.routing.route_table.RouteState`, and prints the resident
memory grown (``/proc/self/status``) and the Python heap grown (tracemalloc, a second run)
per route. A checkout whose wire has pages (``RouteTable.next_page``) gets pages; an older
one a whole first answer, then the rest as deltas (the same table in the end). ``--page 0``:
one whole answer. ``--base DIR`` measures another checkout right after this one and prints
the ratios this / base.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contract.wire import Route

ROOT = Path(__file__).resolve().parent.parent


def synthetic_routes(start: int, stop: int) -> Iterator[Route]:
    """Services ``svc_<i>`` at zero (as after a burst of creates) for ``i`` in
    ``[start, stop)``, as the control plane sends them, tokens included; made as taken."""
    import secrets

    from contract.wire import Route, token_digest

    for i in range(start, stop):
        token = secrets.token_urlsafe(32)
        yield Route(
            service=f"svc_{i:06d}",
            token_sha256=token_digest(token),
            token=token,
            endpoints=[],
            timeout_ms=600_000,
            status="Waiting",
        )


def answers(routes: int, page: int, version: int = 1) -> list[bytes]:
    """A whole table of ``routes`` services at zero (:func:`synthetic_routes`), as the
    control plane sends it: in answers of ``page`` routes when this checkout's wire has
    pages (``page`` 0: one answer), else one whole answer and deltas."""
    from contract.wire import RouteTable

    paged = "next_page" in RouteTable.model_fields
    size = page or routes
    bodies = []
    for start in range(0, routes, size):
        batch = list(synthetic_routes(start, min(routes, start + size)))
        fields: dict[str, object] = {"full": start == 0}
        if paged:
            more = start + size < routes
            next_page = f"{version}.{start + size}" if more else None
            fields = {"continued": start > 0, "next_page": next_page}
        bodies.append(
            RouteTable(version=version, routes=batch, **fields).model_dump_json().encode()
        )
    return bodies


def measure(routes: int, page: int, trace: bool) -> float:
    """Bytes grown per route in this interpreter (run with the checkout on the path)."""
    import gc
    import tracemalloc

    from contract.wire import RouteTable
    from gateway.routing.balancer import EndpointPool
    from gateway.routing.route_table import RouteState

    bodies = answers(routes, page)
    state = RouteState(EndpointPool(), default_timeout_ms=600_000)
    gc.collect()
    if trace:
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0] if trace else rss()
    for body in bodies:  # (kept until measured: their memory is not the table's)
        state.apply(RouteTable.model_validate_json(body))
    gc.collect()
    after = tracemalloc.get_traced_memory()[0] if trace else rss()
    assert len(state.services) == routes
    return (after - before) / routes


def rss() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def run(tree: Path, routes: int, page: int) -> dict[str, float]:
    """Both figures for checkout ``tree``, each from an interpreter of its own."""
    out = {}
    for name, trace in (("resident", False), ("python heap", True)):
        # -P: not this folder first on the path (its gateway.py would hide the package).
        argv = [sys.executable, "-P", __file__, "--child", str(routes), str(page), str(int(trace))]
        env = dict(os.environ, PYTHONPATH=str(tree), OPENEAS_PURE_PYTHON="1")
        done = subprocess.run(argv, env=env, cwd=tree, capture_output=True, text=True, check=True)
        out[name] = json.loads(done.stdout)
    return out


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        routes, page, trace = (int(a) for a in sys.argv[2:5])
        print(json.dumps(measure(routes, page, bool(trace))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routes", type=int, default=10_000)
    parser.add_argument("--page", type=int, default=500, help="routes per answer (0: one)")
    parser.add_argument("--base", type=Path, help="another checkout, measured after this one")
    args = parser.parse_args()
    ours = run(ROOT, args.routes, args.page)
    base = run(args.base.resolve(), args.routes, args.page) if args.base else None
    how = f"answers of {args.page}" if args.page else "one answer"
    print(f"{args.routes} routes in {how}: bytes per route")
    for name, figure in ours.items():
        line = f"  {name:12s} this {figure:8.0f}"
        if base is not None:
            line += f"   base {base[name]:8.0f}   this / base {figure / base[name]:.2f}x"
        print(line)


if __name__ == "__main__":
    main()
