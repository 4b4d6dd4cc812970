/**
 * An MCP client CLI built with the official MCP TypeScript SDK v2
 * (`@modelcontextprotocol/client`): it connects to a Streamable HTTP endpoint, makes one
 * or more requests and prints one JSON line per request.
 *
 *   node --preserve-symlinks-main client.mjs --url URL [--bearer TOKEN] [--header 'Name: value']...
 *        [--era 2026|legacy] [--timeout-ms N] [--confirm yes|no]
 *        (--list | --tool NAME --args JSON [--meta JSON] [--input-responses JSON] [--request-state S]
 *         | --calls FILE)
 *
 * --era 2026 (the default) adopts protocol 2026-07-28 (a `server/discover` probe, then
 * self-contained requests with the `_meta` envelope, no session); --era legacy runs the
 * 2025-11-25 `initialize` handshake and keeps the session the server gives, if any.
 * --meta is sent as the request's `params._meta`. --calls FILE names a JSON array of
 * `{"tool": NAME, "args": {...}, "meta": {...}, "inputResponses": {...}, "requestState": S}`
 * (all but "tool" optional) or `{"list": true}`, made in order on one connection.
 * --timeout-ms bounds the wait for each of these requests' answers (the SDK's default is
 * 60 s); the connection's handshake keeps the SDK's default.
 *
 * Input requests (a tool that asks the user): --confirm yes|no declares the form
 * elicitation capability and answers every elicitation `{"action": "accept", "content":
 * {"confirm": true|false}}`, through the SDK's own mechanism: on 2026-07-28 the SDK's
 * multi-round-trip driver fulfils an `input_required` result with that handler and
 * re-sends the call with `inputResponses` and the echoed `requestState`; on a 2025-era
 * connection the handler answers the server's `elicitation/create` request. Without
 * --confirm there is no handler, and a 2026-07-28 `input_required` result is printed as
 * it came (the SDK's `allowInputRequired`); the form elicitation capability is declared
 * all the same (a server refuses to ask a client that does not declare it), the caller
 * being the one who answers: a manual re-send of such a call carries --input-responses
 * JSON (sent as `params.inputResponses`) and --request-state S (`params.requestState`).
 *
 * Lines printed:
 * - a list: `{"tools": [...], "connection": {"era", "protocolVersion", "sessionId"}}`
 * - a call: the CallToolResult, `{"content", "structuredContent"?, "isError", "_meta"?}`,
 *   or an input-required result, `{"resultType": "input_required", "inputRequests"?,
 *   "requestState"?, "_meta"?}`
 * - a JSON-RPC error: `{"error": {"code", "message", "data"?}}`, with `"httpStatus"`
 *   when it came as the body of an HTTP error status
 * - a failure to reach the server or to get an answer (refused, HTTP error, timeout):
 *   `{"transport_error": "...", "kind": "..."}`, and the exit status is 3.
 * Exit status 0 otherwise (tool errors and JSON-RPC errors included); 2 for bad usage.
 */

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import {
    Client,
    ProtocolError,
    SdkError,
    SdkHttpError,
    StreamableHTTPClientTransport
} from '@modelcontextprotocol/client';

const MODERN_VERSION = '2026-07-28';
const TRANSPORT_FAILURE = 3;
const USAGE = 2;

/** A request that got no answer: printed as `transport_error`, exit status 3. */
class TransportFailure extends Error {
    constructor(message, kind) {
        super(message);
        this.kind = kind;
    }
}

function usage(message) {
    process.stderr.write(`client.mjs: ${message}\n`);
    process.exit(USAGE);
}

function parseJson(text, what) {
    try {
        return JSON.parse(text);
    } catch (error) {
        usage(`${what} is not JSON: ${error.message}`);
    }
}

function readOptions() {
    const { values } = parseArgs({
        options: {
            url: { type: 'string' },
            bearer: { type: 'string' },
            header: { type: 'string', multiple: true, default: [] },
            era: { type: 'string', default: '2026' },
            'timeout-ms': { type: 'string' },
            list: { type: 'boolean', default: false },
            tool: { type: 'string' },
            args: { type: 'string' },
            meta: { type: 'string' },
            'input-responses': { type: 'string' },
            'request-state': { type: 'string' },
            confirm: { type: 'string' },
            calls: { type: 'string' }
        },
        strict: true
    });
    if (!values.url) usage('--url is required');
    if (!['2026', 'legacy'].includes(values.era)) usage('--era is 2026 or legacy');
    if (values.confirm !== undefined && !['yes', 'no'].includes(values.confirm)) usage('--confirm is yes or no');
    const headers = {};
    for (const line of values.header) {
        const colon = line.indexOf(':');
        if (colon <= 0) usage(`--header ${JSON.stringify(line)} is not 'Name: value'`);
        headers[line.slice(0, colon).trim()] = line.slice(colon + 1).trim();
    }
    if (values.bearer) headers.Authorization = `Bearer ${values.bearer}`;

    let calls;
    if (values.calls) {
        calls = parseJson(readFileSync(values.calls, 'utf8'), '--calls');
        if (!Array.isArray(calls)) usage('--calls holds a JSON array');
    } else if (values.list) {
        calls = [{ list: true }];
    } else if (values.tool) {
        calls = [
            {
                tool: values.tool,
                args: values.args === undefined ? {} : parseJson(values.args, '--args'),
                meta: values.meta === undefined ? undefined : parseJson(values.meta, '--meta'),
                inputResponses:
                    values['input-responses'] === undefined
                        ? undefined
                        : parseJson(values['input-responses'], '--input-responses'),
                requestState: values['request-state']
            }
        ];
    } else {
        usage('one of --list, --tool or --calls is required');
    }
    const timeoutMs = values['timeout-ms'] === undefined ? undefined : Number(values['timeout-ms']);
    if (timeoutMs !== undefined && !(timeoutMs > 0)) usage('--timeout-ms is a number of milliseconds, above 0');
    const confirm = values.confirm === undefined ? undefined : values.confirm === 'yes';
    return { url: new URL(values.url), headers, era: values.era, timeoutMs, confirm, calls };
}

/** The JSON-RPC error in an HTTP error's body, if the body is one. */
function jsonRpcErrorIn(text) {
    if (typeof text !== 'string') return undefined;
    try {
        const body = JSON.parse(text);
        if (body && typeof body === 'object' && body.error && typeof body.error.code === 'number') return body.error;
    } catch {
        // Not JSON: no JSON-RPC error in it.
    }
    return undefined;
}

/** A failed request as the line to print, or a TransportFailure thrown. */
function errorLine(error) {
    if (error instanceof ProtocolError) {
        const line = { code: error.code, message: error.message };
        if (error.data !== undefined) line.data = error.data;
        return { error: line };
    }
    if (error instanceof SdkHttpError) {
        const inBody = jsonRpcErrorIn(error.data?.text);
        if (inBody) return { error: inBody, httpStatus: error.status };
        throw new TransportFailure(error.message, `http_${error.status}`);
    }
    const message = withRootCause(error);
    if (error instanceof SdkError) throw new TransportFailure(message, String(error.code));
    throw new TransportFailure(message, 'network');
}

/** An error's message, with the innermost cause's code or message (fetch hides them). */
function withRootCause(error) {
    let root = error;
    for (let depth = 0; root?.cause && depth < 8; depth++) root = root.cause;
    const detail = root === error ? undefined : (root.code ?? root.message);
    const message = String(error?.message ?? error);
    return detail && !message.includes(detail) ? `${message} (${detail})` : message;
}

/** The CallToolResult's fields, as sent; an input-required result's, as it came. */
function resultLine(result) {
    if (result.resultType === 'input_required') {
        const line = { resultType: result.resultType };
        for (const key of ['inputRequests', 'requestState', '_meta']) {
            if (result[key] !== undefined) line[key] = result[key];
        }
        return line;
    }
    const line = { content: result.content ?? [] };
    if (result.structuredContent !== undefined) line.structuredContent = result.structuredContent;
    line.isError = result.isError === true;
    if (result._meta !== undefined) line._meta = result._meta;
    return line;
}

async function perform(client, transport, call, requestOptions) {
    try {
        if (call.list) {
            const { tools } = await client.listTools(undefined, { ...requestOptions, cacheMode: 'refresh' });
            return {
                tools,
                connection: {
                    era: client.getProtocolEra() ?? null,
                    protocolVersion: client.getNegotiatedProtocolVersion() ?? null,
                    sessionId: transport.sessionId ?? null
                }
            };
        }
        const params = { name: call.tool, arguments: call.args ?? {} };
        if (call.meta != null) params._meta = call.meta;
        if (call.inputResponses != null) params.inputResponses = call.inputResponses;
        if (call.requestState != null) params.requestState = call.requestState;
        return resultLine(await client.callTool(params, requestOptions));
    } catch (error) {
        return errorLine(error);
    }
}

async function main() {
    const options = readOptions();
    const transport = new StreamableHTTPClientTransport(options.url, { requestInit: { headers: options.headers } });
    const client = new Client(
        { name: 'gateway-e2e-ts-client', version: '1.0.0' },
        { versionNegotiation: { mode: options.era === 'legacy' ? 'legacy' : { pin: MODERN_VERSION } } }
    );
    // Errors are reported per request; the transport's side channel would repeat them.
    client.onerror = () => {};
    const requestOptions = options.timeoutMs === undefined ? {} : { timeout: options.timeoutMs };
    // The client can always be asked: by its handler with --confirm, else by whoever reads
    // the input_required line and re-sends the call.
    client.registerCapabilities({ elicitation: { form: {} } });
    if (options.confirm === undefined) {
        requestOptions.allowInputRequired = true;
    } else {
        client.setRequestHandler('elicitation/create', async () => ({
            action: 'accept',
            content: { confirm: options.confirm }
        }));
    }

    let status = 0;
    try {
        try {
            await client.connect(transport);
        } catch (error) {
            const line = errorLine(error);
            process.stdout.write(`${JSON.stringify(line)}\n`);
            return 0;
        }
        for (const call of options.calls) {
            process.stdout.write(`${JSON.stringify(await perform(client, transport, call, requestOptions))}\n`);
        }
    } catch (error) {
        if (!(error instanceof TransportFailure)) throw error;
        process.stdout.write(`${JSON.stringify({ transport_error: error.message, kind: error.kind })}\n`);
        status = TRANSPORT_FAILURE;
    } finally {
        if (transport.sessionId) await transport.terminateSession().catch(() => {});
        await client.close().catch(() => {});
    }
    return status;
}

process.exitCode = await main();
