/**
 * `waste template --request FILE` on request bodies as clients send them: an OpenAI chat
 * completion or an Anthropic message, with their model names, sampling and limits.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { renderXtml } from '../src/chat/xtml/render.js';
import { BIN, synth, tmpDir } from './helpers.js';

const k3 = synth({ shape: 'k3-tiny', seed: 3, tokenizer: true }, 'k3-bodies');
const files = tmpDir('bodies');
let n = 0;

function template(model: string, request: unknown) {
  const file = path.join(files, `r${n++}.json`);
  fs.writeFileSync(file, JSON.stringify(request));
  const r = spawnSync(process.execPath, [BIN, 'template', model, '--request', file, '--json'], { encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr, file };
}

function segments(model: string, request: unknown): [string, boolean][] {
  const r = template(model, request);
  assert.equal(r.code, 0, r.err);
  return JSON.parse(r.out).segments;
}

const messages = [
  { role: 'user', content: 'What is a mixture of experts?' },
  { role: 'assistant', content: 'A model of many parts.' },
  { role: 'user', content: [{ type: 'text', text: 'Which parts?' }] },
];
/** What an OpenAI client sends besides the conversation: none of it changes the prompt. */
const OPENAI = { model: 'gpt-4o', temperature: 0.2, top_p: 0.9, max_tokens: 64, max_completion_tokens: 64, stream: true, stream_options: { include_usage: true }, n: 1, seed: 7, stop: ['\n'], presence_penalty: 0, frequency_penalty: 0, logit_bias: {}, logprobs: false, user: 'u1', parallel_tool_calls: true };
/** What an Anthropic client sends besides the conversation. */
const ANTHROPIC = { model: 'claude-x', max_tokens: 1024, stop_sequences: ['END'], temperature: 1, top_k: 5, metadata: { user_id: 'u1' }, stream: false };

describe('waste template on request bodies as clients send them', () => {
  for (const [label, model] of [
    ['a Jinja template', 'demo'],
    ["K3's XTML", k3],
  ]) {
    it(`${label}: an OpenAI body renders as its conversation alone (model, sampling and limits ignored)`, () => {
      assert.deepEqual(segments(model, { ...OPENAI, messages }), segments(model, { messages }));
    });

    it(`${label}: an Anthropic body renders with its system prompt first and its thinking switch`, () => {
      const system = [{ type: 'text', text: 'Be terse.' }, { type: 'text', text: 'Use plain words.' }];
      const got = segments(model, { ...ANTHROPIC, system, thinking: { type: 'disabled' }, messages });
      assert.deepEqual(got, segments(model, { messages: [{ role: 'system', content: 'Be terse.\nUse plain words.' }, ...messages], thinking: false }));
      assert.deepEqual(segments(model, { ...ANTHROPIC, system: 'Be terse.', messages }), segments(model, { messages: [{ role: 'system', content: 'Be terse.' }, ...messages] }));
    });
  }

  it("K3: the body's rendering is the release renderer's", () => {
    const got = segments(k3, { ...ANTHROPIC, system: 'Be terse.', messages, thinking: { type: 'enabled', budget_tokens: 100 } });
    const want = renderXtml({ messages: [{ role: 'system', content: 'Be terse.' }, ...messages], thinking: true }).map((s) => [s.text, s.markup]);
    assert.deepEqual(got, want);
  });

  it("the server's prompt fields act as on the server for a Jinja template, and are refused by name for K3 rather than lost", () => {
    // the demo template opens its reasoning block when asked to reason
    assert.notDeepEqual(segments('demo', { ...OPENAI, messages, reasoning_effort: 'high' }), segments('demo', { messages }));
    const r = template(k3, { ...OPENAI, messages, reasoning_effort: 'high' });
    assert.equal(r.code, 2, r.err);
    assert.match(r.err, /^waste: .*: "reasoning_effort" is the server's; K3's format takes "thinking" and "thinking_effort" \(its renderer's own inputs\)\n$/);
  });

  it('a field no API has is still refused, by name', () => {
    const r = template('demo', { messages, modle: 'x' });
    assert.equal(r.code, 2, r.err);
    assert.match(r.err, /^waste: .*: unknown field "modle" \(a request has messages, /);
  });
});
