"""The agent of deploy/gateway-demo.sh: the official MCP Python SDK calling a shop through
two gateway instances, with a proxy in front of the first that loses answers.

    python demo_client.py --gateway-a ADDR --gateway-b ADDR --token TOKEN

Each effect is asked for once, its answer lost after the shop acted, and asked for again
on the other instance, as an agent runtime retries; the narration says what each answer
was. The shop's own state, printed by the demo afterwards, shows one of each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from typing import Any

from lossy_proxy import LossyProxy
from world import ClientKind, call_tool

EFFECT = "dev.effect-ledger/effect"


def said(answer: dict[str, Any]) -> str:
    if "transport_error" in answer:
        return f"no answer ({answer['kind']}): the client cannot tell whether it happened"
    if "error" in answer:
        return f"error {answer['error']}"
    effect = (answer.get("_meta") or {}).get(EFFECT) or (answer.get("structuredContent") or {}).get("effect")
    body = json.dumps(answer.get("structuredContent"))
    return f"{effect.get('outcome') if effect else 'passed through'}: {body[:160]}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateway-a", required=True)
    parser.add_argument("--gateway-b", required=True)
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    proxy = LossyProxy(args.gateway_a)
    lossy_a, b = proxy.url, f"http://{args.gateway_b}/mcp"
    modern, legacy = ClientKind("py", "2026"), ClientKind("py", "legacy")
    run = uuid.uuid4().hex[:6]

    async def step(title: str, kind: ClientKind, url: str, tool: str, arguments: dict[str, Any], **options: Any) -> None:
        answer = await call_tool(kind, url, tool, arguments, bearer=args.token, timeout_s=60, **options)
        print(f"  {title:<44} {said(answer)}", flush=True)

    print("1. A refund, named by the request_id argument the gateway added to the schema.")
    refund = {"order_id": f"order-{run}", "amount_cents": 1250, "request_id": str(uuid.uuid4())}
    proxy.drop_next("refund")
    await step("via gw-a (the answer is lost):", modern, lossy_a, "refund", refund)
    await step("retried via gw-b:", modern, b, "refund", refund)
    await step("retried by a 2025-11-25 client via gw-b:", legacy, b, "refund", refund)
    repaired = dict(refund, amount_cents=9900)
    await step("the model repairs the amount, same key:", modern, b, "refund", repaired)

    print("2. A ticket (the shop keeps no key), named by the conversation header.")
    ticket = {"subject": f"printer jam {run}", "body": "floor 2, again"}
    headers = {"x-conversation-id": f"conversation-{run}"}
    proxy.drop_next("create_ticket")
    await step("via gw-a (the answer is lost):", modern, lossy_a, "create_ticket", ticket, headers=headers)
    await step("retried via gw-b:", legacy, b, "create_ticket", ticket, headers=headers)

    print("3. A call that names no effect is refused before anything is sent.")
    await step("create_ticket without an identity:", modern, b, "create_ticket", ticket)
    proxy.close()


if __name__ == "__main__":
    asyncio.run(main())
