/**
 * waste serve --parallel: requests decoding at once, their steps batched, each answered exactly
 * as it is alone; a client that leaves mid-stream leaves the batch; the queue's limit holds per
 * slot.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import OpenAI from 'openai';
import { startServer } from '../src/server/server.js';
import { BIN, ROOT } from './helpers.js';

const DEMO = path.join(ROOT, 'models/demo');
const user = (content: string): OpenAI.ChatCompletionMessageParam[] => [{ role: 'user', content }];

const asks: OpenAI.ChatCompletionCreateParamsNonStreaming[] = [
  { model: 'demo', messages: user('It was a dark'), max_tokens: 30, temperature: 0 },
  { model: 'demo', messages: user('Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse'), max_tokens: 20, temperature: 0.8, seed: 4 },
  { model: 'demo', messages: user('The whale'), max_tokens: 40, temperature: 1, top_p: 0.9, seed: 9 },
  { model: 'demo', messages: user('Fellow citizens'), max_tokens: 12, temperature: 0.5, seed: 1 },
];

/** The text of a streamed chat completion, read to its end (or until `stopAfter` chunks, then the connection dropped). */
async function streamText(url: string, body: object, stopAfter = Infinity): Promise<string> {
  const ac = new AbortController();
  const r = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }), signal: ac.signal });
  let text = '';
  let chunks = 0;
  const dec = new TextDecoder();
  let buf = '';
  try {
    for await (const part of r.body as unknown as AsyncIterable<Uint8Array>) {
      buf += dec.decode(part, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = ev.replace(/^data: /, '');
        if (data === '[DONE]') continue;
        text += JSON.parse(data).choices?.[0]?.delta?.content ?? '';
        if (++chunks >= stopAfter) {
          ac.abort();
          return text;
        }
      }
    }
  } catch (e) {
    if (!ac.signal.aborted) throw e;
  }
  return text;
}

describe('waste serve --parallel', () => {
  it('requests at once share the engine\'s passes and each gets the reply it gets alone; one leaving mid-stream changes no other', async () => {
    const alone = await startServer({ model: DEMO, port: 0, parallel: 1, log: false });
    const solo: string[] = [];
    try {
      const c = new OpenAI({ baseURL: `${alone.url}/v1`, apiKey: 'x', maxRetries: 0 });
      for (const a of asks) solo.push((await c.chat.completions.create(a)).choices[0].message.content ?? '');
      solo.push(await streamText(alone.url, asks[2]));
    } finally {
      await alone.close();
    }
    assert.equal(solo[4], solo[2], 'streamed and not: the same reply');

    const server = await startServer({ model: DEMO, port: 0, parallel: 4, log: false });
    try {
      const h: any = await (await fetch(`${server.url}/health`)).json();
      assert.equal(h.queue.parallel, 4);
      assert.equal(h.sessions.max, 4);
      let passes = 0;
      const m = server.host.model;
      const firstMoe = m.config.layerKinds.findIndex((k) => k.ffn === 'moe');
      m.observeRoutes((L) => {
        if (L === firstMoe) passes++;
      });
      const c = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'x', maxRetries: 0 });
      // three at once, and a streamed one that goes away after three chunks
      const leaving = streamText(server.url, asks[2], 3);
      const [r0, r1, r2] = await Promise.all(asks.slice(0, 3).map((a) => c.chat.completions.create(a)));
      const gone = await leaving;
      m.observeRoutes(undefined);
      const got = [r0, r1, r2].map((r) => r.choices[0].message.content ?? '');
      assert.deepEqual(got, solo.slice(0, 3));
      assert.ok(solo[2].startsWith(gone), 'what the leaving client saw is the start of its reply');
      const solos = [r0, r1, r2].reduce((n, r) => n + Math.ceil(r.usage!.prompt_tokens / 64) + r.usage!.completion_tokens, 0);
      assert.ok(passes < 0.8 * solos, `${passes} passes: the requests did not share them (${solos} for the three alone)`);
      // the engine is free again: the fourth request alone
      assert.equal((await c.chat.completions.create(asks[3])).choices[0].message.content, solo[3]);
      const after: any = await (await fetch(`${server.url}/health`)).json();
      assert.equal(after.queue.active, 0);
    } finally {
      await server.close();
    }
  });

  it('answers 429 only when every slot is taken and the queue is full', async () => {
    const server = await startServer({ model: DEMO, port: 0, parallel: 2, queueLimit: 0, log: false });
    try {
      const post = () => fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: user('x'), max_tokens: 2 }) });
      const a = await server.host.queue.acquire('someone');
      assert.equal((await post()).status, 200, 'one slot is still free');
      const b = await server.host.queue.acquire('someone else');
      const r = await post();
      assert.equal(r.status, 429);
      assert.ok(Number(r.headers.get('retry-after')) >= 1);
      a();
      b();
      assert.equal((await post()).status, 200);
    } finally {
      await server.close();
    }
  });
});

describe('waste plan --parallel', () => {
  it("counts a session's state for each request decoding at once", () => {
    const plan = (...args: string[]) => {
      const r = spawnSync(process.execPath, [BIN, 'plan', '--json', ...args], { encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
      return JSON.parse(r.stdout);
    };
    const one = plan();
    const three = plan('--parallel', '3');
    assert.equal(three.sessions, 3);
    assert.equal(three.parallel, 3);
    assert.equal(three.state_bytes, 3 * one.state_bytes);
    assert.ok(three.floor_bytes > one.floor_bytes);
  });
});
