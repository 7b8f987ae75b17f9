import { type TokenConstraint, grammarConstraint } from '../constrain/constraint.js';
import { type Grammar, alt, json, lit, seq } from '../constrain/grammar.js';
import type { TokenVocab } from '../constrain/vocab.js';
import { HERMES_TOOL_MARKERS, KIMI_TOOL_MARKERS } from '../generate/reply.js';
import type { ReplySyntax } from '../tokenizer/chat.js';

export interface ToolDecl {
  name: string;
  description?: string;
  /** JSON Schema of the arguments (an object). */
  parameters: unknown;
}

/** Most calls one reply may make when parallel calls are allowed (the grammar is unrolled). */
const MAX_PARALLEL = 4;

const optional = (g: Grammar): Grammar => alt([seq([]), g]);

/** One call, at position `index` of the section, to any of `tools`, in the template's syntax. */
function callGrammar(style: 'kimi' | 'hermes', tools: ToolDecl[], index: number): Grammar {
  return alt(
    tools.map((t) =>
      style === 'kimi'
        ? seq([lit(KIMI_TOOL_MARKERS.call), lit(`functions.${t.name}:${index}`), lit(KIMI_TOOL_MARKERS.args), json(t.parameters), lit(KIMI_TOOL_MARKERS.callEnd)])
        : seq([lit(HERMES_TOOL_MARKERS.call), lit(`\n{"name": ${JSON.stringify(t.name)}, "arguments": `), json(t.parameters), lit('}\n'), lit(HERMES_TOOL_MARKERS.callEnd)]),
    ),
  );
}

/** Calls `from` onwards, each optional, up to MAX_PARALLEL in all (or none when not parallel). */
function moreCalls(style: 'kimi' | 'hermes', tools: ToolDecl[], parallel: boolean, from: number): Grammar {
  let g: Grammar = seq([]);
  if (parallel) for (let i = MAX_PARALLEL - 1; i >= from; i--) g = optional(seq([callGrammar(style, tools, i), g]));
  return g;
}

/** The calls of a section: one, or up to MAX_PARALLEL in a row. */
function callsGrammar(style: 'kimi' | 'hermes', tools: ToolDecl[], parallel: boolean): Grammar {
  return seq([callGrammar(style, tools, 0), moreCalls(style, tools, parallel, 1)]);
}

/** A whole tool-call section (what the model must write when a call is required). */
export function toolSectionGrammar(style: 'kimi' | 'hermes', tools: ToolDecl[], parallel: boolean): Grammar {
  const calls = callsGrammar(style, tools, parallel);
  return style === 'kimi' ? seq([lit(KIMI_TOOL_MARKERS.section), calls, lit(KIMI_TOOL_MARKERS.sectionEnd)]) : calls;
}

/**
 * A required call from the reply's first token: the markup every such reply begins with is not
 * sampled but written into the prompt (tokenized as the template's markup, so a marker that is a
 * special token is one token), up to where the model has a choice — the tool's name, or with one
 * tool its arguments. The grammar takes over from there.
 */
export function forcedToolCall(style: 'kimi' | 'hermes', tools: ToolDecl[], parallel: boolean): { forced: string; grammar: Grammar } {
  const one = tools.length === 1 ? tools[0] : undefined;
  if (style === 'kimi') {
    const K = KIMI_TOOL_MARKERS;
    const first = one
      ? seq([json(one.parameters), lit(K.callEnd)])
      : alt(tools.map((t) => seq([lit(`${t.name}:0`), lit(K.args), json(t.parameters), lit(K.callEnd)])));
    return {
      forced: K.section + K.call + (one ? `functions.${one.name}:0${K.args}` : 'functions.'),
      grammar: seq([first, moreCalls(style, tools, parallel, 1), lit(K.sectionEnd)]),
    };
  }
  const H = HERMES_TOOL_MARKERS;
  const tail = (t: ToolDecl) => [json(t.parameters), lit('}\n'), lit(H.callEnd)];
  const first = one ? seq(tail(one)) : alt(tools.map((t) => seq([lit(`${JSON.stringify(t.name).slice(1)}, "arguments": `), ...tail(t)])));
  return {
    forced: `${H.call}\n{"name": ${one ? `${JSON.stringify(one.name)}, "arguments": ` : '"'}`,
    grammar: seq([first, moreCalls(style, tools, parallel, 1)]),
  };
}

/** The rest of a section once the model has opened it by itself (tool_choice "auto"). */
function toolSectionRest(style: 'kimi' | 'hermes', tools: ToolDecl[], parallel: boolean): { trigger: string; grammar: Grammar } {
  if (style === 'kimi') return { trigger: KIMI_TOOL_MARKERS.section, grammar: seq([callsGrammar(style, tools, parallel), lit(KIMI_TOOL_MARKERS.sectionEnd)]) };
  // after "<tool_call>" the rest of the first call, then possibly more
  const rest = (t: ToolDecl) => seq([lit(`\n{"name": ${JSON.stringify(t.name)}, "arguments": `), json(t.parameters), lit('}\n'), lit(HERMES_TOOL_MARKERS.callEnd)]);
  return { trigger: HERMES_TOOL_MARKERS.call, grammar: seq([alt(tools.map(rest)), moreCalls(style, tools, parallel, 1)]) };
}

/** Watches a reply's bytes for a piece of text (a marker) as tokens are accepted. */
class TextWatch {
  private tail: number[] = [];
  private readonly want: Uint8Array;

  constructor(
    private readonly vocab: TokenVocab,
    readonly text: string,
  ) {
    this.want = new TextEncoder().encode(text);
  }

  /** Whether the reply's text now ends with the watched text. */
  push(token: number): boolean {
    for (const b of this.vocab.bytes(token)) this.tail.push(b);
    if (this.tail.length > this.want.length) this.tail.splice(0, this.tail.length - this.want.length);
    return this.tail.length === this.want.length && this.tail.every((b, i) => b === this.want[i]);
  }
}

/**
 * Free text until the reply's text ends with `trigger`, then `grammar` to its end: how a reply
 * thinks first and then answers in JSON, or calls a tool when it chooses to.
 */
class AfterText implements TokenConstraint {
  private inner: TokenConstraint | undefined;
  private readonly watch: TextWatch;

  constructor(
    vocab: TokenVocab,
    trigger: string,
    private readonly then: () => TokenConstraint,
  ) {
    this.watch = new TextWatch(vocab, trigger);
  }

  mask(logits: Float32Array): Float32Array {
    return this.inner ? this.inner.mask(logits) : logits;
  }

  accept(token: number): void {
    if (this.inner) return this.inner.accept(token);
    if (this.watch.push(token)) this.inner = this.then();
  }

  get complete(): boolean {
    return this.inner?.complete ?? false;
  }
}

/**
 * A reasoning budget: after `budget` tokens of a reply that starts in the reasoning block, the
 * block is closed — its close marker is the only thing allowed until it is written — and the
 * turn's own constraint (if any) carries on. A reply that closes the block by itself is untouched.
 */
class ReasoningBudget implements TokenConstraint {
  private used = 0;
  private closed = false;
  private closing: TokenConstraint | undefined;
  private readonly watch: TextWatch;

  constructor(
    private readonly vocab: TokenVocab,
    close: string,
    private readonly budget: number,
    private readonly inner: TokenConstraint | undefined,
  ) {
    this.watch = new TextWatch(vocab, close);
    if (budget <= 0) this.closing = grammarConstraint(vocab, lit(close), []);
  }

  mask(logits: Float32Array): Float32Array {
    if (this.closing) return this.closing.mask(logits);
    return this.inner ? this.inner.mask(logits) : logits;
  }

  accept(token: number): void {
    this.inner?.accept(token);
    if (this.closed) return;
    if (this.closing) {
      this.closing.accept(token);
      if (this.closing.complete) {
        this.closing = undefined;
        this.closed = true;
      }
      return;
    }
    if (this.watch.push(token)) this.closed = true;
    else if (++this.used >= this.budget) this.closing = grammarConstraint(this.vocab, lit(this.watch.text), []);
  }

  get complete(): boolean {
    return this.closed && (this.inner?.complete ?? false);
  }
}

export interface ConstraintPlan {
  vocab: TokenVocab;
  syntax: ReplySyntax;
  endTokens: number[];
  /** The reply begins inside the reasoning block: the grammar starts after it closes. */
  reasoningFirst: boolean;
  /** Structured output: the JSON Schema the content must match. */
  schema?: unknown;
  /** Tools the model may call, and whether it must. */
  tools?: { decls: ToolDecl[]; required: boolean; parallel: boolean };
  /** Most tokens of reasoning before the block is closed for the model. */
  reasoningBudget?: number;
}

/**
 * The constraint for a turn (undefined when the reply is free text), and the text the reply is
 * made to begin with, fed with the prompt.
 */
export function turnConstraint(p: ConstraintPlan): { constraint?: TokenConstraint; forced: string } {
  const plan = planConstraint(p);
  if (p.reasoningBudget !== undefined && p.reasoningFirst && p.syntax.think)
    return { constraint: new ReasoningBudget(p.vocab, p.syntax.think.close, p.reasoningBudget, plan.constraint), forced: plan.forced };
  return plan;
}

function planConstraint(p: ConstraintPlan): { constraint?: TokenConstraint; forced: string } {
  // every grammar is compiled now, when the turn is planned, even one a reply may never reach (the
  // calls after a section marker under "auto", the answer after the reasoning): a schema that
  // cannot be enforced is the request's 400, not a fault in the middle of a reply
  const now = (g: Grammar) => {
    const c = grammarConstraint(p.vocab, g, p.endTokens);
    return () => c;
  };
  const afterReasoning = (make: () => TokenConstraint) => (p.reasoningFirst && p.syntax.think ? new AfterText(p.vocab, p.syntax.think.close, make) : make());
  const style = p.syntax.tools;
  if (p.tools && style) {
    if (p.tools.required) {
      if (p.reasoningFirst && p.syntax.think) return { constraint: afterReasoning(now(toolSectionGrammar(style, p.tools.decls, p.tools.parallel))), forced: '' };
      const { forced, grammar } = forcedToolCall(style, p.tools.decls, p.tools.parallel);
      return { constraint: now(grammar)(), forced };
    }
    const { trigger, grammar } = toolSectionRest(style, p.tools.decls, p.tools.parallel);
    const calls = now(grammar);
    // a section marker written while reasoning is reasoning; calls are watched for after it
    return { constraint: afterReasoning(() => new AfterText(p.vocab, trigger, calls)), forced: '' };
  }
  if (p.schema !== undefined) return { constraint: afterReasoning(now(json(p.schema))), forced: '' };
  return { forced: '' };
}
