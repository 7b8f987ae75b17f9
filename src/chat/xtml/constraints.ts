import { type TokenConstraint, grammarConstraint } from '../../constrain/constraint.js';
import { type Grammar, alt, json, lit, seq } from '../../constrain/grammar.js';
import type { PromptSegment } from '../format.js';
import { CLOSE, OPEN, SEP, type Segment, closeTag, escapeAttr, openTag, push } from './tags.js';
import type { ConstraintPlan, TurnPlan } from '../tool-grammar.js';
import { MAX_PARALLEL, type ToolDecl, optional } from '../tool-decl.js';
import { After, MarkupWatch, ReasoningBudget } from '../watch.js';

/**
 * Tool calls and structured output through K3's XTML. The reply reader decides structure by token
 * id, so every marker in these grammars may be spelled only by its reserved token, and every name
 * a client chose only by ordinary tokens: nothing the grammar allows reads differently from what
 * it meant. A call carries its arguments as one `json type="object"` child, the element the
 * release renders for arguments given as raw JSON — the one shape in which a JSON Schema can be
 * enforced whole; typed `argument` children (what the model writes by itself) are read back too.
 */

const mark = (m: string): Grammar => lit(m, 'special');
const text = (s: string): Grammar => lit(s, 'plain');

function tag(name: string, attrs: [string, string][] = []): Grammar {
  return seq([mark(OPEN), text(name + attrs.map(([k, v]) => ` ${k}="${escapeAttr(v)}"`).join('')), mark(SEP)]);
}

const end = (name: string): Grammar => seq([mark(CLOSE), text(name), mark(SEP)]);

/** The arguments of a call once its tag is written: a json element holding a document valid against its schema, then the call's close. */
const body = (t: ToolDecl): Grammar => seq([tag('json', [['type', 'object']]), json(t.parameters), end('json'), end('call')]);

/** Call number `index` (1-based, as the renderer numbers them) to any of `tools`. */
const call = (tools: ToolDecl[], index: number): Grammar => alt(tools.map((t) => seq([tag('call', [['tool', t.name], ['index', String(index)]]), body(t)])));

/** Calls `from` onwards, each optional, up to MAX_PARALLEL in all (none when not parallel). */
function more(tools: ToolDecl[], parallel: boolean, from: number): Grammar {
  let g: Grammar = seq([]);
  if (parallel) for (let i = MAX_PARALLEL; i >= from; i--) g = optional(seq([call(tools, i), g]));
  return g;
}

/** After the calls: the tools element and the message close, and the end token follows. */
const tail = seq([end('tools'), end('message')]);

/**
 * A required call with the reply starting in the response channel (thinking off): everything up
 * to the model's first choice is fed with the prompt, as segments the renderer would cut — the
 * tool's name when there are several, its arguments when there is one.
 */
function forcedCall(tools: ToolDecl[], parallel: boolean): { forced: Segment[]; grammar: Grammar } {
  const forced: Segment[] = [];
  closeTag(forced, 'response');
  openTag(forced, 'tools');
  const one = tools.length === 1 ? tools[0] : undefined;
  if (one) {
    openTag(forced, 'call', [
      ['tool', one.name],
      ['index', '1'],
    ]);
    openTag(forced, 'json', [['type', 'object']]);
    return { forced, grammar: seq([json(one.parameters), end('json'), end('call'), more(tools, parallel, 2), tail]) };
  }
  push(forced, OPEN, true);
  push(forced, 'call');
  push(forced, ' tool');
  push(forced, '="');
  const first = alt(tools.map((t) => seq([text(`${escapeAttr(t.name)}" index="1"`), mark(SEP), body(t)])));
  return { forced, grammar: seq([first, more(tools, parallel, 2), tail]) };
}

const segments = (s: Segment[]): PromptSegment[] => s.map((x) => ({ kind: x.markup ? 'markup' : 'text', text: x.text }));

export function xtmlConstraint(p: ConstraintPlan): TurnPlan {
  const k = p.markers;
  if (!k) throw new Error('xtmlConstraint: the plan needs the marker ids');
  // every grammar is compiled now, when the turn is planned (a schema that cannot be enforced is the request's 400)
  const now = (g: Grammar) => {
    const c = grammarConstraint(p.vocab, g, p.endTokens, { schemas: p.schemas });
    return () => c;
  };
  const thinkClosed = () => new MarkupWatch(p.vocab, [k.close, 'think', k.sep]);
  // a reply that still owes its call or its document may not end before then
  const afterReasoning = (make: () => TokenConstraint, hold: boolean) => (p.reasoningFirst ? new After(thinkClosed(), make, hold ? p.endTokens : []) : make());
  let plan: TurnPlan = { forced: '' };
  if (p.tools?.required) {
    if (p.reasoningFirst) plan = { constraint: afterReasoning(now(seq([tag('response'), end('response'), tag('tools'), call(p.tools.decls, 1), more(p.tools.decls, p.tools.parallel, 2), tail])), true), forced: '' };
    else {
      const { forced, grammar } = forcedCall(p.tools.decls, p.tools.parallel);
      plan = { constraint: now(grammar)(), forced: forced.map((s) => s.text).join(''), forcedSegments: segments(forced) };
    }
  } else if (p.tools) {
    // free until the model opens its tools element by itself, then its calls are enforced
    const calls = now(seq([call(p.tools.decls, 1), more(p.tools.decls, p.tools.parallel, 2), tail]));
    plan = { constraint: afterReasoning(() => new After(new MarkupWatch(p.vocab, [k.open, 'tools', k.sep]), calls), false), forced: '' };
  } else if (p.schema !== undefined) {
    const doc = seq([json(p.schema), end('response'), end('message')]);
    plan = { constraint: p.reasoningFirst ? afterReasoning(now(seq([tag('response'), doc])), true) : now(doc)(), forced: '' };
  }
  if (p.reasoningBudget !== undefined && p.reasoningFirst) plan = { ...plan, constraint: new ReasoningBudget(p.vocab, thinkClosed(), end('think'), p.reasoningBudget, plan.constraint) };
  return plan;
}
