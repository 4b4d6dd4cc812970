"""The gateway's end-to-end world: a 3-node ledger (deploy/cluster.sh), an upstream shop
(the official Python or TypeScript SDK, `world.py`), two `ledger-mcp-gateway` instances
in front of it, and a lossy proxy in front of each instance.

Every process's pid is written to the work folder (`*.pid`) so that run.sh can stop
whatever is left if the test run is killed before it cleans up.
"""

from __future__ import annotations

import json
import os
import random
import select
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from lossy_proxy import LossyProxy
from world import REPO, Service, Shop, ShopKind, WorldError, child_env, start_shop

BIN = Path(os.environ.get("LEDGER_BIN_DIR", REPO / "target" / "debug"))
POLICIES = REPO / "deploy" / "gateway" / "policies.toml"

OPERATOR_KEY = "gw-e2e-operator-key-0001"
TENANT_KEY = "gw-e2e-tenant-acme-00001"
AGENT_TOKEN = "gw-e2e-agent-token-acme-01"
CONVERSATION_HEADER = "x-conversation-id"
# The gateway gives up on an upstream call after this long; the late-commit test holds
# commits longer.
UPSTREAM_TIMEOUT_MS = 2_000
# Each attempt's lease (heartbeats extend it while a call runs).
LEASE_MS = 5_000


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
    raise WorldError("no three consecutive free ports")


def run(argv: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=REPO, env=dict(os.environ, **(env or {})), capture_output=True, text=True)
    if done.returncode != 0:
        raise WorldError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def start_binary(name: str, argv: list[str], work: Path) -> Service:
    """Runs one of the project's binaries until it prints `listening ADDR`."""
    log = work / f"{name}.log"
    env = dict(child_env(), RUST_LOG=os.environ.get("RUST_LOG", "info"))
    with open(log, "ab") as stderr:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, env=env)
    (work / f"{name}.pid").write_text(str(process.pid))
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    line = b""
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([process.stdout], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            process.kill()
            raise WorldError(f"{name} printed no address; see {log}")
        chunk = os.read(process.stdout.fileno(), 1)
        if not chunk:
            raise WorldError(f"{name} exited; see {log}")
        line += chunk
    text = line.decode().strip()
    if not text.startswith("listening "):
        raise WorldError(f"{name} printed {text!r}")
    return Service(name, process, text.removeprefix("listening "), log)


@dataclass
class Ledger:
    """A local 3-node cluster with the shop's policies applied."""

    work: Path
    env: dict[str, str] = field(default_factory=dict)
    endpoints: list[str] = field(default_factory=list)

    def start(self) -> None:
        base = free_base_port()
        self.env = {
            "DATA": str(self.work / "cluster"),
            "BASE_PORT": str(base),
            "OPERATOR_KEY": OPERATOR_KEY,
            "TENANT_KEY": TENANT_KEY,
            "RUST_LOG": "warn",
        }
        self.endpoints = [f"127.0.0.1:{base + n}" for n in (1, 2, 3)]
        run(["bash", "deploy/cluster.sh", "start"], self.env)
        run(
            [
                str(BIN / "ledgerctl"),
                "--endpoints",
                ",".join(self.endpoints),
                "--api-key",
                OPERATOR_KEY,
                "policy",
                "apply",
                str(POLICIES),
            ]
        )

    def stop(self) -> None:
        if self.env:
            subprocess.run(
                ["bash", "deploy/cluster.sh", "stop"], cwd=REPO, env=dict(os.environ, **self.env), capture_output=True
            )


def gateway_config(ledger: Ledger, shop: Shop, key_min_chars: int = 16) -> str:
    """The gateway's configuration for `shop`: refunds keyed by a key argument of at least
    `key_min_chars` characters and passed
    the provider key as the shop's idempotency key; tickets keyed by the conversation and
    passed the provider key as their external reference (an argument for the Python shop;
    a `_meta` field for the TypeScript one, which also takes the argument and lets it win,
    so the gateway sets that too: a caller's own value there would name another ticket);
    both settled by the shop's look-up tools."""
    ticket_key = (
        'provider_key_argument = "external_ref"'
        if shop.kind == "py"
        else 'provider_key_meta = "shop.example/external-ref"\nprovider_key_argument = "external_ref"'
    )
    return f"""
listen_addr = "127.0.0.1:0"
instance = "unnamed"
ledger_endpoints = {json.dumps(ledger.endpoints)}
policy_file = "{POLICIES}"
conversation_header = "{CONVERSATION_HEADER}"
lease_ms = {LEASE_MS}
wait_in_flight_ms = 5000

[[tenants]]
name = "acme"
agent_token = "{AGENT_TOKEN}"
ledger_api_key = "{TENANT_KEY}"

[[upstreams]]
name = "shop"
url = "{shop.url}"
timeout_ms = {UPSTREAM_TIMEOUT_MS}

[[tools]]
name = "refund"
upstream = "shop"
key_argument = "request_id"
key_argument_min_chars = {key_min_chars}
provider_key_argument = "idempotency_key"
before_effect = {{ tool_error_pointer = "/error", tool_error_values = ["invalid_amount"] }}
lookup = {{ tool = "find_refunds", arguments = {{ idempotency_key = "{{provider_key}}" }}, found = "/refunds" }}

[[tools]]
name = "create_ticket"
upstream = "shop"
{ticket_key}
lookup = {{ tool = "find_tickets", arguments = {{ external_ref = "{{provider_key}}" }}, found = "/tickets" }}

[[tools]]
name = "close_account"
upstream = "shop"
before_effect = {{ result_pointer = "/declined", result_values = [true] }}

[[tools]]
name = "find_refunds"
upstream = "shop"

[[tools]]
name = "find_tickets"
upstream = "shop"

[[tools]]
name = "get_order"
upstream = "shop"
"""


@dataclass
class Stack:
    """A shop of one kind behind gateway instances `gw-a` and `gw-b`, each behind a lossy
    proxy."""

    kind: ShopKind
    work: Path
    ledger: Ledger
    # The shop serves the 2025-11-25 era alone, with sessions (the Python shop only).
    legacy_only: bool = False
    shop: Shop | None = None
    gateways: dict[str, Service] = field(default_factory=dict)
    proxies: dict[str, LossyProxy] = field(default_factory=dict)

    def start(self) -> None:
        name = f"shop-{self.kind}" + ("-legacy" if self.legacy_only else "")
        self.shop = start_shop(
            self.kind, self.work, name, json_response=self.kind == "py", legacy_only=self.legacy_only
        )
        # gw-b still takes key arguments of any length, as an instance not yet given the
        # minimum does during an upgrade.
        for instance, key_min_chars in (("gw-a", 16), ("gw-b", 1)):
            config = self.work / f"gateway-{name}-{instance}.toml"
            config.write_text(gateway_config(self.ledger, self.shop, key_min_chars))
            argv = [str(BIN / "ledger-mcp-gateway"), "--config", str(config), "--instance", instance]
            service = start_binary(f"{instance}-{name}", argv, self.work)
            self.gateways[instance] = service
            self.proxies[instance] = LossyProxy(service.addr)

    def url(self, name: str, *, lossy: bool = False) -> str:
        """Instance `name`'s MCP endpoint, through its lossy proxy when `lossy`."""
        if lossy:
            return self.proxies[name].url
        return f"http://{self.gateways[name].addr}/mcp"

    def stop(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()
        for service in self.gateways.values():
            service.stop()
        if self.shop is not None:
            self.shop.stop()
