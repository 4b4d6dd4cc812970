"""The pieces of the gateway's end-to-end tests, all real processes and official SDKs:

- the upstream shop servers, `upstream_py/shop_server.py` (MCP Python SDK) and
  `ts/shop_server.mjs` (MCP TypeScript SDK v2), with their state and faults files
  (`Shop`, `start_shop`);
- MCP clients: the Python SDK's `Client` in this process, and `ts/client.mjs` (the
  TypeScript SDK) as a child process, each in either protocol era, behind one interface
  (`ClientKind`, `list_tools`, `call_tools`), so that a test can run every client
  against every server the same way.

Call results are plain JSON objects in the form `ts/client.mjs` prints, whichever client
made the call: `{"content", "structuredContent"?, "isError", "_meta"?}` for a result,
`{"resultType": "input_required", "inputRequests"?, "requestState"?, "_meta"?}` for a
2026-07-28 input-required result handed back as it came (see `call_tools`' `confirm`),
`{"error": {"code", "message", "data"?}}` for a JSON-RPC error, and
`{"transport_error": "...", "kind": "..."}` when no answer came (refused, timed out).

Both clients declare the form elicitation capability. Asked for input (a tool that wants
the user's confirmation), they answer `{"confirm": true|false}` when the caller passes
`confirm=True|False`, through each SDK's own mechanism: on 2026-07-28 its
multi-round-trip driver answers the `input_required` result and re-sends the call with
`inputResponses` and the echoed `requestState`; on a 2025-era connection its elicitation
handler answers the server's `elicitation/create` request. With `confirm=None` nobody
answers: a 2026-07-28 `input_required` result is returned as it came (the Python SDK's
`ClientSession.call_tool(..., allow_input_required=True)`, the TypeScript SDK's
`allowInputRequired`), and a `Call` with `input_responses` and `request_state` re-sends it
by hand.

Everything these run comes from setup.sh, under GATEWAY_E2E_DIR (default
target/gateway-e2e, relative to the repository).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    INVALID_REQUEST,
    REQUEST_TIMEOUT,
    CallToolResult,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    InputRequiredResult,
    InputResponses,
)
from pydantic import TypeAdapter

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
E2E_DIR = REPO / os.environ.get("GATEWAY_E2E_DIR", "target/gateway-e2e")
TS_DIR = E2E_DIR / "ts"
PY_SHOP = HERE / "upstream_py" / "shop_server.py"
# Links to ts/*.mjs next to the installed node_modules (setup.sh makes them).
TS_SHOP = TS_DIR / "shop_server.mjs"
TS_CLIENT = TS_DIR / "client.mjs"

# How long a connection's handshake, and by default a request, waits for an answer.
CONNECT_TIMEOUT_S = 30
REQUEST_TIMEOUT_S = 60

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"
EXTERNAL_REF_META_KEY = "shop.example/external-ref"
SHOP_TOOLS = ("refund", "create_ticket", "find_refunds", "find_tickets", "get_order", "close_account")

ShopKind = Literal["py", "ts"]
Era = Literal["2026", "legacy"]


class WorldError(RuntimeError):
    """A process of the test world could not be started or used."""


def node_argv(script: Path) -> list[str]:
    """How to run one of the TypeScript scripts: through its link next to node_modules."""
    if not script.exists():
        raise WorldError(f"{script} is missing: run gateway/tests/e2e/setup.sh")
    node = shutil.which("node")
    if node is None:
        raise WorldError("node is not on PATH")
    return [node, "--preserve-symlinks-main", str(script)]


def python_argv(script: Path) -> list[str]:
    """How to run a Python script with the venv's interpreter (this one, under pytest)."""
    return [sys.executable, str(script)]


def child_env() -> dict[str, str]:
    """The environment of the servers: no __pycache__ in the source tree from their imports."""
    return dict(os.environ, PYTHONDONTWRITEBYTECODE="1")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def work_dir(prefix: str) -> Path:
    """A fresh folder for one test run's state, faults and logs, under GATEWAY_E2E_DIR."""
    runs = E2E_DIR / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=runs))


# -- services -----------------------------------------------------------------------------


@dataclass
class Service:
    """A child process that printed `listening on ADDR`; its stderr goes to `log`."""

    name: str
    process: subprocess.Popen[bytes]
    addr: str
    log: Path

    def stop(self, timeout_s: float = 5) -> int:
        """SIGTERM, then SIGKILL after `timeout_s`; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_service(
    name: str, argv: Sequence[str], work: Path, env: dict[str, str] | None = None, timeout_s: float = 30
) -> Service:
    """Runs `argv`, with stderr to `work/<name>.log`, until it prints `listening on ADDR`.

    The pid goes to `work/<name>.pid`, for a wrapper script that cleans up after a killed
    test run.
    """
    log = work / f"{name}.log"
    with open(log, "ab") as stderr:
        process = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, env=env or child_env()
        )
    (work / f"{name}.pid").write_text(str(process.pid))
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([process.stdout], [], [], max(remaining, 0))
        if not ready:
            process.kill()
            process.wait()
            raise WorldError(f"{name} printed no address within {timeout_s} s; see {log}")
        chunk = os.read(process.stdout.fileno(), 1)
        if not chunk:
            process.wait()
            raise WorldError(f"{name} exited ({process.returncode}) before listening; see {log}")
        line += chunk
    text = line.decode().strip()
    if not text.startswith("listening on "):
        process.kill()
        process.wait()
        raise WorldError(f"{name} printed {text!r}")
    return Service(name, process, text.removeprefix("listening on "), log)


# -- the upstream shops -------------------------------------------------------------------


def shop_state_path(kind: ShopKind, work: Path, name: str) -> Path:
    return work / (f"{name}.db" if kind == "py" else f"{name}.json")


def shop_argv(kind: ShopKind, state: Path) -> list[str]:
    """The shop server's command up to its options: `--db`/`--state` included."""
    if kind == "py":
        return [*python_argv(PY_SHOP), "--db", str(state)]
    return [*node_argv(TS_SHOP), "--state", str(state)]


def dump_state(kind: ShopKind, state: Path) -> dict[str, list[dict[str, Any]]]:
    """The shop's state, `{"refunds": [...], "tickets": [...], "closures": [...]}`, by its
    `--dump` command."""
    done = subprocess.run(
        [*shop_argv(kind, state), "--dump"], capture_output=True, text=True, env=child_env(), timeout=30
    )
    if done.returncode != 0:
        raise WorldError(f"dumping {state} failed ({done.returncode}): {done.stderr}")
    return json.loads(done.stdout)


@dataclass
class Shop:
    """One upstream shop server: its process, its state file and its faults file."""

    kind: ShopKind
    name: str
    work: Path
    json_response: bool = False
    # The Python shop only: the 2025-11-25 era alone, with sessions.
    legacy_only: bool = False
    service: Service | None = None

    @property
    def state(self) -> Path:
        return shop_state_path(self.kind, self.work, self.name)

    @property
    def faults(self) -> Path:
        return self.work / f"{self.name}.faults.json"

    @property
    def url(self) -> str:
        """The MCP endpoint."""
        if self.service is None:
            raise WorldError(f"{self.name} is not running")
        return f"http://{self.service.addr}/mcp"

    def start(self, port: int = 0) -> None:
        argv = [*shop_argv(self.kind, self.state), "--port", str(port), "--faults", str(self.faults)]
        if self.json_response:
            argv.append("--json-response")
        if self.legacy_only:
            argv.append("--legacy-only")
        self.service = start_service(self.name, argv, self.work)

    def stop(self) -> int | None:
        """Stops the server (SIGTERM); its exit status, or None if it was not running."""
        if self.service is None:
            return None
        status = self.service.stop()
        self.service = None
        return status

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        return dump_state(self.kind, self.state)

    def set_faults(self, faults: dict[str, dict[str, int]]) -> None:
        """Replaces the faults file (atomically: the server reads it on every call)."""
        temporary = self.faults.with_suffix(".tmp")
        temporary.write_text(json.dumps(faults))
        temporary.replace(self.faults)

    def clear_faults(self) -> None:
        self.faults.unlink(missing_ok=True)


def start_shop(
    kind: ShopKind,
    work: Path,
    name: str | None = None,
    *,
    port: int = 0,
    json_response: bool = False,
    legacy_only: bool = False,
) -> Shop:
    """Starts a shop server of `kind` with its files in `work`."""
    shop = Shop(kind, name or f"shop-{kind}", work, json_response=json_response, legacy_only=legacy_only)
    shop.start(port)
    return shop


# -- the TypeScript client ----------------------------------------------------------------


@dataclass
class ClientRun:
    """What one run of ts/client.mjs printed (one JSON object a line) and its exit status."""

    lines: list[dict[str, Any]]
    returncode: int
    stderr: str

    @property
    def line(self) -> dict[str, Any]:
        """The only line printed."""
        if len(self.lines) != 1:
            raise WorldError(f"client.mjs printed {len(self.lines)} lines (exit {self.returncode}): {self.stderr}")
        return self.lines[0]


def ts_client_argv(
    url: str,
    *,
    era: Era = "2026",
    bearer: str | None = None,
    headers: dict[str, str] | None = None,
    timeout_ms: int | None = None,
    calls_file: Path | None = None,
    list_tools: bool = False,
    tool: str | None = None,
    args: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    confirm: bool | None = None,
    input_responses: dict[str, Any] | None = None,
    request_state: str | None = None,
) -> list[str]:
    argv = [*node_argv(TS_CLIENT), "--url", url, "--era", era]
    if confirm is not None:
        argv += ["--confirm", "yes" if confirm else "no"]
    if bearer is not None:
        argv += ["--bearer", bearer]
    for name, value in (headers or {}).items():
        argv += ["--header", f"{name}: {value}"]
    if timeout_ms is not None:
        argv += ["--timeout-ms", str(timeout_ms)]
    if calls_file is not None:
        argv += ["--calls", str(calls_file)]
    elif list_tools:
        argv.append("--list")
    elif tool is not None:
        argv += ["--tool", tool, "--args", json.dumps(args or {})]
        if meta is not None:
            argv += ["--meta", json.dumps(meta)]
        if input_responses is not None:
            argv += ["--input-responses", json.dumps(input_responses)]
        if request_state is not None:
            argv += ["--request-state", request_state]
    return argv


def parse_client_output(stdout: str, stderr: str, returncode: int) -> ClientRun:
    lines = [json.loads(text) for text in stdout.splitlines() if text.strip()]
    if returncode not in (0, 3):
        raise WorldError(f"client.mjs failed ({returncode}): {stderr}")
    return ClientRun(lines, returncode, stderr)


def run_ts_client(*, process_timeout_s: float = 120, **options: Any) -> ClientRun:
    """Runs ts/client.mjs to the end; `options` are those of `ts_client_argv` after the URL."""
    url = options.pop("url")
    done = subprocess.run(ts_client_argv(url, **options), capture_output=True, text=True, timeout=process_timeout_s)
    return parse_client_output(done.stdout, done.stderr, done.returncode)


async def run_ts_client_async(*, process_timeout_s: float = 120, **options: Any) -> ClientRun:
    """`run_ts_client` without blocking the event loop."""
    url = options.pop("url")
    with anyio.fail_after(process_timeout_s):
        done = await anyio.run_process(ts_client_argv(url, **options), check=False)
    return parse_client_output(done.stdout.decode(), done.stderr.decode(), done.returncode)


# -- the Python client --------------------------------------------------------------------


@asynccontextmanager
async def py_client(
    url: str,
    era: Era = "2026",
    *,
    bearer: str | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = CONNECT_TIMEOUT_S,
    confirm: bool | None = None,
) -> AsyncIterator[tuple[Client, dict[str, Any]]]:
    """A connection with the Python SDK's `Client`, and `{"era", "protocolVersion", "sessionId"}`.

    `era` "2026" adopts 2026-07-28 without a probe (`mode="2026-07-28"`), "legacy" runs
    the 2025-11-25 initialize handshake (`mode="legacy"`). `timeout_s` is how long the
    handshake and, unless a request says otherwise, each request wait for an answer.
    The client declares the form elicitation capability and answers elicitations as
    `elicitation_answer(confirm)` says.
    """
    all_headers = dict(headers or {})
    if bearer is not None:
        all_headers["Authorization"] = f"Bearer {bearer}"
    facts: dict[str, Any] = {"sessionId": None}

    async def note_session(response: httpx2.Response) -> None:
        session = response.headers.get("mcp-session-id")
        if session:
            facts["sessionId"] = session

    # The SDK times requests out; the HTTP client's own limit only guards against a hang.
    http = httpx2.AsyncClient(
        headers=all_headers,
        timeout=httpx2.Timeout(30.0, read=max(timeout_s, CONNECT_TIMEOUT_S) + 30),
        event_hooks={"response": [note_session]},
    )
    mode = MODERN_VERSION if era == "2026" else "legacy"
    try:
        async with http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(
                transport,
                mode=mode,
                cache=None,
                read_timeout_seconds=timeout_s,
                elicitation_callback=elicitation_answer(confirm),
            ) as client:
                facts["protocolVersion"] = client.protocol_version
                facts["era"] = "modern" if client.protocol_version == MODERN_VERSION else "legacy"
                yield client, facts
    except BaseExceptionGroup as group:
        # The SDK's task groups wrap what a call raised; hand the one error on as it is.
        raise only_error(group) from None


def elicitation_answer(confirm: bool | None) -> Any:
    """The Python client's elicitation callback: `{"confirm": confirm}`, accepted.

    With `confirm=None` there is nobody to ask: an elicitation request is refused (the
    2026-07-28 calls of `call_tools` hand an input-required result back before it gets
    here).
    """

    async def answer(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        if confirm is None:
            return ErrorData(code=INVALID_REQUEST, message="nobody to answer the elicitation (confirm is None)")
        return ElicitResult(action="accept", content={"confirm": confirm})

    return answer


def only_error(group: BaseExceptionGroup) -> BaseException:
    """The single error inside nested exception groups, or the group if there are more."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def result_json(result: CallToolResult | InputRequiredResult) -> dict[str, Any]:
    """A CallToolResult, or an InputRequiredResult, in the form ts/client.mjs prints it."""
    wire = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(result, InputRequiredResult):
        return {
            key: wire[key] for key in ("resultType", "inputRequests", "requestState", "_meta") if key in wire
        }
    line: dict[str, Any] = {"content": wire.get("content", [])}
    if result.structured_content is not None:
        line["structuredContent"] = wire["structuredContent"]
    line["isError"] = result.is_error
    if "_meta" in wire:
        line["_meta"] = wire["_meta"]
    return line


# The Python SDK's errors for a request that got no answer, named as the TypeScript SDK's.
NO_ANSWER = {REQUEST_TIMEOUT: "REQUEST_TIMEOUT", CONNECTION_CLOSED: "CONNECTION_CLOSED"}


def error_json(error: BaseException) -> dict[str, Any]:
    """A failed request in the form ts/client.mjs prints it; unexpected errors are raised."""
    if isinstance(error, MCPError):
        if error.error.code in NO_ANSWER:
            return {"transport_error": error.error.message, "kind": NO_ANSWER[error.error.code]}
        line: dict[str, Any] = {"code": error.error.code, "message": error.error.message}
        if error.error.data is not None:
            line["data"] = error.error.data
        return {"error": line}
    if isinstance(error, (httpx2.HTTPError, OSError)):
        return {"transport_error": str(error), "kind": type(error).__name__}
    raise error


# -- any client ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientKind:
    """An MCP client: which SDK, which protocol era."""

    sdk: Literal["py", "ts"]
    era: Era

    @property
    def id(self) -> str:
        return f"{self.sdk}-{self.era}"

    @property
    def protocol_version(self) -> str:
        return MODERN_VERSION if self.era == "2026" else LEGACY_VERSION


CLIENT_KINDS = (
    ClientKind("py", "2026"),
    ClientKind("py", "legacy"),
    ClientKind("ts", "2026"),
    ClientKind("ts", "legacy"),
)


@dataclass
class Call:
    """One tool call: name, arguments, and the request's `_meta`, if any.

    `input_responses` and `request_state`, sent as `params.inputResponses` and
    `params.requestState`, re-send by hand a call that answered input_required.
    """

    tool: str
    args: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] | None = None
    input_responses: dict[str, Any] | None = None
    request_state: str | None = None

    def calls_file_entry(self) -> dict[str, Any]:
        """The call as an entry of ts/client.mjs's --calls file."""
        entry: dict[str, Any] = {"tool": self.tool, "args": self.args, "meta": self.meta}
        if self.input_responses is not None:
            entry["inputResponses"] = self.input_responses
        if self.request_state is not None:
            entry["requestState"] = self.request_state
        return entry


INPUT_RESPONSES = TypeAdapter(InputResponses)


async def list_tools(
    kind: ClientKind,
    url: str,
    *,
    bearer: str | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> dict[str, Any]:
    """tools/list: `{"tools": [...], "connection": {"era", "protocolVersion", "sessionId"}}`.

    `timeout_s` bounds the tools/list request (not the connection's handshake).
    """
    if kind.sdk == "ts":
        run = await run_ts_client_async(
            url=url, era=kind.era, bearer=bearer, headers=headers, timeout_ms=int(timeout_s * 1000), list_tools=True
        )
        return run.line
    try:
        async with py_client(url, kind.era, bearer=bearer, headers=headers) as (client, facts):
            with anyio.fail_after(timeout_s):
                listed = await client.list_tools()
            tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools]
            return {"tools": tools, "connection": dict(facts)}
    except TimeoutError:
        return {"transport_error": "tools/list timed out", "kind": "REQUEST_TIMEOUT"}
    except (httpx2.HTTPError, OSError, MCPError) as error:
        return error_json(error)


async def call_tools(
    kind: ClientKind,
    url: str,
    calls: Sequence[Call],
    *,
    bearer: str | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
    confirm: bool | None = None,
) -> list[dict[str, Any]]:
    """Makes `calls` in order on one connection: one result (or error) for each.

    A call that got no answer ends the run: its `transport_error` is the last item.
    `timeout_s` bounds each call (not the connection's handshake), each of its rounds
    for a call that asks for input. `confirm` True or False answers a call's input
    requests (an elicitation) with `{"confirm": confirm}`, by the SDK's own rounds; None
    returns a 2026-07-28 input-required result as it came (see the module's doc).
    """
    if kind.sdk == "ts":
        calls_file = tempfile.NamedTemporaryFile("w", prefix="calls-", suffix=".json", dir=E2E_DIR, delete=False)
        with calls_file as f:
            json.dump([c.calls_file_entry() for c in calls], f)
        try:
            run = await run_ts_client_async(
                url=url,
                era=kind.era,
                bearer=bearer,
                headers=headers,
                timeout_ms=int(timeout_s * 1000),
                calls_file=Path(f.name),
                confirm=confirm,
            )
            return run.lines
        finally:
            os.unlink(f.name)
    answers: list[dict[str, Any]] = []
    try:
        async with py_client(url, kind.era, bearer=bearer, headers=headers, confirm=confirm) as (client, _):
            for c in calls:
                input_responses = (
                    None if c.input_responses is None else INPUT_RESPONSES.validate_python(c.input_responses)
                )
                try:
                    if confirm is None:
                        # No one to ask: an input-required result comes back as it came.
                        result = await client.session.call_tool(
                            c.tool,
                            c.args,
                            read_timeout_seconds=timeout_s,
                            input_responses=input_responses,
                            request_state=c.request_state,
                            meta=c.meta,
                            allow_input_required=True,
                        )
                    else:
                        result = await client.call_tool(
                            c.tool,
                            c.args,
                            read_timeout_seconds=timeout_s,
                            input_responses=input_responses,
                            request_state=c.request_state,
                            meta=c.meta,
                        )
                    answers.append(result_json(result))
                except MCPError as error:
                    answers.append(error_json(error))
                    if "transport_error" in answers[-1]:
                        break
    except (httpx2.HTTPError, OSError, MCPError) as error:
        # Failing to connect, or to reach the server for a call; not a failure to close
        # after the last answer or after a call that got none.
        if len(answers) < len(calls) and not (answers and "transport_error" in answers[-1]):
            answers.append(error_json(error))
    return answers


async def call_tool(
    kind: ClientKind,
    url: str,
    tool: str,
    args: dict[str, Any],
    meta: dict[str, Any] | None = None,
    *,
    confirm: bool | None = None,
    input_responses: dict[str, Any] | None = None,
    request_state: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """One tool call on a connection of its own: its result (or error). `confirm` and
    `options` as for `call_tools`; `input_responses` and `request_state` as for `Call`."""
    call = Call(tool, args, meta, input_responses=input_responses, request_state=request_state)
    (answer,) = await call_tools(kind, url, [call], confirm=confirm, **options)
    return answer
