"""End to end, the gateway protecting MCP servers no one here wrote in Rust: a shop built
with the official Python SDK and one built with the official TypeScript SDK, each keeping
real state (SQLite, a JSON file), driven by the official Python and TypeScript SDK clients
in both protocol eras (2026-07-28 stateless, and the 2025-11-25 initialize handshake).

Two gateway instances share one configuration; a proxy in front of each loses answers on
purpose. Ground truth is always the shop's own state: one refund or ticket per declared
effect, whatever was lost, retried elsewhere, committed late or repaired.

Run by gateway/tests/e2e/run.sh, which builds the binaries and installs the SDKs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from stack import AGENT_TOKEN, CONVERSATION_HEADER, UPSTREAM_TIMEOUT_MS, Ledger, Stack
from world import CLIENT_KINDS, ClientKind, call_tool, list_tools, work_dir

PY_2026 = ClientKind("py", "2026")
TS_LEGACY = ClientKind("ts", "legacy")
EFFECT = "dev.effect-ledger/effect"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def ledger() -> Iterator[Ledger]:
    ledger = Ledger(work_dir("gateway-"))
    try:
        ledger.start()
        yield ledger
    finally:
        ledger.stop()


@pytest.fixture(scope="session", params=["py", "ts"])
def stack(request: pytest.FixtureRequest, ledger: Ledger) -> Iterator[Stack]:
    stack = Stack(request.param, ledger.work, ledger)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def new_request_id() -> str:
    """A key argument as the schema asks for it: fresh, random, at least 16 characters."""
    return str(uuid.uuid4())


async def call(
    stack: Stack,
    kind: ClientKind,
    tool: str,
    args: dict[str, Any],
    *,
    instance: str = "gw-a",
    lossy: bool = False,
    meta: dict[str, Any] | None = None,
    conversation: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    headers = {CONVERSATION_HEADER: conversation} if conversation else None
    return await call_tool(
        kind,
        stack.url(instance, lossy=lossy),
        tool,
        args,
        meta,
        bearer=AGENT_TOKEN,
        headers=headers,
        timeout_s=60,
        **options,
    )


def outcome(answer: dict[str, Any]) -> str | None:
    """The effect's outcome: from the answer's `_meta`, or from a ledger tool error."""
    meta = answer.get("_meta") or {}
    if EFFECT in meta:
        return meta[EFFECT]["outcome"]
    body = answer.get("structuredContent") or {}
    return (body.get("effect") or {}).get("outcome")


def refunds_of(stack: Stack, order: str) -> list[dict[str, Any]]:
    assert stack.shop is not None
    return [r for r in stack.shop.dump()["refunds"] if r["order_id"] == order]


def closures_of(stack: Stack, account: str) -> list[dict[str, Any]]:
    assert stack.shop is not None
    return [c for c in stack.shop.dump()["closures"] if c["account_id"] == account]


def tickets_about(stack: Stack, subject: str) -> list[dict[str, Any]]:
    assert stack.shop is not None
    return [t for t in stack.shop.dump()["tickets"] if t["subject"] == subject]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", CLIENT_KINDS, ids=lambda k: k.id)
async def test_both_eras_list_the_tools_with_protected_schemas(stack: Stack, kind: ClientKind) -> None:
    listed = await list_tools(kind, stack.url("gw-a"), bearer=AGENT_TOKEN)
    assert listed["connection"]["protocolVersion"] == kind.protocol_version
    assert listed["connection"]["sessionId"] is None
    tools = {t["name"]: t for t in listed["tools"]}
    assert set(tools) == {"refund", "create_ticket", "close_account", "find_refunds", "find_tickets", "get_order"}
    refund = tools["refund"]["inputSchema"]
    assert "request_id" in refund["required"] and "request_id" in refund["properties"]
    assert refund["properties"]["request_id"]["minLength"] == 16
    assert "idempotency_key" not in refund["properties"]
    assert "idempotency_key" not in refund.get("required", [])
    assert "effect ledger" in tools["refund"]["description"]
    # Both shops take the ticket's external reference as an argument (the TypeScript one
    # also in `_meta`, but the argument wins there): hidden, the gateway's to set.
    assert "external_ref" not in tools["create_ticket"]["inputSchema"]["properties"]
    # A read-only tool's schema and description are passed through untouched.
    assert tools["find_tickets"]["inputSchema"]["required"] == ["external_ref"]
    assert "effect ledger" not in (tools["find_tickets"].get("description") or "")
    # Annotations say what the operator's policy says, not what the shop hints.
    hints = {
        name: {h: tools[name].get("annotations", {}).get(h) for h in ("readOnlyHint", "destructiveHint", "idempotentHint")}
        for name in ("refund", "create_ticket", "close_account", "find_tickets")
    }
    assert hints == {
        "refund": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True},
        "create_ticket": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
        "close_account": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
        "find_tickets": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": False},
    }, hints


@pytest.mark.anyio
@pytest.mark.parametrize("kind", CLIENT_KINDS, ids=lambda k: k.id)
async def test_a_lost_refund_answer_retried_on_the_other_instance_refunds_once(
    stack: Stack, kind: ClientKind
) -> None:
    order, request_id = unique("order"), new_request_id()
    args = {"order_id": order, "amount_cents": 1250, "request_id": request_id}
    stack.proxies["gw-a"].drop_next("refund")
    lost = await call(stack, kind, "refund", args, lossy=True)
    assert "transport_error" in lost or "error" in lost, lost
    # The shop refunded; the client cannot know. It retries on the other instance.
    assert len(refunds_of(stack, order)) == 1
    retried = await call(stack, kind, "refund", args, instance="gw-b")
    assert retried["isError"] is False, retried
    assert outcome(retried) == "replayed", retried
    assert retried["structuredContent"]["refund"]["order_id"] == order
    refunds = refunds_of(stack, order)
    assert len(refunds) == 1, refunds
    assert retried["structuredContent"]["refund"]["id"] == refunds[0]["id"]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", CLIENT_KINDS, ids=lambda k: k.id)
async def test_a_lost_ticket_answer_retried_on_the_other_instance_opens_one_ticket(
    stack: Stack, kind: ClientKind
) -> None:
    subject, conversation = unique("printer jam"), unique("conv")
    args = {"subject": subject, "body": "the printer on floor 2 jams"}
    stack.proxies["gw-b"].drop_next("create_ticket")
    lost = await call(stack, kind, "create_ticket", args, instance="gw-b", lossy=True, conversation=conversation)
    assert "transport_error" in lost or "error" in lost, lost
    assert len(tickets_about(stack, subject)) == 1
    retried = await call(stack, kind, "create_ticket", args, conversation=conversation)
    assert retried["isError"] is False, retried
    assert outcome(retried) == "replayed", retried
    tickets = tickets_about(stack, subject)
    assert len(tickets) == 1, tickets
    # The shop holds the provider key the gateway passed on, whichever way it went.
    assert tickets[0]["external_ref"].startswith("el1_"), tickets


@pytest.mark.anyio
async def test_an_upstream_that_commits_late_opens_one_ticket(stack: Stack) -> None:
    assert stack.shop is not None
    subject, conversation = unique("late"), unique("conv")
    args = {"subject": subject, "body": "committed after the gateway gave up"}
    stack.shop.set_faults({"create_ticket": {"delay_before_commit_ms": UPSTREAM_TIMEOUT_MS + 2_000}})
    try:
        first = await call(stack, PY_2026, "create_ticket", args, conversation=conversation)
    finally:
        stack.shop.clear_faults()
    # The gateway saw no answer in time: unknown, then settled by the look-up tool
    # (found once the late commit landed), never re-sent blindly.
    answers = [first]
    while outcome(answers[-1]) not in ("done", "replayed") and len(answers) < 10:
        answers.append(await call(stack, TS_LEGACY, "create_ticket", args, instance="gw-b", conversation=conversation))
    assert answers[-1]["isError"] is False, answers
    tickets = tickets_about(stack, subject)
    assert len(tickets) == 1, tickets
    # The receipt is the shop's answer, or what its look-up found when that settled it.
    body = answers[-1]["structuredContent"]
    assert (body.get("ticket") or body)["id"] == tickets[0]["id"], body


@pytest.mark.anyio
async def test_a_model_repair_with_the_same_key_is_a_conflict_naming_the_field(stack: Stack) -> None:
    order, request_id = unique("order"), new_request_id()
    first = await call(stack, PY_2026, "refund", {"order_id": order, "amount_cents": 500, "request_id": request_id})
    assert outcome(first) == "done", first
    repaired = await call(stack, TS_LEGACY, "refund", {"order_id": order, "amount_cents": 900, "request_id": request_id})
    assert repaired["isError"] is True, repaired
    assert outcome(repaired) == "conflict"
    assert repaired["structuredContent"]["differing_fields"] == ["amount_cents"]
    assert [r["amount_cents"] for r in refunds_of(stack, order)] == [500]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", [PY_2026, TS_LEGACY], ids=lambda k: k.id)
async def test_a_call_that_names_no_effect_is_told_what_to_supply(stack: Stack, kind: ClientKind) -> None:
    subject = unique("anonymous")
    answer = await call(stack, kind, "create_ticket", {"subject": subject, "body": "b"})
    assert answer["isError"] is True, answer
    assert outcome(answer) == "no_identity"
    detail = answer["structuredContent"]["detail"]
    assert "dev.effect-ledger/effect-key" in detail and CONVERSATION_HEADER in detail, detail
    assert tickets_about(stack, subject) == []


@pytest.mark.anyio
async def test_a_failure_declared_before_effect_is_corrected_by_amend(stack: Stack) -> None:
    order, request_id = unique("order"), new_request_id()
    bad = await call(stack, PY_2026, "refund", {"order_id": order, "amount_cents": -5, "request_id": request_id})
    assert bad["isError"] is True and outcome(bad) == "failed_before_effect", bad
    assert bad["structuredContent"]["error"] == "invalid_amount"
    fixed_args = {"order_id": order, "amount_cents": 5, "request_id": request_id}
    # Without amend the corrected call is a conflict; with it the effect takes the new
    # arguments, as nothing can have happened.
    conflict = await call(stack, PY_2026, "refund", fixed_args)
    assert outcome(conflict) == "conflict", conflict
    fixed = await call(stack, TS_LEGACY, "refund", fixed_args, meta={"dev.effect-ledger/amend": True})
    assert fixed["isError"] is False and outcome(fixed) == "done", fixed
    assert [r["amount_cents"] for r in refunds_of(stack, order)] == [5]


@pytest.mark.anyio
async def test_a_runtime_key_in_meta_names_the_effect_in_both_eras(stack: Stack) -> None:
    order = unique("order")
    meta = {"dev.effect-ledger/effect-key": unique("runtime")}
    # No key argument: the runtime's _meta names the effect.
    args = {"order_id": order, "amount_cents": 300}
    first = await call(stack, ClientKind("ts", "2026"), "refund", args, meta=meta)
    assert outcome(first) == "done" and first["_meta"][EFFECT]["identity"] == "meta", first
    again = await call(stack, ClientKind("py", "legacy"), "refund", args, instance="gw-b", meta=meta)
    assert outcome(again) == "replayed", again
    assert len(refunds_of(stack, order)) == 1


@pytest.mark.anyio
async def test_with_a_runtime_turn_a_new_key_argument_is_a_conflict_not_a_replay(stack: Stack) -> None:
    order = unique("order")
    meta = {"dev.effect-ledger/workflow-id": unique("wf"), "dev.effect-ledger/turn-id": "turn-1"}
    first_args = {"order_id": order, "amount_cents": 500, "request_id": new_request_id()}
    first = await call(stack, PY_2026, "refund", first_args, meta=meta)
    assert outcome(first) == "done" and first["_meta"][EFFECT]["identity"] == "meta", first
    # The same turn and target, another key argument: the runtime's identity wins, and the
    # new value is a changed argument, never the first refund's receipt.
    second = await call(stack, TS_LEGACY, "refund", dict(first_args, request_id=new_request_id()), instance="gw-b", meta=meta)
    assert second["isError"] is True and outcome(second) == "conflict", second
    assert second["structuredContent"]["differing_fields"] == ["request_id"], second
    again = await call(stack, TS_LEGACY, "refund", first_args, instance="gw-b", meta=meta)
    assert outcome(again) == "replayed", again
    assert len(refunds_of(stack, order)) == 1


@pytest.mark.anyio
async def test_a_short_key_argument_names_only_an_effect_that_exists(stack: Stack) -> None:
    order, short = unique("order"), f"r-{uuid.uuid4().hex[:6]}"
    args = {"order_id": order, "amount_cents": 300, "request_id": short}
    # A new effect under a key shorter than the minimum: refused, nothing stored or sent.
    refused = await call(stack, PY_2026, "refund", args)
    assert refused["isError"] is True and outcome(refused) == "no_identity", refused
    assert "16 characters" in refused["structuredContent"]["detail"], refused
    assert refunds_of(stack, order) == []
    # Made where no minimum applies yet (gw-b, as during an upgrade), the effect goes on
    # under its short key everywhere: its retry replays, never refused into a new value.
    made = await call(stack, TS_LEGACY, "refund", args, instance="gw-b")
    assert outcome(made) == "done", made
    again = await call(stack, PY_2026, "refund", args)
    assert outcome(again) == "replayed", again
    assert len(refunds_of(stack, order)) == 1


@pytest.mark.anyio
async def test_read_only_tools_pass_through(stack: Stack) -> None:
    order = unique("order")
    for amount, request_id in ((100, new_request_id()), (250, new_request_id())):
        done = await call(stack, PY_2026, "refund", {"order_id": order, "amount_cents": amount, "request_id": request_id})
        assert outcome(done) == "done", done
    seen = await call(stack, TS_LEGACY, "get_order", {"order_id": order})
    assert seen["isError"] is False, seen
    assert seen["structuredContent"]["order"]["refunded_cents"] == 350
    assert EFFECT not in (seen.get("_meta") or {})


@pytest.mark.anyio
@pytest.mark.parametrize("kind", [ClientKind("ts", "2026"), PY_2026], ids=lambda k: k.id)
async def test_an_input_required_round_passes_through_and_keeps_the_effect(stack: Stack, kind: ClientKind) -> None:
    account, conversation = unique("acct"), unique("conv")
    args = {"account_id": account}
    # The shop asks the user first; the gateway passes the question on, and nothing is
    # done yet.
    asked = await call(stack, kind, "close_account", args, conversation=conversation)
    assert asked.get("resultType") == "input_required", asked
    assert closures_of(stack, account) == []
    # The user's answer, re-sent by hand on the other instance: the same effect, now done.
    confirmed = await call(
        stack,
        kind,
        "close_account",
        args,
        instance="gw-b",
        conversation=conversation,
        input_responses={"confirm": {"action": "accept", "content": {"confirm": True}}},
        request_state=asked["requestState"],
    )
    assert confirmed["isError"] is False and outcome(confirmed) == "done", confirmed
    key = confirmed["_meta"][EFFECT]["key"]
    # A retry of the whole call is answered from the ledger: not asked again, not done again.
    again = await call(stack, kind, "close_account", args, conversation=conversation, confirm=True)
    assert outcome(again) == "replayed" and again["_meta"][EFFECT]["key"] == key, again
    assert len(closures_of(stack, account)) == 1


@pytest.mark.anyio
async def test_a_client_that_answers_the_question_itself_closes_once(stack: Stack) -> None:
    account, conversation = unique("acct"), unique("conv")
    # The SDK client answers the input request and re-sends on its own.
    done = await call(stack, ClientKind("py", "2026"), "close_account", {"account_id": account}, conversation=conversation, confirm=True)
    assert done["isError"] is False and outcome(done) == "done", done
    declined_elsewhere = await call(
        stack, ClientKind("ts", "2026"), "close_account", {"account_id": account}, instance="gw-b", conversation=conversation, confirm=False
    )
    assert outcome(declined_elsewhere) == "replayed", declined_elsewhere
    assert len(closures_of(stack, account)) == 1


@pytest.mark.anyio
async def test_bad_input_is_a_clear_error_and_reaches_no_upstream(stack: Stack) -> None:
    order = unique("order")
    args = {"order_id": order, "amount_cents": 100, "request_id": new_request_id()}
    # No bearer token, or one no tenant has: refused before anything is looked at.
    for bearer in (None, "not-a-token-of-any-tenant"):
        answer = await call_tool(PY_2026, stack.url("gw-a"), "refund", args, bearer=bearer, timeout_s=60)
        assert "bearer token" in answer["error"]["message"], answer
    # A tool no entry names (the shop has none either), and arguments over the limit.
    unknown = await call(stack, PY_2026, "refund_everything", {})
    assert "unknown tool" in unknown["error"]["message"], unknown
    huge = await call(stack, TS_LEGACY, "refund", dict(args, note="x" * 20_000))
    assert "more than the limit" in huge["error"]["message"], huge
    # A malformed _meta field is a typed error, not a silently derived key.
    typo = await call(stack, PY_2026, "refund", args, meta={"dev.effect-ledger/effect_key": "k"})
    assert "unknown _meta field" in typo["error"]["message"], typo
    # Garbage bytes on the port: an HTTP error, and the instance still serves.
    async with httpx2.AsyncClient() as http:
        garbage = await http.post(
            stack.url("gw-b"),
            content=b"\x00\xffnot json",
            headers={"content-type": "application/json", "accept": "application/json, text/event-stream"},
        )
    assert 400 <= garbage.status_code < 500, garbage.text
    assert refunds_of(stack, order) == []
    fine = await call(stack, PY_2026, "refund", args, instance="gw-b")
    assert outcome(fine) == "done", fine


@pytest.fixture(scope="module")
def legacy_stack(ledger: Ledger) -> Iterator[Stack]:
    stack = Stack("py", ledger.work, ledger, legacy_only=True)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


@pytest.mark.anyio
@pytest.mark.parametrize("kind", [PY_2026, TS_LEGACY], ids=lambda k: k.id)
async def test_an_upstream_of_the_2025_era_alone_is_spoken_to_in_its_era(
    legacy_stack: Stack, kind: ClientKind
) -> None:
    stack = legacy_stack
    listed = await list_tools(kind, stack.url("gw-a"), bearer=AGENT_TOKEN)
    assert listed["connection"]["protocolVersion"] == kind.protocol_version
    assert "request_id" in {t["name"]: t for t in listed["tools"]}["refund"]["inputSchema"]["required"]
    order, request_id = unique("order"), new_request_id()
    args = {"order_id": order, "amount_cents": 400, "request_id": request_id}
    stack.proxies["gw-a"].drop_next("refund")
    lost = await call(stack, kind, "refund", args, lossy=True)
    assert "transport_error" in lost or "error" in lost, lost
    retried = await call(stack, kind, "refund", args, instance="gw-b")
    assert outcome(retried) == "replayed", retried
    assert len(refunds_of(stack, order)) == 1


@pytest.mark.anyio
async def test_a_declined_question_does_nothing_and_a_later_yes_closes_once(stack: Stack) -> None:
    account, conversation = unique("acct"), unique("conv")
    args = {"account_id": account}
    # The user says no: the shop does nothing, and the operator declared that answer as
    # doing nothing, so it is not kept as the effect.
    declined = await call(stack, PY_2026, "close_account", args, conversation=conversation, confirm=False)
    assert declined["isError"] is False and outcome(declined) == "failed_before_effect", declined
    assert closures_of(stack, account) == []
    # Asked again later, on the other instance, the user says yes: done, once.
    done = await call(
        stack, ClientKind("ts", "2026"), "close_account", args, instance="gw-b", conversation=conversation, confirm=True
    )
    assert done["isError"] is False and outcome(done) == "done", done
    again = await call(stack, PY_2026, "close_account", args, conversation=conversation, confirm=True)
    assert outcome(again) == "replayed", again
    assert len(closures_of(stack, account)) == 1
