"""The upstream shop servers on their own, with no gateway in between: each upstream
(Python SDK, TypeScript SDK) with each client (each SDK, each protocol era), checked
against the state the server stored, read with its `--dump` command.

- tools/list lists the six tools, in the era the client asked for, with no session;
- a refund retried with its key makes one refund; the key with another amount is a tool
  error; an invalid amount is a tool error with `invalid_amount`; neither stores anything;
- create_ticket twice makes two tickets; an external_ref sent in `_meta` is stored;
- the find_* tools and get_order find what was made;
- faults (the four clients at once): a delay before the commit makes the call slow and
  the commit late, a commit lands even when the caller gave up before it, a hang after
  the commit answers late what was committed;
- close_account asks before it acts (2026-07-28 clients): unanswered, it is an
  input_required result (a form elicitation under `confirm`, a requestState) and stores
  nothing; answered yes by the client's SDK it makes one closure, answered no it answers
  `{"declined": true}` and stores nothing; a requestState is accepted by another process
  of the same shop (a manual re-send), and refused for another account or when tampered
  with; a delay before the commit delays the answering round. A 2025-11-25 client cannot
  be asked by these stateless servers: it gets an error and nothing is stored;
- a server stops on SIGTERM with exit status 0, its state kept.

    bash gateway/tests/e2e/setup.sh
    target/gateway-e2e/venv/bin/python -m pytest -p no:cacheprovider gateway/tests/e2e/test_upstreams.py
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from world import (
    CLIENT_KINDS,
    EXTERNAL_REF_META_KEY,
    SHOP_TOOLS,
    Call,
    ClientKind,
    Shop,
    call_tool,
    call_tools,
    list_tools,
    shop_argv,
    start_service,
    start_shop,
    work_dir,
)

READ_ONLY_TOOLS = {"find_refunds", "find_tickets", "get_order"}
REQUIRED_ARGUMENTS = {
    "refund": {"order_id", "amount_cents", "idempotency_key"},
    "create_ticket": {"subject", "body"},
    "find_refunds": {"idempotency_key"},
    "find_tickets": {"external_ref"},
    "get_order": {"order_id"},
    "close_account": {"account_id"},
}
MODERN_KINDS = tuple(kind for kind in CLIENT_KINDS if kind.era == "2026")
LEGACY_KINDS = tuple(kind for kind in CLIENT_KINDS if kind.era == "legacy")
# close_account's answers, as a client's SDK sends them.
YES = {"confirm": {"action": "accept", "content": {"confirm": True}}}
NO = {"confirm": {"action": "accept", "content": {"confirm": False}}}
# The faults' delays: long enough to tell apart from a plain call on a busy machine.
DELAY_MS = 1000
# A caller that gives up waits GIVE_UP_S for its call's answer, then looks at the state:
# the commit must still be ahead, LATE_DELAY_MS after the call arrived.
GIVE_UP_S = 0.3
LATE_DELAY_MS = 2000
# How long a commit may take to show in the state, at most.
SETTLE_S = 10


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    folder = work_dir("upstreams-")
    yield folder
    print(f"\nstate and logs: {folder}")
    if not os.environ.get("GATEWAY_E2E_KEEP"):
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module", params=["py", "ts"], ids=lambda kind: f"upstream-{kind}")
def shop(request: pytest.FixtureRequest, work: Path) -> Iterator[Shop]:
    server = start_shop(request.param, work)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def no_faults(shop: Shop) -> Iterator[None]:
    shop.clear_faults()
    yield
    shop.clear_faults()


@pytest.fixture(params=CLIENT_KINDS, ids=lambda kind: kind.id)
def client(request: pytest.FixtureRequest) -> ClientKind:
    return request.param


@pytest.fixture(params=MODERN_KINDS, ids=lambda kind: kind.id)
def modern_client(request: pytest.FixtureRequest) -> ClientKind:
    return request.param


@pytest.fixture(params=LEGACY_KINDS, ids=lambda kind: kind.id)
def legacy_client(request: pytest.FixtureRequest) -> ClientKind:
    return request.param


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def structured(answer: dict[str, Any]) -> dict[str, Any]:
    """The structured content of a tool result that is not an error."""
    assert "content" in answer, f"not a tool result: {answer}"
    assert answer["isError"] is False, f"a tool error: {answer}"
    return answer["structuredContent"]


def tool_error(answer: dict[str, Any]) -> dict[str, Any]:
    """The structured content of a tool error."""
    assert "content" in answer, f"not a tool result: {answer}"
    assert answer["isError"] is True, f"not a tool error: {answer}"
    return answer["structuredContent"]


def text_of(answer: dict[str, Any]) -> str:
    return " ".join(block.get("text", "") for block in answer["content"])


async def dump(shop: Shop) -> dict[str, list[dict[str, Any]]]:
    return await anyio.to_thread.run_sync(shop.dump)


async def refunds_with_key(shop: Shop, key: str) -> list[dict[str, Any]]:
    return [r for r in (await dump(shop))["refunds"] if r["idempotency_key"] == key]


def tickets_by_ref(state: dict[str, list[dict[str, Any]]], ref: str) -> list[dict[str, Any]]:
    return [t for t in state["tickets"] if t["external_ref"] == ref]


async def tickets_with_ref(shop: Shop, ref: str) -> list[dict[str, Any]]:
    return tickets_by_ref(await dump(shop), ref)


async def closures_of(shop: Shop, account: str) -> list[dict[str, Any]]:
    return [c for c in (await dump(shop))["closures"] if c["account_id"] == account]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- tools/list ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_lists_the_six_tools_in_the_clients_era(shop: Shop, client: ClientKind) -> None:
    listed = await list_tools(client, shop.url)

    assert listed["connection"]["protocolVersion"] == client.protocol_version
    assert listed["connection"]["sessionId"] is None, "the servers are stateless"
    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert sorted(tools) == sorted(SHOP_TOOLS)
    for name, tool in tools.items():
        schema = tool["inputSchema"]
        assert schema["type"] == "object"
        assert set(schema["required"]) == REQUIRED_ARGUMENTS[name]
        assert set(schema["properties"]) >= REQUIRED_ARGUMENTS[name]
        read_only = tool.get("annotations", {}).get("readOnlyHint", False)
        assert read_only == (name in READ_ONLY_TOOLS), name
    assert tools["refund"]["inputSchema"]["properties"]["amount_cents"]["type"] == "integer"
    assert "external_ref" in tools["create_ticket"]["inputSchema"]["properties"]
    assert tools["close_account"]["annotations"]["destructiveHint"] is True


# -- refund: keyed ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_refund_retried_with_its_key_makes_one_refund(shop: Shop, client: ClientKind) -> None:
    key, order = unique("key"), unique("order")
    args = {"order_id": order, "amount_cents": 1250, "idempotency_key": key}

    first, retry = await call_tools(client, shop.url, [Call("refund", args), Call("refund", args)])

    made = structured(first)["refund"]
    assert made["id"].startswith("re_")
    assert (made["order_id"], made["amount_cents"], made["idempotency_key"]) == (order, 1250, key)
    assert structured(retry)["refund"] == made
    assert await refunds_with_key(shop, key) == [made]


@pytest.mark.anyio
async def test_refund_key_reused_with_another_amount_is_a_tool_error(shop: Shop, client: ClientKind) -> None:
    key, order = unique("key"), unique("order")
    first, reused = await call_tools(
        client,
        shop.url,
        [
            Call("refund", {"order_id": order, "amount_cents": 500, "idempotency_key": key}),
            Call("refund", {"order_id": order, "amount_cents": 700, "idempotency_key": key}),
        ],
    )

    made = structured(first)["refund"]
    assert tool_error(reused)["error"] == "idempotency_key_reused"
    assert "idempotency key reused with different parameters" in text_of(reused)
    assert await refunds_with_key(shop, key) == [made]


@pytest.mark.anyio
async def test_invalid_amount_is_a_tool_error_and_stores_nothing(shop: Shop, client: ClientKind) -> None:
    amounts = [0, -5, 1_000_001]
    keys = [unique("key") for _ in amounts]
    answers = await call_tools(
        client,
        shop.url,
        [
            Call("refund", {"order_id": unique("order"), "amount_cents": amount, "idempotency_key": key})
            for amount, key in zip(amounts, keys)
        ],
    )

    assert len(answers) == len(amounts)
    for answer in answers:
        error = tool_error(answer)
        assert error["error"] == "invalid_amount"
        assert error["detail"]
    stored = {r["idempotency_key"] for r in (await dump(shop))["refunds"]}
    assert stored.isdisjoint(keys)


# -- create_ticket: unkeyed ---------------------------------------------------------------


@pytest.mark.anyio
async def test_create_ticket_twice_makes_two_tickets(shop: Shop, client: ClientKind) -> None:
    ref = unique("ref")
    args = {"subject": "Printer on fire", "body": "Again.", "external_ref": ref}

    first, second = await call_tools(client, shop.url, [Call("create_ticket", args), Call("create_ticket", args)])

    tickets = [structured(first)["ticket"], structured(second)["ticket"]]
    assert tickets[0]["id"] != tickets[1]["id"]
    assert all(t["id"].startswith("T-") and t["external_ref"] == ref for t in tickets)
    assert await tickets_with_ref(shop, ref) == tickets


@pytest.mark.anyio
async def test_external_ref_in_meta_is_stored_and_the_argument_wins(shop: Shop, client: ClientKind) -> None:
    from_meta, from_argument, ignored = unique("meta-ref"), unique("arg-ref"), unique("ignored-ref")

    by_meta, by_both = await call_tools(
        client,
        shop.url,
        [
            Call("create_ticket", {"subject": "s", "body": "b"}, meta={EXTERNAL_REF_META_KEY: from_meta}),
            Call(
                "create_ticket",
                {"subject": "s", "body": "b", "external_ref": from_argument},
                meta={EXTERNAL_REF_META_KEY: ignored},
            ),
        ],
    )

    assert structured(by_meta)["ticket"]["external_ref"] == from_meta
    assert structured(by_both)["ticket"]["external_ref"] == from_argument
    assert await tickets_with_ref(shop, from_meta) == [structured(by_meta)["ticket"]]
    assert await tickets_with_ref(shop, from_argument) == [structured(by_both)["ticket"]]
    assert await tickets_with_ref(shop, ignored) == []


# -- look-ups -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_find_tools_and_get_order_find_what_was_made(shop: Shop, client: ClientKind) -> None:
    order, ref = unique("order"), unique("ref")
    keys = [unique("key"), unique("key")]
    answers = await call_tools(
        client,
        shop.url,
        [
            Call("refund", {"order_id": order, "amount_cents": 300, "idempotency_key": keys[0]}),
            Call("refund", {"order_id": order, "amount_cents": 45, "idempotency_key": keys[1]}),
            Call("create_ticket", {"subject": "s", "body": "b"}, meta={EXTERNAL_REF_META_KEY: ref}),
            Call("find_refunds", {"idempotency_key": keys[0]}),
            Call("find_tickets", {"external_ref": ref}),
            Call("get_order", {"order_id": order}),
            Call("find_refunds", {"idempotency_key": unique("unknown")}),
            Call("find_tickets", {"external_ref": unique("unknown")}),
        ],
    )

    refund, _, ticket, found_refunds, found_tickets, order_seen, no_refunds, no_tickets = map(structured, answers)
    assert found_refunds == {"refunds": [refund["refund"]]}
    assert found_tickets == {"tickets": [ticket["ticket"]]}
    assert order_seen == {"order": {"order_id": order, "refunded_cents": 345}}
    assert no_refunds == {"refunds": []} and no_tickets == {"tickets": []}
    state = await dump(shop)
    assert refund["refund"] in state["refunds"] and ticket["ticket"] in state["tickets"]


# -- faults -----------------------------------------------------------------------------
#
# These run the four clients at once, each with its own ticket reference, so that a test
# waits out a fault's delay once.


def refs_by_client(prefix: str) -> dict[ClientKind, str]:
    return {kind: unique(f"{prefix}-{kind.id}") for kind in CLIENT_KINDS}


@pytest.mark.anyio
async def test_delay_before_commit_makes_the_call_slow_and_the_commit_late(shop: Shop) -> None:
    refs = refs_by_client("slow")
    shop.set_faults({"create_ticket": {"delay_before_commit_ms": DELAY_MS}})
    answers: dict[ClientKind, dict[str, Any]] = {}
    took_ms: dict[ClientKind, int] = {}

    async def make_ticket(kind: ClientKind) -> None:
        sent_ms = now_ms()
        args = {"subject": "s", "body": "b", "external_ref": refs[kind]}
        answers[kind] = await call_tool(kind, shop.url, "create_ticket", args)
        took_ms[kind] = now_ms() - sent_ms

    started_ms = now_ms()
    async with anyio.create_task_group() as tasks:
        for kind in CLIENT_KINDS:
            tasks.start_soon(make_ticket, kind)
        await anyio.sleep(DELAY_MS / 1000 / 3)
        early = await dump(shop)
        for kind, ref in refs.items():
            assert tickets_by_ref(early, ref) == [], f"{kind.id}: committed before the delay"

    state = await dump(shop)
    for kind, ref in refs.items():
        ticket = structured(answers[kind])["ticket"]
        assert took_ms[kind] >= DELAY_MS, kind.id
        assert ticket["created_at_ms"] >= started_ms + DELAY_MS, kind.id
        assert tickets_by_ref(state, ref) == [ticket], kind.id


@pytest.mark.anyio
async def test_commit_lands_after_the_caller_gave_up(shop: Shop) -> None:
    refs = refs_by_client("late")
    shop.set_faults({"create_ticket": {"delay_before_commit_ms": LATE_DELAY_MS}})
    answers: dict[ClientKind, dict[str, Any]] = {}
    seen_on_giving_up: dict[ClientKind, list[dict[str, Any]]] = {}

    async def make_ticket(kind: ClientKind) -> None:
        args = {"subject": "s", "body": "b", "external_ref": refs[kind]}
        answers[kind] = await call_tool(kind, shop.url, "create_ticket", args, timeout_s=GIVE_UP_S)
        seen_on_giving_up[kind] = await tickets_with_ref(shop, refs[kind])

    started_ms = now_ms()
    async with anyio.create_task_group() as tasks:
        for kind in CLIENT_KINDS:
            tasks.start_soon(make_ticket, kind)

    for kind, answer in answers.items():
        assert answer.get("kind") == "REQUEST_TIMEOUT", f"{kind.id} did not time out: {answer}"
        assert seen_on_giving_up[kind] == [], f"{kind.id}: committed before the delay"
    with anyio.fail_after(SETTLE_S):
        while True:
            state = await dump(shop)
            if all(tickets_by_ref(state, ref) for ref in refs.values()):
                break
            await anyio.sleep(0.1)
    for kind, ref in refs.items():
        (ticket,) = tickets_by_ref(state, ref)
        assert ticket["created_at_ms"] >= started_ms + LATE_DELAY_MS, kind.id


@pytest.mark.anyio
async def test_hang_after_commit_answers_late_what_was_committed(shop: Shop) -> None:
    refs = refs_by_client("hung")
    shop.set_faults({"create_ticket": {"hang_after_commit_ms": DELAY_MS}})
    answers: dict[ClientKind, dict[str, Any]] = {}
    took_ms: dict[ClientKind, int] = {}
    committed: dict[ClientKind, dict[str, Any]] = {}

    async def make_ticket(kind: ClientKind) -> None:
        sent_ms = now_ms()
        args = {"subject": "s", "body": "b", "external_ref": refs[kind]}
        answers[kind] = await call_tool(kind, shop.url, "create_ticket", args)
        took_ms[kind] = now_ms() - sent_ms

    async with anyio.create_task_group() as tasks:
        for kind in CLIENT_KINDS:
            tasks.start_soon(make_ticket, kind)
        with anyio.fail_after(SETTLE_S):
            while len(committed) < len(refs):
                state = await dump(shop)
                for kind, ref in refs.items():
                    if kind not in committed and (found := tickets_by_ref(state, ref)):
                        assert kind not in answers, f"{kind.id}: answered before the ticket was committed"
                        committed[kind] = found[0]
                await anyio.sleep(0.05)

    for kind in refs:
        assert took_ms[kind] >= DELAY_MS, kind.id
        assert structured(answers[kind])["ticket"] == committed[kind], kind.id


# -- close_account: asks the user first ---------------------------------------------------


def assert_asks_to_confirm(answer: dict[str, Any], account: str) -> str:
    """`answer` is close_account's input_required result for `account`; its requestState."""
    assert answer.get("resultType") == "input_required", f"not input_required: {answer}"
    assert set(answer["inputRequests"]) == {"confirm"}
    question = answer["inputRequests"]["confirm"]
    assert question["method"] == "elicitation/create"
    params = question["params"]
    assert params["mode"] == "form"
    assert params["message"] == f"Close account {account}? This cannot be undone."
    schema = params["requestedSchema"]
    assert schema["type"] == "object" and schema["required"] == ["confirm"]
    assert schema["properties"]["confirm"]["type"] == "boolean"
    assert isinstance(answer["requestState"], str) and answer["requestState"]
    return answer["requestState"]


def assert_refused_state(shop: Shop, answer: dict[str, Any]) -> None:
    """A requestState minted for another account's call: the Python SDK's boundary binds the
    state to the call's arguments and refuses it (-32602); the TypeScript codec proves only
    that the state is the shop's, and the tool refuses the other account (a tool error)."""
    if shop.kind == "py":
        assert answer.get("error", {}).get("code") == -32602, answer
        assert answer["error"]["message"] == "Invalid or expired requestState"
    else:
        assert tool_error(answer)["error"] == "invalid_request_state"


@pytest.mark.anyio
async def test_close_account_unanswered_is_input_required_and_stores_nothing(
    shop: Shop, modern_client: ClientKind
) -> None:
    account = unique("acct")

    answer = await call_tool(modern_client, shop.url, "close_account", {"account_id": account})

    assert_asks_to_confirm(answer, account)
    assert await closures_of(shop, account) == []


@pytest.mark.anyio
async def test_close_account_confirmed_makes_one_closure(shop: Shop, modern_client: ClientKind) -> None:
    account = unique("acct")

    answer = await call_tool(modern_client, shop.url, "close_account", {"account_id": account}, confirm=True)

    closure = structured(answer)["closure"]
    assert closure["id"].startswith("C-") and closure["account_id"] == account
    assert await closures_of(shop, account) == [closure]


@pytest.mark.anyio
async def test_close_account_declined_stores_nothing(shop: Shop, modern_client: ClientKind) -> None:
    account = unique("acct")

    answer = await call_tool(modern_client, shop.url, "close_account", {"account_id": account}, confirm=False)

    assert structured(answer) == {"declined": True}
    assert await closures_of(shop, account) == []


@pytest.mark.anyio
async def test_close_account_cannot_ask_a_legacy_client_and_stores_nothing(
    shop: Shop, legacy_client: ClientKind
) -> None:
    """The servers serve the 2025 era statelessly, so neither can send the client the
    `elicitation/create` request its SDK would ask with; each SDK says so its own way."""
    account = unique("acct")

    answer = await call_tool(legacy_client, shop.url, "close_account", {"account_id": account}, confirm=True)

    if shop.kind == "py":
        assert answer.get("error", {}).get("code") == -32600, answer
        assert "no back-channel for server-initiated requests" in answer["error"]["message"]
    else:
        assert answer.get("isError") is True, answer
        assert "per-request legacy serving cannot receive server-to-client requests" in text_of(answer)
    assert await closures_of(shop, account) == []


@pytest.mark.anyio
async def test_request_state_is_accepted_by_another_process_of_the_shop(shop: Shop, work: Path) -> None:
    """Stateless rounds: the first round's requestState, re-sent by hand to a second server
    process on the same state, commits there; the same state for another account, or
    altered, is refused and stores nothing."""
    twin = start_service(
        unique(f"twin-{shop.kind}"), [*shop_argv(shop.kind, shop.state), "--port", "0"], work
    )
    twin_url = f"http://{twin.addr}/mcp"
    try:
        for kind in MODERN_KINDS:
            account, other = unique("acct"), unique("acct")
            state = assert_asks_to_confirm(
                await call_tool(kind, shop.url, "close_account", {"account_id": account}), account
            )

            confirmed, for_other, altered, declined = await call_tools(
                kind,
                twin_url,
                [
                    Call("close_account", {"account_id": account}, input_responses=YES, request_state=state),
                    Call("close_account", {"account_id": other}, input_responses=YES, request_state=state),
                    Call("close_account", {"account_id": account}, input_responses=YES, request_state=state[:-2]),
                    Call("close_account", {"account_id": account}, input_responses=NO, request_state=state),
                ],
            )

            closure = structured(confirmed)["closure"]
            assert closure["account_id"] == account, kind.id
            assert_refused_state(shop, for_other)
            assert altered.get("error", {}).get("code") == -32602, f"{kind.id}: {altered}"
            assert altered["error"]["message"] == "Invalid or expired requestState"
            assert structured(declined) == {"declined": True}, kind.id
            assert await closures_of(shop, account) == [closure], kind.id
            assert await closures_of(shop, other) == [], kind.id
    finally:
        twin.stop()


@pytest.mark.anyio
async def test_close_account_delay_before_commit_delays_the_confirmed_round(shop: Shop) -> None:
    accounts = {kind: unique(f"slow-{kind.id}") for kind in MODERN_KINDS}
    shop.set_faults({"close_account": {"delay_before_commit_ms": DELAY_MS}})
    answers: dict[ClientKind, dict[str, Any]] = {}
    took_ms: dict[ClientKind, int] = {}

    async def close(kind: ClientKind) -> None:
        sent_ms = now_ms()
        answers[kind] = await call_tool(kind, shop.url, "close_account", {"account_id": accounts[kind]}, confirm=True)
        took_ms[kind] = now_ms() - sent_ms

    started_ms = now_ms()
    async with anyio.create_task_group() as tasks:
        for kind in MODERN_KINDS:
            tasks.start_soon(close, kind)

    for kind, account in accounts.items():
        closure = structured(answers[kind])["closure"]
        assert took_ms[kind] >= DELAY_MS, kind.id
        assert closure["created_at_ms"] >= started_ms + DELAY_MS, kind.id
        assert await closures_of(shop, account) == [closure], kind.id


# -- the process --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_server_stops_on_sigterm_with_status_0_and_keeps_its_state(shop: Shop, work: Path) -> None:
    other = start_shop(shop.kind, work, unique(f"stopped-{shop.kind}"))
    try:
        made = await call_tool(CLIENT_KINDS[0], other.url, "create_ticket", {"subject": "s", "body": "b"})
    finally:
        status = other.stop()

    assert status == 0
    assert (await dump(other))["tickets"] == [structured(made)["ticket"]]
