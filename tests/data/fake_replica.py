"""A stand-in replica process for local-runtime tests: serves /v2/health/ready on the
given port (after an optional delay) and answers POSTs as inferences, or exits with a given
code, like a processor would."""

import http.server
import os
import signal
import subprocess
import sys
import time

port, behaviour = int(sys.argv[1]), sys.argv[2]
print(f"fake replica on {port}: {behaviour}", flush=True)
if behaviour == "stubborn":  # ignores SIGTERM, and so does its child (like a hung stub)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stub = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"stub pid {stub.pid}", flush=True)
if behaviour == "crash-leaving-stub":  # dies, its child lives on (a Triton stub's way)
    stub = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"stub pid {stub.pid}", flush=True)
    time.sleep(0.3)
    sys.exit(1)
if behaviour.startswith("exit:"):
    time.sleep(0.2)
    print("openeas: model pull failed: oss://b/models is empty", file=sys.stderr, flush=True)
    sys.exit(int(behaviour.split(":")[1]))
if behaviour.startswith("warm-when:"):  # like a warm-up: progress, then the ready file
    go = behaviour.removeprefix("warm-when:")

    def warm() -> None:
        while not os.path.exists(go):
            time.sleep(0.05)
        with open(os.environ["OPENEAS_PROGRESS_FILE"], "w") as f:
            f.write(
                '{"phase": "warmed up", "files_done": 0, "files_total": 0, "bytes_done": 0, '
                '"bytes_total": 0, "requests_done": 2, "requests_total": 2, '
                '"started_at": 1.0, "warm_up_seconds": 0.5}'
            )
        open(os.environ["OPENEAS_READY_FILE"], "w").close()

    import threading

    threading.Thread(target=warm, daemon=True).start()
ready_at = time.monotonic() + float(os.environ.get("FAKE_READY_AFTER", "0"))
# "until:<path>": ready once that file exists (the test says when loading is over);
# "ring-until:<path>" also rings the runtime's doorbell, as the triton processor does: its
# server started at once, and ready once the file exists. "mute-until:<path>" never rings.
_, _, ready_path = behaviour.partition("until:")
ready_file = ready_path or None
rings = behaviour.startswith("ring-until:")
if rings:
    bell = int(os.environ["OPENEAS_DOORBELL_FD"])
    os.write(bell, b"s")


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.path == "/v2/health/ready" and time.monotonic() >= ready_at
        ok = ok and (ready_file is None or os.path.exists(ready_file))
        self.send_response(200 if ok else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:  # an inference: answers once ready, as Triton does
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        ok = time.monotonic() >= ready_at and (ready_file is None or os.path.exists(ready_file))
        body = b'{"outputs": []}' if ok else b""
        self.send_response(200 if ok else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


server = http.server.HTTPServer(("127.0.0.1", port), Handler)  # listening from here
if rings:  # ready rung only once it would answer 200, as the processor does

    def ring_when_ready() -> None:
        while not os.path.exists(ready_path):
            time.sleep(0.01)
        os.write(bell, b"l")

    import threading

    threading.Thread(target=ring_when_ready, daemon=True).start()
server.serve_forever()
