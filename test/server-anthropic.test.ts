/**
 * Anthropic's Messages API as current Anthropic clients speak it: `thinking: {type: "adaptive"}`,
 * `output_config.effort` (mapped as OpenAI's reasoning_effort is), no reasoning unless asked for
 * even on a model that reasons by default (K3), /v1/models in Anthropic's shape for an Anthropic
 * client, and a 400 naming a document block or a server tool rather than "Invalid input".
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type RunningServer, startServer } from '../src/server/server.js';
import { ROOT, synth } from './helpers.js';

const k3 = synth({ shape: 'k3-tiny', seed: 31, tokenizer: true }, 'anthropic-k3');
const user = (content: unknown) => [{ role: 'user', content }];

async function post(url: string, json: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(json) });
  return { status: r.status, body: await r.json() };
}

async function get(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const r = await fetch(url, { headers });
  return { status: r.status, body: await r.json() };
}

const types = (body: any) => (body.content ?? []).map((b: { type: string }) => b.type);

describe("Anthropic's Messages API on a model that reasons by default (K3)", () => {
  let server: RunningServer;
  before(async () => {
    server = await startServer({ model: k3, port: 0, log: false });
  });
  after(() => server.close());

  it('does not reason unless the request asks: content[0] is the answer', async () => {
    const r = await post(`${server.url}/v1/messages`, { max_tokens: 8, messages: user('Hello'), temperature: 0 });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(types(r.body), ['text']);
    assert.ok(r.body.content[0].text.length > 0);
    // the same as an OpenAI request with reasoning off: the answer, no reasoning
    const o = await post(`${server.url}/v1/chat/completions`, { max_tokens: 8, messages: user('Hello'), temperature: 0, reasoning_effort: 'none' });
    assert.equal(r.body.content[0].text, o.body.choices[0].message.content);
    // thinking disabled says the same
    const off = await post(`${server.url}/v1/messages`, { max_tokens: 8, messages: user('Hello'), temperature: 0, thinking: { type: 'disabled' } });
    assert.deepEqual(off.body.content, r.body.content);
  });

  it('takes thinking {type: "adaptive"}: the model reasons, with no budget', async () => {
    const r = await post(`${server.url}/v1/messages`, { max_tokens: 8, messages: user('Hello'), temperature: 0, thinking: { type: 'adaptive' } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    // a random model never closes its think channel: the whole reply is reasoning
    assert.equal(types(r.body)[0], 'thinking');
    assert.ok(r.body.content[0].thinking.length > 0);
  });

  it('maps output_config.effort as OpenAI reasoning_effort is mapped: the same prompt, the same reasoning', async () => {
    const thought: Record<string, string> = {};
    for (const effort of ['low', 'high', 'max']) {
      // sampled (both draw with seed 0 when none is named), so a prompt that differs shows
      const a = await post(`${server.url}/v1/messages`, { max_tokens: 10, messages: user('Hello'), temperature: 1, thinking: { type: 'adaptive' }, output_config: { effort } });
      assert.equal(a.status, 200, JSON.stringify(a.body));
      const o = await post(`${server.url}/v1/chat/completions`, { max_tokens: 10, messages: user('Hello'), temperature: 1, reasoning_effort: effort });
      assert.equal(a.body.content[0].thinking, o.body.choices[0].message.reasoning_content, effort);
      thought[effort] = a.body.content[0].thinking;
    }
    // the effort reaches the prompt (K3's thinking_effort note): low reasons otherwise than max
    assert.notEqual(thought.low, thought.max);
    // xhigh, as Anthropic names it, is K3's max
    const x = await post(`${server.url}/v1/messages`, { max_tokens: 10, messages: user('Hello'), temperature: 1, thinking: { type: 'adaptive' }, output_config: { effort: 'xhigh' } });
    assert.equal(x.body.content[0].thinking, thought.max);
    const bad = await post(`${server.url}/v1/messages`, { max_tokens: 10, messages: user('Hello'), output_config: { effort: 'extreme' } });
    assert.equal(bad.status, 400);
    assert.match(bad.body.error.message, /^output_config\.effort: /);
  });
});

describe("Anthropic's side of the demo model's server", () => {
  let server: RunningServer;
  before(async () => {
    server = await startServer({ model: path.join(ROOT, 'models/demo'), port: 0, log: false });
  });
  after(() => server.close());

  it("answers /v1/models in Anthropic's shape to an Anthropic client, OpenAI's to the others", async () => {
    for (const headers of [{ 'anthropic-version': '2023-06-01' }, { 'x-api-key': 'unused' }] as Record<string, string>[]) {
      const list = await get(`${server.url}/v1/models`, headers);
      assert.equal(list.status, 200);
      assert.deepEqual(Object.keys(list.body).sort(), ['data', 'first_id', 'has_more', 'last_id']);
      assert.equal(list.body.has_more, false);
      assert.equal(list.body.first_id, 'demo');
      assert.equal(list.body.last_id, 'demo');
      const [m] = list.body.data;
      assert.equal(m.type, 'model');
      assert.equal(m.id, 'demo');
      assert.equal(m.display_name, 'demo');
      assert.ok(!Number.isNaN(Date.parse(m.created_at)) && m.created_at.endsWith('Z'), m.created_at);
      const one = await get(`${server.url}/v1/models/demo`, headers);
      assert.equal(one.body.type, 'model');
      assert.equal(one.body.id, 'demo');
    }
    const openai = await get(`${server.url}/v1/models`);
    assert.equal(openai.body.object, 'list');
    assert.equal(openai.body.data[0].object, 'model');
    assert.equal(openai.body.data[0].id, 'demo');
  });

  it('names a document block, a search result and a server tool in its 400, never "Invalid input"', async () => {
    const url = `${server.url}/v1/messages`;
    const cases: [unknown, RegExp][] = [
      [{ max_tokens: 4, messages: user([{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'hi' } }, { type: 'text', text: 'Summarize' }]) }, /^messages\[0\]\.content\[0\]: document blocks \(PDF or text sources\) are not read by this server: send the text as a text block$/],
      [{ max_tokens: 4, messages: user([{ type: 'search_result', source: 'x', title: 't', content: [] }]) }, /^messages\[0\]\.content\[0\]: search_result blocks are not read/],
      [{ max_tokens: 4, messages: user('Look it up'), tools: [{ type: 'web_search_20250305', name: 'web_search', max_uses: 3 }] }, /^tools\[0\]: "web_search_20250305" is one of Anthropic's server tools/],
      [{ max_tokens: 4, messages: [...user('q'), { role: 'assistant', content: [{ type: 'server_tool_use', id: 's', name: 'web_search', input: {} }] }, ...user('go')] }, /^messages\[1\]\.content\[0\]: "server_tool_use" blocks belong to Anthropic's server tools/],
      [{ max_tokens: 4, messages: user([{ type: 'tool_result', tool_use_id: 't', content: [{ type: 'document', source: {} }] }]) }, /^messages\[0\]\.content\[0\]\.content\[0\]: a tool_result is read as text here, and this block is "document"/],
      [{ max_tokens: 4, messages: user('hi'), mcp_servers: [{ type: 'url', url: 'http://127.0.0.1:1/', name: 'x' }] }, /^mcp_servers: this server connects to no MCP servers/],
    ];
    for (const [json, re] of cases) {
      for (const at of [url, `${url}/count_tokens`]) {
        const r = await post(at, json);
        assert.equal(r.status, 400, JSON.stringify(r.body));
        assert.equal(r.body.type, 'error');
        assert.match(r.body.error.message, re);
        assert.doesNotMatch(r.body.error.message, /Invalid input/);
      }
    }
    // a custom tool (type "custom") is a client tool as before
    const ok = await post(url, { max_tokens: 4, messages: user('hi'), tools: [{ type: 'custom', name: 'f', input_schema: { type: 'object' } }] });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
  });

  it('takes output_config.format as a JSON schema the reply is held to', async () => {
    const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false };
    const r = await post(`${server.url}/v1/messages`, { max_tokens: 40, messages: user('A number as JSON'), temperature: 0, output_config: { format: { type: 'json_schema', schema } } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.stop_reason, 'end_turn');
    assert.equal(typeof JSON.parse(r.body.content[0].text).n, 'number');
  });
});
