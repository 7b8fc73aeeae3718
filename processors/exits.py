"""Exit codes of ``openeas processor …`` and the one-line failure report.

Runtimes read a replica's exit code to tell outcomes apart without parsing logs: the local
runtime and the kubernetes runtime map them to a service status (``Failed`` with the reason
vs. a retry with backoff). Every failure before the processor's server starts ends with one
line on stderr, ``openeas: <reason>`` (retry warnings may precede a temporary one).

====  ===================================================================================
0-    the server's own exit code; 128+N if signal N killed it
2     bad processor params or usage (the line names the param and what to type)
3     permanent model-repository failure: missing bucket or prefix, empty repository,
      access denied, bad signature, local path missing (mark the service Failed)
75    temporary pull failure after bounded retries: network, 5xx (``EX_TEMPFAIL``: retry)
4     the server has no backend for a model of the repository (the line names the fix)
5     a warm-up request (``warm_up_data_path``) is malformed or Triton refused it: the
      replica never reports ready (the line names the file and Triton's answer)
127   the server binary is missing (the line names every way to provide it)
130   interrupted (Ctrl-C) before the server started
====  ===================================================================================
"""

from __future__ import annotations

import sys

BAD_PARAMS = 2
PULL_PERMANENT = 3
BACKEND_MISSING = 4
WARM_UP_FAILED = 5
PULL_TEMPORARY = 75
NO_SERVER_BINARY = 127
INTERRUPTED = 130

# Codes after which restarting cannot help, with the reason a service shows for each; the
# local and the kubernetes runtimes both read this.
PERMANENT = {
    BAD_PARAMS: "BadProcessorParams",
    PULL_PERMANENT: "ModelPullFailed",
    BACKEND_MISSING: "BackendMissing",
    WARM_UP_FAILED: "WarmUpFailed",
    NO_SERVER_BINARY: "ServerBinaryMissing",
}


def say(line: str) -> None:
    """One ``openeas: …`` line on stderr (the replica's log)."""
    print(f"openeas: {line}", file=sys.stderr, flush=True)


def fail(code: int, reason: str) -> int:
    """Report ``reason`` in one line and hand back ``code`` for the caller to exit with."""
    say(reason)
    return code
