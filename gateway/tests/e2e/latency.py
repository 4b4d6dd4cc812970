"""What the ledger adds to a call through the gateway, measured: the same calls through
a gateway that passes `refund` through untouched and through one that protects it, in one
run, on one machine, with the official Python SDK client.

    python latency.py [--calls N]        (run by deploy/gateway-latency.sh)

Rows, each N sequential calls on one connection after a warm-up:
- `get_order` through the gateway (a read-only tool: passed through, no ledger);
- `refund` through a gateway instance whose configuration does not list it and lets
  unlisted tools pass (no ledger), with a fresh idempotency key each call;
- `refund` through a gateway that protects it (a fresh request_id each call: one claim
  and one report in the ledger around the same upstream call);
- and, for reference, `get_order` and `refund` straight to the shop. (The Python SDK
  client talking to the Python shop directly waits out TCP's delayed acknowledgement,
  about 40 ms a call; the gateway's upstream client does not, so these rows are slower
  than the gateway's.)
Prints a Markdown table: p50, p99 and mean in milliseconds, and each refund row's p50
over the pass-through refund.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from stack import AGENT_TOKEN, BIN, Ledger, Stack, gateway_config, start_binary
from world import py_client, work_dir

WARM_UP = 20


def percentile(sorted_ms: list[float], p: float) -> float:
    index = min(len(sorted_ms) - 1, max(0, round(p / 100 * len(sorted_ms) + 0.5) - 1))
    return sorted_ms[index]


async def timed(n: int, one: Callable[[int], Awaitable[Any]]) -> list[float]:
    for i in range(WARM_UP):
        await one(-1 - i)
    samples = []
    for i in range(n):
        started = time.perf_counter()
        await one(i)
        samples.append((time.perf_counter() - started) * 1000)
    return sorted(samples)


def start_pass_through(stack: Stack) -> str:
    """A gateway instance that does not list `refund` and passes unlisted tools; its URL."""
    assert stack.shop is not None
    config = gateway_config(stack.ledger, stack.shop)
    config = re.sub(r'\[\[tools\]\]\nname = "refund"\n.*?\n\n', "", config, flags=re.S)
    assert 'name = "refund"' not in config
    config = 'unlisted_tools = "pass"\n' + config
    path = stack.work / "gateway-pass.toml"
    path.write_text(config)
    service = start_binary("gw-pass", [str(BIN / "ledger-mcp-gateway"), "--config", str(path), "--instance", "gw-pass"], stack.work)
    stack.gateways["gw-pass"] = service
    return f"http://{service.addr}/mcp"


async def measure(stack: Stack, n: int) -> list[tuple[str, list[float]]]:
    assert stack.shop is not None
    run = uuid.uuid4().hex[:6]
    rows: list[tuple[str, list[float]]] = []
    for label, url, bearer in (
        ("gateway, passed through", start_pass_through(stack), AGENT_TOKEN),
        ("gateway, protected", stack.url("gw-a"), AGENT_TOKEN),
        ("direct", stack.shop.url, None),
    ):
        async with py_client(url, "2026", bearer=bearer) as (client, _):

            async def read(i: int) -> None:
                result = await client.call_tool("get_order", {"order_id": f"lat-{run}"})
                assert not result.is_error, result

            async def refund(i: int) -> None:
                args: dict[str, Any] = {"order_id": f"lat-{run}-{label}-{i}", "amount_cents": 100}
                if label.endswith("protected"):
                    args["request_id"] = f"latency-{run}-{i:06}"
                else:
                    args["idempotency_key"] = f"lat-{run}-{label}-{i}"
                result = await client.call_tool("refund", args)
                assert not result.is_error, result

            if not label.endswith("protected"):
                rows.append((f"get_order, {label}", await timed(n, read)))
            rows.append((f"refund, {label}", await timed(n, refund)))
    return rows


def table(rows: list[tuple[str, list[float]]]) -> str:
    base = dict(rows)["refund, gateway, passed through"]
    lines = [
        "| call | p50 ms | p99 ms | mean ms | p50 over the passed-through refund ms |",
        "|---|---|---|---|---|",
    ]
    for name, samples in rows:
        extra = f"{percentile(samples, 50) - percentile(base, 50):+.2f}" if name.startswith("refund") else ""
        lines.append(
            f"| {name} | {percentile(samples, 50):.2f} | {percentile(samples, 99):.2f} | "
            f"{statistics.fmean(samples):.2f} | {extra} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500, help="measured calls per row")
    args = parser.parse_args()
    ledger = Ledger(work_dir("latency-"))
    stack = Stack("py", ledger.work, ledger)
    try:
        ledger.start()
        stack.start()
        rows = asyncio.run(measure(stack, args.calls))
    finally:
        stack.stop()
        ledger.stop()
    shutil.rmtree(ledger.work, ignore_errors=True)
    print(f"{args.calls} sequential calls per row (after {WARM_UP} warm-up calls), one connection each:\n")
    print(table(rows))


if __name__ == "__main__":
    main()
