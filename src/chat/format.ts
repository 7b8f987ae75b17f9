import * as fs from 'node:fs';
import * as path from 'node:path';
import { Environment, Interpreter, Template } from '@huggingface/jinja';
import { WasteError } from '../util/errors.js';
import { isObject } from '../util/fields.js';
import { checkModelLinks } from '../util/model-dir.js';
import { readJson, readText } from '../util/read.js';
import { KIMI_STYLE_TEMPLATE } from './kimi-template.js';
import type { Tokenizer } from '../tokenizer/tokenizer.js';
import { XtmlChatFormat } from './xtml/format.js';
import { type ReplySyntax, replySyntaxOf } from './syntax.js';

/**
 * Chat formats: how a conversation becomes token ids. Whatever the format, the markup it adds is
 * tokenized in markup mode (its control strings become control tokens) and what people wrote —
 * message contents — in plain mode, so no message can forge a turn marker. An assistant message
 * the model generated here keeps the exact ids it was sampled as.
 */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  /** For a tool result: the call it answers. */
  toolCallId?: string;
  /** Ids the model produced for this (assistant) message; used instead of re-tokenizing its text. */
  ids?: number[];
  /** An assistant's tool calls. */
  toolCalls?: ToolCall[];
  /** An assistant's reasoning, kept apart from its content. */
  reasoning?: string;
  /** The speaker's name (K3's format writes it as an attribute; the others leave it out). */
  name?: string;
  /**
   * The content's parts as the client sent them (`content` is the text ones joined): K3's format
   * tokenizes each text apart and puts a media block where each image is.
   */
  parts?: ContentPart[];
}

/** A text part, or an image by its source size in pixels (what a media block states). */
export type ContentPart = string | { image: { width: number; height: number } };

/** The images of a conversation, in the order a renderer meets them. */
export function messageImages<I extends { width: number; height: number }>(messages: readonly ChatMessage[]): I[] {
  const out: I[] = [];
  for (const m of messages) for (const p of m.parts ?? []) if (typeof p !== 'string') out.push(p.image as I);
  return out;
}

export interface ToolCall {
  id: string;
  name: string;
  /** The arguments as JSON text. */
  arguments: string;
}

export interface EncodeOptions {
  /** End with the hand-over to the assistant (default true). */
  open?: boolean;
  /**
   * The conversation ends with an assistant message to continue (a prefill of the reply): it is
   * rendered up to the end of its content and left open — nothing closes it and no hand-over
   * follows — so the reply goes on from its last character. Takes the place of `open`.
   */
  continueFinal?: boolean;
  /** Tool declarations (OpenAI shape) for templates that render them. */
  tools?: unknown[];
  /** More template variables: `thinking`, `reasoning_effort`, a client's chat_template_kwargs… */
  vars?: Record<string, unknown>;
  /** Reasoning on or off (undefined: the format's default) and how hard, for formats that take them as such (K3's). */
  thinking?: boolean;
  effort?: string;
  /** The request's tool_choice and response format, for formats that tell the model of them (K3's writes a system note). */
  toolChoice?: 'auto' | 'none' | 'required' | { name: string };
  responseFormat?: { type: 'json_object' } | { type: 'json_schema'; json_schema: { schema: unknown } };
}

/** How a model marks up its reply (decided in syntax.ts, for every front end). */
export type { ReplySyntax } from './syntax.js';

export interface ChatFormat {
  /** Where it came from: "chat_template.jinja", "chat.json", "Kimi default", "Kimi K3 XTML". */
  readonly source: string;
  /** The conversation as ids, ending with the hand-over to the assistant when `open`. */
  encode(tokenizer: Tokenizer, messages: ChatMessage[], opts?: EncodeOptions): number[];
  /**
   * The same conversation as the segments `encode` tokenizes, each on its own (what `waste template`
   * shows). Given the tokenizer, a generated message's ids stand where `encode` would use them.
   */
  render(messages: ChatMessage[], opts?: EncodeOptions, tokenizer?: Tokenizer): PromptSegment[];
  /** What ends an assistant turn: the markup after its content ("<|im_end|>" for Kimi). */
  readonly assistantEnd: string;
  readonly syntax: ReplySyntax;
}

/**
 * The message a rendering leaves open for the reply to continue (`continueFinal`): the final one,
 * which must be the assistant's, holding no tool calls (a call cannot be continued as text).
 */
export function continuedMessage(messages: readonly ChatMessage[], opts: EncodeOptions): ChatMessage | undefined {
  if (!opts.continueFinal) return undefined;
  const last = messages[messages.length - 1];
  if (last?.role !== 'assistant') throw new WasteError('E_FORMAT', 'only a final assistant message can be continued');
  if (last.toolCalls?.length) throw new WasteError('E_FORMAT', `messages[${messages.length - 1}]: a final assistant message is continued as the reply's beginning, and one with tool calls cannot be: send their results as tool messages`);
  return last;
}

/** A piece of rendered conversation: markup, a message's text, or a generated message's ids. */
export type PromptSegment = { kind: 'markup'; text: string } | { kind: 'text'; text: string } | { kind: 'ids'; ids: number[] };
type Segment = PromptSegment;

/** Each segment tokenized on its own: markup in markup mode, text in plain mode, ids as they are. */
export function encodeSegments(tokenizer: Tokenizer, segments: readonly PromptSegment[]): number[] {
  const out: number[] = [];
  // one id at a time: push(...ids) passes every id as an argument, and a long message's ids
  // overflow the stack
  const append = (ids: readonly number[]) => {
    for (const id of ids) out.push(id);
  };
  for (const s of segments) {
    if (s.kind === 'ids') append(s.ids);
    else if (s.text) append(tokenizer.encode(s.text, { markup: s.kind === 'markup' }));
  }
  return out;
}

/**
 * The C engine's `chat.json`: `system`, `user`, `assistant` (and optionally `tool`) as [prefix,
 * suffix] pairs, `open` the string that hands the turn to the model.
 */
export interface TurnFormat {
  system?: [string, string];
  user: [string, string];
  assistant: [string, string];
  tool?: [string, string];
  open: string;
  /** A system message put first when the conversation has none. */
  defaultSystem?: string;
}

/**
 * Kimi's turns (the K2 family's, which Kimi-Linear shares) as fixed pairs. A model that ships no
 * format gets KIMI_STYLE_TEMPLATE instead, because pairs cannot write tools; this stays as the
 * plain statement of the same turns that the tests hold the template to.
 */
export const KIMI_TURNS: TurnFormat = {
  system: ['<|im_system|>system<|im_middle|>', '<|im_end|>'],
  user: ['<|im_user|>user<|im_middle|>', '<|im_end|>'],
  assistant: ['<|im_assistant|>assistant<|im_middle|>', '<|im_end|>'],
  tool: ['<|im_system|>tool<|im_middle|>', '<|im_end|>'],
  open: '<|im_assistant|>assistant<|im_middle|>',
};

export class TurnChatFormat implements ChatFormat {
  readonly assistantEnd: string;
  readonly syntax: ReplySyntax = {};

  constructor(
    private readonly turns: TurnFormat,
    readonly source: string,
  ) {
    this.assistantEnd = turns.assistant[1];
  }

  encode(tokenizer: Tokenizer, messages: ChatMessage[], opts: EncodeOptions = {}): number[] {
    return encodeSegments(tokenizer, this.render(messages, opts));
  }

  render(messages: ChatMessage[], opts: EncodeOptions = {}): PromptSegment[] {
    if (opts.tools?.length || messages.some((m) => m.toolCalls?.length))
      throw new WasteError('E_UNSUPPORTED', `${this.source} has no way to write tools or tool calls; give the model a chat_template.jinja that does`);
    const t = this.turns;
    const segments: Segment[] = [];
    const all = t.defaultSystem !== undefined && messages[0]?.role !== 'system' ? [{ role: 'system' as const, content: t.defaultSystem }, ...messages] : messages;
    const continued = continuedMessage(messages, opts);
    for (const m of all) {
      const pair = m.role === 'system' ? (t.system ?? t.user) : m.role === 'tool' ? (t.tool ?? t.user) : t[m.role];
      segments.push({ kind: 'markup', text: pair[0] });
      segments.push(m.ids && m !== continued ? { kind: 'ids', ids: m.ids } : { kind: 'text', text: m.content });
      if (m !== continued) segments.push({ kind: 'markup', text: pair[1] });
    }
    if ((opts.open ?? true) && !continued) segments.push({ kind: 'markup', text: t.open });
    return segments;
  }
}

// Private-use characters mark where each message's content (and every other string a client
// wrote: tool declarations, call arguments, ids) sits in a rendered template, so it is tokenized as
// plain text and cannot become control tokens.
const OPEN = '\uE000';
const CLOSE = '\uE001';
const SENTINELS = /[\uE000\uE001]/g;
const plain = (s: string) => `${OPEN}s:${s.replace(SENTINELS, '')}${CLOSE}`;
// Letters, digits, _ . - only: no control token's text is made of these (they carry <| |> [ ] or
// the like), and a template may compare such strings (t.type == 'function', a tool's name), so they
// go in as they are. Everything else is wrapped.
const IDENTIFIER = /^[\p{L}\p{N}_.-]*$/u;
const guard = (s: string) => (IDENTIFIER.test(s) ? s : plain(s));

function wrapStrings(v: unknown): unknown {
  if (typeof v === 'string') return guard(v);
  if (Array.isArray(v)) return v.map(wrapStrings);
  if (isObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [guard(k), wrapStrings(x)]));
  return v;
}

/**
 * A conversation in harmony's order, for a harmony template (`messages` and their template forms,
 * one for one): an assistant message with several tool calls becomes one message per call — the
 * first keeps the content and reasoning, each later one holds its call alone — and the tool results
 * that follow it are moved after the call each answers (by tool_call_id), so the template, which
 * writes one call per message and names a result after the latest call, writes every call and
 * names every result rightly. gpt-oss's template as released writes only the first call of a
 * message (and names every result after it).
 */
export function harmonyOrder(messages: readonly ChatMessage[], wrapped: readonly Record<string, unknown>[]): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  const moved = new Set<number>();
  for (let i = 0; i < messages.length; i++) {
    if (moved.has(i)) continue;
    const m = messages[i];
    const calls = wrapped[i].tool_calls as unknown[] | undefined;
    if (m.role !== 'assistant' || !calls || calls.length < 2) {
      out.push(wrapped[i]);
      continue;
    }
    // the results that follow the message
    const results: number[] = [];
    for (let j = i + 1; j < messages.length && messages[j].role === 'tool'; j++) results.push(j);
    m.toolCalls!.forEach((call, k) => {
      if (k === 0) out.push({ ...wrapped[i], tool_calls: [calls[0]] });
      else out.push({ role: 'assistant', content: '', tool_calls: [calls[k]] });
      if (k === calls.length - 1) return;
      const answer = results.find((j) => !moved.has(j) && messages[j].toolCallId === call.id);
      if (answer !== undefined) {
        out.push(wrapped[answer]);
        moved.add(answer);
      }
    });
  }
  return out;
}

/**
 * A sentinel rendering's segments fitted to the rendering without sentinels, where the template
 * changed what it wrote of a client's text (stripped it): every markup segment must appear in
 * `raw` exactly where it falls, and a run of text between two markups becomes what `raw` holds
 * there — which must be a piece of the run's own text (a template may trim a content, never add
 * to it). The run is taken as long as it can be, so no text is ever taken for markup. Undefined
 * when they do not fit.
 */
function alignToRaw(segments: Segment[], owner: (number | undefined)[], segText: (k: number) => string, raw: string): { segments: Segment[]; owner: (number | undefined)[] } | undefined {
  const out: Segment[] = [];
  const outOwner: (number | undefined)[] = [];
  let at = 0;
  let k = 0;
  while (k < segments.length) {
    const s = segments[k];
    if (s.kind === 'markup') {
      if (!raw.startsWith(s.text, at)) return undefined;
      out.push(s);
      outOwner.push(undefined);
      at += s.text.length;
      k++;
      continue;
    }
    // a run of text segments, up to the next markup that is not empty
    let r = k;
    while (r < segments.length && segments[r].kind !== 'markup') r++;
    let next = r;
    while (next < segments.length && segments[next].kind === 'markup' && (segments[next] as { text: string }).text === '') next++;
    const run = segments.slice(k, r).map((_, j) => segText(k + j)).join('');
    if (raw.startsWith(run, at)) {
      for (let j = k; j < r; j++) {
        out.push(segments[j]);
        outOwner.push(owner[j]);
      }
      at += run.length;
      k = r;
      continue;
    }
    // the run was changed: the longest piece of raw from here that is a piece of the run and is
    // followed by the next markup (or is the end)
    const follow = next < segments.length ? (segments[next] as { text: string }).text : undefined;
    let end = -1;
    for (let e = Math.min(raw.length, at + run.length); e >= at; e--) {
      if (follow === undefined ? e !== raw.length : !raw.startsWith(follow, e)) continue;
      if (run.includes(raw.slice(at, e))) {
        end = e;
        break;
      }
    }
    if (end < 0) return undefined;
    // one text segment for the run, its owner the run's if they agree
    const owners = new Set(owner.slice(k, r));
    if (end > at) {
      out.push({ kind: 'text', text: raw.slice(at, end) });
      outOwner.push(owners.size === 1 ? owner[k] : undefined);
    }
    at = end;
    k = r;
  }
  return at === raw.length ? { segments: out, owner: outOwner } : undefined;
}

const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'];
const DAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];

/** Python's datetime.strftime for the directives templates use, in the C locale (English names), local time as Python's datetime.now(). */
export function strftime(date: Date, format: string): string {
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  return format.replace(/%[YymdHMSbBaAjp%]/g, (t) => {
    switch (t) {
      case '%Y': return String(date.getFullYear());
      case '%y': return pad(date.getFullYear() % 100);
      case '%m': return pad(date.getMonth() + 1);
      case '%d': return pad(date.getDate());
      case '%H': return pad(date.getHours());
      case '%M': return pad(date.getMinutes());
      case '%S': return pad(date.getSeconds());
      case '%b': return MONTHS[date.getMonth()].slice(0, 3);
      case '%B': return MONTHS[date.getMonth()];
      case '%a': return DAYS[date.getDay()].slice(0, 3);
      case '%A': return DAYS[date.getDay()];
      case '%j': return pad(Math.floor((Date.UTC(date.getFullYear(), date.getMonth(), date.getDate()) - Date.UTC(date.getFullYear(), 0, 1)) / 86400000) + 1, 3);
      case '%p': return date.getHours() < 12 ? 'AM' : 'PM';
      default: return '%';
    }
  });
}

/** Python's range(stop) / range(start, stop[, step]). */
function range(...args: number[]): number[] {
  const [start, stop, step] = args.length === 1 ? [0, args[0], 1] : [args[0], args[1], args[2] ?? 1];
  if (!step) throw new Error('range() arg 3 must not be zero');
  const out: number[] = [];
  for (let i = start; step > 0 ? i < stop : i > stop; i += step) out.push(i);
  return out;
}

/**
 * A template rendered with the globals Hugging Face's apply_chat_template gives it
 * (`raise_exception`, `strftime_now`; range, and the booleans and none in both spellings), any of
 * which `vars` may replace (a test pins strftime_now); then `vars`.
 */
function renderJinja(template: Template, vars: Record<string, unknown>): string {
  const env = new Environment();
  const globals: Record<string, unknown> = {
    false: false, true: true, none: null, False: false, True: true, None: null,
    raise_exception: (message: unknown) => {
      throw new Error(String(message));
    },
    range,
    strftime_now: (format: string) => strftime(new Date(), format),
  };
  for (const [k, v] of Object.entries({ ...globals, ...vars })) env.set(k, v);
  return new Interpreter(env).run(template.parsed).value as string;
}

/**
 * A Jinja chat template (chat_template.jinja, or tokenizer_config.json's chat_template), rendered
 * with @huggingface/jinja. Each message's content goes in wrapped in private-use sentinels, so the
 * rendered text can be cut back into markup and contents; a template that mangles contents beyond
 * recognition is refused rather than guessed at.
 */
export class JinjaChatFormat implements ChatFormat {
  private readonly template: Template;
  readonly assistantEnd: string;
  readonly syntax: ReplySyntax;
  /**
   * How a tool call's arguments reach the template: as the JSON text the model wrote ("string",
   * for templates that print it as it is: Qwen3's, DeepSeek's) or parsed ("object", as Hugging
   * Face's docs ask, for templates that walk or re-serialize them: Qwen3-Coder's `|items`, GLM's
   * `.items()`, harmony's and Kimi K2's `|tojson`). Found by rendering a probe call: the text is
   * kept when the template shows it verbatim.
   */
  readonly toolArguments: 'string' | 'object';
  /**
   * A harmony template (gpt-oss's: `<|channel|>`, `<|call|>`). It writes one tool call per
   * assistant message and names each tool result after the call before it, so an assistant message
   * with several calls is handed over as harmony holds them: each call its own message, followed by
   * its result (see harmonyOrder).
   */
  private readonly harmony: boolean;

  /**
   * `extra`: variables every rendering gets, as Hugging Face's apply_chat_template passes the
   * tokenizer's special tokens (bos_token, eos_token: see templateSpecials); a token the tokenizer
   * does not set is left out, as there.
   */
  constructor(
    text: string,
    readonly source: string,
    private readonly extra: Record<string, unknown> = {},
  ) {
    try {
      this.template = new Template(text);
    } catch (e) {
      throw new WasteError('E_FORMAT', `${source}: the chat template does not parse (${(e as Error).message})`);
    }
    this.syntax = replySyntaxOf(text);
    this.harmony = text.includes('<|channel|>') && text.includes('<|call|>');
    this.toolArguments = this.probeToolArguments();
    // what follows an assistant message's content, up to the next message (or the end)
    const probe = this.renderTemplate([
      { role: 'user', content: 'u' },
      { role: 'assistant', content: 'a' },
      { role: 'user', content: 'v' },
    ], false);
    const after = probe.segments.findIndex((s, i) => i > 0 && probe.segments[i - 1].kind === 'text' && (probe.segments[i - 1] as { text: string }).text === 'a');
    const next = probe.segments.findIndex((s) => s.kind === 'text' && s.text === 'v');
    const tail = after >= 0 ? probe.segments.slice(after, next >= 0 ? next : undefined).filter((s) => s.kind === 'markup') : [];
    const end = tail.map((s) => (s as { text: string }).text).join('');
    // the end marker is the first control-looking token of that markup, or the markup itself up to the next turn
    const marker = /<\|[^|]*\|>|\[[A-Z]+\]|<\/s>|<end_of_turn>/.exec(end);
    this.assistantEnd = marker ? marker[0] : end.trimEnd();
    // harmony closes a message with <|end|> and the assistant's turn with <|return|> (or <|call|>):
    // <|end|> after the reasoning is not the reply's end
    if (this.syntax.tools === 'harmony') this.assistantEnd = '<|return|>';
  }

  /** "string" when the template prints a call's arguments text as it is, else "object". */
  private probeToolArguments(): 'string' | 'object' {
    const args = '{"probe_key": "probe value"}';
    const probe: ChatMessage[] = [
      { role: 'user', content: 'u' },
      { role: 'assistant', content: '', toolCalls: [{ id: 'call_0', name: 'probe_fn', arguments: args }] },
      { role: 'tool', toolCallId: 'call_0', content: 'r' },
    ];
    const rendersAs = (mode: 'string' | 'object') => {
      try {
        return this.renderTemplate(probe, true, undefined, {}, false, mode).segments;
      } catch {
        return undefined;
      }
    };
    const asText = rendersAs('string');
    if (asText?.some((s) => s.kind === 'text' && s.text === args)) return 'string';
    // a template that writes no tool calls either way (Mixtral's refuses a tool turn) keeps the text
    return asText === undefined && rendersAs('object') === undefined ? 'string' : 'object';
  }

  private renderTemplate(messages: ChatMessage[], open: boolean, tools?: unknown[], vars: Record<string, unknown> = {}, continueFinal = false, argumentsAs = this.toolArguments): { segments: Segment[]; ids: Map<number, number[]> } {
    const ids = new Map<number, number[]>();
    for (const [i, m] of messages.entries()) if (m.ids) ids.set(i, m.ids);
    const text = this.renderText(messages, open, tools, vars, continueFinal, argumentsAs, true);
    // each segment, and the message whose content it is (undefined: markup, or another string a client wrote)
    let segments: Segment[] = [];
    let owner: (number | undefined)[] = [];
    let i = 0;
    while (i < text.length) {
      const o = text.indexOf(OPEN, i);
      const c = text.indexOf(CLOSE, i);
      if (o < 0) {
        if (c >= 0) throw this.mangled();
        segments.push({ kind: 'markup', text: text.slice(i) });
        owner.push(undefined);
        break;
      }
      if (c >= 0 && c < o) throw this.mangled();
      segments.push({ kind: 'markup', text: text.slice(i, o) });
      owner.push(undefined);
      const end = text.indexOf(CLOSE, o + 1);
      const m = /^(\d+|s):/.exec(text.slice(o + 1, end));
      if (end < 0 || !m || text.slice(o + 1, end).includes(OPEN)) throw this.mangled();
      const body = text.slice(o + 1 + m[0].length, end);
      const from = m[1] === 's' ? undefined : Number(m[1]);
      const gen = from === undefined ? undefined : ids.get(from);
      segments.push(gen && !(continueFinal && from === messages.length - 1) && body === messages[from!].content.replace(SENTINELS, '') ? { kind: 'ids', ids: gen } : { kind: 'text', text: body });
      owner.push(from);
      i = end + 1;
    }
    // The same inputs without sentinels, as Python renders them: where the template applied string
    // methods to a content (Qwen3 strips its reasoning's line breaks), the sentinels were in the
    // way, and what it writes of that content is taken from this rendering instead.
    const raw = this.renderText(messages, open, tools, vars, continueFinal, argumentsAs, false);
    const segText = (k: number) => {
      const s = segments[k];
      return s.kind === 'ids' ? messages[owner[k]!].content : s.text;
    };
    if (segments.map((_, k) => segText(k)).join('') !== raw) {
      const aligned = alignToRaw(segments, owner, segText, raw);
      if (!aligned) throw this.mangled();
      ({ segments, owner } = aligned);
    }
    if (continueFinal) {
      // as Hugging Face's continue_final_message: the conversation rendered closed, cut after the
      // final message's content
      const finalAt = owner.lastIndexOf(messages.length - 1);
      if (finalAt < 0) throw new WasteError('E_UNSUPPORTED', `${this.source}: the chat template does not write the final assistant message's content, so it cannot be continued`);
      segments.length = finalAt + 1;
    }
    return { segments, ids };
  }

  /**
   * The template rendered on the conversation: with `wrap`, every string a client wrote inside
   * sentinels (each message's content marked with its index), else as it is (as Python renders it).
   */
  private renderText(messages: ChatMessage[], open: boolean, tools: unknown[] | undefined, vars: Record<string, unknown>, continueFinal: boolean, argumentsAs: 'string' | 'object', wrap: boolean): string {
    const asText = wrap ? plain : (s: string) => s.replace(SENTINELS, '');
    const asName = wrap ? guard : (s: string) => s.replace(SENTINELS, '');
    const asValue = wrap ? wrapStrings : (v: unknown) => v;
    const callArguments = (text: string): unknown => {
      if (argumentsAs === 'string') return asText(text);
      try {
        return asValue(JSON.parse(text));
      } catch {
        // not JSON (a malformed call the model wrote): shown as the text it is
        return asText(text);
      }
    };
    const wrapped = messages.map((m, i) => {
      const content = m.content.replace(SENTINELS, '');
      const last = i === messages.length - 1;
      // an empty content is the empty string the template tests as false (`{% if content %}`),
      // unless it is the message a continuation starts from, whose place must be found
      const out: Record<string, unknown> = { role: m.role, content: !wrap || (content === '' && !(continueFinal && last)) ? content : `${OPEN}${i}:${content}${CLOSE}` };
      if (m.toolCallId !== undefined) out.tool_call_id = asName(m.toolCallId);
      // the speaker's name, as a client sent it (Kimi K2's template writes it in place of the role)
      if (m.name !== undefined) out.name = asName(m.name);
      // reasoning under both names templates read it by: reasoning_content (Qwen3's, GLM's,
      // DeepSeek's), thinking (harmony's)
      if (m.reasoning) out.reasoning_content = out.thinking = asText(m.reasoning);
      if (m.toolCalls?.length)
        out.tool_calls = m.toolCalls.map((c) => ({ id: asName(c.id), type: 'function', function: { name: asName(c.name), arguments: callArguments(c.arguments) } }));
      return out;
    });
    const given = this.harmony ? harmonyOrder(messages, wrapped) : wrapped;
    try {
      // as Hugging Face's apply_chat_template: messages, tools (None without any), documents,
      // add_generation_prompt, the tokenizer's special tokens, then the request's variables
      return renderJinja(this.template, {
        ...this.extra,
        ...(asValue(vars) as Record<string, unknown>),
        messages: given,
        tools: tools?.length ? asValue(tools) : null,
        documents: null,
        add_generation_prompt: open,
      });
    } catch (e) {
      throw new WasteError('E_FORMAT', `${this.source}: the chat template failed (${(e as Error).message})`);
    }
  }

  private mangled(): WasteError {
    return new WasteError('E_UNSUPPORTED', `${this.source}: the chat template rewrites message contents in a way that cannot be kept apart from its markup`);
  }

  encode(tokenizer: Tokenizer, messages: ChatMessage[], opts: EncodeOptions = {}): number[] {
    return encodeSegments(tokenizer, this.render(messages, opts));
  }

  render(messages: ChatMessage[], opts: EncodeOptions = {}): PromptSegment[] {
    const continued = continuedMessage(messages, opts) !== undefined;
    return this.renderTemplate(messages, (opts.open ?? true) && !continued, opts.tools, opts.vars, continued).segments;
  }
}

/** A format a family's release speaks natively, in place of a template (the family says which). */
export type NativeChatFormat = 'xtml';

/**
 * The chat format of a model directory. A model whose family speaks a native format (K3: XTML)
 * speaks it, unless its directory has a chat_template.jinja (a template someone chose over it);
 * its chat.json, if any, is the C engine's CLI turns and is not read. Any other model: its
 * `chat.json` when present (a hand-written format for the CLI, as the C engine reads it), else its
 * Jinja template (chat_template.jinja, or tokenizer_config.json's chat_template), else Kimi's
 * default.
 */
export function loadChatFormat(dir: string, opts: { native?: NativeChatFormat } = {}): ChatFormat {
  checkModelLinks(dir);
  const at = (f: string) => path.join(dir, f);
  const jinja = fs.existsSync(at('chat_template.jinja'));
  if (opts.native === 'xtml') return jinja ? new JinjaChatFormat(readText(at('chat_template.jinja')), at('chat_template.jinja'), templateSpecials(dir)) : new XtmlChatFormat();
  if (fs.existsSync(at('chat.json'))) return new TurnChatFormat(parseChatJson(at('chat.json')), at('chat.json'));
  if (jinja) return new JinjaChatFormat(readText(at('chat_template.jinja')), at('chat_template.jinja'), templateSpecials(dir));
  if (fs.existsSync(at('tokenizer_config.json'))) {
    const cfg = readJson(at('tokenizer_config.json'));
    const t = isObject(cfg) ? cfg.chat_template : undefined;
    const named = Array.isArray(t) ? t.filter(isObject) : [];
    const text = typeof t === 'string' ? t : (named.find((x) => x.name === 'default') ?? named[0])?.template;
    if (typeof text === 'string') return new JinjaChatFormat(text, `${at('tokenizer_config.json')} chat_template`, templateSpecials(dir));
  }
  return new JinjaChatFormat(KIMI_STYLE_TEMPLATE, 'Kimi default');
}

/**
 * The special tokens a model's template is rendered with, as Hugging Face's apply_chat_template
 * passes the tokenizer's: `bos_token` and `eos_token` (Mixtral's and DeepSeek's templates open with
 * the BOS they print). From tokenizer_config.json (a checkpoint's: a string, or an added token's
 * {content}); else from the model's config (a container's manifest, or config.json) — its
 * bos_token_id and (first) eos_token_id — named by specials.json. A token none of them sets is
 * left out, as Hugging Face leaves out a tokenizer's unset ones.
 */
export function templateSpecials(dir: string): { bos_token?: string; eos_token?: string } {
  const at = (f: string) => path.join(dir, f);
  const out: { bos_token?: string; eos_token?: string } = {};
  const tokenText = (v: unknown) => (typeof v === 'string' ? v : isObject(v) && typeof v.content === 'string' ? v.content : undefined);
  if (fs.existsSync(at('tokenizer_config.json'))) {
    const cfg = readJson(at('tokenizer_config.json'));
    if (isObject(cfg)) {
      const bos = tokenText(cfg.bos_token);
      const eos = tokenText(cfg.eos_token);
      if (bos !== undefined) out.bos_token = bos;
      if (eos !== undefined) out.eos_token = eos;
      return out;
    }
  }
  let config: unknown;
  if (fs.existsSync(at('manifest.json'))) {
    const m = readJson(at('manifest.json'));
    config = isObject(m) ? m.config : undefined;
  } else if (fs.existsSync(at('config.json'))) config = readJson(at('config.json'));
  if (!isObject(config) || !fs.existsSync(at('specials.json'))) return out;
  // a multimodal wrapper (K3's) keeps the text model's ids in text_config
  const ids = isObject(config.text_config) && config.bos_token_id === undefined ? config.text_config : config;
  const specials = readJson(at('specials.json'));
  const named = new Map<number, string>();
  if (Array.isArray(specials)) for (const e of specials) if (isObject(e) && typeof e.id === 'number' && typeof e.text === 'string') named.set(e.id, e.text);
  const eosId = Array.isArray(ids.eos_token_id) ? ids.eos_token_id[0] : ids.eos_token_id;
  const bos = typeof ids.bos_token_id === 'number' ? named.get(ids.bos_token_id) : undefined;
  const eos = typeof eosId === 'number' ? named.get(eosId) : undefined;
  if (bos !== undefined) out.bos_token = bos;
  if (eos !== undefined) out.eos_token = eos;
  return out;
}

function parseChatJson(file: string): TurnFormat {
  const doc = readJson(file);
  if (!isObject(doc)) throw new WasteError('E_FORMAT', `${file}: not a JSON object`);
  const pair = (k: string, required: boolean): [string, string] | undefined => {
    const v = doc[k];
    if (v === undefined && !required) return undefined;
    if (!Array.isArray(v) || v.length !== 2 || typeof v[0] !== 'string' || typeof v[1] !== 'string')
      throw new WasteError('E_FORMAT', `${file}: "${k}" must be a [prefix, suffix] pair of strings`);
    return [v[0], v[1]];
  };
  if (typeof doc.open !== 'string') throw new WasteError('E_FORMAT', `${file}: "open" must be a string`);
  if (doc.system_default !== undefined && typeof doc.system_default !== 'string') throw new WasteError('E_FORMAT', `${file}: "system_default" must be a string`);
  return {
    system: pair('system', false),
    user: pair('user', true)!,
    assistant: pair('assistant', true)!,
    tool: pair('tool', false),
    open: doc.open,
    defaultSystem: doc.system_default as string | undefined,
  };
}
