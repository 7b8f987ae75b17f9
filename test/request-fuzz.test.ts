/**
 * Seeded fuzzing of request bodies against `waste serve` as a user runs it (a child process, so a
 * crash is seen as one): valid bodies of every route, mutated — fields removed or replaced by
 * hostile values, random JSON Schemas where schemas go, text damaged byte by byte — sent a few at
 * once. Every case is classified: a clean 4xx (a JSON error with a one-line message), a 2xx answer
 * (JSON, or a stream that ends as it should), a 5xx, no answer (a reset), a crash, a hang, runaway
 * memory; any of the last five fails the test, with the cases that gave it. The seed is printed
 * (WASTE_TEST_SEED=N replays a run) and the run is bounded: a few hundred small cases (prompts
 * short enough that a prefill is quick; the bounds' own tests send the large bodies).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Rng } from '../src/util/prng.js';
import { BIN, ROOT, testSeed } from './helpers.js';

const DEMO = path.join(ROOT, 'models/demo');
const CASES = 320;
const AT_ONCE = 4;
/** Not a speed requirement: a case with no answer after this long is a hang (and the whole run is guarded alike). */
const HANG_MS = 60_000;
/** More than this above the server's resident size after its first request is runaway memory. */
const MEMORY_BOUND = 1536 << 20;

type Outcome = 'clean 4xx' | '2xx' | '5xx' | 'no answer' | 'crash' | 'hang' | 'runaway memory';
const FAILURES: Outcome[] = ['5xx', 'no answer', 'crash', 'hang', 'runaway memory'];

const PERSON = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer' }, role: { enum: ['captain', 'mate'] } }, required: ['name', 'age', 'role'], additionalProperties: false };
const WEATHER = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 16 } }, required: ['city'] } } };

/** Valid bodies of each route, the fuzzer's starting points. */
const BASES: [string, () => Record<string, unknown>][] = [
  ['/v1/chat/completions', () => ({ model: 'demo', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'It was a dark' }], max_tokens: 3 })],
  ['/v1/chat/completions', () => ({ messages: [{ role: 'user', content: 'weather?' }], tools: [WEATHER], tool_choice: 'auto', max_tokens: 3, temperature: 0.7, seed: 3 })],
  ['/v1/chat/completions', () => ({ messages: [{ role: 'user', content: 'who?' }], response_format: { type: 'json_schema', json_schema: { name: 'p', schema: PERSON } }, max_tokens: 4 })],
  ['/v1/chat/completions', () => ({ messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }], max_tokens: 2, stream: true, stream_options: { include_usage: true }, logprobs: true, top_logprobs: 2 })],
  ['/v1/completions', () => ({ prompt: 'It was a dark', max_tokens: 3, n: 2, seed: 1 })],
  ['/v1/completions', () => ({ prompt: [1, 2, 3, 4], max_tokens: 2, echo: true, logprobs: 1 })],
  ['/v1/messages', () => ({ model: 'demo', max_tokens: 3, system: 'Be brief.', messages: [{ role: 'user', content: 'Hello' }] })],
  ['/v1/messages', () => ({ max_tokens: 3, messages: [{ role: 'user', content: [{ type: 'text', text: 'weather?' }] }], tools: [{ name: 'get_weather', input_schema: WEATHER.function.parameters }], stream: true })],
  ['/v1/messages/count_tokens', () => ({ messages: [{ role: 'user', content: 'Hello' }] })],
];

/** Values a hostile client sends where another type (or range) is expected. */
function hostileValue(r: Rng, depth = 0): unknown {
  switch (r.int(depth > 2 ? 16 : 20)) {
    case 0:
      return null;
    case 1:
      return r.int(2) === 1;
    case 2:
      return [0, -1, 1, 2 ** 31, 2 ** 32, 2 ** 53, -(2 ** 53), 1e308, -1e308, 0.5, 1e-320, 17][r.int(12)];
    case 3:
      return '';
    case 4:
      return 'x'.repeat(r.int(300));
    case 5:
      return ['\u0000', '\ud800', '\udfff', '<|im_end|>', '<|im_start|>system', '{"a":', '\u202e', '🐋'.repeat(50), 'a\r\nb', '\\u0000'][r.int(10)];
    case 6:
      return 'data:image/png;base64,' + Buffer.from(Array.from({ length: r.int(200) }, () => r.int(256))).toString('base64');
    case 7: {
      let v: unknown = r.int(3);
      for (let i = 0, n = [1, 10, 127, 140][r.int(4)]; i < n; i++) v = [v];
      return v;
    }
    case 8:
      // short, or longer than the demo model's context (a prompt between would only be a slow prefill)
      return Array.from({ length: r.int(3) ? r.int(8) : 5_000 + r.int(5_000) }, (_, i) => i % 9);
    case 9:
      return { __proto__: null, constructor: 'x', toString: 1, valueOf: [] };
    case 10:
      return randomSchema(r, 0);
    case 11:
      return { role: ['user', 'assistant', 'system', 'tool', 'developer', 'bogus'][r.int(6)], content: hostileValue(r, depth + 1) };
    case 12:
      return [{ type: ['text', 'image_url', 'image', 'tool_use', 'tool_result', 'document', 'x'][r.int(7)], text: 'a', image_url: { url: hostileValue(r, depth + 1) }, source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }];
    case 13:
      return { type: 'function', function: { name: ['f', '', 'a b', 'x'.repeat(70)][r.int(4)], parameters: randomSchema(r, 0) } };
    case 14:
      return Number.MAX_SAFE_INTEGER;
    case 15:
      return 'auto';
    default:
      return Object.fromEntries(Array.from({ length: r.int(4) }, (_, i) => [`k${i}`, hostileValue(r, depth + 1)]));
  }
}

/** A JSON Schema, supported or not, sound or not. */
function randomSchema(r: Rng, depth: number): unknown {
  if (depth > 4 || r.int(6) === 0) return [true, false, {}, { type: 'string' }, { type: 'integer' }][r.int(5)];
  const s: Record<string, unknown> = {};
  const sub = () => randomSchema(r, depth + 1);
  for (let k = 0, n = 1 + r.int(3); k < n; k++) {
    switch (r.int(16)) {
      case 0:
        s.type = [['object'], 'string', 'number', 'integer', 'boolean', 'null', 'array', ['string', 'null'], 'nope', []][r.int(10)];
        break;
      case 1:
        s.enum = Array.from({ length: r.int(12) ? r.int(6) : r.int(60_000) }, (_, i) => [i, `v${i}`, null, { a: i }, [i]][i % 5]);
        break;
      case 2:
        s.const = hostileValue(r, 3);
        break;
      case 3:
        s.properties = Object.fromEntries(Array.from({ length: r.int(5) }, (_, i) => [`p${i}`, sub()]));
        s.required = r.int(2) ? ['p0', 'p1'] : ['missing'];
        break;
      case 4:
        s.items = sub();
        break;
      case 5:
        s.prefixItems = [sub(), sub()];
        break;
      case 6:
        s.anyOf = Array.from({ length: 1 + r.int(4) }, sub);
        break;
      case 7:
        s.allOf = Array.from({ length: 1 + r.int(4) }, sub);
        break;
      case 8:
        s.oneOf = [sub(), sub()];
        break;
      case 9:
        s.$ref = ['#', '#/$defs/a', '#/$defs/missing', 'http://x', '#/properties/p0', '#/$defs/a/~1x'][r.int(6)];
        s.$defs = { a: sub() };
        break;
      case 10:
        s[['minLength', 'maxLength', 'minItems', 'maxItems'][r.int(4)]] = [0, 1, 3, 100_001, -1, 2 ** 53, 0.5][r.int(7)];
        break;
      case 11:
        s.nullable = [true, false, 'yes'][r.int(3)];
        break;
      case 12:
        s.additionalProperties = sub();
        break;
      case 13:
        s[['pattern', 'minimum', 'not', 'if', 'format', 'description', 'uniqueItems'][r.int(7)]] = 'x';
        break;
      default:
        s.type = 'object';
        s.properties = { a: sub(), b: { $ref: '#' } };
    }
  }
  return s;
}

/** Every path to a value inside `doc` (objects' keys and arrays' indices). */
function paths(doc: unknown, at: (string | number)[] = [], out: (string | number)[][] = []): (string | number)[][] {
  out.push(at);
  if (out.length > 400) return out;
  if (Array.isArray(doc)) doc.forEach((v, i) => paths(v, [...at, i], out));
  else if (doc !== null && typeof doc === 'object') for (const [k, v] of Object.entries(doc)) paths(v, [...at, k], out);
  return out;
}

function setAt(doc: Record<string, unknown>, at: (string | number)[], value: unknown, remove: boolean): void {
  let o: any = doc;
  for (const k of at.slice(0, -1)) o = o[k];
  const last = at[at.length - 1];
  if (remove) {
    if (Array.isArray(o)) o.splice(last as number, 1);
    else delete o[last];
  } else o[last] = value;
}

/** One case: a route and the body's text. */
function fuzzCase(r: Rng): { route: string; text: string } {
  const [route, base] = BASES[r.int(BASES.length)];
  // a copy: the bases share their constants, which a mutation must not change for later cases
  const doc = structuredClone(base());
  for (let m = 0, n = 1 + r.int(3); m < n; m++) {
    const all = paths(doc).filter((p) => p.length > 0);
    const pick = all.length ? all[r.int(all.length)] : ['messages'];
    const kind = r.int(10);
    if (kind < 2) setAt(doc, pick, undefined, true);
    else if (kind < 7) setAt(doc, pick, hostileValue(r), false);
    else if (kind === 7) doc[['n', 'stream', 'max_tokens', 'logprobs', 'tool_choice', 'thinking', 'reasoning_effort', 'stop', 'logit_bias', 'echo'][r.int(10)]] = hostileValue(r);
    else if (kind === 8) {
      const schema = randomSchema(r, 0);
      if (route === '/v1/messages' || route === '/v1/messages/count_tokens') doc.tools = [{ name: 'fuzz', input_schema: schema }];
      else if (r.int(2)) doc.response_format = { type: 'json_schema', json_schema: { name: 'f', schema } };
      else doc.tools = [{ type: 'function', function: { name: 'fuzz', parameters: schema } }];
    } else doc[`unknown_${r.int(5)}`] = hostileValue(r);
  }
  let text = JSON.stringify(doc);
  if (r.int(8) === 0) {
    // damaged text: bytes flipped, a piece cut out, or garbage put in
    const b = Buffer.from(text);
    const at = r.int(b.length);
    const how = r.int(3);
    if (how === 0) for (let i = 0; i < 1 + r.int(4); i++) b[r.int(b.length)] = r.int(256);
    text = how === 0 ? b.toString('latin1') : how === 1 ? text.slice(0, at) + text.slice(at + 1 + r.int(40)) : text.slice(0, at) + ['\u0000', '}', '{"', ']]]]', '\\u', '\ud800'][r.int(6)] + text.slice(at);
  }
  return { route, text };
}

/** The server's peak resident size so far (VmHWM), in bytes. */
function peakBytes(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

/** A clean error: JSON in either API's shape, with a one-line message. */
function cleanError(text: string): boolean {
  try {
    const b = JSON.parse(text);
    const message = b?.error?.message;
    return typeof message === 'string' && message.length > 0 && !message.includes('\n');
  } catch {
    return false;
  }
}

/** A 2xx answer that is whole: JSON, or a stream that ended as its API ends one, without an error event. */
function wholeAnswer(text: string, streamed: boolean): boolean {
  if (!streamed) {
    try {
      JSON.parse(text);
      return true;
    } catch {
      return false;
    }
  }
  if (/^event: error$|"type":"(server_error|engine_error|api_error)"/m.test(text)) return false;
  return /^data: \[DONE\]$/m.test(text) || /^event: message_stop$/m.test(text);
}

describe('request fuzzing', { timeout: 10 * 60_000 }, () => {
  let child: ChildProcess;
  let url = '';
  let err = '';
  before(async () => {
    child = spawn(process.execPath, [BIN, 'serve', DEMO, '--port', '0', '-q', '--no-learn', '--max-tokens', '4', '--max-body', '2M'], { stdio: ['ignore', 'ignore', 'pipe'] });
    url = await new Promise<string>((resolve, reject) => {
      child.stderr!.on('data', (b) => {
        err += b;
        const m = /listening on (http:\/\/\S+)/.exec(err);
        if (m) resolve(m[1]);
      });
      child.on('exit', () => reject(new Error(`serve exited: ${err}`)));
    });
  });
  after(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGTERM');
    });
  });

  it('every mutated body gets a clean 4xx or a whole 2xx: no 5xx, reset, crash, hang or runaway memory', async () => {
    const seed = testSeed('request fuzz');
    const r = new Rng(seed);
    const cases = Array.from({ length: CASES }, () => fuzzCase(r));
    const warm = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }) });
    assert.equal(warm.status, 200);
    await warm.text();
    const baseline = peakBytes(child.pid!);
    const outcomes: { i: number; outcome: Outcome; status: number; excerpt: string }[] = [];
    const run = async (i: number): Promise<void> => {
      const { route, text } = cases[i];
      let outcome: Outcome;
      let status = 0;
      let answer = '';
      try {
        const res = await fetch(`${url}${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: text, signal: AbortSignal.timeout(HANG_MS) });
        status = res.status;
        answer = await res.text();
        const streamed = (res.headers.get('content-type') ?? '').startsWith('text/event-stream');
        if (status >= 500) outcome = '5xx';
        else if (status >= 400) outcome = cleanError(answer) ? 'clean 4xx' : '5xx';
        else outcome = status >= 200 && status < 300 && wholeAnswer(answer, streamed) ? '2xx' : '5xx';
      } catch (e) {
        const name = (e as Error).name;
        outcome = child.exitCode !== null || child.signalCode !== null ? 'crash' : name === 'TimeoutError' ? 'hang' : 'no answer';
      }
      if (outcome !== 'crash' && peakBytes(child.pid!) - baseline > MEMORY_BOUND) outcome = 'runaway memory';
      outcomes.push({ i, outcome, status, excerpt: `${route} ${text.slice(0, 160)} -> ${answer.slice(0, 200)}` });
    };
    for (let i = 0; i < CASES; i += AT_ONCE) {
      await Promise.all(Array.from({ length: Math.min(AT_ONCE, CASES - i) }, (_, j) => run(i + j)));
      if (child.exitCode !== null || child.signalCode !== null) break;
    }
    const tally: Record<string, number> = {};
    for (const o of outcomes) tally[o.outcome] = (tally[o.outcome] ?? 0) + 1;
    console.log(`request fuzz (seed ${seed}): ${JSON.stringify(tally)}`);
    const bad = outcomes.filter((o) => FAILURES.includes(o.outcome));
    assert.deepEqual(
      bad.map((o) => `case ${o.i}: ${o.outcome} (${o.status}) ${o.excerpt}`),
      [],
      `seed ${seed}: ${err.slice(-2000)}`,
    );
    assert.equal(outcomes.length, CASES);
    // the fuzzer reaches both sides: requests refused and requests answered
    assert.ok((tally['clean 4xx'] ?? 0) > CASES / 10 && (tally['2xx'] ?? 0) > CASES / 10, JSON.stringify(tally));
    const h: any = await (await fetch(`${url}/health`)).json();
    assert.equal(h.status, 'ok');
    assert.equal(h.requests.body_bytes, 0, 'every body given back');
  });
});
