/**
 * A trailing assistant message is the reply's beginning (a prefill), continued rather than closed:
 * on OpenAI's chat completions, Anthropic's messages and `waste template`. The reply is only what
 * follows it (as Anthropic's API answers), and it is exactly what the model gives after the
 * continued prompt — checked against /v1/completions fed the same ids.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type RunningServer, startServer } from '../src/server/server.js';
import { BIN, ROOT, synth, tmpDir } from './helpers.js';

const DEMO = path.join(ROOT, 'models/demo');
const k3 = synth({ shape: 'k3-tiny', seed: 31, tokenizer: true }, 'prefill-k3');
const PREFILLED = [
  { role: 'user', content: 'Name a whale.' },
  { role: 'assistant', content: 'The biggest one is the' },
];

async function post(url: string, json: unknown): Promise<{ status: number; body: any }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(json) });
  return { status: r.status, body: await r.json() };
}

/** `waste template MODEL --request FILE [--json]`, as a user runs it. */
function template(model: string, request: unknown, json = false): { code: number | null; out: string; err: string } {
  const file = path.join(tmpDir('prefill'), 'request.json');
  fs.writeFileSync(file, JSON.stringify(request));
  const r = spawnSync(process.execPath, [BIN, 'template', model, '--request', file, ...(json ? ['--json'] : [])], { encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe('waste template continues a trailing assistant message', () => {
  it('renders it open, with no hand-over after it; closed with add_generation_prompt false', () => {
    const open = template(DEMO, { messages: PREFILLED });
    assert.equal(open.code, 0, open.err);
    assert.equal(open.out, '<|im_user|>user<|im_middle|>Name a whale.<|im_end|><|im_assistant|>assistant<|im_middle|>The biggest one is the\n');
    const closed = template(DEMO, { messages: PREFILLED, add_generation_prompt: false });
    assert.ok(closed.out.endsWith('The biggest one is the<|im_end|>\n'), closed.out);
    // K3's XTML: the response element left open after the content, after the notes
    const x = template(k3, { messages: PREFILLED, thinking: false, tool_choice: 'none' });
    assert.equal(x.code, 0, x.err);
    assert.ok(x.out.endsWith('MUST NOT call any tools in the next message.<|close|>message<|sep|><|end_of_msg|><|open|>message role="assistant"<|sep|><|open|>response<|sep|>The biggest one is the\n'), x.out);
  });
});

for (const [label, model, extra] of [
  ['the demo model (a Jinja template)', DEMO, {}],
  ["a K3-format container (XTML, thinking off as Anthropic's default)", k3, { thinking: false }],
] as const) {
  describe(`a prefilled reply on ${label}`, () => {
    let server: RunningServer;
    let expected: string;
    before(async () => {
      server = await startServer({ model, port: 0, log: false });
      // the continued prompt as `waste template` renders it, fed as ids: what the model says next
      const t = template(model, { messages: PREFILLED, ...extra }, true);
      assert.equal(t.code, 0, t.err);
      const { ids, segments } = JSON.parse(t.out) as { ids: number[]; segments: [string, boolean][] };
      // the prompt ends with the prefill's text: nothing closes it, no new turn opens
      assert.deepEqual(segments.at(-1), ['The biggest one is the', false]);
      const c = await post(`${server.url}/v1/completions`, { prompt: ids, max_tokens: 8, temperature: 0 });
      assert.equal(c.status, 200, JSON.stringify(c.body));
      expected = c.body.choices[0].text;
      assert.ok(expected.length > 0);
    });
    after(() => server.close());

    it('OpenAI: the reply continues the message, and is only the continuation', async () => {
      const r = await post(`${server.url}/v1/chat/completions`, { messages: PREFILLED, max_tokens: 8, temperature: 0, ...(model === k3 ? { reasoning_effort: 'none' } : {}) });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.choices[0].message.content, expected);
      assert.equal(r.body.usage.completion_tokens, 8);
    });

    it('Anthropic: the same continuation in content[0].text', async () => {
      const r = await post(`${server.url}/v1/messages`, { messages: PREFILLED, max_tokens: 8, temperature: 0 });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.deepEqual(r.body.content, [{ type: 'text', text: expected }]);
      // streamed the same
      const s = await fetch(`${server.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: PREFILLED, max_tokens: 8, temperature: 0, stream: true }) });
      const text = [...(await s.text()).matchAll(/"text_delta","text":("(?:[^"\\]|\\.)*")/g)].map((m) => JSON.parse(m[1])).join('');
      assert.equal(text, expected);
    });
  });
}

describe('a prefill the server cannot continue is a 400 naming why', () => {
  let server: RunningServer;
  before(async () => {
    server = await startServer({ model: DEMO, port: 0, log: false });
  });
  after(() => server.close());

  it('with a JSON schema, a required tool call, or tool calls of its own', async () => {
    const url = `${server.url}/v1/chat/completions`;
    const tool = { type: 'function', function: { name: 'f', parameters: { type: 'object' } } };
    const cases: [unknown, RegExp][] = [
      [{ messages: PREFILLED, response_format: { type: 'json_object' } }, /^response_format: a final assistant message is continued as the reply's beginning, which cannot be held to a JSON schema/],
      [{ messages: PREFILLED, tools: [tool], tool_choice: 'required' }, /^tool_choice: a final assistant message is continued .* a required tool call/],
      [{ messages: [PREFILLED[0], { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] }], tools: [tool] }, /final assistant message is continued as the reply's beginning, and one with tool calls cannot be/],
    ];
    for (const [json, re] of cases) {
      const r = await post(url, { max_tokens: 4, ...(json as object) });
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.match(r.body.error.message, re);
    }
    // an empty final assistant message begins the reply with nothing: as if it were not there
    const empty = await post(url, { messages: [PREFILLED[0], { role: 'assistant', content: '' }], max_tokens: 6, temperature: 0 });
    const none = await post(url, { messages: [PREFILLED[0]], max_tokens: 6, temperature: 0 });
    assert.equal(empty.body.choices[0].message.content, none.body.choices[0].message.content);
  });
});
