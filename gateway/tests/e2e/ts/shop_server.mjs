/**
 * A shop's MCP server, built with the official MCP TypeScript SDK v2
 * (`@modelcontextprotocol/server`, served on node:http by `@modelcontextprotocol/node`), as
 * an upstream for the gateway's end-to-end test. It behaves as `upstream_py/shop_server.py`
 * does, over Streamable HTTP at `/mcp`: `createMcpHandler` answers 2026-07-28 requests (the
 * per-request `_meta` envelope, `server/discover`) one by one and 2025-era requests,
 * `initialize` included, with its stateless legacy fallback (no session).
 *
 * Tools:
 * - `refund`: keyed like Stripe's refunds. The same `idempotency_key` with the same order
 *   and amount answers the refund made before; with other parameters it is a tool error.
 * - `create_ticket`: no key at all, every call opens a new ticket. Its `external_ref` may
 *   come as an argument or in the request's `_meta` under `shop.example/external-ref`.
 * - `find_refunds`, `find_tickets`, `get_order`: read-only look-ups.
 * - `close_account`: asks the user first. It answers `inputRequired(...)`: one form
 *   elicitation under the key `confirm` and a `requestState` naming the account, minted
 *   by the SDK's HMAC codec (`createRequestStateCodec`, ten minutes) under
 *   `REQUEST_STATE_KEY`, which every process of this shop shares, and verified by the
 *   server's `requestState.verify` hook before the handler runs again. The re-sent call
 *   with `{"confirm": true}` records a new closure (every time); any other answer is
 *   `{"declined": true}`. Toward a 2025-era request the SDK's legacy shim asks the same
 *   question as an `elicitation/create` request to the client during the call and runs
 *   the handler again with the answer.
 *
 * State is one JSON file (`--state`), replaced atomically (temporary file, fsync, rename)
 * on every commit. Before every tool call the faults file (`--faults`) is read:
 * `{"<tool>": {"delay_before_commit_ms": N, "hang_after_commit_ms": M}}` makes that tool
 * wait N ms before it commits and M ms after, before it answers. The commit does not
 * heed the request's abort signal, so it lands even when the caller has gone.
 *
 *   node --preserve-symlinks-main shop_server.mjs --port 0 --state shop.json [--faults f.json] [--json-response]
 *   node --preserve-symlinks-main shop_server.mjs --dump --state shop.json
 *
 * Once it listens it prints `listening on 127.0.0.1:PORT` (the port it got for `--port
 * 0`); SIGTERM or SIGINT stop it with exit status 0. `--dump` prints the state as one JSON
 * object `{"refunds": [...], "tickets": [...], "closures": [...]}`.
 */

import { closeSync, fsyncSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';
import { createServer } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

const SERVER_NAME = 'shop-ts';
const EXTERNAL_REF_META_KEY = 'shop.example/external-ref';
const MAX_REFUND_CENTS = 1_000_000;
const HOST = '127.0.0.1';
// The HMAC key of close_account's requestState. Every process of this shop must hold the
// same one, so that a call re-sent to another process is accepted. A test fixture, not a
// secret.
const REQUEST_STATE_KEY = 'ledger gateway e2e shop: request-state key (not a secret)';
// close_account's question: the key of its input request, and its form.
const CONFIRM_KEY = 'confirm';
const CONFIRM_SCHEMA = {
    type: 'object',
    properties: {
        confirm: {
            type: 'boolean',
            title: 'Close the account',
            description: 'true closes the account; false keeps it.'
        }
    },
    required: ['confirm']
};

// -- state --------------------------------------------------------------------------------

/** The shop's durable state: refunds, tickets and closures in one JSON file. */
class Shop {
    constructor(path) {
        this.path = path;
    }

    /** The state as stored; a missing file is an empty shop. */
    load() {
        let state;
        try {
            state = JSON.parse(readFileSync(this.path, 'utf8'));
        } catch (error) {
            if (error.code !== 'ENOENT') throw error;
            state = {};
        }
        return { refunds: [], tickets: [], closures: [], ...state };
    }

    /** Replaces the file: a reader sees the old state or the new one, never a part. */
    store(state) {
        const temporary = `${this.path}.${process.pid}.tmp`;
        const fd = openSync(temporary, 'w');
        try {
            writeSync(fd, JSON.stringify(state));
            fsyncSync(fd);
        } finally {
            closeSync(fd);
        }
        renameSync(temporary, this.path);
    }

    /**
     * Makes the refund for `key`, or finds it: `{refund, matches}`, where `matches` tells
     * whether the refund found has this order and amount. Synchronous, so no other call
     * runs between the look-up and the write.
     */
    refund(orderId, amountCents, key) {
        const state = this.load();
        const found = state.refunds.find(r => r.idempotency_key === key);
        if (found) return { refund: found, matches: found.order_id === orderId && found.amount_cents === amountCents };
        const refund = {
            id: `re_${state.refunds.length + 1}`,
            order_id: orderId,
            amount_cents: amountCents,
            idempotency_key: key,
            created_at_ms: Date.now()
        };
        state.refunds.push(refund);
        this.store(state);
        return { refund, matches: true };
    }

    createTicket(subject, body, externalRef) {
        const state = this.load();
        const ticket = {
            id: `T-${state.tickets.length + 1}`,
            subject,
            body,
            external_ref: externalRef ?? null,
            created_at_ms: Date.now()
        };
        state.tickets.push(ticket);
        this.store(state);
        return ticket;
    }

    /** Records a closure of `accountId`: a new one on every call, whatever was closed before. */
    closeAccount(accountId) {
        const state = this.load();
        const closure = { id: `C-${state.closures.length + 1}`, account_id: accountId, created_at_ms: Date.now() };
        state.closures.push(closure);
        this.store(state);
        return closure;
    }

    refunds(key) {
        return this.load().refunds.filter(r => r.idempotency_key === key);
    }

    tickets(externalRef) {
        return this.load().tickets.filter(t => t.external_ref === externalRef);
    }

    refundedCents(orderId) {
        return this.load()
            .refunds.filter(r => r.order_id === orderId)
            .reduce((sum, r) => sum + r.amount_cents, 0);
    }

    dump() {
        const { refunds, tickets, closures } = this.load();
        return { refunds, tickets, closures };
    }
}

// -- faults -------------------------------------------------------------------------------

/** The faults file, read again on every tool call; a missing file means no faults. */
class Faults {
    constructor(path) {
        this.path = path;
    }

    /** `[delay_before_commit_ms, hang_after_commit_ms]` for `tool`. */
    delaysMs(tool) {
        if (!this.path) return [0, 0];
        let text;
        try {
            text = readFileSync(this.path, 'utf8');
        } catch (error) {
            if (error.code === 'ENOENT') return [0, 0];
            throw error;
        }
        const fault = JSON.parse(text)[tool] ?? {};
        return [Number(fault.delay_before_commit_ms ?? 0), Number(fault.hang_after_commit_ms ?? 0)];
    }
}

/** Runs `commit` between the tool's configured delays; neither waits for nor heeds the caller. */
async function withFaults(faults, tool, commit) {
    const [delayMs, hangMs] = faults.delaysMs(tool);
    if (delayMs) await sleep(delayMs);
    const outcome = commit();
    if (hangMs) await sleep(hangMs);
    return outcome;
}

// -- results ------------------------------------------------------------------------------

/** A result whose structured content and text block carry the same JSON. */
function answer(structured, isError = false) {
    return {
        content: [{ type: 'text', text: JSON.stringify(structured) }],
        structuredContent: structured,
        isError
    };
}

function toolError(error, detail) {
    return answer({ error, detail }, true);
}

// -- the MCP server -----------------------------------------------------------------------

function confirmMessage(accountId) {
    return `Close account ${accountId}? This cannot be undone.`;
}

/**
 * A server instance with the shop's tools: `createMcpHandler` makes one per request.
 * `sdk` holds `McpServer`, `inputRequired`, `inputResponse`, `z` (zod) and `codec` (the
 * requestState codec).
 */
function buildServer(sdk, shop, faults) {
    const { McpServer, inputRequired, inputResponse, z, codec } = sdk;
    const server = new McpServer(
        { name: SERVER_NAME, version: '1.0.0' },
        {
            instructions: 'A shop: refunds, help-desk tickets, orders, accounts.',
            // Runs before the handler on every round that carries a requestState (the legacy
            // shim's rounds too): a state this shop did not mint, or an expired one, is
            // answered -32602; the handler reads the payload with ctx.mcpReq.requestState().
            requestState: { verify: codec.verify }
        }
    );

    server.registerTool(
        'refund',
        {
            description:
                'Refund part of an order. Keyed: a retry with the same idempotency_key and the same ' +
                'order and amount answers the refund made before; other parameters are an error.',
            inputSchema: z.object({
                order_id: z.string().describe('The order to refund.'),
                amount_cents: z.number().int().describe(`Cents to refund, 1 to ${MAX_REFUND_CENTS}.`),
                idempotency_key: z.string().describe("The caller's key for this refund.")
            }),
            annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true }
        },
        async ({ order_id, amount_cents, idempotency_key }) => {
            if (!(amount_cents > 0 && amount_cents <= MAX_REFUND_CENTS)) {
                const detail = `amount_cents must be 1 to ${MAX_REFUND_CENTS}, got ${amount_cents}`;
                return toolError('invalid_amount', detail);
            }
            const { refund, matches } = await withFaults(faults, 'refund', () =>
                shop.refund(order_id, amount_cents, idempotency_key)
            );
            if (!matches) {
                return toolError('idempotency_key_reused', 'idempotency key reused with different parameters');
            }
            return answer({ refund });
        }
    );

    server.registerTool(
        'create_ticket',
        {
            description:
                'Open a help-desk ticket. Every call opens a new ticket. external_ref may also be given ' +
                `in the request _meta as '${EXTERNAL_REF_META_KEY}'; the argument wins.`,
            inputSchema: z.object({
                subject: z.string().describe('One line.'),
                body: z.string().describe("The ticket's text."),
                external_ref: z.string().optional().describe("The caller's reference for this ticket.")
            }),
            annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false }
        },
        async ({ subject, body, external_ref }, ctx) => {
            const fromMeta = ctx.mcpReq._meta?.[EXTERNAL_REF_META_KEY];
            const ref = external_ref ?? (typeof fromMeta === 'string' ? fromMeta : undefined);
            const ticket = await withFaults(faults, 'create_ticket', () => shop.createTicket(subject, body, ref));
            return answer({ ticket });
        }
    );

    server.registerTool(
        'find_refunds',
        {
            description: 'The refunds made with an idempotency key.',
            inputSchema: z.object({ idempotency_key: z.string().describe('The key to look for.') }),
            annotations: { readOnlyHint: true }
        },
        async ({ idempotency_key }) =>
            answer({ refunds: await withFaults(faults, 'find_refunds', () => shop.refunds(idempotency_key)) })
    );

    server.registerTool(
        'find_tickets',
        {
            description: 'The tickets with an external reference.',
            inputSchema: z.object({ external_ref: z.string().describe('The reference to look for.') }),
            annotations: { readOnlyHint: true }
        },
        async ({ external_ref }) =>
            answer({ tickets: await withFaults(faults, 'find_tickets', () => shop.tickets(external_ref)) })
    );

    server.registerTool(
        'get_order',
        {
            description: 'An order and how much of it has been refunded.',
            inputSchema: z.object({ order_id: z.string().describe('The order.') }),
            annotations: { readOnlyHint: true }
        },
        async ({ order_id }) => {
            const refunded = await withFaults(faults, 'get_order', () => shop.refundedCents(order_id));
            return answer({ order: { order_id, refunded_cents: refunded } });
        }
    );

    server.registerTool(
        'close_account',
        {
            description:
                "Close a customer's account. Asks the user to confirm first (an elicitation); " +
                'every confirmed call records a new closure.',
            inputSchema: z.object({ account_id: z.string().describe('The account to close.') }),
            annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false }
        },
        async ({ account_id }, ctx) => {
            const response = inputResponse(ctx.mcpReq.inputResponses, CONFIRM_KEY);
            const state = ctx.mcpReq.requestState();
            if (response.kind === 'missing' || state === undefined) {
                return inputRequired({
                    inputRequests: {
                        [CONFIRM_KEY]: inputRequired.elicit({
                            message: confirmMessage(account_id),
                            requestedSchema: CONFIRM_SCHEMA
                        })
                    },
                    requestState: await codec.mint({ account_id })
                });
            }
            // The codec proves the state is this shop's, not that it was minted for this call.
            if (state?.account_id !== account_id) {
                return toolError('invalid_request_state', 'the requestState was minted for another account');
            }
            const yes =
                response.kind === 'elicit' && response.action === 'accept' && response.content?.confirm === true;
            if (!yes) return answer({ declined: true });
            const closure = await withFaults(faults, 'close_account', () => shop.closeAccount(account_id));
            return answer({ closure });
        }
    );

    return server;
}

// -- serving ------------------------------------------------------------------------------

async function serve(shop, faults, port, jsonResponse) {
    // The SDK is loaded only to serve, so that --dump starts fast.
    const [
        { localhostHostValidation, toNodeHandler },
        { createMcpHandler, createRequestStateCodec, inputRequired, inputResponse, McpServer },
        z
    ] = await Promise.all([
        import('@modelcontextprotocol/node'),
        import('@modelcontextprotocol/server'),
        import('zod')
    ]);
    const codec = createRequestStateCodec({ key: REQUEST_STATE_KEY });
    const sdk = { McpServer, inputRequired, inputResponse, z, codec };
    const handler = createMcpHandler(() => buildServer(sdk, shop, faults), {
        legacy: 'stateless',
        responseMode: jsonResponse ? 'json' : 'auto',
        onerror: error => console.error(`mcp: ${error.message}`)
    });
    const mcp = toNodeHandler(handler, { onerror: error => console.error(`mcp: ${error.message}`) });
    // The entry itself checks no Host header; the Python SDK refuses non-local ones by default.
    const localHostOnly = localhostHostValidation();

    const http = createServer((req, res) => {
        const path = new URL(req.url ?? '/', 'http://localhost').pathname;
        if (path !== '/mcp') {
            res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
            return;
        }
        if (!localHostOnly(req, res)) return;
        mcp(req, res).catch(error => {
            console.error(`http: ${error.stack ?? error}`);
            if (!res.headersSent) res.writeHead(500);
            res.end();
        });
    });

    const stop = () => {
        http.close(() => process.exit(0));
        http.closeAllConnections();
        void handler.close();
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);

    http.listen(port, HOST, () => {
        process.stdout.write(`listening on ${HOST}:${http.address().port}\n`);
    });
}

async function main() {
    const { values } = parseArgs({
        options: {
            state: { type: 'string' },
            port: { type: 'string', default: '0' },
            faults: { type: 'string' },
            'json-response': { type: 'boolean', default: false },
            dump: { type: 'boolean', default: false }
        },
        strict: true
    });
    if (!values.state) {
        console.error(
            'usage: shop_server.mjs --state PATH [--port N] [--faults PATH] [--json-response]\n' +
                '       shop_server.mjs --dump --state PATH'
        );
        process.exit(2);
    }
    const shop = new Shop(values.state);
    if (values.dump) {
        process.stdout.write(`${JSON.stringify(shop.dump())}\n`);
        return;
    }
    await serve(shop, new Faults(values.faults), Number(values.port), values['json-response']);
}

await main();
