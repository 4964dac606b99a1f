#!/usr/bin/env node
// A scripted fake of the two model APIs the agent CLIs talk to (api.anthropic.com for claude,
// api.openai.com for codex), for root integration tests. See README.md beside this file.
//
//   node server.mjs --cert CERT --key KEY [--port 443] [--host 0.0.0.0]
//                   --script SCRIPT.json --log LOG.jsonl
//
// Node built-ins only (checked on Debian 12's node 18.20.4, 20 and 22). Prints "listening" once it
// listens.
//
// The script: {"steps": [{"bash": "cmd"}, ..., {"text": "DONE"}]}. The model's turn is chosen
// from the conversation the client sends, not from server state: a request carrying k tool
// results (of our own tool calls) gets steps[k]. So the final text is only ever sent after the
// client has actually returned the result of every scripted command; retries are answered the
// same way as the first try. The server never runs anything: it only asks the agent to.

import fs from 'node:fs';
import https from 'node:https';
import http from 'node:http';
import crypto from 'node:crypto';
import zlib from 'node:zlib';

function parseArgs(argv) {
  const o = { port: 443, host: '0.0.0.0' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const eq = a.indexOf('=');
    if (eq > 0) o[a.slice(2, eq)] = a.slice(eq + 1);
    else if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) o[a.slice(2)] = argv[++i];
    else o[a.slice(2)] = true;
  }
  return o;
}

const args = parseArgs(process.argv.slice(2));
if (!args.script) {
  console.error('usage: node server.mjs (--cert CERT --key KEY | --plain) [--port 443] ' +
    '[--host 0.0.0.0] --script SCRIPT.json [--log LOG.jsonl] [--dump DIR] [--verbose]');
  process.exit(2);
}
const script = JSON.parse(fs.readFileSync(args.script, 'utf8'));
// {"steps": [...]} for both APIs, or {"anthropic": {"steps": [...]}, "openai": {"steps": [...]}};
// {"command": "...", "final": "..."} is short for one bash step then that text.
function loadSteps(s) {
  const st = Array.isArray(s?.steps) ? s.steps
    : s?.command !== undefined ? [{ bash: s.command }, { text: s.final ?? 'DONE' }] : null;
  if (st === null) return null;
  if (!st.length || st[st.length - 1].text === undefined || st.some((x) => x.bash === undefined && x.text === undefined)) {
    throw new Error('script: steps are {"bash": CMD} ... ending with {"text": TEXT}');
  }
  return st;
}
const STEPS = { anthropic: loadSteps(script.anthropic) ?? loadSteps(script), openai: loadSteps(script.openai) ?? loadSteps(script) };
if (!STEPS.anthropic && !STEPS.openai) throw new Error('script: no steps');
for (const k of Object.keys(STEPS)) STEPS[k] ??= [{ text: `fake: the script has no steps for ${k}` }];
const logFd = args.log ? fs.openSync(args.log, 'a') : null;
// --dump DIR: also keep every request body whole, as DIR/NNNN-<path>.json (for debugging).
if (args.dump) fs.mkdirSync(args.dump, { recursive: true });
let dumped = 0;

function log(rec) {
  const line = JSON.stringify({ t: new Date().toISOString(), ...rec }) + '\n';
  if (logFd !== null) fs.writeSync(logFd, line);
  if (args.verbose) process.stderr.write(line);
}

let seq = 0;
const newId = (p) => `${p}${Date.now().toString(36)}${(++seq).toString(36)}${crypto.randomBytes(6).toString('hex')}`;
const short = (s, n = 200) => (typeof s === 'string' && s.length > n ? s.slice(0, n) + '…' : s);

// Our tool call ids encode the step they belong to, so a result is matched to its call.
const callId = (prefix, step) => `${prefix}fake${step}_${crypto.randomBytes(4).toString('hex')}`;
const stepOf = (id) => { const m = /fake(\d+)_/.exec(String(id ?? '')); return m ? Number(m[1]) : -1; };

function stepFor(steps, resultIds) {
  // The number of leading steps whose tool result the client has sent back.
  const done = new Set(resultIds.map(stepOf).filter((s) => s >= 0));
  let k = 0;
  while (done.has(k)) k++;
  return Math.min(k, steps.length - 1);
}

function textOf(content) {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((c) => (typeof c === 'string' ? c : c?.text ?? '')).join('');
}

// ---------------------------------------------------------------- Anthropic

function anthropicSummary(b) {
  const msgs = Array.isArray(b.messages) ? b.messages : [];
  const results = [];
  for (const m of msgs) {
    if (Array.isArray(m.content)) {
      for (const c of m.content) {
        if (c?.type === 'tool_result') {
          results.push({ id: c.tool_use_id, is_error: !!c.is_error, content: short(textOf(c.content)) });
        }
      }
    }
  }
  const tools = Array.isArray(b.tools) ? b.tools.map((t) => t.name ?? t.type) : [];
  const last = msgs[msgs.length - 1];
  return {
    model: b.model, stream: !!b.stream, max_tokens: b.max_tokens, messages: msgs.length,
    tools: tools.length, has_bash: tools.includes('Bash'), tool_results: results,
    last_user: short(last && last.role === 'user' ? textOf(last.content) : undefined),
  };
}

function anthropicTurn(b, sum) {
  // The main conversation is the one offered the Bash tool; everything else (title, quota,
  // summaries...) is a side request and gets a short text that does not use the script.
  if (!sum.has_bash) return { kind: 'side', content: [{ type: 'text', text: 'ok' }], stop: 'end_turn' };
  const steps = STEPS.anthropic;
  const k = stepFor(steps, sum.tool_results.map((r) => r.id));
  const s = steps[k];
  if (s.bash !== undefined) {
    return {
      kind: 'main', step: k, stop: 'tool_use',
      content: [{ type: 'tool_use', id: callId('toolu_', k), name: 'Bash',
        input: { command: s.bash, description: s.description ?? 'Run the scripted command' } }],
    };
  }
  return { kind: 'main', step: k, stop: 'end_turn', content: [{ type: 'text', text: String(s.text) }] };
}

function anthropicMessages(req, res, b, n) {
  const sum = anthropicSummary(b);
  const turn = anthropicTurn(b, sum);
  const id = newId('msg_');
  const model = b.model || 'claude-fake';
  const usage = { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
  log({ dir: 'reply', n, api: 'anthropic', kind: turn.kind, step: turn.step, stop: turn.stop,
    reply: turn.content.map((c) => (c.type === 'text' ? { text: c.text } : { tool_use: c.name, input: c.input })) });
  if (!b.stream) {
    return json(res, 200, { id, type: 'message', role: 'assistant', model, content: turn.content,
      stop_reason: turn.stop, stop_sequence: null, usage });
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const ev = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
  ev('message_start', { message: { id, type: 'message', role: 'assistant', model, content: [],
    stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } } });
  turn.content.forEach((c, index) => {
    if (c.type === 'text') {
      ev('content_block_start', { index, content_block: { type: 'text', text: '' } });
      ev('content_block_delta', { index, delta: { type: 'text_delta', text: c.text } });
    } else {
      ev('content_block_start', { index, content_block: { type: 'tool_use', id: c.id, name: c.name, input: {} } });
      ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(c.input) } });
    }
    ev('content_block_stop', { index });
  });
  ev('message_delta', { delta: { stop_reason: turn.stop, stop_sequence: null }, usage: { output_tokens: usage.output_tokens } });
  ev('message_stop', {});
  res.end();
}

function anthropic(req, res, url, b, n) {
  const p = url.pathname;
  if (req.method === 'POST' && p === '/v1/messages') return anthropicMessages(req, res, b, n);
  if (req.method === 'POST' && p === '/v1/messages/count_tokens') return json(res, 200, { input_tokens: 10 });
  // Claude fetches these two before it starts a session. 404 is taken at once as "none"; a 200
  // must have these shapes (restrictions: a record; uuid: a string), else claude retries
  // policy_limits 5 times with backoff (~10 s) before it goes on.
  if (p === '/api/claude_code/policy_limits') return json(res, 200, { restrictions: {} });
  if (p === '/api/claude_code/settings') return json(res, 200, { uuid: '00000000-0000-4000-8000-000000000000', checksum: '', settings: {} });
  if (p === '/api/hello') return json(res, 200, { message: 'hello' });
  if (p === '/api/claude_code/organizations/metrics_enabled') return json(res, 200, { metrics_logging_enabled: false });
  if (p.startsWith('/api/event_logging') || p === '/api/claude_code/metrics') return json(res, 200, {});
  return json(res, 404, { type: 'error', error: { type: 'not_found_error', message: `fake: no ${p}` } });
}

// ---------------------------------------------------------------- OpenAI

// Codex lists its tools in `tools`, and (newer models) in `additional_tools` input items, grouped
// in namespaces; flatten both.
function openaiTools(b) {
  const out = [];
  const walk = (ts, ns) => {
    for (const t of Array.isArray(ts) ? ts : []) {
      if (t?.type === 'namespace') walk(t.tools, t.name);
      else if (t) out.push({ ...t, namespace: ns });
    }
  };
  walk(b.tools);
  for (const i of Array.isArray(b.input) ? b.input : []) if (i?.type === 'additional_tools') walk(i.tools);
  return out;
}

function openaiSummary(b) {
  const input = Array.isArray(b.input) ? b.input : [];
  const outputs = input.filter((i) => i?.type === 'function_call_output' || i?.type === 'custom_tool_call_output')
    .map((i) => ({ id: i.call_id, content: short(typeof i.output === 'string' ? i.output : JSON.stringify(i.output)) }));
  const tools = openaiTools(b).map((t) => (t.namespace ? `${t.namespace}.` : '') + (t.name ?? t.type));
  const users = input.filter((i) => i?.role === 'user');
  return { model: b.model, stream: !!b.stream, input: input.length, tools, tool_results: outputs,
    last_user: short(users.length ? textOf(users[users.length - 1].content) : undefined) };
}

// Codex offers its shell under one of several names and argument shapes depending on the model
// (its catalog's shell_type and tool_mode); answer with whichever the request offers.
function shellCall(b, cmd, k) {
  const tools = openaiTools(b);
  const fn = (n) => tools.find((t) => t.type === 'function' && t.name === n && !t.namespace);
  const call = (name, args) => ({ type: 'function_call', id: newId('fc_'), call_id: callId('call_', k),
    name, arguments: JSON.stringify(args), status: 'completed' });
  if (fn('exec_command')) return call('exec_command', { cmd });
  if (fn('shell_command')) return call('shell_command', { command: cmd });
  if (fn('shell')) return call('shell', { command: ['bash', '-lc', cmd] });
  // "code mode" (gpt-5.6+/gpt-6 models): the only tool is a freeform `exec` that runs JavaScript
  // in which the real tools are `tools.<name>`.
  const exec = tools.find((t) => t.type === 'custom' && t.name === 'exec');
  if (exec) {
    const js = `const r = await tools.exec_command({ cmd: ${JSON.stringify(cmd)}, yield_time_ms: 30000 });\n` +
      'text(JSON.stringify({ exit_code: r.exit_code, output: r.output }));\n';
    return { type: 'custom_tool_call', id: newId('ctc_'), call_id: callId('call_', k), name: 'exec',
      ...(exec.namespace ? { namespace: exec.namespace } : {}), input: js, status: 'completed' };
  }
  return null;
}

function openaiResponses(req, res, b, n) {
  const sum = openaiSummary(b);
  const steps = STEPS.openai;
  const k = stepFor(steps, sum.tool_results.map((r) => r.id));
  const s = steps[k];
  const respId = newId('resp_');
  const model = b.model || 'gpt-fake';
  let item;
  if (s.bash !== undefined) {
    item = shellCall(b, s.bash, k);
    if (!item) {
      log({ dir: 'reply', n, api: 'openai', kind: 'main', step: k, error: 'no shell tool offered', tools: sum.tools });
      return json(res, 400, { error: { message: 'fake: request offers no shell tool', type: 'invalid_request_error' } });
    }
  } else {
    item = { type: 'message', id: newId('msg_'), role: 'assistant', status: 'completed',
      content: [{ type: 'output_text', text: String(s.text), annotations: [] }] };
  }
  log({ dir: 'reply', n, api: 'openai', kind: 'main', step: k, stop: item.type === 'message' ? 'end_turn' : 'tool_call',
    reply: item.type === 'message' ? { text: s.text } : { [item.type]: item.name, arguments: item.arguments ?? item.input } });
  const usage = { input_tokens: 10, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5,
    output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 15 };
  const base = { id: respId, object: 'response', created_at: Math.floor(Date.now() / 1000), model };
  if (!b.stream) return json(res, 200, { ...base, status: 'completed', output: [item], usage });
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  let sn = 0;
  const ev = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sn++, ...data })}\n\n`);
  const at = { output_index: 0, item_id: item.id };
  ev('response.created', { response: { ...base, status: 'in_progress', output: [] } });
  ev('response.in_progress', { response: { ...base, status: 'in_progress', output: [] } });
  if (item.type === 'function_call') {
    ev('response.output_item.added', { output_index: 0, item: { ...item, arguments: '', status: 'in_progress' } });
    ev('response.function_call_arguments.delta', { ...at, delta: item.arguments });
    ev('response.function_call_arguments.done', { ...at, arguments: item.arguments });
  } else if (item.type === 'custom_tool_call') {
    ev('response.output_item.added', { output_index: 0, item: { ...item, input: '', status: 'in_progress' } });
    ev('response.custom_tool_call_input.delta', { ...at, delta: item.input });
    ev('response.custom_tool_call_input.done', { ...at, input: item.input });
  } else {
    const text = item.content[0].text;
    ev('response.output_item.added', { output_index: 0, item: { ...item, status: 'in_progress', content: [] } });
    ev('response.content_part.added', { ...at, content_index: 0, part: { type: 'output_text', text: '', annotations: [] } });
    ev('response.output_text.delta', { ...at, content_index: 0, delta: text });
    ev('response.output_text.done', { ...at, content_index: 0, text });
    ev('response.content_part.done', { ...at, content_index: 0, part: item.content[0] });
  }
  ev('response.output_item.done', { output_index: 0, item });
  ev('response.completed', { response: { ...base, status: 'completed', output: [item], usage } });
  res.end();
}

function openai(req, res, url, b, n) {
  const p = url.pathname;
  if (req.method === 'POST' && p === '/v1/responses') return openaiResponses(req, res, b, n);
  if (p === '/v1/models') return json(res, 200, { object: 'list', data: [] });
  return json(res, 404, { error: { message: `fake: no ${p}`, type: 'invalid_request_error' } });
}

// ---------------------------------------------------------------- plumbing

function json(res, status, obj, headers = {}) {
  const body = JSON.stringify(obj);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers });
  res.end(body);
  return status;
}

// Claude may gzip its request bodies. zstd needs node >= 22.15; gzip/deflate/br work on 18.
function decode(raw, enc) {
  if (!raw.length) return raw;
  if (enc === 'gzip' || enc === 'x-gzip' || (!enc && raw[0] === 0x1f && raw[1] === 0x8b)) return zlib.gunzipSync(raw);
  if (enc === 'deflate') return zlib.inflateSync(raw);
  if (enc === 'br') return zlib.brotliDecompressSync(raw);
  if (enc === 'zstd' || (!enc && raw.length >= 4 && raw.readUInt32LE(0) === 0xfd2fb528)) {
    if (typeof zlib.zstdDecompressSync !== 'function') throw new Error('this node has no zstd');
    return zlib.zstdDecompressSync(raw);
  }
  if (enc && enc !== 'identity') throw new Error(`unknown content-encoding ${enc}`);
  return raw;
}

let requests = 0;

function handle(req, res) {
  const n = ++requests;
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const enc = String(req.headers['content-encoding'] ?? '').toLowerCase();
    let raw = Buffer.concat(chunks);
    let bodyNote;
    try {
      raw = decode(raw, enc);
    } catch (e) {
      bodyNote = `${raw.length} bytes, content-encoding ${enc || 'none'} not decoded: ${e.message}`;
    }
    const host = String(req.headers.host ?? '').replace(/:\d+$/, '');
    const url = new URL(req.url, 'https://x');
    let b = {};
    if (raw.length && !bodyNote) {
      try { b = JSON.parse(raw.toString('utf8')); } catch { bodyNote = `${raw.length} bytes, not JSON`; }
    }
    if (args.dump && raw.length) {
      const name = `${String(++dumped).padStart(4, '0')}-${url.pathname.replace(/[^A-Za-z0-9]+/g, '_')}.json`;
      fs.writeFileSync(`${args.dump}/${name}`, raw);
    }
    const api = host === 'api.openai.com' || url.pathname === '/v1/responses' ? 'openai' : 'anthropic';
    const summary = bodyNote ?? (url.pathname === '/v1/messages' ? anthropicSummary(b)
      : url.pathname === '/v1/responses' ? openaiSummary(b)
      : raw.length ? { keys: Object.keys(b).slice(0, 20) } : undefined);
    log({ dir: 'request', n, api, method: req.method, path: url.pathname, query: url.search || undefined,
      host: req.headers.host, ua: req.headers['user-agent'], encoding: enc || undefined, body: summary,
      // The credential headers as they arrived (a test of injected secrets reads them).
      apiKey: req.headers['x-api-key'], authorization: req.headers.authorization });
    // Claude takes an answer without Anthropic's request id for a proxy's.
    res.setHeader(api === 'openai' ? 'x-request-id' : 'request-id', newId('req_'));
    // A model request we could not read must not be mistaken for a side request.
    if (bodyNote && req.method === 'POST' && /^\/v1\/(messages|responses)$/.test(url.pathname)) {
      log({ dir: 'reply', n, api, error: bodyNote });
      return json(res, 400, { type: 'error', error: { type: 'invalid_request_error', message: `fake: ${bodyNote}` } });
    }
    try {
      (api === 'openai' ? openai : anthropic)(req, res, url, b, n);
    } catch (e) {
      log({ dir: 'error', n, error: String(e?.stack ?? e) });
      if (!res.headersSent) json(res, 500, { error: { message: 'fake: internal error' } });
      else res.end();
    }
  });
}

const server = args.plain
  ? http.createServer(handle)
  : https.createServer({ cert: fs.readFileSync(args.cert), key: fs.readFileSync(args.key) }, handle);

// WebSocket (codex tries the Responses API over one first): refuse the upgrade with a plain
// HTTP error so the client falls back to POST + SSE at once.
server.on('upgrade', (req, socket) => {
  log({ dir: 'request', n: ++requests, api: 'openai', method: req.method, path: new URL(req.url, 'https://x').pathname, host: req.headers.host,
    upgrade: req.headers.upgrade, reply: 'refused websocket upgrade (426)' });
  const body = JSON.stringify({ error: { message: 'fake: websocket not supported', type: 'invalid_request_error' } });
  socket.end(`HTTP/1.1 426 Upgrade Required\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
});
server.on('tlsClientError', (e) => log({ dir: 'tls-error', error: String(e?.message ?? e) }));
server.keepAliveTimeout = 30000;
server.listen(Number(args.port), args.host, () => {
  log({ dir: 'listening', port: Number(args.port), host: args.host, steps: STEPS });
  process.stdout.write('listening\n');
});
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => { server.close(); process.exit(0); });
