/**
 * A K3-format container served through the official openai client: chat streamed and not (the
 * think channel as reasoning_content), a forced tool call whose arguments are valid JSON for its
 * schema, a json_schema reply that validates — all through K3's XTML markup — and the model's
 * generation_config.json as the sampling defaults. The model's weights are random: what is tested
 * is the markup and its enforcement, never what it says.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Ajv } from 'ajv';
import OpenAI from 'openai';
import { type RunningServer, startServer } from '../src/server/server.js';
import { synth } from './helpers.js';

const dir = synth({ shape: 'k3-tiny', seed: 31, tokenizer: true }, 'k3-serve');
// the release's sampling settings
fs.writeFileSync(path.join(dir, 'generation_config.json'), JSON.stringify({ temperature: 1.0, top_p: 0.95 }));

const WEATHER = { type: 'function' as const, function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 10 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false } } };
const CLOCK = { type: 'function' as const, function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 6 } }, required: ['zone'], additionalProperties: false } } };
const PERSON = { type: 'object', properties: { name: { type: 'string', maxLength: 8 }, age: { type: 'integer' }, tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 2 } }, required: ['name', 'age', 'tags'], additionalProperties: false };
const validate = { get_weather: new Ajv().compile(WEATHER.function.parameters), get_time: new Ajv().compile(CLOCK.function.parameters) };
const user = (content: string) => [{ role: 'user' as const, content }];

describe('waste serve on a K3-format container, through the openai client', () => {
  let server: RunningServer;
  let client: OpenAI;

  before(async () => {
    server = await startServer({ model: dir, port: 0, log: false });
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => server.close());

  it('chats streamed and not: the same reply, reasoning apart from the content, none with thinking off', async () => {
    const req = { model: 'k3', messages: user('Hello'), max_tokens: 10, seed: 5 };
    const whole = await client.chat.completions.create(req);
    const msg = whole.choices[0].message as { content: string | null; reasoning_content?: string };
    // thinking is on by default, and a random model never closes its think channel
    assert.ok((msg.reasoning_content ?? '').length > 0);
    assert.equal(msg.content, '');
    assert.equal(whole.choices[0].finish_reason, 'length');
    const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
    let reasoning = '';
    let content = '';
    let usage: unknown;
    for await (const ch of stream) {
      const d = ch.choices[0]?.delta as { content?: string; reasoning_content?: string } | undefined;
      reasoning += d?.reasoning_content ?? '';
      content += d?.content ?? '';
      if (ch.usage) usage = ch.usage;
    }
    assert.equal(reasoning, msg.reasoning_content);
    assert.equal(content, '');
    assert.deepEqual(usage, whole.usage);
    const off = await client.chat.completions.create({ ...req, reasoning_effort: 'none' });
    const offMsg = off.choices[0].message as { content: string | null; reasoning_content?: string };
    assert.ok((offMsg.content ?? '').length > 0);
    assert.equal(offMsg.reasoning_content, undefined);
    // markup never reaches what the client reads
    for (const t of [msg.reasoning_content, offMsg.content]) assert.doesNotMatch(t ?? '', /<\|(open|close|sep|end_of_msg)\|>/);
  });

  it("samples with the model's generation_config.json (temperature 1.0, top-p 0.95) when the request names no settings", async () => {
    const base = { model: 'k3', messages: user('Hi'), max_tokens: 8, seed: 9, reasoning_effort: 'none' as const };
    const byDefault = await client.chat.completions.create(base);
    const release = await client.chat.completions.create({ ...base, temperature: 1, top_p: 0.95 });
    const greedy = await client.chat.completions.create({ ...base, temperature: 0 });
    assert.equal(byDefault.choices[0].message.content, release.choices[0].message.content);
    assert.notEqual(byDefault.choices[0].message.content, greedy.choices[0].message.content);
  });

  it('makes a required or a named tool call with arguments that validate, thinking or not, streamed the same', async () => {
    for (const [seed, extra] of [
      [1, { reasoning_effort: 'none' }],
      [2, { reasoning_effort: 'none' }],
      [3, { thinking: { type: 'enabled', budget_tokens: 4 } }],
    ] as const) {
      const r = await client.chat.completions.create({ model: 'k3', messages: user('Weather in Oslo?'), tools: [WEATHER, CLOCK], tool_choice: 'required', max_tokens: 300, seed, ...extra } as never);
      const choice = r.choices[0];
      assert.equal(choice.finish_reason, 'tool_calls');
      const calls = choice.message.tool_calls ?? [];
      assert.ok(calls.length >= 1);
      for (const c of calls) {
        assert.equal(c.type, 'function');
        if (c.type !== 'function') continue;
        const v = validate[c.function.name as keyof typeof validate];
        assert.ok(v, c.function.name);
        assert.ok(v(JSON.parse(c.function.arguments)), `${c.function.arguments}: ${JSON.stringify(v.errors)}`);
      }
    }
    const req = { model: 'k3', messages: user('Time?'), tools: [WEATHER, CLOCK], tool_choice: { type: 'function' as const, function: { name: 'get_time' } }, reasoning_effort: 'none' as const, max_tokens: 200, seed: 4 };
    const named = await client.chat.completions.create(req);
    const nc = named.choices[0].message.tool_calls ?? [];
    assert.equal(nc.length, 1);
    assert.ok(nc[0].type === 'function' && nc[0].function.name === 'get_time' && validate.get_time(JSON.parse(nc[0].function.arguments)));
    const stream = await client.chat.completions.create({ ...req, stream: true });
    const got: { id?: string; name?: string; args: string }[] = [];
    for await (const ch of stream)
      for (const d of ch.choices[0]?.delta.tool_calls ?? []) {
        got[d.index] ??= { args: '' };
        if (d.id) got[d.index].id = d.id;
        if (d.function?.name) got[d.index].name = d.function.name;
        got[d.index].args += d.function?.arguments ?? '';
      }
    assert.deepEqual(got.map((c) => [c.name, c.args]), nc.map((c) => (c.type === 'function' ? [c.function.name, c.function.arguments] : [])));
    // each response's calls have ids of their own (the model writes none in K3's format)
    for (const c of [...got, ...nc]) assert.match(c.id ?? '', /^call_[0-9A-Za-z]{24}$/);
    assert.notEqual(got[0].id, nc[0].id);
    // the result goes back in (re-sorted by id, named by its call) and the reply is free again
    const back = await client.chat.completions.create({ model: 'k3', messages: [...user('Time?'), named.choices[0].message, { role: 'tool', tool_call_id: nc[0].id, content: '12:00' }], tools: [WEATHER, CLOCK], tool_choice: 'none', reasoning_effort: 'none', max_tokens: 6, seed: 1 });
    assert.equal(back.choices[0].finish_reason, 'length');
    assert.equal(back.choices[0].message.tool_calls, undefined);
  });

  it('enforces a json_schema reply, after the reasoning when there is some; json_object too', async () => {
    const check = new Ajv().compile(PERSON);
    for (const [seed, extra] of [
      [1, { reasoning_effort: 'none' }],
      [2, { reasoning: { effort: 'low', max_tokens: 3 } }],
    ] as const) {
      const r = await client.chat.completions.create({ model: 'k3', messages: user('A person as JSON'), response_format: { type: 'json_schema', json_schema: { name: 'person', schema: PERSON, strict: true } }, max_tokens: 300, seed, ...extra } as never);
      assert.equal(r.choices[0].finish_reason, 'stop');
      const doc = JSON.parse(r.choices[0].message.content ?? '');
      assert.ok(check(doc), JSON.stringify(check.errors));
    }
    const obj = await client.chat.completions.create({ model: 'k3', messages: user('JSON'), response_format: { type: 'json_object' }, reasoning_effort: 'none', max_tokens: 40, seed: 3 });
    assert.ok((obj.choices[0].message.content ?? '').startsWith('{'));
  });

  it('matches stop strings on the text the client reads', async () => {
    const base = { model: 'k3', messages: user('Go'), max_tokens: 16, seed: 12, reasoning_effort: 'none' as const };
    const free = (await client.chat.completions.create(base)).choices[0].message.content ?? '';
    const stop = free.slice(4, 7);
    assert.equal(stop.length, 3, free);
    const cut = await client.chat.completions.create({ ...base, stop: [stop] });
    assert.equal(cut.choices[0].finish_reason, 'stop');
    assert.equal(cut.choices[0].message.content, free.slice(0, free.indexOf(stop)));
  });

  it("answers Anthropic's Messages API with the think channel as a thinking block", async () => {
    const r = await fetch(`${server.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ max_tokens: 24, messages: user('Hello'), thinking: { type: 'enabled', budget_tokens: 3 } }) });
    const body: any = await r.json();
    assert.equal(r.status, 200, JSON.stringify(body));
    assert.deepEqual(body.content.map((b: { type: string }) => b.type).slice(0, 2), ['thinking', 'text']);
  });
});
