"""A fake Kubernetes API server (http.server) for harness.report.kube: it records every request and
answers GET/PATCH of a node with `status`. `hold`: each PATCH waits for it to be set (`arrived`
is set first), so a test can act while the run waits on the API."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FakeApi"]

#: How long a held PATCH waits at most, s.
HOLD_S = 60.0


class FakeApi(ThreadingHTTPServer):
    def __init__(self, status: int = 200, hold: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.status = status
        self.requests: list[tuple[str, str, str, dict, str]] = []
        self.node = {"metadata": {"name": "ip-10-0-0-7", "resourceVersion": "991"},
                     "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}}
        self.arrived, self.release = threading.Event(), threading.Event()
        if not hold:
            self.release.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> FakeApi:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: FakeApi

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else {}
        self.server.requests.append((self.command, self.path, self.headers.get("Content-Type", ""),
                                     body, self.headers.get("Authorization", "")))
        if self.command == "PATCH":
            self.server.arrived.set()
            self.server.release.wait(HOLD_S)
        payload = json.dumps(self.server.node if self.server.status == 200 else
                             {"kind": "Status", "code": self.server.status}).encode()
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_PATCH = _answer

    def log_message(self, *args: object) -> None:
        pass
