import { type TokenConstraint, grammarConstraint } from '../constrain/constraint.js';
import { type Grammar, alt, json, lit, seq } from '../constrain/grammar.js';
import type { TokenVocab } from '../constrain/vocab.js';
import type { SchemaNode } from '../constrain/schema-compile.js';
import { HERMES_TOOL_MARKERS, KIMI_TOOL_MARKERS } from './reply.js';
import type { PromptSegment, ReplySyntax } from './format.js';
import { MAX_PARALLEL, type ToolDecl, optional } from './tool-decl.js';
import { After, ReasoningBudget, TextWatch } from './watch.js';
import { xtmlConstraint } from './xtml/constraints.js';

export type { ToolDecl };


/**
 * One call, at position `index` of the section, to any of `tools`, in the template's syntax. Kimi's
 * call ids number the conversation's calls (`functions.NAME:N`, N counting from its first call), so
 * the section's first call is number `base` — ids unique within the conversation, as Kimi's format
 * has them.
 */
function callGrammar(style: 'kimi' | 'hermes', tools: ToolDecl[], index: number, base = 0): Grammar {
  return alt(
    tools.map((t) =>
      style === 'kimi'
        ? seq([lit(KIMI_TOOL_MARKERS.call), lit(`functions.${t.name}:${base + index}`), lit(KIMI_TOOL_MARKERS.args), json(t.parameters), lit(KIMI_TOOL_MARKERS.callEnd)])
        : seq([lit(HERMES_TOOL_MARKERS.call), lit(`\n{"name": ${JSON.stringify(t.name)}, "arguments": `), json(t.parameters), lit('}\n'), lit(HERMES_TOOL_MARKERS.callEnd)]),
    ),
  );
}

/** Calls `from` onwards, each optional, up to MAX_PARALLEL in all (or none when not parallel). */
function moreCalls(style: 'kimi' | 'hermes', tools: ToolDecl[], parallel: boolean, from: number, base = 0): Grammar {
  let g: Grammar = seq([]);
  if (parallel) for (let i = MAX_PARALLEL - 1; i >= from; i--) g = optional(seq([callGrammar(style, tools, i, base), g]));
  return g;
}

/** The calls of a section: one, or up to MAX_PARALLEL in a row. */
function callsGrammar(style: 'kimi' | 'hermes', tools: ToolDecl[], parallel: boolean, base = 0): Grammar {
  return seq([callGrammar(style, tools, 0, base), moreCalls(style, tools, parallel, 1, base)]);
}

/** A whole tool-call section (what the model must write when a call is required). */
export function toolSectionGrammar(style: 'kimi' | 'hermes', tools: ToolDecl[], parallel: boolean, base = 0): Grammar {
  const calls = callsGrammar(style, tools, parallel, base);
  return style === 'kimi' ? seq([lit(KIMI_TOOL_MARKERS.section), calls, lit(KIMI_TOOL_MARKERS.sectionEnd)]) : calls;
}

/**
 * A required call from the reply's first token: the markup every such reply begins with is not
 * sampled but written into the prompt (tokenized as the template's markup, so a marker that is a
 * special token is one token), up to where the model has a choice — the tool's name, or with one
 * tool its arguments. The grammar takes over from there.
 */
export function forcedToolCall(style: 'kimi' | 'hermes', tools: ToolDecl[], parallel: boolean, base = 0): { forced: string; grammar: Grammar } {
  const one = tools.length === 1 ? tools[0] : undefined;
  if (style === 'kimi') {
    const K = KIMI_TOOL_MARKERS;
    const first = one
      ? seq([json(one.parameters), lit(K.callEnd)])
      : alt(tools.map((t) => seq([lit(`${t.name}:${base}`), lit(K.args), json(t.parameters), lit(K.callEnd)])));
    return {
      forced: K.section + K.call + (one ? `functions.${one.name}:${base}${K.args}` : 'functions.'),
      grammar: seq([first, moreCalls(style, tools, parallel, 1, base), lit(K.sectionEnd)]),
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
function toolSectionRest(style: 'kimi' | 'hermes', tools: ToolDecl[], parallel: boolean, base = 0): { trigger: string; grammar: Grammar } {
  if (style === 'kimi') return { trigger: KIMI_TOOL_MARKERS.section, grammar: seq([callsGrammar(style, tools, parallel, base), lit(KIMI_TOOL_MARKERS.sectionEnd)]) };
  // after "<tool_call>" the rest of the first call, then possibly more
  const rest = (t: ToolDecl) => seq([lit(`\n{"name": ${JSON.stringify(t.name)}, "arguments": `), json(t.parameters), lit('}\n'), lit(HERMES_TOOL_MARKERS.callEnd)]);
  return { trigger: HERMES_TOOL_MARKERS.call, grammar: seq([alt(tools.map(rest)), moreCalls(style, tools, parallel, 1)]) };
}

/**
 * Whether a reply in `syntax` can be held to a grammar yet: its tool calls (tool_choice required
 * or named: Kimi's, Hermes' and K3's can; the other formats' calls are read, chat/reply-reader.ts,
 * but not constrained) or its JSON (response_format: every format but harmony, whose answer comes
 * after a channel header the grammar does not write). A request that needs what cannot be held is
 * refused rather than left unenforced.
 */
export function constrainable(syntax: ReplySyntax, what: 'calls' | 'json'): boolean {
  if (what === 'json') return syntax.tools !== 'harmony';
  return !syntax.tools || syntax.tools === 'kimi' || syntax.tools === 'hermes' || syntax.tools === 'xtml';
}

export interface ConstraintPlan {
  vocab: TokenVocab;
  syntax: ReplySyntax;
  endTokens: number[];
  /** The reply begins inside the reasoning block: the grammar starts after it closes. */
  reasoningFirst: boolean;
  /** Structured output: the JSON Schema the content must match. */
  schema?: unknown;
  /** The schemas compiled already (with the request's bounds), by schema object. */
  schemas?: ReadonlyMap<unknown, SchemaNode>;
  /** Tools the model may call, and whether it must; `base`: the calls the conversation already holds (Kimi numbers its call ids on from there). */
  tools?: { decls: ToolDecl[]; required: boolean; parallel: boolean; base?: number };
  /** Most tokens of reasoning before the block is closed for the model. */
  reasoningBudget?: number;
  /** K3's marker ids (for its format, whose structure is in token ids). */
  markers?: { open: number; close: number; sep: number; end: number };
}

/**
 * What a turn's reply is held to: the constraint (undefined when the reply is free text), and the
 * text the reply is made to begin with, fed with the prompt — as `forcedSegments` when it must be
 * tokenized segment by segment (K3's), else as markup.
 */
export interface TurnPlan {
  constraint?: TokenConstraint;
  forced: string;
  forcedSegments?: PromptSegment[];
}

/**
 * The constraint for a turn (undefined when the reply is free text), and the text the reply is
 * made to begin with, fed with the prompt.
 */
export function turnConstraint(p: ConstraintPlan): TurnPlan {
  if (p.syntax.tools === 'xtml') return xtmlConstraint(p);
  const plan = planConstraint(p);
  const close = p.syntax.think?.close;
  if (p.reasoningBudget !== undefined && p.reasoningFirst && close !== undefined)
    return { constraint: new ReasoningBudget(p.vocab, new TextWatch(p.vocab, close), lit(close), p.reasoningBudget, plan.constraint), forced: plan.forced };
  return plan;
}

function planConstraint(p: ConstraintPlan): { constraint?: TokenConstraint; forced: string } {
  // every grammar is compiled now, when the turn is planned, even one a reply may never reach (the
  // calls after a section marker under "auto", the answer after the reasoning): a schema that
  // cannot be enforced is the request's 400, not a fault in the middle of a reply
  const now = (g: Grammar) => {
    const c = grammarConstraint(p.vocab, g, p.endTokens, { schemas: p.schemas });
    return () => c;
  };
  const afterReasoning = (make: () => TokenConstraint) => (p.reasoningFirst && p.syntax.think ? new After(new TextWatch(p.vocab, p.syntax.think.close), make) : make());
  const style = p.syntax.tools;
  // the other formats' calls are not constrained yet: their replies are read, not held to a grammar
  if (p.tools && (style === 'kimi' || style === 'hermes')) {
    if (p.tools.required) {
      if (p.reasoningFirst && p.syntax.think) return { constraint: afterReasoning(now(toolSectionGrammar(style, p.tools.decls, p.tools.parallel, p.tools.base))), forced: '' };
      const { forced, grammar } = forcedToolCall(style, p.tools.decls, p.tools.parallel, p.tools.base);
      return { constraint: now(grammar)(), forced };
    }
    const { trigger, grammar } = toolSectionRest(style, p.tools.decls, p.tools.parallel, p.tools.base);
    const calls = now(grammar);
    // a section marker written while reasoning is reasoning; calls are watched for after it
    return { constraint: afterReasoning(() => new After(new TextWatch(p.vocab, trigger), calls)), forced: '' };
  }
  if (p.schema !== undefined) return { constraint: afterReasoning(now(json(p.schema))), forced: '' };
  return { forced: '' };
}
