/**
 * Tool calls and structured output held to K3's markup while sampling: random walks over the
 * synthetic K3 vocabulary, drawing uniformly among the tokens a turn's constraint allows, always
 * end in calls (or a document) that the reply reader — which reads structure by token id — finds
 * and that validate against their schemas. Every marker a walk writes is its reserved token.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Ajv } from 'ajv';
import { vocabOf } from '../src/constrain/vocab.js';
import { XtmlReplyReader } from '../src/chat/xtml/reply.js';
import { type ConstraintPlan, type ToolDecl, turnConstraint } from '../src/chat/tool-grammar.js';
import { XtmlChatFormat, markerIds } from '../src/chat/xtml/format.js';
import { encodeSegments } from '../src/chat/format.js';
import { Rng } from '../src/util/prng.js';
import { k3Tokenizer } from './helpers.js';

const tok = k3Tokenizer();
const vocab = vocabOf(tok);
const k = markerIds(tok);
const syntax = new XtmlChatFormat().syntax;
const TOOLS: ToolDecl[] = [
  { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 6 } }, required: ['city'], additionalProperties: false } },
  { name: 'add', parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'], additionalProperties: false } },
];
const validators = Object.fromEntries(TOOLS.map((t) => [t.name, new Ajv().compile(t.parameters as object)]));
const plan = (p: Partial<ConstraintPlan>): ConstraintPlan => ({ vocab, syntax, endTokens: [k.end], reasoningFirst: false, markers: k, ...p });
const ids = (...parts: (string | number)[]) => parts.flatMap((p) => (typeof p === 'number' ? [p] : tok.encode(p)));

/** Draw uniformly among the allowed tokens, after `prefix`; the reply as the reader sees it, forced beginning included. */
function walk(seed: number, p: ConstraintPlan, prefix: number[] = [], steps = 4000) {
  const { constraint, forced, forcedSegments } = turnConstraint(p);
  const c = constraint!;
  const rng = new Rng(seed);
  const forcedIds = forcedSegments ? encodeSegments(tok, forcedSegments) : [];
  const out: number[] = [];
  for (const t of prefix) {
    c.accept(t);
    out.push(t);
  }
  const logits = new Float32Array(tok.vocabSize);
  let ended = false;
  for (let i = 0; i < steps && !ended; i++) {
    const m = c.mask(logits);
    const allowed: number[] = [];
    for (let t = 0; t < m.length; t++) if (m[t] !== -Infinity) allowed.push(t);
    const t = allowed[Math.floor(rng.float() * allowed.length)];
    c.accept(t);
    out.push(t);
    ended = t === k.end;
  }
  const reader = new XtmlReplyReader(k, { channel: p.reasoningFirst ? 'think' : 'response', tools: !!p.tools });
  const d = tok.decoder();
  for (const t of [...forcedIds, ...out]) reader.push(t, d.push(t));
  reader.flush();
  return { reader, forced, forcedIds, out, ended };
}

/** Every special token of a walk is one of the four markers (so none was spelled as text, nor any other special sampled). */
function onlyMarkers(out: number[]): void {
  const marks = new Set([k.open, k.close, k.sep, k.end]);
  for (const t of out) if (tok.specials.has(t)) assert.ok(marks.has(t), `special ${t} ${tok.decode([t])}`);
}

function validCalls(reader: XtmlReplyReader, max = 4): void {
  assert.ok(reader.calls.length >= 1 && reader.calls.length <= max, `${reader.calls.length} calls`);
  for (const call of reader.calls) {
    assert.ok(validators[call.name], call.name);
    assert.ok(validators[call.name](JSON.parse(call.arguments)), `${call.name} ${call.arguments}`);
  }
}

describe("a turn's constraint in K3's format", () => {
  it('a required call, thinking off: its opening is fed as the renderer cuts it, its arguments a json child valid against the schema', () => {
    for (const seed of [1, 2, 3]) {
      const w = walk(seed, plan({ tools: { decls: TOOLS.slice(1), required: true, parallel: false } }));
      assert.equal(w.forced, '<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="add" index="1"<|sep|><|open|>json type="object"<|sep|>');
      const closeResponse = [k.close, ...tok.encode('response'), k.sep];
      assert.deepEqual(w.forcedIds.slice(0, closeResponse.length), closeResponse);
      assert.ok(w.ended);
      assert.ok(tok.decode(w.out).endsWith('<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>'));
      onlyMarkers(w.out);
      validCalls(w.reader, 1);
      assert.equal(w.reader.calls[0].name, 'add');
    }
    for (const seed of [4, 5, 6]) {
      const w = walk(seed, plan({ tools: { decls: TOOLS, required: true, parallel: true } }));
      // several tools: fed up to the name, which the model chooses
      assert.ok(w.forced.endsWith('<|open|>call tool="'));
      assert.ok(w.ended);
      onlyMarkers(w.out);
      validCalls(w.reader);
    }
  });

  it('a required call, thinking on: free reasoning (which may not end the reply), then an empty response and the calls', () => {
    const p = plan({ reasoningFirst: true, tools: { decls: TOOLS, required: true, parallel: false } });
    const { constraint } = turnConstraint(p);
    const logits = new Float32Array(tok.vocabSize);
    assert.equal(constraint!.mask(logits)[k.end], -Infinity, 'no end before the call');
    assert.notEqual(constraint!.mask(logits)[tok.encode('the')[0]], -Infinity, 'reasoning is free');
    const w = walk(7, p, ids('hmm', k.close, 'think', k.sep));
    assert.equal(w.reader.reasoning, 'hmm');
    assert.equal(w.reader.content, '');
    validCalls(w.reader, 1);
    onlyMarkers(w.out);
  });

  it('tool_choice auto: free until the model opens its tools element — by its tokens, not by spelling it — then the calls are enforced', () => {
    const p = plan({ tools: { decls: TOOLS, required: false, parallel: true } });
    const { constraint } = turnConstraint(p);
    const c = constraint!;
    const logits = new Float32Array(tok.vocabSize).fill(1);
    for (const t of ids('Let me see <|open|>tools<|sep|> spelled, ', k.close, 'response', k.sep)) {
      assert.equal(c.mask(logits), logits, 'free text is not masked');
      c.accept(t);
    }
    for (const seed of [8, 9]) {
      const w = walk(seed, p, ids('Sure.', k.close, 'response', k.sep, k.open, 'tools', k.sep));
      assert.equal(w.reader.content, 'Sure.');
      assert.ok(w.ended);
      onlyMarkers(w.out);
      validCalls(w.reader);
    }
  });

  it('a response schema: the JSON from the first token with thinking off, after the reasoning with it on; a budget closes the reasoning', () => {
    const schema = { type: 'object', properties: { ok: { type: 'boolean' }, n: { enum: [1, 2] } }, required: ['ok', 'n'], additionalProperties: false };
    const check = new Ajv().compile(schema);
    const off = walk(10, plan({ schema }));
    assert.ok(off.ended);
    assert.ok(check(JSON.parse(off.reader.content)), off.reader.content);
    onlyMarkers(off.out);
    const on = walk(11, plan({ schema, reasoningFirst: true }), ids('so', k.close, 'think', k.sep));
    assert.equal(on.reader.reasoning, 'so');
    assert.ok(check(JSON.parse(on.reader.content)), on.reader.content);
    // three tokens of reasoning, then the close is all that is allowed
    const budget = walk(12, plan({ schema, reasoningFirst: true, reasoningBudget: 3 }));
    assert.ok(budget.ended);
    assert.equal(budget.out.indexOf(k.close), 3, 'three tokens of reasoning, then its close');
    assert.ok(check(JSON.parse(budget.reader.content)), budget.reader.content);
  });

  it('a tool name is written escaped and read back as it was, fed or sampled', () => {
    const params = { type: 'object', properties: {}, additionalProperties: false };
    const odd: ToolDecl[] = [
      { name: 'say "hi" & go', parameters: params },
      { name: '<|sep|>&quot;', parameters: params },
    ];
    for (const [seed, decls] of [[13, odd.slice(0, 1)], [14, odd], [15, odd]] as const) {
      const w = walk(seed, plan({ tools: { decls: [...decls], required: true, parallel: false } }));
      assert.ok(w.ended);
      onlyMarkers(w.out);
      assert.equal(w.reader.calls.length, 1);
      assert.ok(decls.some((d) => d.name === w.reader.calls[0].name), JSON.stringify(w.reader.calls));
    }
  });

  it('is no constraint at all for free text', () => {
    assert.deepEqual(turnConstraint(plan({})), { forced: '' });
  });
});
