"""``openeas processor …``: the commands a replica (or an operator) runs.

``openeas.cli`` dispatches here. ``pull <uri> <dest>`` fetches a model repository;
``model-cache`` serves a node's model cache (:mod:`processors.model_cache.server`);
``run <processor> [--http-port …] -- <processor_params…>`` is every replica's command (see
``processors.exits`` for the exit codes). Processor params follow ``--`` verbatim, so
argparse never sees (or rewrites) the tenant's flags.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from processors import exits, progress, registry, repository
from processors.base import READY_FILE_ENV, Ports, ProcessorError
from processors.exits import fail


def main(argv: list[str]) -> int:
    """Run ``openeas processor <argv…>``; the process exit code."""
    head, params = _split_params(argv)
    parser = _parser()
    args = parser.parse_args(head)
    # A replica's log is its stderr: storage's progress and retry warnings go there too
    # (``pull`` prints its own summary, so only warnings).
    level = logging.WARNING if args.command == "pull" else logging.INFO
    logging.basicConfig(level=level, format="openeas: %(message)s")
    try:
        if args.command == "pull":
            if params is not None:
                parser.error("pull takes no processor params (nothing after --)")
            return _pull(args.uri, Path(args.dest), args.endpoint)
        if args.command == "model-cache":
            from processors.model_cache import server  # an HTTP server: not for a pull's start

            server.serve(
                args.dir,
                max_bytes=args.max_bytes,
                max_age_days=args.max_age_days,
                host=args.host,
                port=args.port,
            )
            return 0
        return _run(args, params)
    except KeyboardInterrupt:
        return exits.INTERRUPTED


def _split_params(argv: list[str]) -> tuple[list[str], list[str] | None]:
    if "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="openeas processor",
        description="What a replica runs. OSS credentials come from OSS_ACCESS_KEY_ID and "
        "OSS_ACCESS_KEY_SECRET.",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{pull,run,model-cache}"
    )

    pull = commands.add_parser(
        "pull",
        help="download a model repository to a directory",
        description="Download a model repository to a directory (progress to "
        f"${progress.ENV_FILE} when set).",
    )
    pull.add_argument("uri", help="oss://bucket/prefix, or a local directory to copy")
    pull.add_argument("dest", help="local directory (created; updated in place if present)")
    pull.add_argument("--endpoint", help="OSS endpoint (default: $OSS_ENDPOINT)")

    cache = commands.add_parser(
        "model-cache",
        help="serve a node's model cache to the pulls on that node",
        description="Serve cached model files over HTTP (GET/PUT /objects/<address>), "
        "bounded by --max-bytes (least recently used go first) and --max-age-days.",
    )
    cache.add_argument("--dir", type=Path, required=True, help="where the objects are kept")
    cache.add_argument("--max-bytes", type=_positive, required=True, help="size bound")
    cache.add_argument(
        "--max-age-days",
        type=float,
        default=14.0,
        help="drop objects unused this long (default 14)",
    )
    cache.add_argument("--host", default="0.0.0.0", help="listen address (default 0.0.0.0)")
    cache.add_argument("--port", type=int, default=8090, help="port (default 8090)")

    run = commands.add_parser(
        "run",
        help="pull the model repository, then run the processor's server",
        usage="openeas processor run <processor> [options] -- <processor_params...>",
    )
    run.add_argument("processor", help=f"one of: {', '.join(registry.names())}")
    run.add_argument("--http-port", type=int, default=8000, help="HTTP port (default 8000)")
    run.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (default 8001)")
    run.add_argument("--metrics-port", type=int, default=8002, help="metrics port (default 8002)")
    run.add_argument(
        "--host", default="127.0.0.1", help="listen address (default 127.0.0.1; 0.0.0.0 in a pod)"
    )
    run.add_argument(
        "--model-cache",
        type=Path,
        help="where remote repositories are pulled (default: $OPENEAS_MODEL_CACHE or a temp dir)",
    )
    run.add_argument(
        "--warm-up-data-path",
        metavar="PATH_OR_URI",
        help="request files replayed once the server is ready, before the replica reports "
        f"ready (${READY_FILE_ENV} is created then): a file or folder, or oss://bucket/prefix "
        "(default: none, ready as soon as the server is)",
    )
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"give a positive number of bytes, not {text}")
    return value


def _run(args: argparse.Namespace, params: list[str] | None) -> int:
    if params is None:
        return fail(
            exits.BAD_PARAMS,
            "give the processor params after --, e.g. "
            "openeas processor run triton -- --model-repository=oss://<bucket>/<prefix>",
        )
    try:
        processor = registry.get(args.processor)
    except ProcessorError as e:
        return fail(exits.BAD_PARAMS, e.one_line())
    if processor.run is None:
        return fail(exits.BAD_PARAMS, f"processor {processor.name!r} has no runner")
    ports = Ports(args.http_port, args.grpc_port, args.metrics_port, host=args.host)
    return processor.run(params, ports, args.model_cache, args.warm_up_data_path)


def _pull(uri: str, dest: Path, endpoint: str | None) -> int:
    try:
        report = repository.pull(uri, dest, endpoint=endpoint)  # else OSS_ENDPOINT
    except repository.PullFailed as e:
        return fail(e.exit_code, f"model pull failed: {e}")
    print(
        f"pulled {uri} into {report.dest}: {report.files} files, "
        f"{report.bytes_downloaded} bytes downloaded, {report.bytes_reused} reused, "
        f"{report.bytes_from_cache} from the node cache, {report.seconds:.2f} s"
    )
    return 0
