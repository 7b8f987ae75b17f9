import * as fs from 'node:fs';
import * as path from 'node:path';
import { Template } from '@huggingface/jinja';
import { WasteError } from '../util/errors.js';
import { isObject } from '../util/fields.js';
import { readJson, readText } from '../util/read.js';
import type { Tokenizer } from './tokenizer.js';

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
}

export interface ChatFormat {
  /** Where it came from: "chat_template.jinja", "chat.json", "Kimi default". */
  readonly source: string;
  /** The conversation as ids, ending with the hand-over to the assistant when `open`. */
  encode(tokenizer: Tokenizer, messages: ChatMessage[], opts?: { open?: boolean; tools?: unknown[] }): number[];
  /** What ends an assistant turn: the markup after its content ("<|im_end|>" for Kimi). */
  readonly assistantEnd: string;
}

/** A piece of rendered conversation: markup, a message's text, or a generated message's ids. */
type Segment = { kind: 'markup'; text: string } | { kind: 'text'; text: string } | { kind: 'ids'; ids: number[] };

function encodeSegments(tokenizer: Tokenizer, segments: Segment[]): number[] {
  const out: number[] = [];
  for (const s of segments) {
    if (s.kind === 'ids') out.push(...s.ids);
    else if (s.text) out.push(...tokenizer.encode(s.text, { markup: s.kind === 'markup' }));
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

/** Kimi's format (the K2 family's template, which Kimi-Linear shares): used when a model ships none. */
export const KIMI_TURNS: TurnFormat = {
  system: ['<|im_system|>system<|im_middle|>', '<|im_end|>'],
  user: ['<|im_user|>user<|im_middle|>', '<|im_end|>'],
  assistant: ['<|im_assistant|>assistant<|im_middle|>', '<|im_end|>'],
  tool: ['<|im_system|>tool<|im_middle|>', '<|im_end|>'],
  open: '<|im_assistant|>assistant<|im_middle|>',
};

export class TurnChatFormat implements ChatFormat {
  readonly assistantEnd: string;

  constructor(
    private readonly turns: TurnFormat,
    readonly source: string,
  ) {
    this.assistantEnd = turns.assistant[1];
  }

  encode(tokenizer: Tokenizer, messages: ChatMessage[], opts: { open?: boolean } = {}): number[] {
    const t = this.turns;
    const segments: Segment[] = [];
    const all = t.defaultSystem !== undefined && messages[0]?.role !== 'system' ? [{ role: 'system' as const, content: t.defaultSystem }, ...messages] : messages;
    for (const m of all) {
      const pair = m.role === 'system' ? (t.system ?? t.user) : m.role === 'tool' ? (t.tool ?? t.user) : t[m.role];
      segments.push({ kind: 'markup', text: pair[0] });
      segments.push(m.ids ? { kind: 'ids', ids: m.ids } : { kind: 'text', text: m.content });
      segments.push({ kind: 'markup', text: pair[1] });
    }
    if (opts.open ?? true) segments.push({ kind: 'markup', text: t.open });
    return encodeSegments(tokenizer, segments);
  }
}

// Private-use characters mark where each message's content sits in a rendered template.
const OPEN = '\uE000';
const CLOSE = '\uE001';
const SENTINELS = /[\uE000\uE001]/g;

/**
 * A Jinja chat template (chat_template.jinja, or tokenizer_config.json's chat_template), rendered
 * with @huggingface/jinja. Each message's content goes in wrapped in private-use sentinels, so the
 * rendered text can be cut back into markup and contents; a template that mangles contents beyond
 * recognition is refused rather than guessed at.
 */
export class JinjaChatFormat implements ChatFormat {
  private readonly template: Template;
  readonly assistantEnd: string;

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
    // what follows an assistant message's content, up to the next message (or the end)
    const probe = this.render([
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
  }

  private render(messages: ChatMessage[], open: boolean, tools?: unknown[]): { segments: Segment[]; ids: Map<number, number[]> } {
    const ids = new Map<number, number[]>();
    const wrapped = messages.map((m, i) => {
      const content = m.content.replace(SENTINELS, '');
      if (m.ids) ids.set(i, m.ids);
      const base = { role: m.role, content: `${OPEN}${i}:${content}${CLOSE}` };
      return m.toolCallId !== undefined ? { ...base, tool_call_id: m.toolCallId } : base;
    });
    let text: string;
    try {
      text = this.template.render({
        bos_token: '',
        eos_token: '',
        ...this.extra,
        messages: wrapped,
        add_generation_prompt: open,
        ...(tools ? { tools } : {}),
      });
    } catch (e) {
      throw new WasteError('E_FORMAT', `${this.source}: the chat template failed (${(e as Error).message})`);
    }
    const segments: Segment[] = [];
    let i = 0;
    while (i < text.length) {
      const o = text.indexOf(OPEN, i);
      const c = text.indexOf(CLOSE, i);
      if (o < 0) {
        if (c >= 0) throw this.mangled();
        segments.push({ kind: 'markup', text: text.slice(i) });
        break;
      }
      if (c >= 0 && c < o) throw this.mangled();
      segments.push({ kind: 'markup', text: text.slice(i, o) });
      const end = text.indexOf(CLOSE, o + 1);
      const m = /^(\d+):/.exec(text.slice(o + 1, end));
      if (end < 0 || !m || text.slice(o + 1, end).includes(OPEN)) throw this.mangled();
      const idx = Number(m[1]);
      const body = text.slice(o + 1 + m[0].length, end);
      const gen = ids.get(idx);
      segments.push(gen && body === messages[idx].content.replace(SENTINELS, '') ? { kind: 'ids', ids: gen } : { kind: 'text', text: body });
      i = end + 1;
    }
    return { segments, ids };
  }

  private mangled(): WasteError {
    return new WasteError('E_UNSUPPORTED', `${this.source}: the chat template rewrites message contents in a way that cannot be kept apart from its markup`);
  }

  encode(tokenizer: Tokenizer, messages: ChatMessage[], opts: { open?: boolean; tools?: unknown[] } = {}): number[] {
    return encodeSegments(tokenizer, this.render(messages, opts.open ?? true, opts.tools).segments);
  }
}

/**
 * The chat format of a model directory: its `chat.json` when present (a hand-written format for
 * the CLI, as the C engine reads it), else its Jinja template (chat_template.jinja, or
 * tokenizer_config.json's chat_template), else Kimi's default.
 */
export function loadChatFormat(dir: string): ChatFormat {
  const at = (f: string) => path.join(dir, f);
  if (fs.existsSync(at('chat.json'))) return new TurnChatFormat(parseChatJson(at('chat.json')), at('chat.json'));
  if (fs.existsSync(at('chat_template.jinja'))) return new JinjaChatFormat(readText(at('chat_template.jinja')), at('chat_template.jinja'));
  if (fs.existsSync(at('tokenizer_config.json'))) {
    const cfg = readJson(at('tokenizer_config.json'));
    const t = isObject(cfg) ? cfg.chat_template : undefined;
    const named = Array.isArray(t) ? t.filter(isObject) : [];
    const text = typeof t === 'string' ? t : (named.find((x) => x.name === 'default') ?? named[0])?.template;
    if (typeof text === 'string') return new JinjaChatFormat(text, `${at('tokenizer_config.json')} chat_template`);
  }
  return new TurnChatFormat(KIMI_TURNS, 'Kimi default');
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
