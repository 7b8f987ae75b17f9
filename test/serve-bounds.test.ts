/**
 * What one request may cost the server, and what a client may hold of it (issue 32, items 1–3):
 * request bodies in flight, schema size and compiled-grammar size, parses and compiles at once —
 * each refused with a 4xx naming its bound before the work is done; compiles and long bodies that
 * leave /health answered meanwhile; `n` choices of a completion that run the prompt once; slow
 * requests answered 408, connections past the bound 503, oversize bodies 413 rather than a reset.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import * as net from 'node:net';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type RunningServer, startServer } from '../src/server/server.js';
import { BIN, ROOT } from './helpers.js';

const DEMO = path.join(ROOT, 'models/demo');
/** A guard against a hang (a wait for a state that never comes); far above a working run's seconds, and no measure of speed. */
const HANG = { timeout: 10 * 60_000 };
const user = (content: string) => [{ role: 'user' as const, content }];

async function post(url: string, body: unknown): Promise<{ status: number; body: any }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await r.text();
  try {
    return { status: r.status, body: JSON.parse(text) };
  } catch {
    return { status: r.status, body: text };
  }
}

const health = async (url: string): Promise<any> => (await fetch(`${url}/health`)).json();

/**
 * Send `request` (a whole HTTP request, or its head and then `body`) on a connection of its own
 * as a simple client does: everything written first, the answer read after. A connection the
 * server resets while it is written comes back as `reset`.
 */
function exchange(url: string, head: string, body?: { bytes: number; chunked?: boolean; paced?: boolean }): Promise<{ status: number; headers: string; body: string } | { reset: string }> {
  const u = new URL(url);
  return new Promise((resolve) => {
    const socket = net.connect(Number(u.port), u.hostname);
    let got = Buffer.alloc(0);
    let done = false;
    const finish = (r: { status: number; headers: string; body: string } | { reset: string }) => {
      if (done) return;
      done = true;
      socket.destroy();
      resolve(r);
    };
    const parse = () => {
      const text = got.toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      if (end < 0) return;
      const headers = text.slice(0, end);
      const length = Number(/content-length: (\d+)/i.exec(headers)?.[1] ?? -1);
      const rest = got.subarray(end + 4);
      if (length >= 0 && rest.length >= length) finish({ status: Number(headers.split(' ')[1]), headers, body: rest.subarray(0, length).toString('utf8') });
    };
    let written = false;
    socket.on('data', (d) => {
      got = Buffer.concat([got, d]);
      // what a simple client reads once it has written everything
      if (written) parse();
    });
    socket.on('error', (e: NodeJS.ErrnoException) => finish({ reset: e.code ?? e.message }));
    socket.on('close', () => {
      parse();
      finish({ reset: 'closed' });
    });
    socket.on('connect', async () => {
      const write = (b: Buffer | string) => new Promise<void>((res, rej) => socket.write(b, (e) => (e ? rej(e) : res())));
      try {
        await write(head);
        if (body) {
          const chunk = Buffer.alloc(64 << 10, 0x20);
          for (let sent = 0, i = 0; sent < body.bytes; sent += chunk.length, i++) {
            const piece = chunk.subarray(0, Math.min(chunk.length, body.bytes - sent));
            await write(body.chunked ? Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')]) : piece);
            // an upload that takes a while, as one over a network does
            if (body.paced && i % 4 === 3) await new Promise((r) => setTimeout(r, 20));
          }
          if (body.chunked) await write('0\r\n\r\n');
        }
        written = true;
        parse();
      } catch (e) {
        finish({ reset: (e as NodeJS.ErrnoException).code ?? String(e) });
      }
    });
  });
}

/** `waste serve` as a user starts it, with `args`; resolves once it listens. */
async function serve(args: string[], env: Record<string, string> = {}): Promise<{ url: string; child: ChildProcess; err: () => string }> {
  const child = spawn(process.execPath, [BIN, 'serve', DEMO, '--port', '0', '-q', '--no-learn', ...args], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  let err = '';
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr!.on('data', (b) => {
      err += b;
      const m = /listening on (http:\/\/\S+)/.exec(err);
      if (m) resolve(m[1]);
    });
    child.on('exit', () => reject(new Error(`serve exited: ${err}`)));
  });
  return { url, child, err: () => err };
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  await new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

/** The schema of issue 32: 230,000 strings in an enum, a 7.8 MB request. */
const ENUM_BODY = JSON.stringify({
  model: 'demo',
  messages: user('pick one'),
  max_tokens: 4,
  response_format: { type: 'json_schema', json_schema: { name: 'e', schema: { type: 'string', enum: Array.from({ length: 230_000 }, (_, i) => `value-${i}-${'x'.repeat(20)}`) } } },
});

/** An object schema of `n` properties: cheap to send, many slices to compile. */
const wide = (n: number, prefix = 'p') => ({ type: 'object', properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`${prefix}${i}`, { type: i % 2 ? 'string' : ['integer', 'null'] }])) });

describe('what a request may cost', HANG, () => {
  it('waste serve stays up under concurrent 7.8 MB schema requests: each is answered with the bound it passed, and /health after', async () => {
    assert.ok(ENUM_BODY.length > 7_800_000 && ENUM_BODY.length < 8 << 20, `${ENUM_BODY.length} bytes`);
    // a 2 GB heap: the size V8 gives many containers; before these bounds four of these requests exhausted it
    const { url, child, err } = await serve([], { NODE_OPTIONS: '--max-old-space-size=2048' });
    try {
      const answers = await Promise.all(
        Array.from({ length: 6 }, async () => {
          try {
            return await post(`${url}/v1/chat/completions`, ENUM_BODY);
          } catch (e) {
            return { status: 0, body: String((e as Error).cause ?? e) };
          }
        }),
      );
      assert.equal(child.exitCode, null, err());
      assert.equal(child.signalCode, null, err());
      for (const a of answers) {
        assert.ok(a.status >= 400 && a.status < 500, `${a.status} ${JSON.stringify(a.body).slice(0, 300)}`);
        assert.match(a.body.error.message, /\(--max-(schema-size|inflight|grammar-states)\)/, JSON.stringify(a.body).slice(0, 300));
      }
      assert.ok(answers.some((a) => a.body.error.code === 'schema_too_large'));
      const h = await health(url);
      assert.equal(h.status, 'ok');
      assert.equal(h.requests.body_bytes, 0, 'every body given back');
      const ok = await post(`${url}/v1/chat/completions`, { messages: user('hi'), max_tokens: 2 });
      assert.equal(ok.status, 200, JSON.stringify(ok.body));
    } finally {
      await stop(child);
    }
  });

  it('the bounds are waste serve flags, each reaching the server; bodies in flight below one body are refused in one line', async () => {
    const { url, child } = await serve(['--max-body', '512K', '--max-inflight', '1M', '--compiles', '3', '--max-schema-size', '100', '--max-grammar-states', '1000', '--request-timeout', '5', '--max-connections', '7']);
    try {
      const h = await health(url);
      assert.deepEqual(
        [h.requests.max_body_bytes, h.requests.compiles, h.requests.max_connections],
        [1 << 20, 3, 7],
      );
      const big = await post(`${url}/v1/chat/completions`, 'x'.repeat(600 << 10));
      assert.equal(big.status, 413);
      assert.match(big.body.error.message, /\(524288 bytes, --max-body\)/);
      const schema = await post(`${url}/v1/chat/completions`, { messages: user('hi'), max_tokens: 2, response_format: { type: 'json_schema', json_schema: { name: 'w', schema: wide(60) } } });
      assert.equal(schema.status, 400);
      assert.match(schema.body.error.message, /more than 100 subschemas.*\(--max-schema-size\)/);
      const states = await post(`${url}/v1/chat/completions`, { messages: user('hi'), max_tokens: 2, response_format: { type: 'json_schema', json_schema: { name: 'e', schema: { enum: Array.from({ length: 90 }, (_, i) => `a fairly long value ${i}`) } } } });
      assert.equal(states.status, 400);
      assert.match(states.body.error.message, /more than 1000 grammar states.*\(--max-grammar-states\)/);
    } finally {
      await stop(child);
    }
    const r = spawnSync(process.execPath, [BIN, 'serve', DEMO, '--port', '0', '--no-learn', '--max-inflight', '1M'], { encoding: 'utf8' });
    assert.equal(r.status, 2, r.stderr);
    assert.equal(r.stderr, 'waste: --max-inflight 1M: at least --max-body (8388608 bytes), or no body of the largest size could be taken\n');
  });

  describe('each bound, on a server of small bounds', () => {
    let server: RunningServer;
    before(async () => {
      server = await startServer({ model: DEMO, port: 0, log: false, maxBodyBytes: 64 << 10, maxInflightBytes: 100_000, maxSchemaSize: 400, maxGrammarStates: 3_000 });
    });
    after(() => server.close());

    it('bodies in flight: a declared length that does not fit beside the others is a 429 before its body is read', async () => {
      const chat = `${server.url}/v1/chat/completions`;
      // a client holding 60,000 bytes of a body it is slow to send
      const holder = net.connect(Number(new URL(server.url).port), '127.0.0.1');
      await new Promise((r) => holder.once('connect', r));
      holder.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n{"messages":`);
      try {
        while ((await health(server.url)).requests.body_bytes !== 60_000) await new Promise((r) => setTimeout(r, 10));
        const pad = (n: number) => {
          const s = JSON.stringify({ messages: user('hi'), max_tokens: 2 });
          return s.slice(0, -1) + ' '.repeat(n - s.length) + '}';
        };
        const refused = await post(chat, pad(50_000));
        assert.equal(refused.status, 429, JSON.stringify(refused.body));
        assert.equal(refused.body.error.code, 'bodies_in_flight');
        assert.match(refused.body.error.message, /at most 100000 at once \(--max-inflight\)/);
        const fits = await post(chat, pad(30_000));
        assert.equal(fits.status, 200, JSON.stringify(fits.body).slice(0, 300));
      } finally {
        holder.destroy();
      }
      while ((await health(server.url)).requests.body_bytes !== 0) await new Promise((r) => setTimeout(r, 10));
      // a chunked body (no length declared) is counted as it arrives
      const r = await exchange(server.url, 'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n', { bytes: 200_000, chunked: true });
      assert.ok('status' in r, JSON.stringify(r));
      assert.equal(r.status, 413, r.body);
      assert.match(r.body, /65536 bytes, --max-body/);
    });

    it("schema size: every schema of the request counted together, refused before it is compiled, naming the field where it passed", async () => {
      // three tools of 60 properties, 152 units each (the object, 60 properties, 90 type names, its type): two fit in 400, three do not
      const tools = [0, 1, 2].map((i) => ({ type: 'function', function: { name: `t${i}`, parameters: wide(60) } }));
      const r = await post(`${server.url}/v1/chat/completions`, { messages: user('hi'), max_tokens: 2, tools, tool_choice: 'none' });
      assert.equal(r.status, 400, JSON.stringify(r.body).slice(0, 300));
      assert.equal(r.body.error.code, 'schema_too_large');
      assert.equal(r.body.error.param, 'tools[2].function.parameters');
      assert.match(r.body.error.message, /more than 400 subschemas, names and enum values, this server's bound \(--max-schema-size\)/);
      const anthropic = await post(`${server.url}/v1/messages`, { messages: user('hi'), max_tokens: 2, tools: tools.map((t) => ({ name: t.function.name, input_schema: t.function.parameters })), tool_choice: { type: 'none' } });
      assert.equal(anthropic.status, 400);
      assert.match(anthropic.body.error.message, /^tools\[2\]\.input_schema: .*\(--max-schema-size\)/);
      const one = await post(`${server.url}/v1/chat/completions`, { messages: user('hi'), max_tokens: 2, tools: tools.slice(0, 2), tool_choice: 'none' });
      assert.equal(one.status, 200, JSON.stringify(one.body).slice(0, 300));
    });

    it('compiled size: a small schema that compiles large is refused while compiling', async () => {
      // 300 values: within the schema size; their texts, over 3,000 bytes, are not within the states
      const schema = { type: 'string', enum: Array.from({ length: 300 }, (_, i) => `value number ${i}`) };
      const r = await post(`${server.url}/v1/chat/completions`, { messages: user('hi'), max_tokens: 2, response_format: { type: 'json_schema', json_schema: { name: 'v', schema } } });
      assert.equal(r.status, 400, JSON.stringify(r.body).slice(0, 300));
      assert.equal(r.body.error.code, 'grammar_too_large');
      assert.equal(r.body.error.param, 'response_format.json_schema.schema');
      assert.match(r.body.error.message, /compile to more than 3000 grammar states, this server's bound \(--max-grammar-states\)/);
      const fits = await post(`${server.url}/v1/chat/completions`, { messages: user('hi'), max_tokens: 8, response_format: { type: 'json_schema', json_schema: { name: 'v', schema: { ...schema, enum: schema.enum.slice(0, 50) } } } });
      assert.equal(fits.status, 200, JSON.stringify(fits.body).slice(0, 300));
    });
  });

  it('parses and compiles: at most `compiles` at once, the rest waiting their turn', async () => {
    const server = await startServer({ model: DEMO, port: 0, log: false, compiles: 1 });
    // the most parses and compiles seen in progress, looked at every turn of the event loop
    let most = 0;
    let sampling = true;
    try {
      const host = server.host;
      const turn = (i: number) => ({ messages: user('hi'), tools: [], toolChoice: 'none' as const, parallelToolCalls: false, schema: wide(3_000, `r${i}_`), sampling: {}, maxTokens: 2 });
      const sample = () => {
        most = Math.max(most, host.compiling + host.parsing);
        if (sampling) setImmediate(sample);
      };
      sample();
      const runs = [0, 1, 2].map((i) => host.prepare(turn(i)));
      const settled = Promise.allSettled(runs);
      // each renders its prompt first (a promise, settled within microtasks: nothing else runs meanwhile)
      for (let i = 0; i < 20 && host.work.active + host.work.waiting < 3; i++) await Promise.resolve();
      assert.equal(host.work.active, 1);
      assert.equal(host.work.waiting, 2);
      const done = await settled;
      assert.deepEqual(
        done.map((d) => d.status),
        ['fulfilled', 'fulfilled', 'fulfilled'],
      );
      assert.equal(most, 1);
      assert.equal(host.work.active + host.work.waiting, 0);
    } finally {
      sampling = false;
      await server.close();
    }
  });
});

describe('the event loop during costly requests', HANG, () => {
  let server: RunningServer;
  before(async () => {
    server = await startServer({ model: DEMO, port: 0, log: false });
  });
  after(() => server.close());

  /** Ask /health, one after another, until `costly` is answered: the answers that came while it was in `phase`. */
  async function healthDuring(costly: Promise<{ status: number; body: any }>, phase: 'compiling' | 'parsing' | 'rendering'): Promise<{ during: number; answer: { status: number; body: any } }> {
    let answered: { status: number; body: any } | undefined;
    const settled = costly.then((a) => (answered = a));
    let during = 0;
    while (!answered) {
      const h = await health(server.url);
      if (h.requests[phase] > 0) during++;
    }
    await settled;
    return { during, answer: answered };
  }

  it('a large schema compiles in slices: /health is answered while it compiles', async () => {
    const costly = post(`${server.url}/v1/chat/completions`, { messages: user('hi'), max_tokens: 2, response_format: { type: 'json_schema', json_schema: { name: 'w', schema: wide(9_000) } } });
    const { during, answer } = await healthDuring(costly, 'compiling');
    assert.equal(answer.status, 200, JSON.stringify(answer.body).slice(0, 300));
    assert.ok(during > 0, 'no /health answer came while the schema compiled');
  });

  it('128 tools compile in slices: /health is answered while they compile', async () => {
    const tools = Array.from({ length: 128 }, (_, i) => ({ type: 'function', function: { name: `tool_${i}`, parameters: wide(60) } }));
    const costly = post(`${server.url}/v1/chat/completions`, { messages: user('hi'), max_tokens: 2, tools, tool_choice: 'none' });
    const { during, answer } = await healthDuring(costly, 'compiling');
    assert.equal(answer.status, 200, JSON.stringify(answer.body).slice(0, 300));
    assert.ok(during > 0, 'no /health answer came while the tools compiled');
  });

  it('a conversation of megabytes is rendered and tokenized on a thread of its own: /health is answered meanwhile, and the prompt is what rendering it here gives', async () => {
    // 6 MB of words: seconds of tokenizing, which on the server's thread would stall every request
    const text = Array.from({ length: 900_000 }, (_, i) => ['whale', 'sea', 'ship', 'the', 'of'][i % 5]).join(' ');
    const body = { messages: [{ role: 'user', content: text }], max_tokens: 1 };
    const costly = post(`${server.url}/v1/chat/completions`, body);
    const { during, answer } = await healthDuring(costly, 'rendering');
    // the demo's context is far shorter: the refusal names the count the thread rendered
    assert.equal(answer.status, 400);
    assert.equal(answer.body.error.code, 'context_length_exceeded');
    const n = Number(/the conversation is (\d+) tokens/.exec(answer.body.error.message)?.[1]);
    const here = server.host.model.chatFormat().encode(server.host.model.tokenizer(), [{ role: 'user', content: text }], {}).length;
    assert.equal(n, here, 'the thread renders the ids rendering on the server thread gives');
    assert.ok(during > 0, 'no /health answer came while the conversation was rendered');
  });

  for (const [what, tools] of [
    // the same 6 MB, in a tool's description rather than a message: rendered into the prompt all the same
    ['a tool whose description is megabytes', [{ type: 'function', function: { name: 'lookup', description: Array.from({ length: 900_000 }, (_, i) => ['whale', 'sea', 'ship', 'the', 'of'][i % 5]).join(' '), parameters: { type: 'object', properties: { q: { type: 'string' } } } } }]],
    // 234 K characters of JSON, 192 K tokens: JSON tokenizes far slower than prose of its length
    ['128 tools of 60 properties', Array.from({ length: 128 }, (_, i) => ({ type: 'function', function: { name: `tool_${i}`, parameters: wide(60) } }))],
  ] as const) {
    it(`tool declarations are rendered on the thread too (${what}): /health is answered meanwhile, and the prompt is what rendering it here gives`, async () => {
      const costly = post(`${server.url}/v1/chat/completions`, { messages: user('hi'), tools, max_tokens: 1 });
      const { during, answer } = await healthDuring(costly, 'rendering');
      assert.equal(answer.status, 400);
      assert.equal(answer.body.error.code, 'context_length_exceeded');
      const n = Number(/the conversation is (\d+) tokens/.exec(answer.body.error.message)?.[1]);
      const here = server.host.model.chatFormat().encode(server.host.model.tokenizer(), user('hi'), { tools: [...tools] }).length;
      assert.equal(n, here, 'the thread renders the ids rendering on the server thread gives');
      assert.ok(during > 0, 'no /health answer came while the tools were rendered');
    });
  }

  it("a completion's text prompt of megabytes is tokenized on the thread: /health is answered meanwhile, and the ids are the tokenizer's here", async () => {
    const text = Array.from({ length: 900_000 }, (_, i) => ['whale', 'sea', 'ship', 'the', 'of'][i % 5]).join(' ');
    const costly = post(`${server.url}/v1/completions`, { prompt: text, max_tokens: 1 });
    const { during, answer } = await healthDuring(costly, 'rendering');
    assert.equal(answer.status, 400);
    assert.equal(answer.body.error.code, 'context_length_exceeded');
    const n = Number(/^the prompt is (\d+) tokens/.exec(answer.body.error.message)?.[1]);
    assert.equal(n, server.host.model.tokenizer().encode(text).length, 'the thread tokenizes as the server thread does');
    assert.ok(during > 0, 'no /health answer came while the prompt was tokenized');
    // a short one is tokenized here, as before
    const short = await post(`${server.url}/v1/completions`, { prompt: 'It was a dark', max_tokens: 1 });
    assert.equal(short.status, 200, JSON.stringify(short.body));
    assert.equal(short.body.usage.prompt_tokens, server.host.model.tokenizer().encode('It was a dark').length);
  });

  it('a body of 3.9 million token ids is walked in slices and refused by its length before its ids are checked', async () => {
    const ids = `{"max_tokens":1,"prompt":[${Array.from({ length: 3_900_000 }, (_, i) => i % 10).join(',')}]}`;
    const costly = post(`${server.url}/v1/completions`, ids);
    const { during, answer } = await healthDuring(costly, 'parsing');
    assert.equal(answer.status, 400);
    assert.equal(answer.body.error.code, 'context_length_exceeded');
    assert.match(answer.body.error.message, /^the prompt is 3900000 tokens and this model's context is \d+/);
    assert.ok(during > 0, 'no /health answer came while the body was walked');
  });
});

describe('n choices of a request', HANG, () => {
  let server: RunningServer;
  let rows = 0;
  before(async () => {
    server = await startServer({ model: DEMO, port: 0, log: false, parallel: 1 });
    const m = server.host.model;
    const firstMoe = m.config.layerKinds.findIndex((k) => k.ffn === 'moe');
    // the tokens the model runs: every one passes the first MoE layer once
    m.observeRoutes((L, _route, T) => {
      if (L === firstMoe) rows += T;
    });
  });
  after(() => server.close());

  const prompt = 'It was a dark and stormy night; the rain fell in torrents, except at occasional intervals, when it was checked by a violent gust of wind. '.repeat(3);

  for (const [what, extra] of [
    ['generated', {}],
    ['scored and generated (echo with logprobs)', { echo: true, logprobs: 2 }],
  ] as const) {
    it(`run the prompt once, and each choice is what its seed gives alone: ${what}`, async () => {
      const url = `${server.url}/v1/completions`;
      const alone: any[] = [];
      rows = 0;
      for (let i = 0; i < 4; i++) alone.push((await post(url, { prompt, max_tokens: 6, temperature: 1, seed: 11 + i, ...extra })).body);
      const aloneRows = rows;
      rows = 0;
      const together = await post(url, { prompt, n: 4, max_tokens: 6, temperature: 1, seed: 11, ...extra });
      assert.equal(together.status, 200, JSON.stringify(together.body));
      const P = together.body.usage.prompt_tokens;
      assert.ok(P > 100, `${P} prompt tokens`);
      assert.deepEqual(
        together.body.choices.map((c: any) => [c.text, c.logprobs, c.finish_reason]),
        alone.map((a) => [a.choices[0].text, a.choices[0].logprobs, a.choices[0].finish_reason]),
      );
      assert.ok(new Set(alone.map((a) => a.choices[0].text)).size > 1, 'the seeds give different replies');
      // the prompt once, then each choice's own tokens
      assert.ok(rows >= P && rows <= P + 4 * 6, `${rows} tokens run for a prompt of ${P}`);
      assert.ok(aloneRows >= 4 * P, `${aloneRows} tokens run alone`);
      // streamed: the same choices
      const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt, n: 4, max_tokens: 6, temperature: 1, seed: 11, stream: true, ...extra }) });
      const texts = ['', '', '', ''];
      for (const line of (await r.text()).split('\n')) {
        if (!line.startsWith('data: {')) continue;
        for (const c of JSON.parse(line.slice(6)).choices) texts[c.index] += c.text;
      }
      assert.deepEqual(texts, alone.map((a) => a.choices[0].text));
    });
  }

  it('chat completions run the conversation once too, each choice what its seed gives alone', async () => {
    const url = `${server.url}/v1/chat/completions`;
    const body = { messages: [{ role: 'system', content: prompt }, ...user('Go on.')], max_tokens: 5, temperature: 1, logprobs: true, top_logprobs: 1 };
    const alone: any[] = [];
    for (let i = 0; i < 3; i++) alone.push((await post(url, { ...body, seed: 5 + i })).body);
    rows = 0;
    const together = await post(url, { ...body, n: 3, seed: 5 });
    assert.equal(together.status, 200, JSON.stringify(together.body));
    const P = together.body.usage.prompt_tokens;
    assert.deepEqual(
      together.body.choices.map((c: any) => [c.message, c.logprobs, c.finish_reason]),
      alone.map((a) => [a.choices[0].message, a.choices[0].logprobs, a.choices[0].finish_reason]),
    );
    assert.ok(rows >= P && rows <= P + 3 * 5, `${rows} tokens run for a prompt of ${P}`);
  });
});

describe('connections', HANG, () => {
  it('a request whose body does not arrive within the timeout is answered 408, as is one whose headers do not', async () => {
    const server = await startServer({ model: DEMO, port: 0, log: false, requestTimeoutMs: 1000 });
    try {
      for (const head of ['POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"messages"', 'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-']) {
        const r = await exchange(server.url, head);
        assert.ok('status' in r, JSON.stringify(r));
        assert.equal(r.status, 408, r.body);
        const body = JSON.parse(r.body);
        assert.equal(body.error.code, 'request_timeout');
        assert.match(body.error.message, /within 1 s \(--request-timeout\)/);
      }
      assert.equal((await health(server.url)).status, 'ok');
    } finally {
      await server.close();
    }
  });

  it('one connection past the bound is answered 503 and closed; once one closes, a new one is served', async () => {
    const server = await startServer({ model: DEMO, port: 0, log: false, maxConnections: 3 });
    const port = Number(new URL(server.url).port);
    const held: net.Socket[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        const s = net.connect(port, '127.0.0.1');
        await new Promise((r) => s.once('connect', r));
        held.push(s);
      }
      const get = 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n';
      const refused = await exchange(server.url, get);
      assert.ok('status' in refused, JSON.stringify(refused));
      assert.equal(refused.status, 503, refused.body);
      const body = JSON.parse(refused.body);
      assert.equal(body.error.code, 'too_many_connections');
      assert.match(body.error.message, /3 connections open, the most it takes \(--max-connections\)/);
      held.pop()!.destroy();
      for (;;) {
        const r = await exchange(server.url, get);
        if ('status' in r && r.status === 200) {
          assert.equal(JSON.parse(r.body).requests.max_connections, 3);
          break;
        }
        await new Promise((res) => setTimeout(res, 20));
      }
    } finally {
      for (const s of held) s.destroy();
      await server.close();
    }
  });

  it('oversize bodies get their 413 even from a client that reads only after sending all of it', async () => {
    const server = await startServer({ model: DEMO, port: 0, log: false, maxBodyBytes: 1 << 20 });
    try {
      const head = (framing: string) => `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${framing}\r\n\r\n`;
      const bytes = 6 << 20;
      const answers = await Promise.all([
        ...[0, 1, 2].map(() => exchange(server.url, head(`Content-Length: ${bytes}`), { bytes, paced: true })),
        ...[0, 1, 2].map(() => exchange(server.url, head('Transfer-Encoding: chunked'), { bytes, chunked: true, paced: true })),
      ]);
      for (const a of answers) {
        assert.ok('status' in a, `a reset instead of the answer: ${JSON.stringify(a)}`);
        assert.equal(a.status, 413, a.body);
        assert.equal(JSON.parse(a.body).error.code, 'request_too_large');
        assert.match(a.body, /1048576 bytes, --max-body/);
      }
      assert.equal((await health(server.url)).status, 'ok');
    } finally {
      await server.close();
    }
  });
});
