"""The shop's MCP server with the official MCP Python SDK (`mcp` 2.x): its tools, and
serving them over Streamable HTTP, stateless, to both protocol eras.

`close_account` asks the user before it acts. Toward a 2026-07-28 request it answers an
`InputRequiredResult` (one form elicitation under the key `confirm`, and a `requestState`
naming the account) and commits on the re-sent call that carries the answer; the SDK's
`RequestStateBoundary` seals that state (AES-256-GCM, bound to the tool, its arguments
and the server's name, ten minutes) under `REQUEST_STATE_KEY`, which every process of
this shop shares, so that any of them accepts the re-sent call. Toward a 2025-era request
it would send the same form as an `elicitation/create` request to the client during the
call, as the SDK does for that era; served statelessly, the call has no channel for it,
and the SDK answers a JSON-RPC error (-32600, "no back-channel").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypeVar

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolResult,
    ClientCapabilities,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    TextContent,
    ToolAnnotations,
)
from mcp_types.version import is_version_at_least
from pydantic import Field

from shop_state import Faults, Shop

SERVER_NAME = "shop-py"
EXTERNAL_REF_META_KEY = "shop.example/external-ref"
MAX_REFUND_CENTS = 1_000_000
HOST = "127.0.0.1"

# The key sealing close_account's requestState. Every process of this shop must hold the
# same one, so that a call re-sent to another process is accepted. A test fixture, not a
# secret.
REQUEST_STATE_KEY = "ledger gateway e2e shop: request-state key (not a secret)"
# The first protocol revision whose tools/call may answer input_required.
INPUT_REQUIRED_VERSION = "2026-07-28"
# close_account's question: the key of its input request, and its form.
CONFIRM_KEY = "confirm"
CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "confirm": {
            "type": "boolean",
            "title": "Close the account",
            "description": "true closes the account; false keeps it.",
        }
    },
    "required": ["confirm"],
}

T = TypeVar("T")


async def with_faults(faults: Faults, tool: str, commit: Callable[[], T]) -> T:
    """Runs `commit` between the tool's configured delays.

    The delay and the commit are shielded: a caller that disconnects (on which the SDK
    cancels the handler) does not stop a commit that has been asked for, as with a real
    backend that got the request.
    """
    delay_ms, hang_ms = faults.delays_ms(tool)
    with anyio.CancelScope(shield=True):
        if delay_ms:
            await anyio.sleep(delay_ms / 1000)
        outcome = commit()
    if hang_ms:
        await anyio.sleep(hang_ms / 1000)
    return outcome


def answer(structured: dict[str, Any], *, is_error: bool = False) -> CallToolResult:
    """A result whose structured content and text block carry the same JSON."""
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(structured))],
        structured_content=structured,
        is_error=is_error,
    )


def tool_error(error: str, detail: str) -> CallToolResult:
    return answer({"error": error, "detail": detail}, is_error=True)


def confirm_message(account_id: str) -> str:
    return f"Close account {account_id}? This cannot be undone."


def confirmed(response: object) -> bool:
    """Whether an answer to close_account's question says yes: accepted with `confirm: true`.

    Declined, cancelled, or accepted with anything else is a no.
    """
    return (
        isinstance(response, ElicitResult)
        and response.action == "accept"
        and (response.content or {}).get("confirm") is True
    )


def require_form_elicitation(capabilities: ClientCapabilities | None) -> None:
    """Refuses, as the TypeScript SDK does on its own, to ask a client that cannot answer.

    (A bare `elicitation: {}`, from before modes existed, counts as form support.)
    """
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is not None and (elicitation.form is not None or elicitation.url is None):
        return
    raise MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=(
            f"Cannot request input '{CONFIRM_KEY}' (elicitation/create): the request's client "
            "capabilities do not declare the required capability"
        ),
        data={"requiredCapabilities": {"elicitation": {"form": {}}}},
    )


def state_account(request_state: str | None) -> str | None:
    """The account a close_account requestState was minted for (already unsealed by the SDK)."""
    if request_state is None:
        return None
    try:
        state = json.loads(request_state)
    except ValueError:
        return None
    account = state.get("account_id") if isinstance(state, dict) else None
    return account if isinstance(account, str) else None


def build_server(shop: Shop, faults: Faults) -> MCPServer:
    mcp = MCPServer(
        SERVER_NAME,
        version="1.0.0",
        instructions="A shop: refunds, help-desk tickets, orders, accounts.",
        request_state_security=RequestStateSecurity(keys=[REQUEST_STATE_KEY]),
    )

    @mcp.tool(
        description=(
            "Refund part of an order. Keyed: a retry with the same idempotency_key and the same "
            "order and amount answers the refund made before; other parameters are an error."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True),
    )
    async def refund(
        order_id: Annotated[str, Field(description="The order to refund.")],
        amount_cents: Annotated[int, Field(description=f"Cents to refund, 1 to {MAX_REFUND_CENTS}.")],
        idempotency_key: Annotated[str, Field(description="The caller's key for this refund.")],
    ) -> CallToolResult:
        if not 0 < amount_cents <= MAX_REFUND_CENTS:
            return tool_error("invalid_amount", f"amount_cents must be 1 to {MAX_REFUND_CENTS}, got {amount_cents}")
        made, matches = await with_faults(
            faults, "refund", lambda: shop.refund(order_id, amount_cents, idempotency_key)
        )
        if not matches:
            return tool_error("idempotency_key_reused", "idempotency key reused with different parameters")
        return answer({"refund": made})

    @mcp.tool(
        description=(
            "Open a help-desk ticket. Every call opens a new ticket. external_ref may also be given "
            f"in the request _meta as '{EXTERNAL_REF_META_KEY}'; the argument wins."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False),
    )
    async def create_ticket(
        subject: Annotated[str, Field(description="One line.")],
        body: Annotated[str, Field(description="The ticket's text.")],
        ctx: Context,
        external_ref: Annotated[str | None, Field(description="The caller's reference for this ticket.")] = None,
    ) -> CallToolResult:
        if external_ref is None:
            from_meta = (ctx.request_context.meta or {}).get(EXTERNAL_REF_META_KEY)
            external_ref = from_meta if isinstance(from_meta, str) else None
        made = await with_faults(faults, "create_ticket", lambda: shop.create_ticket(subject, body, external_ref))
        return answer({"ticket": made})

    @mcp.tool(
        description="The refunds made with an idempotency key.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def find_refunds(
        idempotency_key: Annotated[str, Field(description="The key to look for.")],
    ) -> CallToolResult:
        return answer({"refunds": await with_faults(faults, "find_refunds", lambda: shop.refunds(idempotency_key))})

    @mcp.tool(
        description="The tickets with an external reference.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def find_tickets(
        external_ref: Annotated[str, Field(description="The reference to look for.")],
    ) -> CallToolResult:
        return answer({"tickets": await with_faults(faults, "find_tickets", lambda: shop.tickets(external_ref))})

    @mcp.tool(
        description="An order and how much of it has been refunded.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def get_order(order_id: Annotated[str, Field(description="The order.")]) -> CallToolResult:
        refunded = await with_faults(faults, "get_order", lambda: shop.refunded_cents(order_id))
        return answer({"order": {"order_id": order_id, "refunded_cents": refunded}})

    @mcp.tool(
        description=(
            "Close a customer's account. Asks the user to confirm first (an elicitation); "
            "every confirmed call records a new closure."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False),
    )
    async def close_account(
        account_id: Annotated[str, Field(description="The account to close.")],
        ctx: Context,
    ) -> CallToolResult | InputRequiredResult:
        version = ctx.protocol_version
        if version is not None and is_version_at_least(version, INPUT_REQUIRED_VERSION):
            response = (ctx.input_responses or {}).get(CONFIRM_KEY)
            # The boundary has verified the state and that it was minted for these very
            # arguments; the account in it is checked all the same.
            if response is None or state_account(ctx.request_state) != account_id:
                require_form_elicitation(ctx.client_capabilities)
                question = ElicitRequest(
                    params=ElicitRequestFormParams(message=confirm_message(account_id), requested_schema=CONFIRM_SCHEMA)
                )
                return InputRequiredResult(
                    input_requests={CONFIRM_KEY: question},
                    request_state=json.dumps({"account_id": account_id}),
                )
            yes = confirmed(response)
        else:
            # 2025-11-25: the question goes to the client as a request during the call.
            yes = confirmed(
                await ctx.request_context.session.elicit_form(
                    confirm_message(account_id), CONFIRM_SCHEMA, related_request_id=ctx.request_id
                )
            )
        if not yes:
            return answer({"declined": True})
        made = await with_faults(faults, "close_account", lambda: shop.close_account(account_id))
        return answer({"closure": made})

    return mcp


class Uvicorn(uvicorn.Server):
    """uvicorn's server, stopped by SIGTERM or SIGINT with exit status 0.

    (uvicorn's own handlers raise the signal again once it has shut down, so that the
    process ends killed by it.)
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        try:
            yield
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    def stop(self) -> None:
        self.should_exit = True


class LegacyOnly:
    """An ASGI wrapper that makes the shop a server of the 2025-11-25 era alone, as servers
    written before 2026-07-28 are: `server/discover` is a method it does not know, and a
    request that names protocol 2026-07-28 is refused as an unsupported version."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        refusal = None
        if isinstance(request, dict) and request.get("method") == "server/discover":
            refusal = {"code": -32601, "message": "Method not found"}
        elif headers.get("mcp-protocol-version") == "2026-07-28":
            refusal = {"code": -32602, "message": "Unsupported protocol version: 2026-07-28"}
        if refusal is not None:
            answer = json.dumps({"jsonrpc": "2.0", "id": (request or {}).get("id"), "error": refusal}).encode()
            status = 200 if refusal["code"] == -32601 else 400
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": answer})
            return
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def serve(shop: Shop, faults: Faults, port: int, json_response: bool, legacy_only: bool = False) -> None:
    """Serves `/mcp` on 127.0.0.1:`port` and prints `listening on ADDR` once it accepts.

    `legacy_only`: the 2025-11-25 era alone, with sessions (`Mcp-Session-Id`), as a server
    written before 2026-07-28 is."""
    mcp = build_server(shop, faults)
    # stateless_http: a 2025-era initialize is answered without a session, and any later
    # request is served on its own. 2026-07-28 requests are stateless whatever it says.
    app = mcp.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=not legacy_only, json_response=json_response, host=HOST
    )
    if legacy_only:
        app = LegacyOnly(app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    server = Uvicorn(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            await serving
            raise SystemExit("the server stopped while starting")
        await asyncio.sleep(0.01)
    print(f"listening on {HOST}:{sock.getsockname()[1]}", flush=True)
    await serving
