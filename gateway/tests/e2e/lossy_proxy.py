"""An HTTP proxy that loses answers on purpose, in front of one gateway instance.

The request reaches the gateway, the gateway acts and answers, and the proxy closes the
client's connection instead of passing the answer on: the fault the ledger exists for.
Which answers are lost is armed per tool (`drop_next("refund")`): the next `tools/call` of
that tool, whatever the client, era or transport details.
"""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Hop-by-hop headers, not forwarded (RFC 9110 §7.6.1).
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host"}


def tool_called(body: bytes) -> str | None:
    """The tool a JSON-RPC `tools/call` body calls; None for anything else."""
    try:
        message: Any = json.loads(body)
    except ValueError:
        return None
    if isinstance(message, dict) and message.get("method") == "tools/call":
        params = message.get("params") or {}
        name = params.get("name")
        return name if isinstance(name, str) else None
    return None


class LossyProxy:
    """Forwards HTTP/1.1 requests to `target` (`host:port`); loses the armed answers."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._armed: dict[str, int] = {}
        self.dropped: list[str] = []
        self.forwarded = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                host, port = proxy.target.rsplit(":", 1)
                upstream = http.client.HTTPConnection(host, int(port), timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                headers["Host"] = proxy.target
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    payload = response.read()
                except OSError as e:
                    self.send_error(502, f"gateway unreachable: {e}")
                    return
                finally:
                    upstream.close()
                tool = tool_called(body)
                if tool is not None and proxy._take(tool):
                    # The gateway answered; the client never hears it.
                    self.close_connection = True
                    return
                with proxy._lock:
                    proxy.forwarded += 1
                self.send_response(response.status, response.reason)
                for k, v in response.getheaders():
                    if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _forward
            do_POST = _forward
            do_DELETE = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def addr(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.addr}/mcp"

    def drop_next(self, tool: str, times: int = 1) -> None:
        """Loses the answers of the next `times` calls of `tool`."""
        with self._lock:
            self._armed[tool] = self._armed.get(tool, 0) + times

    def _take(self, tool: str) -> bool:
        with self._lock:
            if self._armed.get(tool, 0) == 0:
                return False
            self._armed[tool] -= 1
            self.dropped.append(tool)
            return True

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
