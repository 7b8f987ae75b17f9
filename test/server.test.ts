import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as http from 'node:http';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Ajv } from 'ajv';
import OpenAI from 'openai';
import { Model } from '../src/api/model.js';
import { FairQueue, QueueFull } from '../src/server/queue.js';
import { type RunningServer, startServer } from '../src/server/server.js';
import { WasteError } from '../src/util/errors.js';
import { grammarConstraint } from '../src/constrain/constraint.js';
import { json } from '../src/constrain/grammar.js';
import type { TokenVocab } from '../src/constrain/vocab.js';
import { BIN, ROOT } from './helpers.js';

const DEMO = path.join(ROOT, 'models/demo');
const WEATHER = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 24 }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } }, required: ['city', 'unit'], additionalProperties: false },
  },
};
const CLOCK = { type: 'function' as const, function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 16 } }, required: ['zone'], additionalProperties: false } } };
const PERSON = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 20 },
    age: { type: 'integer' },
    role: { enum: ['captain', 'mate', 'harpooner'] },
    ships: { type: 'array', items: { type: 'string', maxLength: 12 }, maxItems: 3 },
  },
  required: ['name', 'age', 'role', 'ships'],
  additionalProperties: false,
};

/** One token per byte (and an end token, 256): checks text against a grammar byte by byte. */
const BYTES: TokenVocab = { size: 257, bytes: (id) => (id < 256 ? Uint8Array.of(id) : new Uint8Array(0)), isSpecial: (id) => id === 256 };

const user = (content: string) => [{ role: 'user' as const, content }];

async function raw(url: string, init: RequestInit & { json?: unknown } = {}): Promise<{ status: number; headers: Headers; body: any }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...(init.headers ?? {}) }, body: init.json !== undefined ? JSON.stringify(init.json) : init.body, signal: init.signal });
  const text = await r.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: r.status, headers: r.headers, body };
}

/** A GET with the Host header a browser would send for `host` (fetch does not let a page set it). */
function getAs(url: string, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, headers: { host } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** A streamed request read to its end: the status, and the error event if the stream carried one. */
async function streamed(url: string, json: unknown): Promise<{ status: number; text: string; error: any }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(json) });
  const text = await r.text();
  const events = [...text.matchAll(/^data: (.*)$/gm)].map((m) => m[1]).filter((d) => d !== '[DONE]').map((d) => JSON.parse(d));
  return { status: r.status, text, error: r.ok ? events.find((e) => e.error || e.type === 'error')?.error : JSON.parse(text) };
}

describe('waste serve: the OpenAI-compatible API on the demo model', () => {
  let server: RunningServer;
  let client: OpenAI;
  const lines: string[] = [];

  before(async () => {
    server = await startServer({ model: DEMO, port: 0, log: (l) => lines.push(l) });
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => server.close());

  it('lists the model and reports health with the cache', async () => {
    const models = await client.models.list();
    assert.deepEqual(models.data.map((m) => m.id), ['demo']);
    const h: any = await (await fetch(`${server.url}/health`)).json();
    assert.equal(h.status, 'ok');
    assert.equal(h.model, 'demo');
    assert.ok(h.budget_bytes > 0);
    assert.equal(typeof h.cache.hit_rate, 'number');
  });

  it('answers a chat completion exactly as the library does, and logs one line for it', async () => {
    const r = await client.chat.completions.create({ model: 'demo', messages: user('It was a dark'), max_tokens: 24, temperature: 0 });
    const text = r.choices[0].message.content ?? '';
    assert.ok(text.length > 0);
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.equal(r.usage?.completion_tokens, r.usage!.total_tokens - r.usage!.prompt_tokens);
    const m = await Model.open(DEMO);
    try {
      let lib = '';
      for await (const piece of m.chat().send('It was a dark', { maxTokens: 24, temperature: 0 })) lib += piece;
      assert.equal(text, lib);
    } finally {
      await m.close();
    }
    const line = lines.find((l) => l.includes('POST /v1/chat/completions 200'));
    assert.ok(line, lines.join('\n'));
    assert.match(line, /\d+ prompt \+ \d+ reply tokens, [\d.]+ tok\/s, (stop|length) \| experts [\d.]+ % hit, [\d.]+ MB read/);
  });

  it('streams the same reply in deltas, with usage in the last chunk when asked', async () => {
    const req = { model: 'demo', messages: user('Call me Ishmael.'), max_tokens: 20, temperature: 0.8, seed: 7 };
    const whole = await client.chat.completions.create(req);
    const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let finishes = 0;
    let usage: unknown;
    let chunks = 0;
    for await (const ch of stream) {
      chunks++;
      for (const c of ch.choices) {
        text += c.delta.content ?? '';
        if (c.finish_reason) finishes++;
      }
      if (ch.usage) usage = ch.usage;
    }
    assert.equal(text, whole.choices[0].message.content);
    assert.equal(finishes, 1);
    assert.deepEqual(usage, whole.usage);
    assert.ok(chunks > 3);
  });

  it('returns each token with its log-probability and alternatives, streamed the same as whole', async () => {
    // no repetition penalty (the demo's default has one): greedy then takes the most likely token
    const req = { model: 'demo', messages: user('It was a dark'), max_tokens: 16, temperature: 0, repetition_penalty: 1, logprobs: true, top_logprobs: 3 };
    const r = await client.chat.completions.create(req);
    const choice = r.choices[0];
    const entries = choice.logprobs?.content ?? [];
    // every sampled token but the end token
    assert.equal(entries.length, r.usage!.completion_tokens - (choice.finish_reason === 'stop' ? 1 : 0));
    // the tokens' bytes spell the reply
    assert.equal(Buffer.from(entries.flatMap((e) => e.bytes ?? [])).toString('utf8'), choice.message.content);
    for (const e of entries) {
      assert.ok(e.logprob <= 0 && Number.isFinite(e.logprob), JSON.stringify(e));
      assert.equal(e.top_logprobs.length, 3);
      for (let i = 1; i < 3; i++) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob);
      // greedy, unpenalised: the token taken is the most likely one
      assert.deepEqual(e.top_logprobs[0], { token: e.token, logprob: e.logprob, bytes: e.bytes });
    }
    const streamed: typeof entries = [];
    for await (const ch of await client.chat.completions.create({ ...req, stream: true })) for (const c of ch.choices) streamed.push(...(c.logprobs?.content ?? []));
    assert.deepEqual(streamed, entries);
    // not asked: none
    const plain = await client.chat.completions.create({ model: 'demo', messages: user('It was a dark'), max_tokens: 4, temperature: 0 });
    assert.equal(plain.choices[0].logprobs, null);
  });

  it('logit_bias bans and forces tokens by id', async () => {
    const base = { model: 'demo', messages: user('It was a dark'), max_tokens: 4, temperature: 0, repetition_penalty: 1, logprobs: true, top_logprobs: 2 };
    const first = (await client.chat.completions.create(base)).choices[0].logprobs!.content![0];
    const m = await Model.open(DEMO);
    let taken: number;
    let runnerUp: number;
    try {
      const tok = m.tokenizer();
      const idOf = (bytes: number[]) => Array.from({ length: m.config.vocab }, (_, i) => i).find((i) => Buffer.from(tok.tokenBytes(i)).equals(Buffer.from(bytes)))!;
      taken = idOf(first.bytes!);
      runnerUp = idOf(first.top_logprobs[1].bytes!);
    } finally {
      await m.close();
    }
    const banned = (await client.chat.completions.create({ ...base, logit_bias: { [taken]: -100 } })).choices[0].logprobs!.content![0];
    assert.notDeepEqual(banned.bytes, first.bytes);
    assert.deepEqual(banned.bytes, first.top_logprobs[1].bytes, 'the runner-up takes its place');
    const forced = (await client.chat.completions.create({ ...base, logit_bias: { [runnerUp]: 100 } })).choices[0].logprobs!.content!;
    assert.equal(forced.length, 4);
    for (const e of forced) assert.deepEqual(e.bytes, first.top_logprobs[1].bytes);
  });

  it('completes raw text on /v1/completions as the library does, and scores an echoed prompt exactly', async () => {
    const opts = { temperature: 0, repetition_penalty: 1 };
    const r = await client.completions.create({ model: 'demo', prompt: 'It was a dark', max_tokens: 8, ...opts });
    assert.equal(r.object, 'text_completion');
    const m = await Model.open(DEMO);
    let ids: number[];
    let rows: Float32Array;
    try {
      const s = m.newSession();
      let lib = '';
      for await (const t of s.generate('It was a dark', { maxTokens: 8, temperature: 0, repetitionPenalty: 1 })) lib += t.text;
      assert.equal(r.choices[0].text, lib);
      s.close();
      ids = m.tokenize('It was a dark');
      rows = await m.newSession().forward(ids, { allLogits: true });
    } finally {
      await m.close();
    }
    // the prompt as ids gives the same completion
    const byIds = await client.completions.create({ model: 'demo', prompt: ids, max_tokens: 8, ...opts });
    assert.equal(byIds.choices[0].text, r.choices[0].text);
    // scoring: echo, max_tokens 0, logprobs
    const scored = await client.completions.create({ model: 'demo', prompt: 'It was a dark', max_tokens: 0, echo: true, logprobs: 2 });
    const lp = scored.choices[0].logprobs!;
    assert.equal(scored.choices[0].text, 'It was a dark');
    assert.equal(lp.tokens!.length, ids.length);
    assert.equal(lp.tokens!.join(''), 'It was a dark');
    assert.equal(lp.token_logprobs![0], null);
    assert.equal(lp.top_logprobs![0], null);
    const V = rows.length / ids.length;
    for (let k = 1; k < ids.length; k++) {
      const row = rows.subarray((k - 1) * V, k * V);
      let max = -Infinity;
      for (const x of row) max = Math.max(max, x);
      let sum = 0;
      for (const x of row) sum += Math.exp(x - max);
      assert.ok(Math.abs(lp.token_logprobs![k]! - (row[ids[k]] - max - Math.log(sum))) < 1e-5, `token ${k}`);
      assert.equal(Object.keys(lp.top_logprobs![k]!).length <= 2, true);
    }
    assert.deepEqual(lp.text_offset, lp.tokens!.map((_, k) => lp.tokens!.slice(0, k).join('').length));
    // echo with a completion: the prompt's tokens, then the completion's, streamed the same
    const req = { model: 'demo', prompt: 'It was a dark', max_tokens: 6, echo: true, logprobs: 1, ...opts };
    const whole = await client.completions.create(req);
    assert.ok(whole.choices[0].text.startsWith('It was a dark' + r.choices[0].text.slice(0, 3)));
    const wl = whole.choices[0].logprobs!;
    assert.equal(wl.tokens!.length, ids.length + whole.usage!.completion_tokens - (whole.choices[0].finish_reason === 'stop' ? 1 : 0));
    let text = '';
    const streamed: string[] = [];
    const streamedLp: (number | null)[] = [];
    for await (const ch of await client.completions.create({ ...req, stream: true })) {
      for (const c of ch.choices) {
        text += c.text;
        streamed.push(...(c.logprobs?.tokens ?? []));
        streamedLp.push(...(c.logprobs?.token_logprobs ?? []));
      }
    }
    assert.equal(text, whole.choices[0].text);
    assert.deepEqual(streamed, wl.tokens);
    assert.deepEqual(streamedLp, wl.token_logprobs);
  });

  it('logprobs leave out what a stop string cuts, count offsets from the prompt, and stay the model\'s under a grammar', async () => {
    const base = { model: 'demo', prompt: 'It was a dark', max_tokens: 8, temperature: 0, repetition_penalty: 1, logprobs: 1 };
    const free = await client.completions.create(base);
    const words = free.choices[0].text.split(' ');
    const stop = ' ' + words[2];
    const cut = await client.completions.create({ ...base, stop });
    const lp = cut.choices[0].logprobs!;
    assert.equal(cut.choices[0].text, free.choices[0].text.slice(0, free.choices[0].text.indexOf(stop)));
    assert.equal(lp.tokens!.join(''), cut.choices[0].text, 'no token of the stop string is listed');
    // without echo, offsets count from the start of the prompt
    assert.equal(lp.text_offset![0], 'It was a dark'.length);
    const chatReq = { model: 'demo', messages: user('It was a dark'), max_tokens: 8, temperature: 0, repetition_penalty: 1, logprobs: true, stop: [stop] };
    const chat = await client.chat.completions.create(chatReq);
    assert.equal(Buffer.from(chat.choices[0].logprobs!.content!.flatMap((e) => e.bytes ?? [])).toString('utf8'), chat.choices[0].message.content);
    // a grammar's mask is not the model: the chosen token's logprob is the model's, as its alternatives are
    const json = await client.chat.completions.create({ model: 'demo', messages: user('A person, as JSON.'), max_tokens: 12, temperature: 0, response_format: { type: 'json_object' }, logprobs: true, top_logprobs: 5 });
    for (const e of json.choices[0].logprobs!.content!) {
      assert.ok(e.logprob <= e.top_logprobs[0].logprob + 1e-12, JSON.stringify(e));
      const same = e.top_logprobs.find((t) => t.token === e.token && t.bytes!.join() === e.bytes!.join());
      if (same) assert.equal(same.logprob, e.logprob);
    }
  });

  it('a completion that only echoes leaves the kept conversation alone', async () => {
    const first = await client.completions.create({ model: 'demo', prompt: 'Call me Ishmael.', max_tokens: 5, temperature: 0 });
    await client.completions.create({ model: 'demo', prompt: 'unrelated text', max_tokens: 0, echo: true });
    const next = await client.completions.create({ model: 'demo', prompt: 'Call me Ishmael.' + first.choices[0].text + ' And', max_tokens: 3, temperature: 0 });
    assert.ok(next.usage!.prompt_tokens_details!.cached_tokens! > 0, JSON.stringify(next.usage));
  });

  it('n choices: each is what the request gives alone with seed + its index, streamed the same', async () => {
    const req = { model: 'demo', messages: user('Call me Ishmael.'), max_tokens: 10, temperature: 0.9, seed: 7 };
    const three = await client.chat.completions.create({ ...req, n: 3 });
    assert.deepEqual(three.choices.map((c) => c.index), [0, 1, 2]);
    const alone = [];
    for (const seed of [7, 8, 9]) alone.push(await client.chat.completions.create({ ...req, seed }));
    assert.deepEqual(three.choices.map((c) => c.message.content), alone.map((a) => a.choices[0].message.content));
    assert.ok(new Set(alone.map((a) => a.choices[0].message.content)).size > 1, 'different seeds, different replies');
    assert.equal(three.usage!.prompt_tokens, alone[0].usage!.prompt_tokens);
    assert.equal(three.usage!.completion_tokens, alone.reduce((t, a) => t + a.usage!.completion_tokens, 0));
    const texts = ['', '', ''];
    const finishes = [0, 0, 0];
    for await (const ch of await client.chat.completions.create({ ...req, n: 3, stream: true }))
      for (const c of ch.choices) {
        texts[c.index] += c.delta.content ?? '';
        if (c.finish_reason) finishes[c.index]++;
      }
    assert.deepEqual(texts, three.choices.map((c) => c.message.content));
    assert.deepEqual(finishes, [1, 1, 1]);
    const legacy = await client.completions.create({ model: 'demo', prompt: 'It was a dark', max_tokens: 6, temperature: 0.9, seed: 3, n: 2 });
    const second = await client.completions.create({ model: 'demo', prompt: 'It was a dark', max_tokens: 6, temperature: 0.9, seed: 4 });
    assert.equal(legacy.choices[1].text, second.choices[0].text);
  });

  it('--sessions keeps conversations apart: each continues where it left off, with the same replies', async () => {
    const two = await startServer({ model: DEMO, port: 0, sessions: 2, parallel: 2, log: false });
    // one request at a time keeps one session (each request decoding at once needs one of its own)
    const single = await startServer({ model: DEMO, port: 0, parallel: 1, log: false });
    try {
      const both = new OpenAI({ baseURL: `${two.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const ask = (c: OpenAI, messages: OpenAI.ChatCompletionMessageParam[]) => c.chat.completions.create({ model: 'demo', messages, max_tokens: 12, temperature: 0 });
      const go = async (c: OpenAI) => {
        const a1 = await ask(c, user('It was a dark'));
        const b1 = await ask(c, user('Call me Ishmael.'));
        const a2 = await ask(c, [...user('It was a dark'), { role: 'assistant', content: a1.choices[0].message.content }, ...user('Go on.')]);
        const b2 = await ask(c, [...user('Call me Ishmael.'), { role: 'assistant', content: b1.choices[0].message.content }, ...user('Go on.')]);
        return { a1, a2, b1, b2 };
      };
      const kept = await go(both);
      const one = await go(new OpenAI({ baseURL: `${single.url}/v1`, apiKey: 'unused', maxRetries: 0 }));
      // two sessions: the second turn of each conversation feeds only what is new
      assert.ok(kept.a2.usage!.prompt_tokens_details!.cached_tokens! >= kept.a1.usage!.prompt_tokens, JSON.stringify(kept.a2.usage));
      assert.ok(kept.b2.usage!.prompt_tokens_details!.cached_tokens! >= kept.b1.usage!.prompt_tokens, JSON.stringify(kept.b2.usage));
      // one session: the other conversation took it, so everything is fed again
      assert.equal(one.a2.usage!.prompt_tokens_details!.cached_tokens, 0);
      assert.equal(one.b2.usage!.prompt_tokens_details!.cached_tokens, 0);
      for (const k of ['a1', 'a2', 'b1', 'b2'] as const) assert.equal(kept[k].choices[0].message.content, one[k].choices[0].message.content, k);
      const h: any = await (await fetch(`${two.url}/health`)).json();
      assert.equal(h.sessions.max, 2);
      assert.equal(h.sessions.kept, 2);
      assert.ok(h.sessions.tokens.every((t: number) => t > kept.a1.usage!.prompt_tokens), JSON.stringify(h.sessions));
    } finally {
      await two.close();
      await single.close();
    }
  });

  it('calls a required tool with arguments that validate against its schema, and takes the result back', async () => {
    const r = await client.chat.completions.create({ model: 'demo', messages: user('What is the weather in Nantucket?'), tools: [WEATHER, CLOCK], tool_choice: 'required', max_tokens: 600, temperature: 0.7, seed: 3 });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    const calls = choice.message.tool_calls ?? [];
    assert.ok(calls.length >= 1);
    const validate = { get_weather: new Ajv().compile(WEATHER.function.parameters), get_time: new Ajv().compile(CLOCK.function.parameters) };
    for (const call of calls) {
      assert.equal(call.type, 'function');
      if (call.type !== 'function') continue;
      const v = validate[call.function.name as keyof typeof validate];
      assert.ok(v, `unknown tool ${call.function.name}`);
      assert.ok(v(JSON.parse(call.function.arguments)), JSON.stringify(v.errors));
    }
    // a named tool is the one called
    const named = await client.chat.completions.create({ model: 'demo', messages: user('Time?'), tools: [WEATHER, CLOCK], tool_choice: { type: 'function', function: { name: 'get_time' } }, max_tokens: 400 });
    const nc = named.choices[0].message.tool_calls ?? [];
    assert.equal(nc.length, 1);
    assert.equal(nc[0].type === 'function' && nc[0].function.name, 'get_time');
    // the tool's result goes back and the model answers in text
    const first = calls[0];
    const back = await client.chat.completions.create({
      model: 'demo',
      messages: [...user('What is the weather in Nantucket?'), choice.message, { role: 'tool', tool_call_id: first.id, content: '{"temp": 12}' }],
      tools: [WEATHER, CLOCK],
      tool_choice: 'none',
      max_tokens: 16,
    });
    assert.ok(['stop', 'length'].includes(back.choices[0].finish_reason));
    assert.equal(back.choices[0].message.tool_calls, undefined);
  });

  it('streams tool calls as OpenAI deltas that add up to the same call', async () => {
    const req = { model: 'demo', messages: user('Weather please'), tools: [WEATHER], tool_choice: 'required' as const, max_tokens: 400, temperature: 0 };
    const whole = await client.chat.completions.create(req);
    const stream = await client.chat.completions.create({ ...req, stream: true });
    const calls: { id?: string; name?: string; args: string }[] = [];
    let finish: string | null = null;
    for await (const ch of stream)
      for (const c of ch.choices) {
        for (const d of c.delta.tool_calls ?? []) {
          calls[d.index] ??= { args: '' };
          if (d.id) calls[d.index].id = d.id;
          if (d.function?.name) calls[d.index].name = d.function.name;
          calls[d.index].args += d.function?.arguments ?? '';
        }
        finish = c.finish_reason ?? finish;
      }
    assert.equal(finish, 'tool_calls');
    // without include_usage every chunk has a choice; the engine's figures ride on the finishing one
    const rawStream = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...req, stream: true }) });
    const chunks = [...(await rawStream.text()).matchAll(/^data: (\{.*\})$/gm)].map((m) => JSON.parse(m[1]));
    assert.ok(chunks.every((ch) => ch.choices.length === 1));
    assert.equal(typeof chunks.at(-1).waste.tokens, 'number');
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'tool_calls');
    const w = whole.choices[0].message.tool_calls!;
    assert.deepEqual(
      calls.map((c) => [c.id, c.name, c.args]),
      w.map((c) => (c.type === 'function' ? [c.id, c.function.name, c.function.arguments] : [])),
    );
  });

  it('enforces response_format json_schema and json_object while sampling, streaming or not', async () => {
    const validate = new Ajv().compile(PERSON);
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({
        model: 'demo',
        messages: user('Describe the captain as JSON.'),
        response_format: { type: 'json_schema', json_schema: { name: 'person', schema: PERSON, strict: true } },
        max_tokens: 200,
        temperature: 1,
        seed,
      });
      assert.equal(r.choices[0].finish_reason, 'stop');
      const doc = JSON.parse(r.choices[0].message.content ?? '');
      assert.ok(validate(doc), JSON.stringify(validate.errors));
    }
    // json_object: any object. The demo model rambles inside strings, so its replies run to
    // max_tokens; what it wrote must still be a prefix the grammar accepts, streamed or not
    const stream = await client.chat.completions.create({ model: 'demo', messages: user('JSON please'), response_format: { type: 'json_object' }, max_tokens: 60, temperature: 0.9, seed: 5, stream: true });
    let text = '';
    let finish: string | null = null;
    for await (const ch of stream) {
      text += ch.choices[0]?.delta.content ?? '';
      finish = ch.choices[0]?.finish_reason ?? finish;
    }
    const check = grammarConstraint(BYTES, json({ type: 'object' }), [256]);
    for (const b of new TextEncoder().encode(text)) check.accept(b);
    if (finish === 'stop') assert.equal(typeof JSON.parse(text), 'object');
    else assert.equal(finish, 'length');
    assert.ok(text.startsWith('{'));
  });

  it('returns reasoning apart from the content when thinking is on, and none when it is off', async () => {
    const on = await raw(`${server.url}/v1/chat/completions`, { json: { messages: user('Think about whales.'), max_tokens: 12, thinking: true, temperature: 0 } });
    assert.equal(on.status, 200, JSON.stringify(on.body));
    const msg = on.body.choices[0].message;
    assert.ok(msg.reasoning_content.length > 0);
    assert.ok(!(msg.content ?? '').includes('<think>') && !(msg.content ?? '').includes('</think>'));
    const effort = await raw(`${server.url}/v1/chat/completions`, { json: { messages: user('Think about whales.'), max_tokens: 12, reasoning_effort: 'high', temperature: 0 } });
    assert.equal(effort.body.choices[0].message.reasoning_content, msg.reasoning_content);
    const off = await raw(`${server.url}/v1/chat/completions`, { json: { messages: user('Think about whales.'), max_tokens: 12, reasoning_effort: 'none', temperature: 0 } });
    assert.equal(off.body.choices[0].message.reasoning_content, undefined);
    // a reasoning budget closes the block for the model, and the answer follows
    const tok = server.host.model.tokenizer();
    for (const json of [
      { messages: user('Think about whales.'), max_tokens: 40, thinking: { type: 'enabled', budget_tokens: 6 }, temperature: 0 },
      { messages: user('Think about whales.'), max_tokens: 40, reasoning: { effort: 'high', max_tokens: 6 }, temperature: 0 },
    ]) {
      const b = await raw(`${server.url}/v1/chat/completions`, { json });
      assert.equal(b.status, 200, JSON.stringify(b.body));
      const m = b.body.choices[0].message;
      assert.ok(m.reasoning_content.length > 0 && tok.encode(m.reasoning_content).length <= 8, m.reasoning_content);
      assert.ok((m.content ?? '').length > 0, 'an answer after the reasoning');
    }
    const a = await raw(`${server.url}/v1/messages`, { json: { max_tokens: 40, messages: user('Think about whales.'), thinking: { type: 'enabled', budget_tokens: 6 }, temperature: 0 } });
    assert.deepEqual(a.body.content.map((c: { type: string }) => c.type).slice(0, 2), ['thinking', 'text']);
  });

  it('refuses bad requests with OpenAI-shaped 400s and keeps serving', async () => {
    const url = `${server.url}/v1/chat/completions`;
    const cases: [string, RequestInit & { json?: unknown }, RegExp][] = [
      ['malformed JSON', { body: '{"messages": [' }, /not valid JSON/],
      ['empty body', { body: '' }, /empty/],
      ['no messages', { json: { messages: [] } }, /messages/],
      ['messages not a list', { json: { messages: 'hi' } }, /messages/],
      ['wrong type', { json: { messages: user('x'), temperature: 'hot' } }, /temperature/],
      ['out of range', { json: { messages: user('x'), top_p: 3 } }, /top_p/],
      ['n > 16', { json: { messages: user('x'), n: 17 } }, /n must be at most 16/],
      ['top_logprobs without logprobs', { json: { messages: user('x'), top_logprobs: 2 } }, /logprobs must be true/],
      ['top_logprobs out of range', { json: { messages: user('x'), logprobs: true, top_logprobs: 21 } }, /top_logprobs/],
      ['logit_bias key not a token id', { json: { messages: user('x'), logit_bias: { abc: 1 } } }, /logit_bias.*token ids/],
      ['logit_bias key with a leading zero', { json: { messages: user('x'), logit_bias: { '01': 1 } } }, /logit_bias.*token ids/],
      ['logit_bias value out of range', { json: { messages: user('x'), logit_bias: { 5: 101 } } }, /logit_bias/],
      ['logit_bias beyond the vocabulary', { json: { messages: user('x'), logit_bias: { 999999: 1 } } }, /token 999999 is beyond this model's vocabulary of \d+/],
      ['bad role', { json: { messages: [{ role: 'wizard', content: 'x' }] } }, /messages/],
      ['image part (the demo model has no vision tower)', { json: { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }] }] } }, /^messages\[0\]\.content\[0\]: this model takes no images/],
      ['an input_audio part', { json: { messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }] }] } }, /only text and image_url parts are supported \(got "input_audio"\)/],
      ['unenforceable schema', { json: { messages: user('x'), response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'string', pattern: '^a' } } } } }, /pattern/],
      ['unknown tool choice', { json: { messages: user('x'), tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'nope' } } } }, /nope/],
      ['contradictory reasoning', { json: { messages: user('x'), thinking: false, reasoning_effort: 'high' } }, /thinking is off/],
      ['a lower bound no reply reaches', { json: { messages: user('x'), response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'array', minItems: 1e15 } } } } }, /minItems.*at most/],
      ['a schema nested too deep', { json: { messages: user('x'), tools: [{ type: 'function', function: { name: 'f', parameters: JSON.parse('{"type":"object","properties":{"a":'.repeat(70) + '{}' + '}}'.repeat(70)) } }] } }, /deeper than/],
      ['a body nested too deep', { body: `{"messages":[{"role":"user","content":"x"}],"metadata":${'['.repeat(5000)}${']'.repeat(5000)}}` }, /deeper than 128/],
      ['a template variable the server sets', { json: { messages: user('x'), chat_template_kwargs: { tools: ['<|im_end|>'] } } }, /may not set "tools"/],
    ];
    const completions = `${server.url}/v1/completions`;
    const legacy: [string, unknown, RegExp][] = [
      ['suffix', { prompt: 'x', suffix: 'y' }, /suffix: insertion is not supported/],
      ['max_tokens 0 without echo', { prompt: 'x', max_tokens: 0 }, /goes with echo/],
      ['no prompt', { prompt: [] }, /prompt/],
      ['two prompts', { prompt: ['a', 'b'] }, /one prompt per request/],
      ['ids and text mixed', { prompt: [1, 'b'] }, /not both mixed/],
      ['a token beyond the vocabulary', { prompt: [1, 99999999] }, /token 99999999 is beyond this model's vocabulary/],
      ['logprobs out of range', { prompt: 'x', logprobs: 21 }, /logprobs/],
      ['an empty text prompt', { prompt: '' }, /nothing to complete/],
    ];
    for (const [what, body, re] of legacy) {
      const r = await raw(completions, { json: body });
      assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.error.message, re, what);
    }
    for (const [what, init, re] of cases) {
      const r = await raw(url, init);
      assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.type, 'invalid_request_error', what);
      assert.match(r.body.error.message, re, what);
    }
    // unknown fields are ignored
    const ok = await raw(url, { json: { messages: user('x'), max_tokens: 2, user: 'someone', logit_bias: {}, store: false } });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    const big = await raw(url, { json: { messages: user('x'.repeat(9 << 20)) } });
    assert.equal(big.status, 413);
    assert.match(big.body.error.message, /larger than/);
    const nf = await raw(`${server.url}/v1/nothing`);
    assert.equal(nf.status, 404);
    assert.equal(nf.body.error.code, 'not_found');
    // any model name is served by the one model (README): /v1/models/{name} answers for it
    const nm = await fetch(`${server.url}/v1/models/other`);
    assert.equal(nm.status, 200);
    assert.equal(((await nm.json()) as { root: string }).root, 'demo');
    // a page of another origin, or a name that is not this machine (DNS rebinding), is refused
    const cross = await raw(url, { json: { messages: user('x'), max_tokens: 2 }, headers: { origin: 'https://evil.example' } });
    assert.equal(cross.status, 403);
    assert.match(cross.body.error.message, /another origin/);
    const same = await raw(url, { json: { messages: user('x'), max_tokens: 2 }, headers: { origin: server.url } });
    assert.equal(same.status, 200);
    const rebound = await new Promise<number>((resolve, reject) => {
      const u = new URL(url);
      const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { host: 'attacker.example', 'content-type': 'application/json' } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end(JSON.stringify({ messages: user('x'), max_tokens: 2 }));
    });
    assert.equal(rebound, 403);
  });

  it('turns an engine fault into a 500 with its message, then serves the next request', async () => {
    const host = server.host;
    const turn = host.turn;
    host.turn = async function* () {
      throw new WasteError('E_IO', 'expert record 7 could not be read (simulated)');
    } as typeof host.turn;
    try {
      const r = await raw(`${server.url}/v1/chat/completions`, { json: { messages: user('x'), max_tokens: 2 } });
      assert.equal(r.status, 500);
      assert.equal(r.body.error.type, 'engine_error');
      assert.match(r.body.error.message, /simulated/);
    } finally {
      host.turn = turn;
    }
    const again = await client.chat.completions.create({ model: 'demo', messages: user('x'), max_tokens: 2 });
    assert.ok(again.choices.length === 1);
  });

  it('stops generating within a token or so when the client goes away', async () => {
    // the demo may end a reply early; banning its end tokens keeps both replies running until the abort
    const model = server.host.model;
    const ends = [...model.config.eosTokenIds, model.tokenizer().specialId(model.chatFormat().assistantEnd)].filter((t): t is number => t !== undefined);
    const logit_bias = Object.fromEntries(ends.map((t) => [String(t), -100]));
    const ac = new AbortController();
    const r = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: user('Tell me a long story.'), max_tokens: 3000, stream: true, logit_bias }), signal: ac.signal });
    const reader = r.body!.getReader();
    let got = 0;
    let buf = '';
    while (got < 5) {
      const { value } = await reader.read();
      buf += new TextDecoder().decode(value);
      got = (buf.match(/"content"/g) ?? []).length - 1;
    }
    const before = lines.length;
    ac.abort();
    // the request's log line appears when its turn has ended
    for (let i = 0; i < 400 && !lines.slice(before).some((l) => l.includes('aborted')); i++) await new Promise((res) => setTimeout(res, 25));
    const line = lines.slice(before).find((l) => l.includes('aborted'));
    assert.ok(line, `no aborted turn in the log: ${lines.slice(before).join('\n')}`);
    const tokens = Number(/\+ (\d+) reply tokens/.exec(line)![1]);
    assert.ok(tokens < got + 20, `generated ${tokens} tokens after the client had read ${got}`);
    const h: any = await (await fetch(`${server.url}/health`)).json();
    assert.equal(h.queue.running, false);
    // a request waiting for a whole JSON reply stops too
    const ac2 = new AbortController();
    const mark = lines.length;
    const pending = fetch(`${server.url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ messages: user('Tell me a long story.'), max_tokens: 3000, logit_bias }), signal: ac2.signal }).catch(() => 'aborted');
    await new Promise((res) => setTimeout(res, 300));
    ac2.abort();
    assert.equal(await pending, 'aborted');
    for (let i = 0; i < 400 && !lines.slice(mark).some((l) => l.includes('aborted')); i++) await new Promise((res) => setTimeout(res, 25));
    const line2 = lines.slice(mark).find((l) => l.includes('aborted'));
    assert.ok(line2, `no aborted turn in the log: ${lines.slice(mark).join('\n')}`);
    assert.ok(Number(/\+ (\d+) reply tokens/.exec(line2)![1]) < 3000);
  });

  it('serves Anthropic /v1/messages, streaming too, with tool use', async () => {
    const url = `${server.url}/v1/messages`;
    const r = await raw(url, { json: { model: 'demo', max_tokens: 16, system: 'You are terse.', messages: user('Hello'), temperature: 0 } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.type, 'message');
    assert.ok(['end_turn', 'max_tokens'].includes(r.body.stop_reason));
    assert.equal(r.body.content[0].type, 'text');
    const tool = await raw(url, { json: { max_tokens: 400, messages: user('Weather?'), tools: [{ name: 'get_weather', input_schema: WEATHER.function.parameters }], tool_choice: { type: 'any' } } });
    assert.equal(tool.body.stop_reason, 'tool_use');
    const use = tool.body.content.find((b: { type: string }) => b.type === 'tool_use');
    assert.equal(use.name, 'get_weather');
    assert.ok(new Ajv().compile(WEATHER.function.parameters)(use.input));
    // the result goes back as a tool_result block
    const back = await raw(url, { json: { max_tokens: 8, messages: [...user('Weather?'), { role: 'assistant', content: tool.body.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny' }] }], tools: [{ name: 'get_weather', input_schema: WEATHER.function.parameters }] } });
    assert.equal(back.status, 200, JSON.stringify(back.body));
    const s = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ max_tokens: 12, messages: user('Hello'), stream: true, temperature: 0 }) });
    const events = [...(await s.text()).matchAll(/^event: (\S+)$/gm)].map((m) => m[1]);
    assert.equal(events[0], 'message_start');
    assert.equal(events.at(-1), 'message_stop');
    assert.equal(events.at(-2), 'message_delta');
    assert.ok(events.includes('content_block_start') && events.includes('content_block_delta') && events.includes('content_block_stop'));
    const bad = await raw(url, { json: { messages: user('x') } });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.type, 'error');
    assert.equal(bad.body.error.type, 'invalid_request_error');
    assert.match(bad.body.error.message, /max_tokens/);
    // a stop sequence that matches is named, with stop_reason stop_sequence
    const free = await raw(url, { json: { max_tokens: 30, messages: user('Hello'), temperature: 0 } });
    const text: string = free.body.content[0].text;
    const word = text.trim().split(/\s+/)[1];
    assert.ok(word, text);
    const stopped = await raw(url, { json: { max_tokens: 30, messages: user('Hello'), temperature: 0, stop_sequences: [word] } });
    assert.equal(stopped.body.stop_reason, 'stop_sequence');
    assert.equal(stopped.body.stop_sequence, word);
    assert.equal(stopped.body.content[0].text, text.slice(0, text.indexOf(word)));
    const count = await raw(`${url}/count_tokens`, { json: { messages: user('Hello') } });
    assert.ok(count.body.input_tokens > 1);
    // a continued conversation: what the session already holds counts as cache reads
    const first = await raw(url, { json: { max_tokens: 6, messages: user('Call me Ishmael.'), temperature: 0 } });
    const more = [...user('Call me Ishmael.'), { role: 'assistant', content: first.body.content }, ...user('More.')];
    const whole = (await raw(`${url}/count_tokens`, { json: { messages: more } })).body.input_tokens;
    const streamed = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ max_tokens: 4, messages: more, stream: true, temperature: 0 }) });
    const start = JSON.parse(/^event: message_start\ndata: (.*)$/m.exec(await streamed.text())![1]).message.usage;
    assert.ok(start.cache_read_input_tokens >= first.body.usage.input_tokens, JSON.stringify(start));
    assert.equal(start.input_tokens + start.cache_read_input_tokens, whole);
    assert.equal(first.body.usage.cache_read_input_tokens + first.body.usage.input_tokens, (await raw(`${url}/count_tokens`, { json: { messages: user('Call me Ishmael.') } })).body.input_tokens);
  });

  it('a conversation or tool declaration too long for the context is a 400 on every route, never a stack overflow', async () => {
    // ~130k tokens: their ids once overflowed the stack as push(...ids) arguments
    const long = user('word '.repeat(130_000));
    const chat = await raw(`${server.url}/v1/chat/completions`, { json: { messages: long } });
    assert.equal(chat.status, 400, JSON.stringify(chat.body));
    assert.equal(chat.body.error.code, 'context_length_exceeded');
    const tokens = Number(/the conversation is (\d+) tokens/.exec(chat.body.error.message)![1]);
    assert.ok(tokens > 130_000, chat.body.error.message);
    const stream = await raw(`${server.url}/v1/chat/completions`, { json: { messages: long, stream: true } });
    assert.equal(stream.status, 400);
    assert.equal(stream.body.error.code, 'context_length_exceeded');
    const messages = await raw(`${server.url}/v1/messages`, { json: { max_tokens: 4, messages: long } });
    assert.equal(messages.status, 400, JSON.stringify(messages.body));
    assert.equal(messages.body.error.type, 'invalid_request_error');
    assert.match(messages.body.error.message, new RegExp(`the conversation is ${tokens} tokens and this model's context is \\d+`));
    // counting answers as the endpoint counted for would, and names the count for a client that trims
    const count = await raw(`${server.url}/v1/messages/count_tokens`, { json: { messages: long } });
    assert.equal(count.status, 400, JSON.stringify(count.body));
    assert.equal(count.body.error.type, 'invalid_request_error');
    assert.match(count.body.error.message, new RegExp(`the conversation is ${tokens} tokens and this model's context is \\d+`));
    // a large tool declaration, offered or required
    const fn = (parameters: unknown) => [{ type: 'function', function: { name: 'pick', parameters } }];
    const values = Array.from({ length: 50_000 }, (_, i) => `v${i}`);
    const names = Array.from({ length: 5_000 }, (_, i) => `p${i}`);
    const wide = { type: 'object', properties: Object.fromEntries(names.map((n) => [n, { type: 'string' }])), required: names };
    for (const [what, body] of [
      ['a 50,000-value enum', { messages: user('x'), tools: fn({ type: 'object', properties: { v: { enum: values } } }) }],
      ['5,000 required properties, the call required', { messages: user('x'), tools: fn(wide), tool_choice: 'required' }],
    ] as const) {
      const r = await raw(`${server.url}/v1/chat/completions`, { json: body });
      assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.body).slice(0, 300)}`);
      assert.equal(r.body.error.code, 'context_length_exceeded', what);
    }
    const anthropicTool = await raw(`${server.url}/v1/messages/count_tokens`, { json: { messages: user('x'), tools: [{ name: 'pick', input_schema: { type: 'object', properties: { v: { enum: values } } } }] } });
    assert.equal(anthropicTool.status, 400, JSON.stringify(anthropicTool.body).slice(0, 300));
    assert.match(anthropicTool.body.error.message, /the conversation is \d{5,} tokens/);
  });

  it('bounds every sampling number at the edge: what the sampler would refuse is a 400 before any stream starts', async () => {
    const chat = `${server.url}/v1/chat/completions`;
    const legacy = `${server.url}/v1/completions`;
    const messages = `${server.url}/v1/messages`;
    const base = { messages: user('x'), max_tokens: 1, stream: true };
    const lbase = { prompt: 'It was', max_tokens: 1, stream: true };
    const abase = { messages: user('x'), max_tokens: 1, stream: true };
    // [endpoint, body, the field named]: each just past a bound
    const beyond: [string, Record<string, unknown>, string][] = [
      [chat, { ...base, top_k: 2 ** 31 + 1 }, 'top_k'],
      [chat, { ...base, seed: -1 }, 'seed'],
      [chat, { ...base, seed: 2 ** 32 }, 'seed'],
      [chat, { ...base, temperature: 2.01 }, 'temperature'],
      [chat, { ...base, top_p: 0 }, 'top_p'],
      [chat, { ...base, min_p: 1.01 }, 'min_p'],
      [chat, { ...base, presence_penalty: -2.01 }, 'presence_penalty'],
      [chat, { ...base, frequency_penalty: 2.01 }, 'frequency_penalty'],
      [chat, { ...base, repetition_penalty: 0.009 }, 'repetition_penalty'],
      [chat, { ...base, logit_bias: { 5: -100.5 } }, 'logit_bias'],
      [chat, { ...base, n: 17 }, 'n'],
      [chat, { ...base, logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
      [chat, { ...base, max_tokens: 0 }, 'max_tokens'],
      [chat, { ...base, max_completion_tokens: 2 ** 53 }, 'max_completion_tokens'],
      [chat, { ...base, thinking_budget_tokens: -1 }, 'thinking_budget_tokens'],
      [legacy, { ...lbase, top_k: 2 ** 31 + 1 }, 'top_k'],
      [legacy, { ...lbase, seed: 2 ** 32 }, 'seed'],
      [legacy, { ...lbase, logprobs: 21 }, 'logprobs'],
      [messages, { ...abase, top_k: 2 ** 31 + 1 }, 'top_k'],
      [messages, { ...abase, temperature: 1.01 }, 'temperature'],
      [messages, { ...abase, thinking: { type: 'enabled', budget_tokens: 0 } }, 'thinking'],
    ];
    for (const [url, body, field] of beyond) {
      const r = await streamed(url, body);
      const what = `${new URL(url).pathname} ${JSON.stringify(body)}`;
      assert.equal(r.status, 400, `${what}: ${r.text.slice(0, 300)}`);
      assert.match(r.error.error?.message ?? r.error.message, new RegExp(field), what);
    }
    // and every bound itself is served to the end, without an error event
    const at: [string, Record<string, unknown>][] = [
      [chat, { ...base, top_k: 2 ** 31, temperature: 2, top_p: 1, min_p: 1, seed: 2 ** 32 - 1 }],
      [chat, { ...base, seed: 0, temperature: 1, presence_penalty: -2, frequency_penalty: 2, repetition_penalty: 0.01, logit_bias: { 5: -100, 6: 100 } }],
      [chat, { ...base, presence_penalty: 2, frequency_penalty: -2, repetition_penalty: 100, logprobs: true, top_logprobs: 20, n: 16 }],
      [chat, { ...base, max_tokens: 2 ** 53 - 1, thinking: true, thinking_budget_tokens: 2 ** 53 - 1 }],
      [legacy, { ...lbase, top_k: 2 ** 31, seed: 2 ** 32 - 1, temperature: 2, logprobs: 20 }],
      [messages, { ...abase, top_k: 2 ** 31, temperature: 1, top_p: 1 }],
    ];
    for (const [url, body] of at) {
      const r = await streamed(url, body);
      const what = `${new URL(url).pathname} ${JSON.stringify(body)}`;
      assert.equal(r.status, 200, `${what}: ${r.text.slice(0, 300)}`);
      assert.equal(r.error, undefined, `${what}: ${r.text.slice(-300)}`);
    }
  });

  it('refuses a tool schema no document satisfies whatever tool_choice says, and a response format too', async () => {
    const url = `${server.url}/v1/chat/completions`;
    const NEVER = { type: 'function', function: { name: 'never', parameters: { type: 'object', properties: { a: { type: 'string', minLength: 3, maxLength: 1 } }, required: ['a'] } } };
    // none: the tools are not offered, but a request's declarations are checked all the same
    for (const tool_choice of [undefined, 'auto', 'none', 'required', { type: 'function', function: { name: 'never' } }, { type: 'function', function: { name: 'get_weather' } }]) {
      const r = await raw(url, { json: { messages: user('x'), max_tokens: 2, tools: [WEATHER, NEVER], ...(tool_choice ? { tool_choice } : {}) } });
      assert.equal(r.status, 400, `tool_choice ${JSON.stringify(tool_choice)}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.param, 'tools[1].function.parameters');
      assert.match(r.body.error.message, /no JSON document satisfies/);
    }
    for (const type of ['auto', 'none', 'any']) {
      const r = await raw(`${server.url}/v1/messages`, { json: { messages: user('x'), max_tokens: 2, tools: [{ name: 'never', input_schema: NEVER.function.parameters }], tool_choice: { type } } });
      assert.equal(r.status, 400, `${type}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.error.message, /^tools\[0\]\.input_schema: no JSON document satisfies/);
    }
    // a reply that reasons first reaches its schema only after the reasoning: checked now all the same
    const answer = await raw(url, { json: { messages: user('x'), max_tokens: 2, thinking: true, response_format: { type: 'json_schema', json_schema: { name: 'n', schema: NEVER.function.parameters } } } });
    assert.equal(answer.status, 400, JSON.stringify(answer.body));
    assert.match(answer.body.error.message, /response_format.*no JSON document satisfies/);
    // the same tools without the impossible one are served
    const ok = await raw(url, { json: { messages: user('x'), max_tokens: 2, tools: [WEATHER], tool_choice: 'none' } });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
  });

  it('a model fault is a 500 engine_error whatever its message says, streamed or not; the next request is served', async () => {
    const host = server.host;
    const tok = host.model.tokenizer() as unknown as { tokenBytes(id: number): Uint8Array };
    const prompt = host.model.chatFormat().encode(host.model.tokenizer(), user('x'));
    // an ordinary token the prompt does not hold, and that this "tokenizer" cannot print (as one
    // too small for its model cannot): the reply is made to begin with it
    const id = Array.from({ length: 1000 }, (_, i) => 3000 + i).find((t) => !prompt.includes(t))!;
    const own = tok.tokenBytes;
    tok.tokenBytes = function (this: unknown, t: number) {
      if (t === id) throw new WasteError('E_ARG', `token id ${t} is not in the vocabulary of tokenizer.model (0..2999)`);
      return own.call(this, t);
    };
    const body = { messages: user('x'), max_tokens: 3, temperature: 0, logit_bias: { [id]: 100 } };
    try {
      const r = await raw(`${server.url}/v1/chat/completions`, { json: body });
      assert.equal(r.status, 500, JSON.stringify(r.body));
      assert.equal(r.body.error.type, 'engine_error');
      assert.match(r.body.error.message, new RegExp(`token id ${id} is not in the vocabulary`));
      const s = await streamed(`${server.url}/v1/chat/completions`, { ...body, stream: true });
      assert.equal(s.status, 200);
      assert.equal(s.error?.type, 'engine_error', s.text);
    } finally {
      tok.tokenBytes = own;
    }
    // Anthropic's shape: api_error, not invalid_request_error
    const turn = host.turn;
    host.turn = async function* () {
      throw new WasteError('E_ARG', 'token id 14203 is not in the vocabulary (simulated)');
    } as typeof host.turn;
    try {
      const m = await raw(`${server.url}/v1/messages`, { json: { max_tokens: 2, messages: user('x') } });
      assert.equal(m.status, 500, JSON.stringify(m.body));
      assert.equal(m.body.error.type, 'api_error');
    } finally {
      host.turn = turn;
    }
    const again = await client.chat.completions.create({ model: 'demo', messages: user('x'), max_tokens: 2, logit_bias: { [id]: 100 } });
    assert.ok(again.choices[0].message.content);
  });

  it('answers only to this machine\'s names on every route, /health and the page included (DNS rebinding)', async () => {
    const port = new URL(server.url).port;
    for (const route of ['/health', '/', '/app.js', '/style.css', '/favicon.ico', '/v1/models', '/nothing']) {
      const r = await getAs(`${server.url}${route}`, 'attacker.example');
      assert.equal(r.status, 403, `${route}: ${r.body.slice(0, 200)}`);
      assert.equal(JSON.parse(r.body).error.code, 'bad_host', route);
      assert.doesNotMatch(r.body, /demo|budget/, route);
    }
    for (const name of [`127.0.0.1:${port}`, `localhost:${port}`, 'localhost']) {
      const r = await getAs(`${server.url}/health`, name);
      assert.equal(r.status, 200, `${name}: ${r.body}`);
      assert.equal(JSON.parse(r.body).model, 'demo');
    }
  });

  it('queues concurrent requests fairly and answers each as if alone', async () => {
    const req = (content: string) => client.chat.completions.create({ model: 'demo', messages: user(content), max_tokens: 10, temperature: 0 });
    const alone = [(await req('one')).choices[0].message.content, (await req('two')).choices[0].message.content];
    const together = await Promise.all([req('one'), req('two')]);
    assert.deepEqual(together.map((r) => r.choices[0].message.content), alone);
  });
});

describe('waste serve: limits and keys', () => {
  it('answers 429 with Retry-After when the queue is full', async () => {
    const server = await startServer({ model: DEMO, port: 0, queueLimit: 0, parallel: 1, log: false });
    try {
      // hold the engine as a long turn would
      const release = await server.host.queue.acquire('someone else');
      const r = await raw(`${server.url}/v1/chat/completions`, { json: { messages: user('x'), max_tokens: 2 } });
      assert.equal(r.status, 429);
      assert.ok(Number(r.headers.get('retry-after')) >= 1);
      assert.equal(r.body.error.type, 'rate_limit_error');
      release();
      assert.equal((await raw(`${server.url}/v1/chat/completions`, { json: { messages: user('x'), max_tokens: 2 } })).status, 200);
    } finally {
      await server.close();
    }
  });

  it('requires the API key on /v1 (constant-time check) but not on /health; bounds the context', async () => {
    const server = await startServer({ model: DEMO, port: 0, apiKey: 'sesame', log: false, open: { maxContext: 64 } });
    try {
      const url = `${server.url}/v1/chat/completions`;
      const json = { messages: user('hi'), max_tokens: 2 };
      assert.equal((await raw(url, { json })).status, 401);
      const wrong = await raw(url, { json, headers: { authorization: 'Bearer open' } });
      assert.equal(wrong.status, 401);
      assert.equal(wrong.body.error.type, 'authentication_error');
      assert.equal((await raw(url, { json, headers: { authorization: 'Bearer sesame' } })).status, 200);
      assert.equal((await raw(`${server.url}/v1/messages`, { json: { max_tokens: 2, messages: user('hi') }, headers: { 'x-api-key': 'sesame' } })).status, 200);
      assert.equal((await fetch(`${server.url}/health`)).status, 200);
      const long = await raw(url, { json: { messages: user('word '.repeat(200)) }, headers: { authorization: 'Bearer sesame' } });
      assert.equal(long.status, 400);
      assert.equal(long.body.error.code, 'context_length_exceeded');
      // streamed or not, and on either API, the refusal comes before any stream starts
      const longStream = await raw(url, { json: { messages: user('word '.repeat(200)), stream: true }, headers: { authorization: 'Bearer sesame' } });
      assert.equal(longStream.status, 400);
      assert.equal(longStream.body.error.code, 'context_length_exceeded');
      const longMessages = await raw(`${server.url}/v1/messages`, { json: { max_tokens: 5, messages: user('word '.repeat(200)), stream: true }, headers: { 'x-api-key': 'sesame' } });
      assert.equal(longMessages.status, 400);
      assert.equal(longMessages.body.type, 'error');
      // max_tokens beyond what the context leaves is clipped, not refused
      const clipped = await new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sesame', maxRetries: 0 }).chat.completions.create({ model: 'demo', messages: user('hi'), max_tokens: 100000 });
      assert.ok(clipped.usage!.total_tokens <= 64);
    } finally {
      await server.close();
    }
  });

  it('`waste serve` with no model serves the demo model and shuts down on SIGTERM', async () => {
    const child = spawn(process.execPath, [BIN, 'serve', '--port', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.on('data', (d) => {
        err += d;
        const m = /listening on (http:\/\/\S+)/.exec(err);
        if (m) resolve(m[1]);
      });
      child.on('exit', () => reject(new Error(`serve exited: ${err}`)));
    });
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
    const h: any = await (await fetch(`${url}/health`)).json();
    assert.equal(h.model, 'demo');
    const page = await fetch(`${url}/`);
    assert.equal(page.status, 200);
    assert.match(await page.text(), /<html/i);
    const code = await new Promise<number | null>((resolve) => {
      child.on('exit', (c) => resolve(c));
      child.kill('SIGTERM');
    });
    assert.equal(code, 0, err);
  });
});

describe('several choices as one result', () => {
  it('sums the replies, counts the prompt once, and is aborted when any choice was', async () => {
    const { combined } = await import('../src/server/run-turn.js');
    const r = (finish: 'stop' | 'length' | 'aborted', tokens: number) => ({ reasoning: '', content: '', toolCalls: [], finish, promptTokens: 10, cachedTokens: 4, completionTokens: tokens, prefillSeconds: 1, generateSeconds: 2, hits: 3, misses: 1, bytesRead: 100 });
    const all = combined([r('stop', 5), r('length', 7)]);
    assert.deepEqual([all.promptTokens, all.cachedTokens, all.completionTokens, all.generateSeconds, all.hits, all.bytesRead, all.finish], [10, 4, 12, 4, 6, 200, 'length']);
    assert.equal(combined([r('stop', 5), r('aborted', 2)]).finish, 'aborted');
    assert.equal(combined([r('aborted', 5), r('stop', 2)]).finish, 'aborted');
  });
});

describe('fair queue', () => {
  it('serves waiting clients round-robin, drops a waiter whose client left, and refuses beyond its limit', async () => {
    const q = new FairQueue(4);
    const order: string[] = [];
    const first = await q.acquire('a');
    const ac = new AbortController();
    const waits = [q.acquire('a').then((r) => (order.push('a2'), r)), q.acquire('a').then((r) => (order.push('a3'), r)), q.acquire('b').then((r) => (order.push('b1'), r))];
    const gone = q.acquire('c', ac.signal);
    ac.abort();
    await assert.rejects(gone);
    const d = q.acquire('d').then((r) => (order.push('d1'), r));
    assert.equal(q.queued, 4);
    await assert.rejects(q.acquire('e'), (e) => e instanceof QueueFull && e.retryAfter >= 1);
    first();
    // each release starts the next waiter: a, then b, then d, then a again
    (await waits[0])();
    (await waits[2])();
    (await d)();
    (await waits[1])();
    assert.deepEqual(order, ['a2', 'b1', 'd1', 'a3']);
    assert.equal(q.running, false);
  });
});
