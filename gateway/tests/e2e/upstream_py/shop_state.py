"""The shop's durable state (refunds, tickets and account closures in one SQLite file) and
its faults file.

Standard library only, so that `shop_server.py --dump` starts fast.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS refunds (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    order_id TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    created_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tickets (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    external_ref TEXT,
    created_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS closures (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
);
"""


class Shop:
    """Refunds, tickets and closures in one SQLite file; every write is one transaction."""

    def __init__(self, db: Path) -> None:
        self.db = db
        conn = self._connect()
        try:
            conn.executescript(SCHEMA)
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.db, isolation_level=None, timeout=10)
        conn.row_factory = sqlite3.Row
        return conn

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (BEGIN IMMEDIATE), committed when the block ends."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    def _read(self, query: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        conn = self._connect()
        try:
            return conn.execute(query, args).fetchall()
        finally:
            conn.close()

    def refund(self, order_id: str, amount_cents: int, key: str) -> tuple[dict[str, Any], bool]:
        """Makes the refund for `key`, or finds the one made before.

        Returns the refund and whether it has this order and amount (always true for a
        new one). The look-up and the insert are one transaction.
        """
        with self._transaction() as conn:
            row = conn.execute("SELECT * FROM refunds WHERE idempotency_key = ?", (key,)).fetchone()
            if row is not None:
                found = refund_json(row)
                return found, (found["order_id"], found["amount_cents"]) == (order_id, amount_cents)
            cursor = conn.execute(
                "INSERT INTO refunds (order_id, amount_cents, idempotency_key, created_at_ms) VALUES (?, ?, ?, ?)",
                (order_id, amount_cents, key, now_ms()),
            )
            row = conn.execute("SELECT * FROM refunds WHERE n = ?", (cursor.lastrowid,)).fetchone()
            return refund_json(row), True

    def create_ticket(self, subject: str, body: str, external_ref: str | None) -> dict[str, Any]:
        with self._transaction() as conn:
            cursor = conn.execute(
                "INSERT INTO tickets (subject, body, external_ref, created_at_ms) VALUES (?, ?, ?, ?)",
                (subject, body, external_ref, now_ms()),
            )
            row = conn.execute("SELECT * FROM tickets WHERE n = ?", (cursor.lastrowid,)).fetchone()
            return ticket_json(row)

    def close_account(self, account_id: str) -> dict[str, Any]:
        """Records a closure of `account_id`: a new one on every call, whatever was closed before."""
        with self._transaction() as conn:
            cursor = conn.execute(
                "INSERT INTO closures (account_id, created_at_ms) VALUES (?, ?)", (account_id, now_ms())
            )
            row = conn.execute("SELECT * FROM closures WHERE n = ?", (cursor.lastrowid,)).fetchone()
            return closure_json(row)

    def refunds(self, key: str | None = None) -> list[dict[str, Any]]:
        """The refunds with idempotency key `key`, or all of them."""
        if key is None:
            rows = self._read("SELECT * FROM refunds ORDER BY n")
        else:
            rows = self._read("SELECT * FROM refunds WHERE idempotency_key = ? ORDER BY n", (key,))
        return [refund_json(r) for r in rows]

    def tickets(self, external_ref: str | None = None) -> list[dict[str, Any]]:
        """The tickets with external reference `external_ref`, or all of them."""
        if external_ref is None:
            rows = self._read("SELECT * FROM tickets ORDER BY n")
        else:
            rows = self._read("SELECT * FROM tickets WHERE external_ref = ? ORDER BY n", (external_ref,))
        return [ticket_json(r) for r in rows]

    def refunded_cents(self, order_id: str) -> int:
        rows = self._read("SELECT COALESCE(SUM(amount_cents), 0) AS s FROM refunds WHERE order_id = ?", (order_id,))
        return int(rows[0]["s"])

    def closures(self) -> list[dict[str, Any]]:
        return [closure_json(r) for r in self._read("SELECT * FROM closures ORDER BY n")]

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        return {"refunds": self.refunds(), "tickets": self.tickets(), "closures": self.closures()}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def refund_json(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": f"re_{row['n']}",
        "order_id": row["order_id"],
        "amount_cents": row["amount_cents"],
        "idempotency_key": row["idempotency_key"],
        "created_at_ms": row["created_at_ms"],
    }


def ticket_json(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": f"T-{row['n']}",
        "subject": row["subject"],
        "body": row["body"],
        "external_ref": row["external_ref"],
        "created_at_ms": row["created_at_ms"],
    }


def closure_json(row: sqlite3.Row) -> dict[str, Any]:
    return {"id": f"C-{row['n']}", "account_id": row["account_id"], "created_at_ms": row["created_at_ms"]}


class Faults:
    """The faults file, read again on every tool call; a missing file means no faults.

    Its form: `{"<tool>": {"delay_before_commit_ms": N, "hang_after_commit_ms": M}}`.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def delays_ms(self, tool: str) -> tuple[int, int]:
        """(delay_before_commit_ms, hang_after_commit_ms) for `tool`."""
        if self.path is None:
            return 0, 0
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return 0, 0
        fault = json.loads(text).get(tool) or {}
        return int(fault.get("delay_before_commit_ms", 0)), int(fault.get("hang_after_commit_ms", 0))
