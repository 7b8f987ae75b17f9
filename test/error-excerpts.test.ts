/**
 * Errors quote at most a short excerpt of what they reject: a megabyte of hostile input (a special
 * token's text, a tool's name, a schema reference, a command-line value) is never a megabyte of
 * error message, and a bad special token is a clean error rather than an internal one.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type RunningServer, startServer } from '../src/server/server.js';
import { EXCERPT_CHARS, WasteError, excerpt, quoted } from '../src/util/errors.js';
import { BIN, ROOT, copyContainer } from './helpers.js';

const MIB = 1 << 20;
/** Room for the message's own words around one excerpt. */
const SHORT = 400;

function waste(args: string[]) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe('excerpts of rejected input', () => {
  it('excerpt and quoted keep 60 characters and say how many more there were, never half a surrogate pair', () => {
    assert.equal(excerpt('short'), 'short');
    assert.equal(quoted('a"b'), '"a\\"b"');
    const long = 'x'.repeat(MIB);
    assert.equal(excerpt(long), `${'x'.repeat(EXCERPT_CHARS)}…(${MIB - EXCERPT_CHARS} more)`);
    assert.equal(quoted(long), `"${'x'.repeat(EXCERPT_CHARS)}"…(${MIB - EXCERPT_CHARS} more)`);
    const emoji = `${'a'.repeat(EXCERPT_CHARS - 1)}😀${'b'.repeat(10)}`;
    assert.equal(excerpt(emoji), `${'a'.repeat(EXCERPT_CHARS - 1)}…(12 more)`);
    // whatever a message quotes, it stays bounded
    assert.ok(new WasteError('E_ARG', `bad: ${long}`).message.length < 2100);
  });

  it('a special token of 1 MiB in specials.json is one short line naming it, from run and tokenize --markup', () => {
    const dir = copyContainer(path.join(ROOT, 'models', 'demo'));
    const file = path.join(dir, 'specials.json');
    const specials = JSON.parse(fs.readFileSync(file, 'utf8')) as { id: number; text: string }[];
    // [BOS], which the chat format does not use: one it uses would also be refused, even without the
    // bound, as a control token of the format that specials.json no longer names (a clean error)
    const bos = specials.find((s) => s.text === '[BOS]')!;
    bos.text = `<|${'x'.repeat(MIB)}|>`;
    fs.writeFileSync(file, JSON.stringify(specials));
    for (const args of [['run', dir, 'Hi', '-n', '2'], ['tokenize', dir, 'Hi', '--markup']]) {
      const r = waste(args);
      assert.equal(r.code, 1, r.err);
      assert.equal(r.out, '');
      assert.match(r.err, new RegExp(`^waste: .*tokenizer\\.model: special token ${bos.id}'s text is 1048580 characters long, more than the 256 a special token may have\n$`));
      assert.ok(r.err.length < SHORT, `${r.err.length} characters`);
    }
  });

  it('a command-line value or a repository of 100,000 characters is quoted by its start', () => {
    const long = 'z'.repeat(100_000);
    for (const [args, want] of [
      [['plan', '--budget', long], /^waste: budget "z{60}"…\(99940 more\) is not a size/],
      [['pull', '--dry-run', `${long}/x`], /^waste: "z{60}"…\(99942 more\) is not a repository/],
    ] as [string[], RegExp][]) {
      const r = waste(args);
      assert.equal(r.code, 2, r.err);
      assert.match(r.err, want);
      assert.ok(r.err.length < SHORT, `${r.err.length} characters`);
    }
  });
});

describe('excerpts in the server\'s 400s', () => {
  let server: RunningServer;
  before(async () => {
    server = await startServer({ model: 'demo', port: 0, log: false });
  });
  after(async () => {
    await server.close();
  });

  const name = 'f'.repeat(MIB);
  const fn = (n: string) => ({ type: 'function', function: { name: n, parameters: { type: 'object' } } });
  for (const [what, body, want] of [
    ['a content part of a 1 MiB type', { messages: [{ role: 'user', content: [{ type: name, text: 'Hi' }] }] }, /^messages\[0\]\.content\[0\]: only text and image_url parts are supported \(got "f{60}"…\(1048516 more\)\)$/],
    ['a tool_choice naming 1 MiB', { tools: [fn('a')], tool_choice: { type: 'function', function: { name } } }, /^tool_choice names "f{60}"…\(1048516 more\), which is not among the tools$/],
    ['a schema $ref of 1 MiB', { response_format: { type: 'json_schema', json_schema: { name: 's', schema: { $ref: `#/${name}` } } } }, /JSON Schema at .*: "#\/f{58}"…\(1048518 more\) names nothing in the schema/],
  ] as [string, object, RegExp][]) {
    it(`${what}: a 400 whose message quotes an excerpt`, async () => {
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 1, ...body }),
      });
      const doc = (await res.json()) as { error: { message: string } };
      assert.equal(res.status, 400, doc.error.message.slice(0, 200));
      assert.match(doc.error.message, want);
      assert.ok(doc.error.message.length < SHORT, `${doc.error.message.length} characters`);
    });
  }
});
