import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { DEMO_MODEL } from '../src/store/names.js';
import { grammarConstraint, type TokenConstraint } from '../src/constrain/constraint.js';
import { alt, type Grammar, json, lit, repeat, seq } from '../src/constrain/grammar.js';
import { checkSchema, validator } from '../src/constrain/schema.js';
import { type TokenVocab, vocabOf } from '../src/constrain/vocab.js';
import { loadTokenizer } from '../src/tokenizer/load.js';
import { WasteError } from '../src/util/errors.js';
import { Rng } from '../src/util/prng.js';

/**
 * Grammar-constrained sampling: a random sampler that picks any allowed token must always finish
 * with a document that parses and satisfies the schema (checked by ajv), and hand-picked prefixes
 * must mask exactly the tokens that cannot continue them.
 */

const utf8 = new TextEncoder();
const BEGIN = '<|tool_call_begin|>';
const END_CALL = '<|tool_call_end|>';
const EOS = '[EOS]';

/** A byte-level toy vocabulary: every single byte, pieces of JSON, words, split characters, three specials. */
function toyVocab(): TokenVocab & { id(text: string | number[]): number } {
  const tokens: Uint8Array[] = [];
  for (let b = 0; b < 256; b++) tokens.push(new Uint8Array([b]));
  const pieces = [
    '{"', '":', '": ', '", "', '","', '"}', '"]', '["', '[{', '}]', '},', '}}', ']}', '{}', '[]', '"a"', '"a', '"b":', '", ', '],',
    'true', 'false', 'null', 'tr', 'ue', 'nu', ' ', '  ', '    ', '\n', '\n  ', '\n    ', '\t', ',\n', ': ', ', ',
    'name', 'age', 'value', 'children', 'kind', 'tags', 'city', 'zip', 'id', '"name"', '"value":', '"children": [', '"kind":"x"',
    ' the', 'hello', ' world', 'abc', 'xyz', 'é', '日本', '語', '🦜', '\\n', '\\"', '\\\\', '\\u00', '\\ud83d', '\\ude00', '\\u', '\\/',
    '12', '345', '0.', '.5', 'e+', 'E-', '-1', '1e', '00', '999999999', '3.14', 'red', 'green', 'blue', '"red"', 'x"', 'y"}',
    // whole keys of the test schemas, so a random walk writes required keys often enough to finish
    '"id":', '"color":', '"kind":', '"level":', '"x":', '"y":', '"z":', '"a":', '"c":', '"shape":', '"age":',
  ];
  for (const p of pieces) tokens.push(utf8.encode(p));
  // parts of characters, as a byte-level BPE has them
  for (const split of [[0xc3], [0xa9], [0xe6, 0x97], [0xa5], [0xf0, 0x9f], [0xa6, 0x9c], [0xe8, 0xaa, 0x9e, 0x20]]) tokens.push(new Uint8Array(split));
  for (let i = 0; i < 150; i++) tokens.push(utf8.encode(`w${i.toString(36)}`));
  const specials = new Set<number>();
  for (const s of [BEGIN, END_CALL, EOS]) {
    specials.add(tokens.length);
    tokens.push(utf8.encode(s));
  }
  const byText = new Map<string, number>();
  tokens.forEach((t, id) => {
    const key = Buffer.from(t).toString('latin1') + (specials.has(id) ? '#special' : '');
    if (!byText.has(key)) byText.set(key, id);
  });
  return {
    size: tokens.length,
    bytes: (id) => tokens[id],
    isSpecial: (id) => specials.has(id),
    id(text) {
      if (typeof text !== 'string') return byText.get(Buffer.from(text).toString('latin1'))!;
      const special = byText.get(Buffer.from(utf8.encode(text)).toString('latin1') + '#special');
      const id = special ?? byText.get(Buffer.from(utf8.encode(text)).toString('latin1'));
      assert.ok(id !== undefined, `no token ${JSON.stringify(text)}`);
      return id;
    },
  };
}

const toy = toyVocab();
const EOS_ID = toy.id(EOS);

function allowedIds(m: Float32Array): number[] {
  const out: number[] = [];
  for (let i = 0; i < m.length; i++) if (m[i] !== -Infinity) out.push(i);
  return out;
}

/** Feed text byte by byte (single-byte tokens). */
function feed(c: TokenConstraint, text: string): void {
  for (const b of utf8.encode(text)) c.accept(b);
}

const zeros = (v: TokenVocab) => new Float32Array(v.size);
const allows = (c: TokenConstraint, v: TokenVocab, id: number) => c.mask(zeros(v))[id] !== -Infinity;

interface Walk {
  bytes: Uint8Array;
  tokens: number[];
  complete: boolean;
  maskMs: number[];
}

/**
 * Sample a reply: uniformly among the allowed tokens, except that a third of the time it picks a
 * token that closes something (a quote, bracket or brace) when one is allowed, so documents end,
 * and otherwise half the time a token of several bytes (whole keys, words), so they end sooner.
 */
function randomWalk(vocab: TokenVocab, grammar: Grammar, ends: number[], rng: Rng, maxSteps = 3000): Walk {
  const c = grammarConstraint(vocab, grammar, ends);
  const out: number[] = [];
  const tokens: number[] = [];
  const maskMs: number[] = [];
  const closes = (id: number) => !vocab.isSpecial(id) && vocab.bytes(id).some((b) => b === 0x22 || b === 0x5d || b === 0x7d);
  for (let i = 0; i < maxSteps; i++) {
    const t0 = performance.now();
    const m = c.mask(zeros(vocab));
    maskMs.push(performance.now() - t0);
    const ids = allowedIds(m);
    assert.ok(ids.length > 0);
    if (c.complete) {
      assert.ok(ids.every((id) => ends.includes(id)), 'when complete, only end tokens are allowed');
      c.accept(ids[rng.int(ids.length)]);
      return { bytes: Uint8Array.from(out), tokens, complete: true, maskMs };
    }
    assert.ok(ids.every((id) => !ends.includes(id)), 'end tokens are masked until the grammar is complete');
    const closing = ids.filter(closes);
    const long = ids.filter((id) => vocab.bytes(id).length > 1);
    const r = rng.float();
    const pick = closing.length && r < 0.33 ? closing[rng.int(closing.length)] : long.length && r < 0.66 ? long[rng.int(long.length)] : ids[rng.int(ids.length)];
    c.accept(pick);
    tokens.push(pick);
    out.push(...vocab.bytes(pick));
  }
  return { bytes: Uint8Array.from(out), tokens, complete: false, maskMs };
}

const SCHEMAS: Record<string, unknown> = {
  'nested objects': {
    type: 'object',
    properties: {
      name: { type: 'string', minLength: 1, maxLength: 12, description: 'ignored' },
      age: { type: 'integer' },
      address: { type: 'object', properties: { city: { type: 'string' }, zip: { type: 'string', maxLength: 5 } }, required: ['city'], additionalProperties: false },
      tags: { type: 'array', items: { type: 'string', maxLength: 4 }, maxItems: 3 },
    },
    required: ['name', 'age'],
    additionalProperties: false,
  },
  'arrays with min and max items': { type: 'array', items: { type: 'number' }, minItems: 2, maxItems: 4 },
  'enum and const': {
    type: 'object',
    properties: { color: { enum: ['red', 'green', 'blue', 42, null, { a: [1] }] }, kind: { const: 'x' }, level: { type: 'integer', enum: [1, 2.5, 'three', 4] } },
    required: ['color', 'kind', 'level'],
  },
  'anyOf of object and string': {
    anyOf: [{ type: 'object', properties: { kind: { const: 'x' }, n: { type: 'integer' } }, required: ['kind'], additionalProperties: false }, { type: 'string', maxLength: 3 }],
  },
  'recursive $ref tree': {
    $defs: {
      node: {
        type: 'object',
        properties: { value: { type: 'integer' }, children: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 3 } },
        required: ['value'],
        additionalProperties: false,
      },
    },
    $ref: '#/$defs/node',
  },
  'additionalProperties schema': { type: 'object', properties: { id: { type: 'integer' } }, required: ['id'], additionalProperties: { type: 'boolean' } },
  'additionalProperties false with required keys only': { type: 'object', required: ['a', 'b'], properties: { a: { type: 'null' } }, additionalProperties: { type: 'integer' } },
  nullable: { type: 'object', properties: { x: { type: 'string', nullable: true }, y: { type: 'integer', nullable: true }, z: { nullable: true, enum: ['red'] } }, required: ['x', 'y', 'z'] },
  'json_object mode': { type: 'object' },
  'any JSON value': true,
  'prefixItems with items false': { type: 'array', prefixItems: [{ type: 'string' }, { type: 'integer' }, { type: 'boolean' }], items: false, minItems: 2 },
  'oneOf, allOf with one member, definitions': {
    definitions: { pt: { type: 'object', properties: { x: { type: 'number' }, y: { type: 'number' } }, required: ['x', 'y'], additionalProperties: false } },
    type: 'object',
    properties: { shape: { oneOf: [{ allOf: [{ $ref: '#/definitions/pt' }] }, { type: 'array', items: { $ref: '#/definitions/pt' }, minItems: 1, maxItems: 2 }] } },
    required: ['shape'],
    additionalProperties: false,
  },
  'unicode strings with length limits': { type: 'array', items: { type: 'string', minLength: 2, maxLength: 4 }, minItems: 1, maxItems: 3 },
  'type list and integer vs number': { type: 'object', properties: { a: { type: ['string', 'null'] }, b: { type: ['integer', 'boolean'] }, c: { type: 'number' } }, required: ['a', 'b', 'c'] },
};

describe('constrained sampling: random documents from a toy byte-level vocabulary', () => {
  for (const [name, schema] of Object.entries(SCHEMAS)) {
    it(`${name}: every document finishes, parses and passes ajv`, () => {
      const check = validator(schema);
      const rng = new Rng(name.length * 7919 + 1);
      const seen = new Set<string>();
      for (let n = 0; n < 40; n++) {
        const w = randomWalk(toy, json(schema), [EOS_ID], rng);
        assert.ok(w.complete, `${name}: document ${n} did not finish in 3000 tokens`);
        const text = new TextDecoder('utf-8', { fatal: true }).decode(w.bytes);
        let value: unknown;
        assert.doesNotThrow(() => {
          value = JSON.parse(text);
        }, `${name}: ${JSON.stringify(text)} does not parse`);
        assert.equal(check(value), null, `${name}: ${text}`);
        seen.add(text);
      }
      assert.ok(seen.size > 10, `${name}: the walks should differ (${seen.size} distinct)`);
    });
  }

  it('a tool call framed by special tokens: the markers come as specials or spelled out, never inside the JSON', () => {
    const schema = SCHEMAS['nested objects'];
    const check = validator(schema);
    const rng = new Rng(5);
    let asSpecial = 0;
    let spelled = 0;
    for (let n = 0; n < 40; n++) {
      const w = randomWalk(toy, seq(lit(BEGIN), json(schema), lit(END_CALL)), [EOS_ID], rng);
      assert.ok(w.complete);
      const specials = w.tokens.filter((id) => toy.isSpecial(id));
      for (const id of specials) assert.ok(id === toy.id(BEGIN) || id === toy.id(END_CALL));
      if (w.tokens[0] === toy.id(BEGIN)) asSpecial++;
      else spelled++;
      const text = new TextDecoder().decode(w.bytes);
      assert.ok(text.startsWith(BEGIN) && text.endsWith(END_CALL), text);
      assert.equal(check(JSON.parse(text.slice(BEGIN.length, -END_CALL.length))), null, text);
    }
    assert.ok(asSpecial > 0 && spelled > 0, `both ways should occur (${asSpecial} as the special token, ${spelled} spelled)`);
  });

  it('alt, repeat with a separator, and an empty endTokens list (the caller watches complete)', () => {
    const g = seq(lit('calls:'), repeat(alt(json({ type: 'integer' }), json({ type: 'object', properties: { k: { type: 'boolean' } }, additionalProperties: false })), 1, 3, ';'), lit('.'));
    const rng = new Rng(11);
    for (let n = 0; n < 30; n++) {
      const c = grammarConstraint(toy, g, []);
      let text = '';
      for (let i = 0; i < 3000 && !c.complete; i++) {
        const ids = allowedIds(c.mask(zeros(toy)));
        const closing = ids.filter((id) => toy.bytes(id).some((b) => b === 0x7d || b === 0x2e || b === 0x3b || b === 0x22));
        const pick = closing.length && rng.float() < 0.3 ? closing[rng.int(closing.length)] : ids[rng.int(ids.length)];
        c.accept(pick);
        text += new TextDecoder().decode(toy.bytes(pick));
      }
      assert.ok(c.complete, text);
      assert.match(text, /^calls:[^;]+(;[^;]+){0,2}\.$/);
      for (const part of text.slice(6, -1).split(';')) {
        const v = JSON.parse(part);
        assert.ok(Number.isInteger(v) || (typeof v === 'object' && Object.keys(v).every((k) => k === 'k')), part);
      }
      assert.throws(() => c.mask(zeros(toy)), (e: unknown) => e instanceof WasteError && e.code === 'E_STATE');
    }
  });

  it('the mask agrees with accept: a token is allowed exactly when accepting it succeeds', () => {
    const schema = SCHEMAS['nested objects'];
    const rng = new Rng(3);
    for (let n = 0; n < 2; n++) {
      const w = randomWalk(toy, json(schema), [EOS_ID], rng, 400);
      for (let at = 0; at <= w.tokens.length; at += Math.max(1, Math.floor(w.tokens.length / 8))) {
        const replay = () => {
          const c = grammarConstraint(toy, json(schema), [EOS_ID]);
          for (const t of w.tokens.slice(0, at)) c.accept(t);
          return c;
        };
        const mask = replay().mask(zeros(toy));
        for (let id = 0; id < toy.size; id++) {
          let ok = true;
          try {
            replay().accept(id);
          } catch {
            ok = false;
          }
          assert.equal(mask[id] !== -Infinity, ok, `token ${id} ${JSON.stringify(new TextDecoder().decode(toy.bytes(id)))} after ${JSON.stringify(new TextDecoder().decode(Uint8Array.from(w.tokens.slice(0, at).flatMap((t) => [...toy.bytes(t)]))))}`);
        }
      }
    }
  });
});

describe('constrained sampling: what is masked', () => {
  const after = (schema: unknown, text: string, ends = [EOS_ID]) => {
    const c = grammarConstraint(toy, json(schema), ends);
    feed(c, text);
    return c;
  };

  it('a value of the wrong type: after {"a": an integer may begin, a string may not', () => {
    const c = after({ type: 'object', properties: { a: { type: 'integer' } } }, '{"a":');
    assert.ok(!allows(c, toy, toy.id('"')));
    assert.ok(allows(c, toy, toy.id('1')));
    assert.ok(allows(c, toy, toy.id('-1')));
    assert.ok(allows(c, toy, toy.id(' ')));
    assert.ok(!allows(c, toy, toy.id('3.14')), 'an integer has no fraction');
    assert.ok(!allows(c, toy, toy.id('true')));
    feed(c, '12');
    assert.ok(!allows(c, toy, toy.id('.5')));
    assert.ok(allows(c, toy, toy.id('}')));
    assert.throws(() => c.accept(toy.id('"')), (e: unknown) => e instanceof WasteError && e.code === 'E_ARG');
  });

  it('} only once every required key is there; a key at most once; unknown keys refused with additionalProperties false', () => {
    const schema = { type: 'object', properties: { name: { type: 'string' }, age: { type: 'integer' } }, required: ['name', 'age'], additionalProperties: false };
    const c = after(schema, '{');
    assert.ok(!allows(c, toy, toy.id('}')));
    assert.ok(!allows(c, toy, toy.id('{}')) && !allows(c, toy, toy.id('"b":')) && allows(c, toy, toy.id('"a')) && allows(c, toy, toy.id('"age":')));
    feed(c, '"');
    assert.deepEqual(allowedIds(c.mask(zeros(toy))).map((id) => new TextDecoder().decode(toy.bytes(id))).sort(), ['a', 'age', 'n', 'name']);
    feed(c, 'name":"x"');
    assert.ok(!allows(c, toy, toy.id('}')), 'age is still missing');
    assert.ok(allows(c, toy, toy.id(',')));
    feed(c, ',"');
    assert.ok(!allows(c, toy, toy.id('n')), 'name was given already');
    assert.ok(allows(c, toy, toy.id('a')));
    feed(c, 'age":7');
    assert.ok(allows(c, toy, toy.id('}')));
    assert.ok(!allows(c, toy, toy.id(',')), 'no key is left to write');
    const no = after({ type: 'object', properties: { a: false, b: { type: 'null' } }, required: ['b'] }, '{"a');
    assert.ok(!allows(no, toy, toy.id('"')), 'a property whose schema is false cannot be written as another key');
    assert.ok(allows(no, toy, toy.id('b')));
    const any = after({ type: 'object' }, '{"a":1,');
    assert.ok(!allows(any, toy, toy.id('"a"')), 'a repeated key');
    assert.ok(allows(any, toy, toy.id('"a')), '"ab" is another key');
    feed(any, '"a');
    assert.ok(!allows(any, toy, toy.id('"')) && !allows(any, toy, toy.id('":')));
    assert.ok(allows(any, toy, toy.id('b')));
  });

  it('strings: control characters, escapes, UTF-8 split across tokens, surrogate pairs, lengths in characters', () => {
    const c = after({ type: 'string' }, '"');
    assert.ok(!allows(c, toy, 0x0a) && !allows(c, toy, 0x00) && !allows(c, toy, toy.id('\n')), 'raw control characters');
    assert.ok(allows(c, toy, toy.id('\\n')) && allows(c, toy, toy.id('\\"')) && allows(c, toy, toy.id('\\/')));
    assert.ok(!allows(c, toy, 0x80) && !allows(c, toy, 0xc0) && !allows(c, toy, 0xff), 'not a UTF-8 lead byte');
    assert.ok(allows(c, toy, toy.id([0xe6, 0x97])));
    c.accept(toy.id([0xe6, 0x97]));
    assert.deepEqual(allowedIds(c.mask(zeros(toy))).filter((id) => id < 256), Array.from({ length: 64 }, (_, i) => 0x80 + i), 'only a continuation byte');
    assert.ok(allows(c, toy, toy.id([0xa5])) && !allows(c, toy, toy.id('"')));
    c.accept(toy.id([0xa5]));
    feed(c, '\\u');
    assert.ok(allows(c, toy, toy.id('d')));
    feed(c, 'd');
    assert.ok(!allows(c, toy, toy.id('c')), 'a lone low surrogate');
    feed(c, '83d');
    assert.ok(!allows(c, toy, toy.id('"')), 'a high surrogate needs its low half');
    assert.ok(allows(c, toy, toy.id('\\ude00')));
    c.accept(toy.id('\\ude00'));
    feed(c, '"');
    assert.ok(c.complete);
    const s = after({ type: 'string', minLength: 2, maxLength: 3 }, '"é');
    assert.ok(!allows(s, toy, toy.id('"')), 'one character is too short');
    feed(s, '日本');
    assert.ok(!allows(s, toy, toy.id('a')) && !allows(s, toy, toy.id('\\n')), 'three characters is the most');
    assert.ok(allows(s, toy, toy.id('"')));
  });

  it('numbers: JSON syntax, bounded digits; whitespace is bounded too', () => {
    const c = after({ type: 'array', items: { type: 'number' } }, '[-');
    assert.ok(!allows(c, toy, toy.id('-1')) && !allows(c, toy, toy.id('.5')));
    feed(c, '0');
    assert.ok(!allows(c, toy, toy.id('0')) && !allows(c, toy, toy.id('12')), 'no leading zeros');
    assert.ok(allows(c, toy, toy.id('.5')) && allows(c, toy, toy.id('e+')) && allows(c, toy, toy.id(']')));
    feed(c, '.5e');
    assert.ok(!allows(c, toy, toy.id(']')) && allows(c, toy, toy.id('-1')));
    feed(c, '-12');
    assert.ok(!allows(c, toy, toy.id('0')), 'at most two exponent digits: the value stays finite');
    const d = after({ type: 'array', items: { type: 'integer' } }, '[999999999');
    feed(d, '999999');
    assert.ok(!allows(d, toy, toy.id('9')), 'at most 15 digits, so the value stays exact');
    assert.ok(!allows(d, toy, toy.id('.5')) && !allows(d, toy, toy.id('e+')));
    // a number at the top level completes the grammar as soon as it could end
    const top1 = after({ type: 'integer' }, '7');
    assert.ok(top1.complete);
    assert.deepEqual(allowedIds(top1.mask(zeros(toy))), [EOS_ID]);
    // a gap is nothing, one space, or a line break and at most 20 blanks of indentation
    const sp = after({ type: 'array' }, '[ ');
    assert.ok(!allows(sp, toy, toy.id(' ')) && !allows(sp, toy, toy.id('\n')) && allows(sp, toy, toy.id(']')));
    const ws = after({ type: 'array' }, '[\r\n');
    assert.ok(!allows(ws, toy, toy.id('\n')) && allows(ws, toy, toy.id('    ')) && allows(ws, toy, toy.id('\t')) && allows(ws, toy, toy.id(']')));
    feed(ws, ' '.repeat(19));
    assert.ok(allows(ws, toy, toy.id(' ')) && !allows(ws, toy, toy.id('  ')));
    feed(ws, '\t');
    assert.ok(!allows(ws, toy, toy.id(' ')) && allows(ws, toy, toy.id('1')));
    assert.ok(!allows(after({ type: 'array' }, '[\r'), toy, toy.id(']')), 'a \\r needs its \\n');
    const top = grammarConstraint(toy, json(true), [EOS_ID]);
    assert.ok(!allows(top, toy, toy.id(' ')), 'no whitespace before the top-level value');
  });

  it('special tokens: only where a literal spells their whole text, never inside JSON; end tokens only when complete, then only they', () => {
    const c = grammarConstraint(toy, seq(lit(BEGIN), json({ type: 'object', properties: { a: { type: 'string' } } }), lit(END_CALL)), [EOS_ID]);
    assert.ok(allows(c, toy, toy.id(BEGIN)) && allows(c, toy, toy.id('<')));
    assert.ok(!allows(c, toy, toy.id(END_CALL)) && !allows(c, toy, EOS_ID));
    c.accept(toy.id(BEGIN));
    feed(c, '{"a":"');
    for (const s of [BEGIN, END_CALL, EOS]) assert.ok(!allows(c, toy, toy.id(s)), `${s} inside a string`);
    feed(c, 'x"}');
    assert.ok(allows(c, toy, toy.id(END_CALL)) && allows(c, toy, toy.id('<')) && !allows(c, toy, EOS_ID));
    assert.ok(!c.complete);
    feed(c, '<|tool_call_end');
    assert.ok(!allows(c, toy, toy.id(END_CALL)), 'the special token does not fit what is left of the literal');
    feed(c, '|>');
    assert.ok(c.complete);
    assert.deepEqual(allowedIds(c.mask(zeros(toy))), [EOS_ID]);
    assert.throws(() => c.accept(toy.id('x')), /only end tokens/);
    c.accept(EOS_ID);
  });

  it('a literal of special tokens only (markup read by id) or of ordinary tokens only (text that must stay text)', () => {
    // "special": the marker as its token, never spelled by ordinary ones
    const marks = grammarConstraint(toy, seq(lit(BEGIN, 'special'), lit('x'), lit(END_CALL, 'special')), [EOS_ID]);
    assert.deepEqual(allowedIds(marks.mask(zeros(toy))), [toy.id(BEGIN)]);
    assert.throws(() => grammarConstraint(toy, lit(BEGIN, 'special'), [EOS_ID]).accept(toy.id('<')), /cannot continue/);
    marks.accept(toy.id(BEGIN));
    marks.accept(toy.id('x'));
    assert.deepEqual(allowedIds(marks.mask(zeros(toy))), [toy.id(END_CALL)]);
    marks.accept(toy.id(END_CALL));
    assert.ok(marks.complete);
    // "plain": a name that happens to spell a marker is spelled, never the special token
    const plain = grammarConstraint(toy, seq(lit('f'), lit(BEGIN, 'plain')), [EOS_ID]);
    plain.accept(toy.id('f'));
    const m = allowedIds(plain.mask(zeros(toy)));
    assert.ok(m.includes(toy.id('<')) && !m.includes(toy.id(BEGIN)), 'spelled, not the special');
    assert.throws(() => grammarConstraint(toy, lit('x', 'nope' as never), []), /special" or "plain/);
    // random walks keep to it: every special token is a marker, and each marker is one
    const rng = new Rng(9);
    for (let n = 0; n < 20; n++) {
      const w = randomWalk(toy, seq(lit(BEGIN, 'special'), json(SCHEMAS['nested objects']), lit(END_CALL, 'special')), [EOS_ID], rng);
      assert.ok(w.complete);
      assert.equal(w.tokens[0], toy.id(BEGIN));
      assert.equal(w.tokens[w.tokens.length - 1], toy.id(END_CALL));
      assert.equal(w.tokens.filter((id) => toy.isSpecial(id)).length, 2);
    }
  });

  it('masking keeps the logits of allowed tokens and sizes to the logits given', () => {
    const c = grammarConstraint(toy, json({ enum: ['red', 'green'] }), [EOS_ID]);
    const logits = Float32Array.from({ length: toy.size + 5 }, (_, i) => i / 10);
    const m = c.mask(logits);
    assert.equal(m.length, toy.size + 5);
    assert.deepEqual(allowedIds(m), [0x22, toy.id('"red"')].sort((a, b) => a - b));
    assert.equal(m[0x22], logits[0x22]);
    assert.equal(logits[1], Math.fround(0.1), 'the input is not changed');
  });

  it('throws E_STATE when the vocabulary has no token that can continue', () => {
    const letters: TokenVocab = { size: 26, bytes: (id) => new Uint8Array([0x61 + id]), isSpecial: () => false };
    const c = grammarConstraint(letters, json({ type: 'object' }), []);
    assert.throws(() => c.mask(new Float32Array(26)), (e: unknown) => e instanceof WasteError && e.code === 'E_STATE' && /no token/.test(e.message));
  });

  it('a schema no finite value satisfies, or a malformed grammar, is refused up front', () => {
    const $defs = { n: { type: 'object', properties: { next: { $ref: '#/$defs/n' } }, required: ['next'] } };
    assert.throws(() => grammarConstraint(toy, json({ $defs, $ref: '#/$defs/n' }), []), (e: unknown) => e instanceof WasteError && e.code === 'E_ARG');
    assert.throws(() => grammarConstraint(toy, json({ type: 'string', minLength: 3, maxLength: 2 }), []), /admits no finite text/);
    assert.throws(() => grammarConstraint(toy, json({ type: 'object', required: ['x'], additionalProperties: false }), []), /admits no finite text/);
    assert.throws(() => grammarConstraint(toy, repeat(lit(''), 0, Infinity), []), /may be empty/);
    // an unsatisfiable branch is simply never offered
    const c = grammarConstraint(toy, json({ $defs, anyOf: [{ $ref: '#/$defs/n' }, { type: 'boolean' }] }), []);
    assert.deepEqual(allowedIds(c.mask(zeros(toy))).map((id) => new TextDecoder().decode(toy.bytes(id))).sort(), ['f', 'false', 't', 'tr', 'true']);
  });
});

describe('checkSchema and validator', () => {
  const refuses = (schema: unknown, keyword: string, pointer: string) =>
    assert.throws(
      () => checkSchema(schema),
      (e: unknown) => e instanceof WasteError && e.code === 'E_ARG' && e.message.includes(`"${keyword}"`) && e.message.includes(pointer),
      `${keyword} at ${pointer}`,
    );

  it('refuses keywords sampling cannot enforce, naming them and where they are', () => {
    refuses({ type: 'string', pattern: '^a' }, 'pattern', '#/pattern');
    refuses({ type: 'object', properties: { n: { type: 'integer', minimum: 0 } } }, 'minimum', '#/properties/n/minimum');
    refuses({ $defs: { x: { frobnicate: true } }, $ref: '#/$defs/x' }, 'frobnicate', '#/$defs/x/frobnicate');
    refuses({ type: 'array', items: { uniqueItems: true } }, 'uniqueItems', '#/items/uniqueItems');
    refuses({ anyOf: [{ not: { type: 'null' } }] }, 'not', '#/anyOf/0/not');
    refuses({ properties: { 'a/b': { multipleOf: 2 } } }, 'multipleOf', '#/properties/a~1b/multipleOf');
    for (const k of ['exclusiveMinimum', 'maximum', 'patternProperties', 'if', 'contains', 'propertyNames', 'minProperties', 'maxProperties', 'dependentRequired', 'dependentSchemas'])
      refuses({ [k]: {} }, k, `#/${k}`);
  });

  it('accepts the supported subset and ignores annotations (format is not enforced)', () => {
    for (const s of Object.values(SCHEMAS)) checkSchema(s);
    checkSchema({ type: 'string', format: 'date-time', title: 't', description: 'd', default: 'x', examples: ['y'], $schema: 'https://json-schema.org/draft/2020-12/schema', $comment: 'c', strict: true });
    assert.throws(() => checkSchema({ $ref: 'https://example.com/s.json' }), /only references within the schema/);
    assert.throws(() => checkSchema({ $ref: '#/$defs/missing' }), /names nothing/);
    assert.throws(() => checkSchema({ type: 'strin' }), /#\/type/);
    assert.throws(() => checkSchema({ items: [{ type: 'string' }] }), /prefixItems/);
  });

  it('the validator reads oneOf as anyOf and nullable as "or null", as the sampler does', () => {
    const v = validator({ type: 'object', properties: { x: { type: 'string', nullable: true }, y: { oneOf: [{ type: 'number' }, { type: 'integer' }] } }, required: ['x'] });
    assert.equal(v({ x: null, y: 3 }), null);
    assert.equal(v({ x: 'a' }), null);
    assert.match(v({ x: 3 }) ?? '', /value/);
    assert.notEqual(v({}), null);
  });
});

describe('constrained sampling on the demo model vocabulary (4,096 tokens)', () => {
  const manifest = JSON.parse(fs.readFileSync(path.join(DEMO_MODEL, 'manifest.json'), 'utf8')) as { config: { vocab_size: number } };
  // as the engine opens it: the reserved special ids stop at the model's vocabulary
  const tok = loadTokenizer(DEMO_MODEL, { modelVocab: manifest.config.vocab_size })!;
  const vocab = vocabOf(tok);
  const ends = [tok.specialId('[EOS]')!, tok.specialId('<|im_end|>')!];

  it('documents as a model would write them (compact, pretty-printed, with escapes) are accepted token by token', () => {
    const docs: [unknown, string[]][] = [
      [
        SCHEMAS['nested objects'],
        [
          '{"name":"Ishmael","age":33,"address":{"city":"Nantucket"},"tags":["sea","whal"]}',
          String.raw`{
  "tags": [],
  "age": -0,
  "name": "é日本🦜",
  "address": {
    "zip": "02554",
    "city": "N\u00e9\/x\n\t\"\\"
  }
}`,
          '{ "age" : 1 ,\n  "name" : "\\ud83e\\udd9c" }',
        ],
      ],
      [SCHEMAS['recursive $ref tree'], [JSON.stringify({ value: 1, children: [{ value: 2, children: [{ value: 3 }] }, { value: 4, children: [] }] }, null, 2)]],
      [SCHEMAS['json_object mode'], ['{}', '{"a":[1,2.5e-3,{"b":null}],"c":"d","":true}', JSON.stringify({ x: { y: [true, false, 'z'] } }, null, '\t')]],
      [SCHEMAS['anyOf of object and string'], ['"ab"', '{"kind":"x","n":12}', '{"n":-7,"kind":"x"}']],
      [SCHEMAS['enum and const'], ['{"level":4,"kind":"x","color":{"a":[1]}}', '{"color":null,"extra":[{}],"kind":"x","level":1}']],
    ];
    for (const [schema, texts] of docs) {
      for (const text of texts) {
        const c = grammarConstraint(vocab, json(schema), ends);
        for (const id of tok.encode(text)) {
          assert.ok(allows(c, vocab, id), `${JSON.stringify(tok.decode([id]))} masked in ${text}`);
          c.accept(id);
        }
        assert.ok(c.complete, text);
        assert.equal(validator(schema)(JSON.parse(text)), null);
      }
    }
  });

  it('random documents through the real tokenizer are valid; mask time per step', (t) => {
    assert.equal(vocab.size, 4096);
    const times: number[] = [];
    let docs = 0;
    for (const [name, open] of Object.entries(SCHEMAS)) {
      // a random walk through real tokens almost never spells a required key when any key may be
      // written, so objects are closed, and the schemas that need other keys are left out
      if (name.startsWith('additionalProperties')) continue;
      const schema = closeObjects(open);
      const check = validator(schema);
      const rng = new Rng(name.length + 17);
      for (let n = 0; n < 6; n++) {
        const w = randomWalk(vocab, json(schema), ends, rng);
        assert.ok(w.complete, name);
        const text = tok.decode(w.tokens);
        assert.equal(check(JSON.parse(text)), null, `${name}: ${text}`);
        times.push(...w.maskMs.slice(1));
        docs++;
      }
    }
    // framed by the model's own special tokens, which never appear inside the JSON
    const framed = seq(lit('<|im_assistant|>'), json(closeObjects(SCHEMAS['nested objects'])), lit('<|im_end|>'));
    const rng = new Rng(99);
    for (let n = 0; n < 6; n++) {
      const w = randomWalk(vocab, framed, [tok.specialId('[EOS]')!], rng);
      assert.ok(w.complete);
      const inner = w.tokens.filter((id) => vocab.isSpecial(id)).map((id) => tok.decode([id]));
      assert.ok(inner.every((x) => x === '<|im_assistant|>' || x === '<|im_end|>'), inner.join());
      const text = tok.decode(w.tokens);
      assert.ok(text.startsWith('<|im_assistant|>') && text.endsWith('<|im_end|>'), text);
      assert.doesNotThrow(() => JSON.parse(text.slice('<|im_assistant|>'.length, -'<|im_end|>'.length)), text);
    }
    times.sort((a, b) => a - b);
    const mean = times.reduce((a, b) => a + b, 0) / times.length;
    t.diagnostic(
      `demo vocab (${vocab.size} tokens): ${docs} documents, ${times.length} masks — mean ${mean.toFixed(3)} ms, median ${times[times.length >> 1].toFixed(3)} ms, p99 ${times[Math.floor(times.length * 0.99)].toFixed(3)} ms, max ${times[times.length - 1].toFixed(3)} ms per step`,
    );
  });
});

/** The schema with additionalProperties: false wherever an object has required keys and says nothing of others. */
function closeObjects(s: unknown): unknown {
  if (Array.isArray(s)) return s.map(closeObjects);
  if (typeof s !== 'object' || s === null) return s;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(s)) out[k] = k === 'enum' || k === 'const' ? v : closeObjects(v);
  if ('required' in out && !('additionalProperties' in out)) out.additionalProperties = false;
  return out;
}
