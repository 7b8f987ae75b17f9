import type { ToolCall } from './format.js';
import type { ToolDecl } from './tool-decl.js';
import { type CallIdMaker, type ReplyEvent, type ReplyReader, indexCallId } from './reply.js';

/** A call read from its markup: its function, its arguments as JSON text, and its id when the model wrote one. */
export interface ReadCall {
  name: string;
  arguments: string;
  id?: string;
}

/**
 * The tool-call markup of a family whose calls are delimited by text markers: an optional block
 * around the calls (DeepSeek's `<｜tool▁calls▁begin｜>`), each call between its own markers, and
 * how a call's body (the text between them) reads.
 */
export interface CallMarkup {
  /** The format's name, for messages. */
  name: string;
  block?: { open: string; close: string };
  call: { open: string; close: string };
  /**
   * A call's body as a call, or why it is not one. `tools`: the declared tools by name (undefined
   * when the caller did not say which), for formats whose values are typed by the schema.
   */
  read(body: string, tools: ReadonlyMap<string, ToolDecl> | undefined): ReadCall | ReadCall[] | string;
  /** A body cut off by the reply's end is still read when it reads whole (a JSON body closes itself). */
  readUnterminated?: boolean;
}

type State = 'content' | 'reasoning' | 'block' | 'call';

/**
 * Reads a reply of a format whose tool calls are delimited by text markers (Qwen3's and
 * Qwen3-Coder's `<tool_call>`, GLM-4.5's, DeepSeek's), with an optional `<think>` block before the
 * answer, as its text streams in, piece by piece at any split. Text is held back only while its
 * tail could be the start of a marker, so reasoning and content stream in order, once. A call goes
 * out whole (its `call` event and its arguments together) when its closing marker arrives and its
 * body reads — arguments are checked (and for the XML formats typed by the tool's schema) before
 * a client sees them. Never throws: a call that does not read (bad JSON, an undeclared function,
 * cut off by the reply's end, opened again before it closed) becomes content, markers and all, so
 * nothing the model wrote is lost; a closing marker where none is open is text.
 */
export class CallMarkupReader implements ReplyReader {
  readonly byToken = false;
  readonly calls: ToolCall[] = [];
  reasoning = '';
  content = '';
  /** Why each call that did not read was turned into content (for logs and tests). */
  readonly rejected: string[] = [];
  readonly startsInReasoning: boolean;
  /** Whitespace in a block, held back (see takeVisible). */
  gap = '';
  private state: State;
  private inBlock = false;
  private buf = '';
  private body = '';
  private sawText = false;
  private readonly callId: CallIdMaker;
  private readonly tools: boolean;
  private readonly decls: ReadonlyMap<string, ToolDecl> | undefined;

  constructor(
    private readonly markup: CallMarkup,
    private readonly think: { open: string; close: string } | undefined,
    opts: { startInReasoning?: boolean; tools?: boolean; decls?: readonly ToolDecl[]; callId?: CallIdMaker } = {},
  ) {
    this.state = opts.startInReasoning && think ? 'reasoning' : 'content';
    this.startsInReasoning = this.state === 'reasoning';
    this.callId = opts.callId ?? indexCallId;
    this.tools = opts.tools ?? true;
    this.decls = opts.decls?.length ? new Map(opts.decls.map((d) => [d.name, d])) : undefined;
  }

  get inReasoning(): boolean {
    return this.state === 'reasoning';
  }

  private markers(): string[] {
    const m = this.markup;
    switch (this.state) {
      case 'reasoning':
        return this.think ? [this.think.close] : [];
      case 'content': {
        const out: string[] = [];
        if (this.think && !this.sawText) out.push(this.think.open);
        if (this.tools) {
          if (m.block) out.push(m.block.open);
          out.push(m.call.open);
        }
        return out;
      }
      case 'block':
        return [m.call.open, m.block!.close];
      case 'call':
        return [m.call.close, m.call.open, ...(this.inBlock && m.block ? [m.block.close] : [])];
    }
  }

  push(_token: number, text: string): ReplyEvent[] {
    const out: ReplyEvent[] = [];
    if (!text) return out;
    this.buf += text;
    for (;;) {
      const found = scanMarkers(this.buf, this.markers());
      if (!found.marker) {
        this.take(this.buf.slice(0, found.at), out);
        this.buf = this.buf.slice(found.at);
        return out;
      }
      const { at, marker } = found;
      const before = this.buf.slice(0, at);
      this.buf = this.buf.slice(at + marker.length);
      if (this.think && marker === this.think.open && this.state === 'content' && before.trim()) {
        // a reasoning block opens a reply or not at all: after text, "<think>" is text
        this.take(before + marker, out);
        continue;
      }
      this.take(before, out);
      this.transition(marker, out);
    }
  }

  flush(): ReplyEvent[] {
    const out: ReplyEvent[] = [];
    this.take(this.buf, out);
    this.buf = '';
    if (this.state === 'call') this.endCall(false, out);
    this.state = 'content';
    this.inBlock = false;
    this.gap = '';
    return out;
  }

  /** Text between markers, where the state puts it. */
  private take(text: string, out: ReplyEvent[]): void {
    if (!text) return;
    switch (this.state) {
      case 'reasoning':
      case 'content':
        this.text(this.state, text, out);
        break;
      case 'call':
        this.body += text;
        break;
      case 'block':
        // whitespace between calls is markup; anything else the model wrote there is content (with
        // the whitespace before it, however the pieces fell)
        this.gap += text;
        this.text('content', takeVisible(this), out);
        break;
    }
  }

  private text(kind: 'reasoning' | 'content', text: string, out: ReplyEvent[]): void {
    if (!text) return;
    if (kind === 'content') {
      if (text.trim()) this.sawText = true;
      this.content += text;
    } else this.reasoning += text;
    const last = out[out.length - 1];
    if (last && last.kind === kind) last.text += text;
    else out.push({ kind, text });
  }

  private transition(marker: string, out: ReplyEvent[]): void {
    const m = this.markup;
    this.gap = '';
    const t = this.think;
    if (this.state === 'reasoning') {
      // only the closing marker is watched for there
      this.state = 'content';
    } else if (this.state === 'content' && t && marker === t.open) this.state = 'reasoning';
    else if (m.block && marker === m.block.open && this.state === 'content') {
      this.state = 'block';
      this.inBlock = true;
    } else if (marker === m.call.open && this.state === 'call') {
      // opened again before it closed: the first was never finished
      this.endCall(false, out);
      this.body = '';
      this.state = 'call';
    } else if (marker === m.call.open) {
      this.body = '';
      this.state = 'call';
    } else if (marker === m.call.close) {
      this.endCall(true, out);
      this.state = this.inBlock ? 'block' : 'content';
    } else if (m.block && marker === m.block.close) {
      if (this.state === 'call') this.endCall(false, out);
      this.inBlock = false;
      this.state = 'content';
    }
  }

  /** The call whose body is complete (`closed`: by its closing marker) out as a call, or back into the content. */
  private endCall(closed: boolean, out: ReplyEvent[]): void {
    const body = this.body;
    this.body = '';
    const m = this.markup;
    let r: ReadCall | ReadCall[] | string;
    try {
      r = closed || m.readUnterminated ? m.read(body, this.decls) : `${m.name}: a call cut off before ${m.call.close}`;
    } catch (e) {
      r = `${m.name}: ${(e as Error).message}`;
    }
    const all = typeof r === 'string' ? [] : Array.isArray(r) ? r : [r];
    if (typeof r !== 'string' && !all.length) r = `${m.name}: no call`;
    const unknown = all.find((c) => this.decls && !this.decls.has(c.name));
    if (unknown) r = `${m.name}: a call of ${JSON.stringify(unknown.name)}, which is not a declared tool`;
    if (typeof r === 'string') {
      this.rejected.push(r);
      this.text('content', m.call.open + body + (closed ? m.call.close : ''), out);
      return;
    }
    for (const c of all) {
      const index = this.calls.length;
      const id = c.id ?? this.callId(index);
      this.calls.push({ id, name: c.name, arguments: c.arguments });
      out.push({ kind: 'call', index, id, name: c.name }, { kind: 'arguments', index, text: c.arguments });
    }
  }
}

/**
 * Of the text between calls or messages (`gap`), what is content: up to its last visible
 * character, which goes with the whitespace before it; whitespace after it is held back, as it
 * may still turn out to be the markup between two calls. Empty when there is nothing to show.
 */
export function takeVisible(holder: { gap: string }): string {
  const end = holder.gap.trimEnd().length;
  const shown = holder.gap.slice(0, end);
  holder.gap = holder.gap.slice(end);
  return shown;
}

/**
 * Where the first of `markers` starts in `buf` (the longest, when two start at once) — or, when
 * none is there, `at` is where the tail that could still become one begins: what precedes it can
 * go out, the tail is held back.
 */
export function scanMarkers(buf: string, markers: readonly string[]): { at: number; marker?: string } {
  let at = -1;
  let marker = '';
  for (const m of markers) {
    const i = buf.indexOf(m);
    if (i >= 0 && (at < 0 || i < at || (i === at && m.length > marker.length))) {
      at = i;
      marker = m;
    }
  }
  if (at >= 0) return { at, marker };
  let keep = 0;
  for (const m of markers) for (let k = Math.min(m.length - 1, buf.length); k > keep; k--) if (m.startsWith(buf.slice(buf.length - k))) keep = k;
  return { at: buf.length - keep };
}

/**
 * `text` (trimmed) when it is the JSON text of an object, else undefined. Kept as the model wrote
 * it, spacing and all: a client sends it back, the template writes it into the next prompt, and
 * there it matches the tokens the session already holds.
 */
export function jsonObject(text: string): string | undefined {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return undefined;
  }
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? text.trim() : undefined;
}

/** The JSON Schema of a tool's parameter `key`, when the tool declares it. */
function paramSchema(tool: ToolDecl | undefined, key: string): Record<string, unknown> | undefined {
  const p = tool?.parameters as { properties?: Record<string, unknown> } | undefined;
  const s = p && typeof p === 'object' && p.properties && typeof p.properties === 'object' ? p.properties[key] : undefined;
  return s && typeof s === 'object' ? (s as Record<string, unknown>) : undefined;
}

/** A schema's type name (the first besides null when it lists several), lower case; undefined when it states none. */
function schemaType(s: Record<string, unknown> | undefined): string | undefined {
  if (!s) return undefined;
  const t = s.type;
  if (typeof t === 'string') return t.toLowerCase();
  if (Array.isArray(t)) {
    const named = t.filter((x): x is string => typeof x === 'string' && x !== 'null');
    return named[0]?.toLowerCase() ?? (t.includes('null') ? 'null' : undefined);
  }
  if (Array.isArray(s.enum)) return 'enum';
  return undefined;
}

/** Python's literals as JSON (True, False, None, single-quoted strings), for values the model wrote as Python would print them. */
function pythonLiteral(text: string): unknown {
  let out = '';
  let i = 0;
  const s = text.trim();
  while (i < s.length) {
    const c = s[i];
    if (c === "'" || c === '"') {
      let j = i + 1;
      let str = '';
      while (j < s.length && s[j] !== c) {
        if (s[j] === '\\' && j + 1 < s.length) {
          str += s[j + 1] === "'" ? "'" : s[j] + s[j + 1];
          j += 2;
        } else {
          str += s[j] === '"' ? '\\"' : s[j];
          j++;
        }
      }
      if (j >= s.length) throw new Error('an unterminated string');
      out += `"${str}"`;
      i = j + 1;
    } else if (/[A-Za-z_]/.test(c)) {
      const w = /^[A-Za-z_]\w*/.exec(s.slice(i))![0];
      const map: Record<string, string> = { True: 'true', False: 'false', None: 'null' };
      if (!(w in map)) throw new Error(`a name ${w}`);
      out += map[w];
      i += w.length;
    } else {
      out += c;
      i++;
    }
  }
  return JSON.parse(out);
}

/**
 * A Qwen3-Coder parameter's value as Qwen's own parser (and vLLM's qwen3_coder) reads it, by the
 * type the tool's schema gives it: a parameter the schema does not name, or a string type, is the
 * text; "null" is null; integer and number types are numbers (whole numbers as integers); boolean
 * is `true` or not; any other type is JSON, else a Python literal, else the text.
 */
export function qwenCoderValue(raw: string, schema: Record<string, unknown> | undefined): unknown {
  if (!schema) return raw;
  if (raw.trim().toLowerCase() === 'null') return null;
  const type = schemaType(schema) ?? 'object';
  if (['string', 'str', 'text', 'varchar', 'char', 'enum'].includes(type)) return raw;
  if (/^(int|uint|long|short|unsigned)/.test(type)) {
    const t = raw.trim();
    return /^[-+]?\d+$/.test(t) ? Number(t) : raw;
  }
  if (/^(num|float)/.test(type)) {
    const t = raw.trim();
    const n = Number(t);
    return t && Number.isFinite(n) ? n : raw;
  }
  if (['boolean', 'bool', 'binary'].includes(type)) return raw.trim().toLowerCase() === 'true';
  try {
    return JSON.parse(raw);
  } catch {
    try {
      return pythonLiteral(raw);
    } catch {
      return raw;
    }
  }
}

/**
 * A GLM-4.5 argument's value: JSON-decoded when the tool's schema gives the parameter a type other
 * than string (and it reads as JSON), else the text as written.
 */
export function glmValue(raw: string, schema: Record<string, unknown> | undefined): unknown {
  const type = schemaType(schema);
  if (type === undefined || type === 'string' || type === 'enum') return raw;
  try {
    return JSON.parse(raw.trim());
  } catch {
    return raw;
  }
}

const objectText = (entries: [string, unknown][]) => `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(',')}}`;

/** Qwen3's (and Qwen3-Next's, QwQ's, Hermes') `<tool_call>{"name": …, "arguments": {…}}</tool_call>`. */
export const QWEN_JSON_MARKUP: CallMarkup = {
  name: "Qwen3's <tool_call> JSON",
  call: { open: '<tool_call>', close: '</tool_call>' },
  readUnterminated: true,
  read(body) {
    let o: unknown;
    try {
      o = JSON.parse(body);
    } catch {
      return "Qwen3's <tool_call>: the call is not JSON";
    }
    const c = o as { name?: unknown; arguments?: unknown };
    if (!c || typeof c !== 'object' || typeof c.name !== 'string' || !c.name) return "Qwen3's <tool_call>: the call names no function";
    const extra = Object.keys(c).filter((k) => k !== 'name' && k !== 'arguments');
    if (extra.length) return `Qwen3's <tool_call>: the call of ${c.name} has ${JSON.stringify(extra[0])} besides its name and arguments`;
    const args = typeof c.arguments === 'string' ? jsonObject(c.arguments) : c.arguments === undefined ? '{}' : jsonObject(JSON.stringify(c.arguments));
    if (args === undefined) return `Qwen3's <tool_call>: the arguments of ${c.name} are not a JSON object`;
    return { name: c.name, arguments: args };
  },
};

/**
 * Qwen3-Coder's XML function format: `<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>…\n</function>\n</tool_call>`;
 * each value loses one newline at each end and is typed by the tool's schema (qwenCoderValue).
 */
export const QWEN_XML_MARKUP: CallMarkup = {
  name: "Qwen3-Coder's <function=…>",
  call: { open: '<tool_call>', close: '</tool_call>' },
  read(body, tools) {
    const f = /^\s*<function=([^>\n]+)>/.exec(body);
    if (!f) return "Qwen3-Coder's <tool_call>: no <function=NAME> opens the call";
    const name = f[1].trim();
    let rest = body.slice(f[0].length);
    const end = rest.lastIndexOf('</function>');
    if (end >= 0) {
      if (rest.slice(end + '</function>'.length).trim()) return `Qwen3-Coder's <tool_call>: text after </function> in the call of ${name}`;
      rest = rest.slice(0, end);
    }
    const tool = tools?.get(name);
    const args: [string, unknown][] = [];
    const re = /<parameter=([^>\n]+)>([\s\S]*?)(?:<\/parameter>|(?=<parameter=)|$)/g;
    let last = 0;
    for (let m = re.exec(rest); m; m = re.exec(rest)) {
      if (rest.slice(last, m.index).trim()) return `Qwen3-Coder's <tool_call>: text outside a <parameter> in the call of ${name}`;
      last = m.index + m[0].length;
      let v = m[2];
      if (v.startsWith('\n')) v = v.slice(1);
      if (v.endsWith('\n')) v = v.slice(0, -1);
      const key = m[1].trim();
      args.push([key, qwenCoderValue(v, paramSchema(tool, key))]);
      if (m[0].length === 0) break;
    }
    if (rest.slice(last).trim()) return `Qwen3-Coder's <tool_call>: text outside a <parameter> in the call of ${name}`;
    return { name, arguments: objectText(args) };
  },
};

/**
 * GLM-4.5's (and 4.6's, 4.7's) `<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>…</tool_call>`;
 * a value is JSON-decoded when the schema says the parameter is not a string (glmValue).
 */
export const GLM_MARKUP: CallMarkup = {
  name: "GLM's <arg_key>/<arg_value>",
  call: { open: '<tool_call>', close: '</tool_call>' },
  read(body, tools) {
    const k = body.indexOf('<arg_key>');
    const name = (k < 0 ? body : body.slice(0, k)).trim();
    if (!name || /[\s<>{}]/.test(name)) return "GLM's <tool_call>: the call does not begin with a function's name";
    const tool = tools?.get(name);
    const rest = k < 0 ? '' : body.slice(k);
    const args: [string, unknown][] = [];
    const re = /<arg_key>([\s\S]*?)<\/arg_key>\s*<arg_value>([\s\S]*?)<\/arg_value>/g;
    let last = 0;
    for (let m = re.exec(rest); m; m = re.exec(rest)) {
      if (rest.slice(last, m.index).trim()) return `GLM's <tool_call>: text outside an argument in the call of ${name}`;
      last = m.index + m[0].length;
      const key = m[1].trim();
      args.push([key, glmValue(m[2], paramSchema(tool, key))]);
    }
    if (rest.slice(last).trim()) return `GLM's <tool_call>: an argument without its <arg_key>…</arg_key><arg_value>…</arg_value> in the call of ${name}`;
    return { name, arguments: objectText(args) };
  },
};

export const DEEPSEEK_MARKERS = {
  calls: '<｜tool▁calls▁begin｜>',
  callsEnd: '<｜tool▁calls▁end｜>',
  call: '<｜tool▁call▁begin｜>',
  callEnd: '<｜tool▁call▁end｜>',
  sep: '<｜tool▁sep｜>',
} as const;

/**
 * DeepSeek's tool calls. V3.1 (and V3.2's template, Terminus): `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`.
 * V3 and R1 write the type first and the arguments fenced: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{json}\n```<｜tool▁call▁end｜>`.
 * Both are read, by the body's shape.
 */
export const DEEPSEEK_MARKUP: CallMarkup = {
  name: "DeepSeek's tool-call markers",
  block: { open: DEEPSEEK_MARKERS.calls, close: DEEPSEEK_MARKERS.callsEnd },
  call: { open: DEEPSEEK_MARKERS.call, close: DEEPSEEK_MARKERS.callEnd },
  readUnterminated: true,
  read(body) {
    const s = body.indexOf(DEEPSEEK_MARKERS.sep);
    if (s < 0) return `DeepSeek's tool call: no ${DEEPSEEK_MARKERS.sep} after the function's name`;
    const head = body.slice(0, s).trim();
    const tail = body.slice(s + DEEPSEEK_MARKERS.sep.length);
    // V3 / R1: type, then the name on its line and the arguments in a fence
    const v3 = /^([^\n]+)\n\s*```(?:json)?[ \t]*\n([\s\S]*?)\n?```\s*$/.exec(tail);
    if (v3 && head === 'function') {
      const args = jsonObject(v3[2]);
      if (args === undefined) return `DeepSeek's tool call: the arguments of ${v3[1].trim()} are not a JSON object`;
      return { name: v3[1].trim(), arguments: args };
    }
    if (!head) return "DeepSeek's tool call: no function's name";
    const args = jsonObject(tail.trim());
    if (args === undefined) return `DeepSeek's tool call: the arguments of ${head} are not a JSON object`;
    return { name: head, arguments: args };
  },
};

/**
 * Mistral's (Mixtral 8x22B Instruct's) `[TOOL_CALLS] [{"name": …, "arguments": {…}, "id": …}, …]`,
 * which runs to the end of the reply (`</s>`, a stop token the reader may never see).
 */
export const MISTRAL_MARKUP: CallMarkup = {
  name: "Mistral's [TOOL_CALLS]",
  call: { open: '[TOOL_CALLS]', close: '</s>' },
  readUnterminated: true,
  read(body) {
    let list: unknown;
    try {
      list = JSON.parse(body);
    } catch {
      return "Mistral's [TOOL_CALLS]: the calls are not JSON";
    }
    if (!Array.isArray(list)) list = [list];
    const out: ReadCall[] = [];
    for (const c of list as { name?: unknown; arguments?: unknown; id?: unknown }[]) {
      if (!c || typeof c !== 'object' || typeof c.name !== 'string' || !c.name) return "Mistral's [TOOL_CALLS]: a call names no function";
      const extra = Object.keys(c).filter((k) => k !== 'name' && k !== 'arguments' && k !== 'id');
      if (extra.length) return `Mistral's [TOOL_CALLS]: the call of ${c.name} has ${JSON.stringify(extra[0])} besides its name, arguments and id`;
      const args = typeof c.arguments === 'string' ? jsonObject(c.arguments) : c.arguments === undefined ? '{}' : jsonObject(JSON.stringify(c.arguments));
      if (args === undefined) return `Mistral's [TOOL_CALLS]: the arguments of ${c.name} are not a JSON object`;
      out.push({ name: c.name, arguments: args, ...(typeof c.id === 'string' && c.id ? { id: c.id } : {}) });
    }
    return out;
  },
};

/** Kimi's section markers, as its call reader reads them (the same strings as KIMI_TOOL_MARKERS). */
const K = {
  section: '<|tool_calls_section_begin|>',
  sectionEnd: '<|tool_calls_section_end|>',
  call: '<|tool_call_begin|>',
  args: '<|tool_call_argument_begin|>',
  callEnd: '<|tool_call_end|>',
} as const;

/**
 * Kimi K2's (and K2-Thinking's, Kimi-Linear's) tool-call section:
 * `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>…<|tool_calls_section_end|>`;
 * the id the model writes (`functions.NAME:IDX`) is the call's id, as Kimi's template reads it back.
 */
export const KIMI_MARKUP: CallMarkup = {
  name: "Kimi's tool-call section",
  block: { open: K.section, close: K.sectionEnd },
  call: { open: K.call, close: K.callEnd },
  readUnterminated: true,
  read(body) {
    const a = body.indexOf(K.args);
    if (a < 0) return `Kimi's tool call: no ${K.args} after the call's id`;
    const header = body.slice(0, a).trim();
    const m = /^(?:functions\.)?([^\s:<>]+)(?::\d+)?$/.exec(header);
    if (!m) return `Kimi's tool call: ${JSON.stringify(header)} is not a call id (functions.NAME:INDEX)`;
    const args = jsonObject(body.slice(a + K.args.length).trim());
    if (args === undefined) return `Kimi's tool call: the arguments of ${m[1]} are not a JSON object`;
    return { name: m[1], arguments: args, id: header };
  },
};
