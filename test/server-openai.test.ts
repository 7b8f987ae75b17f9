/**
 * The OpenAI API's rough edges found by trying it as clients do: tool-call ids unique across
 * responses, a forced tool call held to max_tokens, reasoning tokens counted, every effort OpenAI
 * names taken, and one rule for model names on every route.
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type RunningServer, startServer } from '../src/server/server.js';
import { ROOT, synth } from './helpers.js';

const k3 = synth({ shape: 'k3-tiny', seed: 31, tokenizer: true }, 'openai-k3');
const user = (content: string) => [{ role: 'user', content }];
const WEATHER = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 10 } }, required: ['city'], additionalProperties: false } } };
const CLOCK = { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 6 } }, required: ['zone'], additionalProperties: false } } };

async function post(url: string, json: unknown): Promise<{ status: number; body: any }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(json) });
  return { status: r.status, body: await r.json() };
}

/** A streamed chat completion's chunks. */
async function chunks(url: string, json: unknown): Promise<any[]> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...(json as object), stream: true, stream_options: { include_usage: true } }) });
  return [...(await r.text()).matchAll(/^data: (\{.*\})$/gm)].map((m) => JSON.parse(m[1]));
}

describe('OpenAI API on a K3-format container', () => {
  let server: RunningServer;
  let chat: string;
  before(async () => {
    server = await startServer({ model: k3, port: 0, log: false });
    chat = `${server.url}/v1/chat/completions`;
  });
  after(() => server.close());

  it('gives every tool call an id of its own, the same in all of a stream\'s chunks', async () => {
    const req = { messages: user('Weather?'), tools: [WEATHER, CLOCK], tool_choice: 'required', reasoning_effort: 'none', max_tokens: 200, seed: 1 };
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await post(chat, req);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      for (const c of r.body.choices[0].message.tool_calls) ids.push(c.id);
    }
    for (const id of ids) assert.match(id, /^call_[0-9A-Za-z]{24}$/);
    assert.equal(new Set(ids).size, ids.length, ids.join(' '));
    // streamed: the id comes with the call's first delta and is not repeated otherwise
    const cs = await chunks(chat, req);
    const deltas = cs.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []);
    const first = deltas.find((d) => d.id);
    assert.match(first.id, /^call_[0-9A-Za-z]{24}$/);
    assert.ok(!ids.includes(first.id));
    assert.ok(deltas.filter((d) => d.index === first.index && d.id).every((d) => d.id === first.id));
  });

  it('holds a forced tool call to max_tokens: finish "length" with what fits, never more', async () => {
    for (const max of [1, 2, 5]) {
      for (const tool_choice of ['required', { type: 'function', function: { name: 'get_time' } }]) {
        const r = await post(chat, { messages: user('Time?'), tools: [WEATHER, CLOCK], tool_choice, reasoning_effort: 'none', max_tokens: max, seed: 2 });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.ok(r.body.usage.completion_tokens <= max, `${r.body.usage.completion_tokens} tokens for max_tokens ${max}`);
        assert.equal(r.body.choices[0].finish_reason, 'length');
        // markup cut in two is not the answer
        assert.doesNotMatch(r.body.choices[0].message.content ?? '', /<\|/);
      }
      const streamed = await chunks(chat, { messages: user('Time?'), tools: [WEATHER, CLOCK], tool_choice: 'required', reasoning_effort: 'none', max_tokens: max, seed: 2 });
      assert.ok(streamed.at(-1).usage.completion_tokens <= max);
    }
  });

  it('counts reasoning tokens in usage.completion_tokens_details', async () => {
    // thinking is on by default, and a random model never closes its think channel
    const on = await post(chat, { messages: user('Hello'), max_tokens: 10, seed: 3 });
    assert.equal(on.body.usage.completion_tokens, 10);
    assert.equal(on.body.usage.completion_tokens_details.reasoning_tokens, 10);
    const off = await post(chat, { messages: user('Hello'), max_tokens: 10, seed: 3, reasoning_effort: 'none' });
    assert.equal(off.body.usage.completion_tokens_details.reasoning_tokens, 0);
    // a budget closes the block: its tokens and the closing tag's are reasoning, the answer's not
    const budget = await post(chat, { messages: user('Hello'), max_tokens: 20, seed: 3, thinking: { type: 'enabled', budget_tokens: 4 } });
    const r = budget.body.usage.completion_tokens_details.reasoning_tokens;
    assert.ok(r >= 4 && r < budget.body.usage.completion_tokens, JSON.stringify(budget.body.usage));
    assert.ok(budget.body.choices[0].message.content.length > 0);
    const streamed = await chunks(chat, { messages: user('Hello'), max_tokens: 20, seed: 3, thinking: { type: 'enabled', budget_tokens: 4 } });
    assert.deepEqual(streamed.at(-1).usage, budget.body.usage);
  });

  it('takes every reasoning_effort OpenAI names, mapped to the nearest K3 has', async () => {
    const reasoning: Record<string, string> = {};
    for (const effort of ['minimal', 'low', 'medium', 'high', 'xhigh', 'max']) {
      const r = await post(chat, { messages: user('Hello'), max_tokens: 8, temperature: 1, reasoning_effort: effort });
      assert.equal(r.status, 200, `${effort}: ${JSON.stringify(r.body)}`);
      reasoning[effort] = r.body.choices[0].message.reasoning_content;
    }
    // K3 has low, high and max
    assert.equal(reasoning.minimal, reasoning.low);
    assert.equal(reasoning.medium, reasoning.high);
    assert.equal(reasoning.xhigh, reasoning.max);
    const none = await post(chat, { messages: user('Hello'), max_tokens: 8, reasoning_effort: 'none' });
    assert.equal(none.body.choices[0].message.reasoning_content, undefined);
  });
});

describe('OpenAI API on the demo model', () => {
  let server: RunningServer;
  before(async () => {
    server = await startServer({ model: path.join(ROOT, 'models/demo'), port: 0, log: false });
  });
  after(() => server.close());

  it("numbers Kimi's call ids across the conversation, so none repeats within it", async () => {
    const chat = `${server.url}/v1/chat/completions`;
    const messages: unknown[] = user('Weather?');
    const ids: string[] = [];
    for (let turn = 0; turn < 3; turn++) {
      const r = await post(chat, { messages, tools: [WEATHER], tool_choice: 'required', max_tokens: 200, seed: turn });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const m = r.body.choices[0].message;
      for (const c of m.tool_calls) ids.push(c.id);
      messages.push(m, ...m.tool_calls.map((c: { id: string }) => ({ role: 'tool', tool_call_id: c.id, content: 'sunny' })), ...user('And now?'));
    }
    assert.equal(ids[0], 'functions.get_weather:0');
    assert.equal(new Set(ids).size, ids.length, ids.join(' '));
    ids.forEach((id, i) => assert.equal(id, `functions.get_weather:${i}`));
  });

  it('holds a forced call to max_tokens on a template whose markers are text (57 tokens once for max_tokens 1)', async () => {
    const r = await post(`${server.url}/v1/chat/completions`, { messages: user('Weather?'), tools: [WEATHER], tool_choice: 'required', max_tokens: 1 });
    assert.equal(r.body.usage.completion_tokens, 1);
    assert.equal(r.body.choices[0].finish_reason, 'length');
    assert.equal(r.body.choices[0].message.tool_calls, undefined);
    assert.equal(r.body.choices[0].message.content, '');
  });

  it('serves any model name with the one model, on every route, and /v1/models/{name} says so', async () => {
    for (const name of ['demo', 'gpt-4o', 'claude-sonnet-4-5']) {
      const m = await fetch(`${server.url}/v1/models/${name}`);
      assert.equal(m.status, 200);
      const body: any = await m.json();
      assert.equal(body.id, name);
      assert.equal(body.root, 'demo');
      const c = await post(`${server.url}/v1/chat/completions`, { model: name, messages: user('Hi'), max_tokens: 2 });
      assert.equal(c.status, 200);
      assert.equal(c.body.model, 'demo');
      const t = await post(`${server.url}/v1/completions`, { model: name, prompt: 'Hi', max_tokens: 2 });
      assert.equal(t.status, 200);
      assert.equal(t.body.model, 'demo');
      const a = await post(`${server.url}/v1/messages`, { model: name, messages: user('Hi'), max_tokens: 2 });
      assert.equal(a.status, 200);
      assert.equal(a.body.model, 'demo');
    }
    // the list names the model once, by its own name
    const list: any = await (await fetch(`${server.url}/v1/models`)).json();
    assert.deepEqual(list.data.map((m: { id: string }) => m.id), ['demo']);
  });
});
