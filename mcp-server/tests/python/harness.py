"""The world of the Python end-to-end test, all real processes: a 3-node ledger started by
deploy/cluster.sh, the fake providers, and two ledger-mcp-server instances sharing one
configuration, the way deploy/mcp-demo.sh and the Rust tests start them.

Every process's pid is written to the work folder (`*.pid`) so that run.sh can stop
whatever is left if this process is killed (by its time bound) before it cleans up.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parents[3]
BIN = Path(os.environ.get("LEDGER_BIN_DIR", REPO / "target" / "debug"))

OPERATOR_KEY = "py-e2e-operator-key-0001"
TENANT_KEY = "py-e2e-tenant-acme-00001"
AGENT_TOKEN = "py-e2e-agent-token-acme-01"
PROTOCOL = "2026-07-28"
LEGACY_PROTOCOL = "2025-11-25"

# The server gives up on a provider after this long; the tests hold commits longer.
PROVIDER_TIMEOUT_MS = 2_000
# Each attempt's lease (heartbeats extend it while a dispatch runs).
LEASE_MS = 5_000
# What the operator's policy says the help desk and the deploy service may take to
# process a request they received: longer than any hold the tests inject.
PROCESSING_MS_MAX = 10_000

# The operator's policies, with the fields the server needs to derive keys from the
# target (`target_fields`) and to distrust an early "not found" (`processing_ms_max`,
# `visibility_lag_ms`: a look-up proves absence only after the dispatch's lease end plus
# both). Retries may observe an unsettled effect many times, hence `observations_max`.
POLICIES = f"""
[[tenant]]
name = "acme"

[[tool]]
tenant = "acme"
tool = "pay/refund"
class = "keyed_idempotent"
provider_horizon_ms = 86400000
processing_ms_max = 30000
target_fields = ["/order_id"]

[[tool]]
tenant = "acme"
tool = "desk/create_ticket"
class = "unkeyed_create"
processing_ms_max = {PROCESSING_MS_MAX}
visibility_lag_ms = 0
observations_max = 20

[[tool]]
tenant = "acme"
tool = "msg/send_message"
class = "irreversible"
confirmation_required = true
processing_ms_max = 5000
visibility_lag_ms = 200

[[tool]]
tenant = "acme"
tool = "deploy/start_deploy"
class = "long_running_job"
target_fields = ["/service"]
processing_ms_max = {PROCESSING_MS_MAX}
visibility_lag_ms = 0
observations_max = 20

[[tool]]
tenant = "acme"
tool = "pay/get_order"
class = "read_only"
"""


class HarnessError(RuntimeError):
    """The world could not be started."""


def free_base_port() -> int:
    """A port P with P+1..P+3 free: deploy/cluster.sh puts node N on BASE_PORT+N."""
    for _ in range(200):
        base = random.randrange(20_000, 60_000)
        sockets = []
        try:
            for n in (1, 2, 3):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", base + n))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise HarnessError("no three consecutive free ports")


@dataclass
class Service:
    """A child process that printed `listening <addr>`."""

    name: str
    process: subprocess.Popen[bytes]
    addr: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_service(name: str, argv: list[str], work: Path) -> Service:
    """Runs `argv` with its log in `work/<name>.log` and waits for its address."""
    log = open(work / f"{name}.log", "wb")
    env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info"))
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, env=env)
    (work / f"{name}.pid").write_text(str(process.pid))
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([process.stdout], [], [], max(remaining, 0))
        if not ready:
            process.kill()
            raise HarnessError(f"{name} printed no address; see {work / (name + '.log')}")
        chunk = os.read(process.stdout.fileno(), 1)
        if not chunk:
            raise HarnessError(f"{name} exited; see {work / (name + '.log')}")
        line += chunk
    text = line.decode().strip()
    if not text.startswith("listening "):
        raise HarnessError(f"{name} printed {text!r}")
    return Service(name, process, text.removeprefix("listening "))


def run(argv: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        argv, cwd=REPO, env=dict(os.environ, **(env or {})), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise HarnessError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


@dataclass
class World:
    """A ledger cluster, the fake providers, and server instances `mcp-a` and `mcp-b`."""

    work: Path
    cluster_env: dict[str, str] = field(default_factory=dict)
    endpoints: list[str] = field(default_factory=list)
    providers: Service | None = None
    servers: dict[str, Service] = field(default_factory=dict)

    # -- start and stop -----------------------------------------------------------------

    def start(self) -> None:
        base = free_base_port()
        self.cluster_env = {
            "DATA": str(self.work / "cluster"),
            "BASE_PORT": str(base),
            "OPERATOR_KEY": OPERATOR_KEY,
            "TENANT_KEY": TENANT_KEY,
            "RUST_LOG": "warn",
        }
        self.endpoints = [f"127.0.0.1:{base + n}" for n in (1, 2, 3)]
        run(["bash", "deploy/cluster.sh", "start"], self.cluster_env)
        policies = self.work / "policies.toml"
        policies.write_text(POLICIES)
        run(
            [
                str(BIN / "ledgerctl"),
                "--endpoints",
                ",".join(self.endpoints),
                "--api-key",
                OPERATOR_KEY,
                "policy",
                "apply",
                str(policies),
            ]
        )
        self.providers = start_service(
            "providers", [str(BIN / "fake-provider"), "--deploy-ms", "500"], self.work
        )
        config = self.work / "mcp.toml"
        config.write_text(self.server_config())
        for name in ("mcp-a", "mcp-b"):
            argv = [str(BIN / "ledger-mcp-server"), "--config", str(config), "--instance", name]
            self.servers[name] = start_service(name, argv, self.work)

    def server_config(self) -> str:
        assert self.providers is not None
        return f"""
listen_addr = "127.0.0.1:0"
instance = "unnamed"
ledger_endpoints = {json.dumps(self.endpoints)}
policy_file = "policies.toml"
provider_addr = "{self.providers.addr}"
request_state_key = "py-e2e-request-state-key-0123456789abcdef"
lease_ms = {LEASE_MS}
wait_in_flight_ms = 5000
provider_timeout_ms = {PROVIDER_TIMEOUT_MS}

[[tenants]]
name = "acme"
agent_token = "{AGENT_TOKEN}"
ledger_api_key = "{TENANT_KEY}"
"""

    def stop(self) -> None:
        for service in [*self.servers.values(), self.providers]:
            if service is not None:
                service.stop()
        if self.cluster_env:
            subprocess.run(
                ["bash", "deploy/cluster.sh", "stop"],
                cwd=REPO,
                env=dict(os.environ, **self.cluster_env),
                capture_output=True,
            )

    # -- the providers' own state (ground truth) ----------------------------------------

    def provider(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One request to the fake providers: the status and the JSON body."""
        assert self.providers is not None
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://{self.providers.addr}{path}",
            data=data,
            method=method,
            headers={"content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def read(self, path: str) -> Any:
        status, body = self.provider("GET", path)
        assert status == 200, f"GET {path}: {status} {body}"
        return body

    def fault(self, **fault: Any) -> None:
        """Sets a route's faults (`POST /admin/faults`)."""
        status, body = self.provider("POST", "/admin/faults", fault)
        assert status == 200, f"fault {fault}: {status} {body}"

    def effects(self) -> dict[str, list[dict[str, Any]]]:
        return self.read("/admin/effects")

    def pending(self) -> int:
        """Requests the providers hold before applying them."""
        return int(self.read("/admin/held")["pending"])

    # -- MCP ----------------------------------------------------------------------------

    @asynccontextmanager
    async def client(self, instance: str, mode: str = "auto") -> AsyncIterator[Client]:
        """A fresh connection to `instance` with the Python SDK, as tenant acme's agent:
        protocol 2026-07-28 (`mode="auto"`), or the 2025-11-25 initialize handshake
        (`mode="legacy"`)."""
        addr = self.servers[instance].addr
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {AGENT_TOKEN}"},
            timeout=httpx2.Timeout(30.0, read=60.0),
        )
        try:
            async with http:
                transport = streamable_http_client(f"http://{addr}/mcp", http_client=http)
                async with Client(transport, mode=mode, cache=None, read_timeout_seconds=60) as client:
                    expected = PROTOCOL if mode == "auto" else LEGACY_PROTOCOL
                    assert client.protocol_version == expected, client.protocol_version
                    yield client
        except BaseExceptionGroup as group:
            # The SDK's task groups wrap what a call raised; hand the one error on as it is.
            raise only_error(group) from None


def only_error(group: BaseExceptionGroup) -> BaseException:
    """The single error inside nested exception groups, or the group if there are more."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error
