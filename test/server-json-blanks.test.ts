/**
 * A constrained reply cannot spend its tokens on whitespace: between JSON values a gap is at most
 * a line break and 20 of indentation (json-text.ts), and anywhere — inside strings too — a run of
 * blanks (spaces, tabs, line breaks, the escapes \n \t \r) is at most MAX_BLANK_RUN bytes. Checked
 * with a sampler that always prefers whitespace, on bytes and through the server with a model
 * whose logits are biased toward it.
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { MAX_BLANK_RUN } from '../src/constrain/blank-runs.js';
import { grammarConstraint } from '../src/constrain/constraint.js';
import { json, lit, seq } from '../src/constrain/grammar.js';
import type { TokenVocab } from '../src/constrain/vocab.js';
import { startServer } from '../src/server/server.js';
import { ROOT } from './helpers.js';

/** One token per byte, and an end token (256). */
const BYTES: TokenVocab = { size: 257, bytes: (id) => (id < 256 ? Uint8Array.of(id) : new Uint8Array(0)), isSpecial: (id) => id === 256 };

/** The longest run of blanks in a JSON text, escapes \n \t \r counted by their two bytes. */
function longestRun(text: string): number {
  let best = 0;
  for (const m of text.matchAll(/(?:[ \t\r\n]|\\[ntr])+/g)) best = Math.max(best, m[0].length);
  return best;
}

/**
 * Sample greedily by a preference order (the first allowed byte of `prefer`, else the lowest allowed
 * byte), up to `steps` tokens or the end token: a model that wants nothing but whitespace.
 */
function greedy(schema: unknown, prefer: string | ((text: string) => string), steps: number, frame = (g: ReturnType<typeof json>) => g): string {
  const c = grammarConstraint(BYTES, frame(json(schema)), [256]);
  const logits = new Float32Array(257);
  let out = '';
  for (let i = 0; i < steps; i++) {
    const order = [...Buffer.from(typeof prefer === 'string' ? prefer : prefer(out))];
    const m = c.mask(logits);
    if (m[256] !== -Infinity) break;
    const pick = order.find((b) => m[b] !== -Infinity) ?? m.findIndex((v) => v !== -Infinity);
    c.accept(pick);
    out += String.fromCharCode(pick);
  }
  return out;
}

describe('whitespace in a constrained reply is bounded', () => {
  it('inside strings, keys and values alike, and between values', () => {
    // spaces first, then a letter (a string can always go on), then the closing quote
    const key = greedy({ type: 'object' }, ' "a', 2000);
    assert.equal(longestRun(key), MAX_BLANK_RUN, key.slice(0, 200));
    const value = greedy({ type: 'object', properties: { s: { type: 'string' } }, required: ['s'], additionalProperties: false }, ' \n"s:a', 2000);
    assert.ok(longestRun(value) <= MAX_BLANK_RUN, value.slice(0, 200));
    // escaped line breaks are blanks too: a string of "\n\n\n…" is cut as a run of spaces is
    const openEscape = (t: string) => (t.match(/\\+$/)?.[0].length ?? 0) % 2 === 1;
    const escapes = greedy({ type: 'array', items: { type: 'string' } }, (t) => (openEscape(t) ? 'n"' : '\\"['), 2000);
    assert.ok(escapes.startsWith('["\\n\\n'), escapes.slice(0, 40));
    assert.equal(longestRun(escapes), MAX_BLANK_RUN, escapes.slice(0, 200));
    // between values: nothing, one space, or a line break and at most 20 of indentation
    const gaps = greedy({ type: 'array', items: { type: 'integer' }, maxItems: 3 }, '\n \t[1,]', 500);
    for (const g of gaps.match(/[ \t\r\n]+/g) ?? []) assert.ok(g.length <= 21, JSON.stringify(g));
    assert.equal(JSON.stringify(JSON.parse(gaps)), '[1,1,1]');
  });

  it('still lets a grammar through that holds a longer run itself (a literal or enum value)', () => {
    const long = ' '.repeat(MAX_BLANK_RUN + 10);
    const text = greedy({ enum: [`a${long}b`] }, ' ', 500, (g) => seq([g, lit(long), lit('!')]));
    assert.equal(text, `"a${long}b"${long}!`);
  });

  it('through the server: a model biased toward whitespace writes at most the bound in a row', async () => {
    const server = await startServer({ model: path.join(ROOT, 'models/demo'), port: 0, log: false });
    try {
      const tok = server.host.model.tokenizer();
      const blanks: string[] = [];
      for (let id = 0; id < server.host.model.config.vocab; id++) if (/^\s+$/.test(tok.decode([id]))) blanks.push(String(id));
      assert.ok(blanks.length > 0);
      const logit_bias = Object.fromEntries(blanks.map((id) => [id, 20]));
      for (const response_format of [{ type: 'json_object' }, { type: 'json_schema', json_schema: { schema: { type: 'object', properties: { a: { type: 'array', items: { type: 'string' } } }, required: ['a'] } } }]) {
        const r = await fetch(`${server.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ messages: [{ role: 'user', content: 'JSON' }], response_format, max_tokens: 300, logit_bias, seed: 1 }),
        });
        const body: any = await r.json();
        assert.equal(r.status, 200, JSON.stringify(body));
        const text: string = body.choices[0].message.content;
        assert.ok(longestRun(text) <= MAX_BLANK_RUN, `${longestRun(text)} blanks in a row: ${JSON.stringify(text.slice(0, 120))}`);
      }
    } finally {
      await server.close();
    }
  });
});
