"""A shop's MCP server, built with the official MCP Python SDK (`mcp` 2.x), as an upstream
for the gateway's end-to-end test. It serves Streamable HTTP at `/mcp`, stateless, to both
protocol eras: 2026-07-28 (`server/discover`, the per-request `_meta` envelope) and the
2025-era `initialize` handshake (answered without a session).

Tools:
- `refund`: keyed like Stripe's refunds. The same `idempotency_key` with the same order
  and amount answers the refund it made before; with other parameters it is a tool error.
- `create_ticket`: no key at all, every call opens a new ticket. Its `external_ref` may
  come as an argument or in the request's `_meta` under `shop.example/external-ref`.
- `find_refunds`, `find_tickets`, `get_order`: read-only look-ups.
- `close_account`: asks the user first. A 2026-07-28 call is answered `input_required`
  (a form elicitation under `confirm`, a sealed `requestState`); the call re-sent with
  `{"confirm": true}` records a new closure, every time; any other answer is
  `{"declined": true}`. A 2025-era call tries to ask with an `elicitation/create` request,
  which this stateless server cannot send: a JSON-RPC error, nothing stored.

State is kept in SQLite (`--db`). Before every tool call the faults file (`--faults`) is
read: `{"<tool>": {"delay_before_commit_ms": N, "hang_after_commit_ms": M}}` makes that
tool wait N ms before it commits and M ms after, before it answers. The commit is shielded
from cancellation, so it lands even when the caller has gone.

    python shop_server.py --port 0 --db shop.db [--faults faults.json] [--json-response]
    python shop_server.py --dump --db shop.db

Once it listens it prints `listening on 127.0.0.1:PORT` (the port it got for `--port 0`);
SIGTERM or SIGINT stop it with exit status 0. `--dump` prints the state as one JSON object
`{"refunds": [...], "tickets": [...], "closures": [...]}`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from shop_state import Faults, Shop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="the SQLite file holding the shop's state")
    parser.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--faults", type=Path, help="the faults file, read on every tool call")
    parser.add_argument("--json-response", action="store_true", help="answer JSON bodies, never SSE streams")
    parser.add_argument("--dump", action="store_true", help="print the state as JSON and exit")
    parser.add_argument(
        "--legacy-only", action="store_true", help="serve the 2025-11-25 era alone, with sessions"
    )
    args = parser.parse_args()

    shop = Shop(args.db)
    if args.dump:
        json.dump(shop.dump(), sys.stdout)
        sys.stdout.write("\n")
        return
    # Imported only to serve, so that --dump does not load the SDK (a second of start-up).
    from shop_mcp import serve

    asyncio.run(serve(shop, Faults(args.faults), args.port, args.json_response, args.legacy_only))


if __name__ == "__main__":
    main()
