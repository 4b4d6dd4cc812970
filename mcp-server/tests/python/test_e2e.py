"""End to end with an MCP client that is not rmcp: the official Python SDK (`mcp` 2.x,
protocol 2026-07-28, stateless) against two ledger-mcp-server instances, a real ledger
cluster and the fake providers. Every effect is checked in the providers' own state.

- Late commit: the provider holds a create longer than the server waits for it; the
  first call times out at the agent or answers that the outcome is unknown, retries
  through the other instance must never send it again, and once the hold and the
  policy's processing bound have passed a retry answers the one effect.
- Model repair: the same turn re-sends a refund with another amount; the answer is a
  tool error naming the changed field, and the provider holds the first refund only.
- Both eras: a client of the 2025-11-25 revision (initialize handshake, no session) and
  a 2026-07-28 one name the same effect by the same `_meta`; one refund.

Run with `bash mcp-server/tests/python/run.sh`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT, CallToolResult

from harness import LEASE_MS, PROCESSING_MS_MAX, PROVIDER_TIMEOUT_MS, World

WORKFLOW_ID = "dev.effect-ledger/workflow-id"
TURN_ID = "dev.effect-ledger/turn-id"

# How long the providers hold a create before applying it: longer than the server waits
# for the provider, shorter than the policy's processing bound.
HOLD_MS = 8_000
# How long the agent waits for the first call: long enough for the server to give up on
# the provider and answer, too short for the held create.
FIRST_CALL_TIMEOUT_S = 4
assert PROVIDER_TIMEOUT_MS < FIRST_CALL_TIMEOUT_S * 1000 < HOLD_MS <= PROCESSING_MS_MAX
# When a look-up's "not found" may prove a create absent, at the latest, from the first
# call: the dispatch's lease end plus the provider's processing bound.
SETTLED_S = (LEASE_MS + PROCESSING_MS_MAX) / 1000
# Outcomes a call may answer while the effect is not settled (all with isError).
UNSETTLED = {"unknown", "in_flight", "needs_reconcile"}
RETRY_EVERY_S = 2
RUN = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    given = os.environ.get("E2E_WORK")
    work = Path(given) if given else Path(tempfile.mkdtemp(prefix="mcp-py-e2e-"))
    work.mkdir(parents=True, exist_ok=True)
    w = World(work)
    try:
        w.start()
        yield w
    finally:
        w.stop()
        print(f"\nlogs and configs: {work}")
        if not given and not os.environ.get("E2E_KEEP"):
            shutil.rmtree(work, ignore_errors=True)


def turn(name: str) -> dict[str, str]:
    """The `_meta` of a call in turn `name` of this run's workflow."""
    return {WORKFLOW_ID: f"wf-py-{RUN}", TURN_ID: f"{name}-{RUN}"}


def structured(result: CallToolResult) -> dict[str, Any]:
    """The structured content of a result, or the JSON of its first text block."""
    if result.structured_content is not None:
        return result.structured_content
    for block in result.content:
        text = getattr(block, "text", None)
        if text is not None:
            try:
                return json.loads(text)
            except ValueError:
                return {"text": text}
    return {}


def outcome(result: CallToolResult) -> str | None:
    return structured(result).get("effect", {}).get("outcome")


def everything_said(result: CallToolResult) -> str:
    """Every word of a result: its structured content and its text blocks."""
    texts = [getattr(b, "text", "") for b in result.content]
    return json.dumps(result.structured_content) + " " + " ".join(texts)


async def call(
    world: World,
    instance: str,
    tool: str,
    arguments: dict[str, Any],
    meta: dict[str, str],
    timeout_s: float | None = None,
    mode: str = "auto",
) -> CallToolResult:
    async with world.client(instance, mode) as client:
        return await client.call_tool(tool, arguments, meta=meta, read_timeout_seconds=timeout_s)


async def until_nothing_pending(world: World) -> None:
    with anyio.fail_after(HOLD_MS / 1000 + 10):
        while world.pending():
            await anyio.sleep(0.2)


@pytest.mark.anyio
async def test_a_repaired_refund_in_the_same_turn_is_a_tool_error_naming_the_field(world: World) -> None:
    order = f"o-py-{RUN}"
    meta = turn("repair")
    args = {"order_id": order, "amount_cents": 500, "currency": "EUR"}
    with anyio.fail_after(60):
        first = await call(world, "mcp-a", "refund", args, meta)
        assert not first.is_error, f"the refund should commit: {everything_said(first)}"
        assert outcome(first) == "done", structured(first)
        receipt = structured(first)["receipt"]

        repaired_args = dict(args, amount_cents=5000)
        try:
            repaired = await call(world, "mcp-b", "refund", repaired_args, meta)
        except MCPError as e:
            pytest.fail(
                "a repaired call must be answered with a tool result (isError), not a "
                f"JSON-RPC error: {e.code} {e.message} {e.data}"
            )
        said = everything_said(repaired)
        assert repaired.is_error is True, (
            "the same turn re-sent the refund with another amount: expected a conflict "
            f"(isError) naming amount_cents, got outcome {outcome(repaired)!r}: {said}"
        )
        assert "amount_cents" in said, f"the conflict should name amount_cents: {said}"
        fields = structured(repaired).get("differing_fields")
        assert fields is not None, f"the conflict should list differing_fields: {said}"
        assert any("amount_cents" in f for f in fields), fields
        assert not any("order_id" in f or "currency" in f for f in fields), fields

        # The same call as the first one still answers the first refund.
        again = await call(world, "mcp-b", "refund", args, meta)
        assert not again.is_error, everything_said(again)
        assert outcome(again) == "replayed", structured(again)
        assert structured(again)["receipt"] == receipt

    # The provider's own state: one refund of 500 on the order.
    refunds = [r for r in world.effects()["refunds"] if r["order_id"] == order]
    assert [r["amount_cents"] for r in refunds] == [500], refunds
    view = world.read(f"/pay/orders/{order}")
    assert (view["refunds"], view["refunded_cents"]) == (1, 500), view
    by_key = world.read(f"/pay/refunds?idempotency_key={receipt['idempotency_key']}")
    assert by_key["refunds"] == [receipt]


async def a_late_commit_is_settled_once(
    world: World,
    *,
    route: str,
    tool: str,
    arguments: dict[str, Any],
    kind: str,
    ours: Callable[[dict[str, Any]], bool],
) -> dict[str, Any]:
    """Drives `tool` against a provider route that commits `HOLD_MS` late; returns the
    structured answer of the retry that answered the effect."""
    world.fault(route=route, commit_delay_ms=HOLD_MS)
    meta = turn(tool)

    def held_and_stored() -> tuple[int, int]:
        return world.pending(), sum(1 for e in world.effects()[kind] if ours(e))

    started = time.monotonic()
    try:
        with anyio.fail_after(SETTLED_S + 60):
            # The agent gives up on the first call, or the server answers that the
            # outcome is unknown: either way before the provider applied the create.
            try:
                first = await call(world, "mcp-a", tool, arguments, meta, FIRST_CALL_TIMEOUT_S)
            except MCPError as e:
                assert e.code == REQUEST_TIMEOUT, f"the first call failed: {e.code} {e.message}"
            else:
                waited_s = time.monotonic() - started
                assert first.is_error and outcome(first) in UNSETTLED, (
                    f"the first call cannot know the outcome, answered after {waited_s:.1f} s: "
                    f"{everything_said(first)}"
                )
            held, stored = held_and_stored()
            assert (held, stored) == (1, 0), (
                f"the provider should hold the one create, unapplied: {held} held, {stored} stored"
            )

            # Retry through the other instance until a retry answers the effect. No retry
            # may send it again: at most one create is ever held or stored.
            answers: list[str] = []
            answer = None
            while time.monotonic() - started < SETTLED_S + 20:
                retry = await call(world, "mcp-b", tool, arguments, meta)
                at_s = time.monotonic() - started
                answers.append(f"{at_s:.1f}s {outcome(retry)}")
                held, stored = held_and_stored()
                assert held + stored <= 1, (
                    f"a retry sent {tool} again: {held} held and {stored} stored at the "
                    f"provider; answers so far: {answers}; last: {everything_said(retry)}"
                )
                if not retry.is_error:
                    answer = structured(retry)
                    break
                assert outcome(retry) in UNSETTLED, everything_said(retry)
                await anyio.sleep(RETRY_EVERY_S)
            assert answer is not None, (
                f"no retry answered the {kind} within {SETTLED_S + 20:.0f} s of the first "
                f"call (hold {HOLD_MS} ms, lease {LEASE_MS} ms, processing bound "
                f"{PROCESSING_MS_MAX} ms): {answers}"
            )
            print(f"{tool}: first call at 0 s, retries: {answers}")
            assert answer["effect"]["outcome"] == "replayed", (
                f"the retry should answer the held create, not send one: {answer}"
            )

            # Later retries, on either instance, answer the same effect.
            for instance in ("mcp-a", "mcp-b"):
                again = await call(world, instance, tool, arguments, meta)
                assert not again.is_error, everything_said(again)
                assert structured(again)["receipt"] == answer["receipt"]
            await until_nothing_pending(world)
    finally:
        world.fault(route=route)

    stored = [e for e in world.effects()[kind] if ours(e)]
    assert len(stored) == 1, f"the provider holds {len(stored)} {kind}: {stored}"
    return answer


@pytest.mark.anyio
async def test_a_ticket_committed_late_is_created_once(world: World) -> None:
    subject = f"Parcel lost {RUN}"
    answer = await a_late_commit_is_settled_once(
        world,
        route="ticket",
        tool="create_ticket",
        arguments={"subject": subject, "body": "Order o-981 never arrived."},
        kind="tickets",
        ours=lambda t: t["subject"] == subject,
    )
    receipt = answer["receipt"]
    found = world.read(f"/desk/tickets?external_ref={receipt['external_ref']}")["tickets"]
    assert found == [receipt], found


@pytest.mark.anyio
async def test_a_deploy_committed_late_starts_one_job(world: World) -> None:
    service = f"checkout-{RUN}"
    answer = await a_late_commit_is_settled_once(
        world,
        route="deploy",
        tool="start_deploy",
        arguments={"service": service, "version": "2.4.1"},
        kind="jobs",
        ours=lambda j: j["service"] == service,
    )
    receipt = answer["receipt"]
    assert answer["job"]["job_id"] == receipt["job_id"], answer
    jobs = world.read(f"/deploy/jobs?job_ref={receipt['job_ref']}")["jobs"]
    assert [j["job_id"] for j in jobs] == [receipt["job_id"]], jobs
    assert world.read(f"/deploy/jobs/{receipt['job_id']}")["service"] == service


@pytest.mark.anyio
async def test_a_2025_11_25_client_and_a_2026_07_28_client_name_the_same_effect(world: World) -> None:
    order = f"o-py-era-{RUN}"
    meta = turn("eras")
    args = {"order_id": order, "amount_cents": 700, "currency": "EUR"}
    with anyio.fail_after(60):
        legacy = await call(world, "mcp-a", "refund", args, meta, mode="legacy")
        assert not legacy.is_error, everything_said(legacy)
        assert outcome(legacy) == "done", structured(legacy)
        modern = await call(world, "mcp-b", "refund", args, meta)
        assert outcome(modern) == "replayed", structured(modern)
        assert structured(modern)["receipt"] == structured(legacy)["receipt"]
    refunds = [r for r in world.effects()["refunds"] if r["order_id"] == order]
    assert len(refunds) == 1, refunds
