import { z } from 'zod';
import { quoted } from '../util/errors.js';
import type { ToolDecl } from '../chat/tool-grammar.js';
import { badRequest } from './errors.js';
import { requestSchema } from './request-schemas.js';
import type { TurnRequest } from './host.js';
import { type DraftMessage, type DraftTurn, type RequestImage, urlSource } from './image-parts.js';

/**
 * The body of POST /v1/chat/completions. Fields we do not know are ignored (clients send many);
 * a field we know with a value of the wrong type or range is refused.
 */
const TextPart = z.object({ type: z.literal('text'), text: z.string() });
const Content = z.union([z.string(), z.null(), z.array(z.union([TextPart, z.object({ type: z.string() }).loose()]))]);

const ToolCallIn = z.object({
  id: z.string(),
  type: z.literal('function').optional(),
  function: z.object({ name: z.string().min(1), arguments: z.string() }),
});

const Name = z.string().optional();

const Message = z.discriminatedUnion('role', [
  z.object({ role: z.literal('system'), content: Content, name: Name }),
  z.object({ role: z.literal('developer'), content: Content, name: Name }),
  z.object({ role: z.literal('user'), content: Content, name: Name }),
  z.object({
    role: z.literal('assistant'),
    name: Name,
    content: Content.optional(),
    reasoning_content: z.string().nullish(),
    tool_calls: z.array(ToolCallIn).nullish(),
  }),
  z.object({ role: z.literal('tool'), content: Content, tool_call_id: z.string() }),
]);

const FUNCTION_NAME = /^[A-Za-z0-9_.-]{1,64}$/;

const Tool = z.object({
  type: z.literal('function'),
  function: z.object({
    name: z.string().regex(FUNCTION_NAME, 'a function name is 1 to 64 letters, digits, _ . or -'),
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
    strict: z.boolean().nullish(),
  }),
});

const ResponseFormat = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }),
  z.object({ type: z.literal('json_object'), schema: z.record(z.string(), z.unknown()).optional() }),
  z.object({
    type: z.literal('json_schema'),
    json_schema: z.object({ name: z.string().optional(), schema: z.record(z.string(), z.unknown()).optional(), strict: z.boolean().nullish() }).optional(),
    schema: z.record(z.string(), z.unknown()).optional(),
  }),
]);

/** OpenAI's efforts (none turns reasoning off) and `max`; a format maps them to the nearest it knows (K3's: see xtml/format.ts). */
const Effort = z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max']);

/*
 * Every number a request carries is bounded here, within what the library's sampler accepts
 * (src/generate/sampler.ts: temperature 0..100, top-k 0..2^31, top-p (0, 1], min-p 0..1, penalties
 * -2..2, repetition 0.01..100, bias -100..100, seed 0..2^32-1), so a request the engine would refuse
 * is a 400 before it waits for the engine — never a 200 whose stream then fails. Counts (token
 * budgets, max_tokens) are integers, which zod also keeps within the safe range.
 */
export const TopK = z.number().int().min(0).max(2 ** 31);
export const Seed = z.number().int().min(0).max(2 ** 32 - 1);

/** The sampling fields both OpenAI endpoints take. */
export const SamplingFields = z.object({
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: TopK.nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  repetition_penalty: z.number().min(0.01).max(100).nullish(),
  seed: Seed.nullish(),
  stop: z.union([z.string(), z.array(z.string()).max(16)]).nullish(),
  logit_bias: z.record(z.string(), z.number().min(-100).max(100)).nullish(),
});

export const ChatCompletionBody = z.object({
  model: z.string().optional(),
  messages: z.array(Message).min(1, 'messages must hold at least one message'),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).nullish(),
  max_tokens: z.number().int().min(1).nullish(),
  max_completion_tokens: z.number().int().min(1).nullish(),
  ...SamplingFields.shape,
  n: z.number().int().min(1).max(16, 'n must be at most 16').nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  tools: z.array(Tool).max(128).nullish(),
  tool_choice: z.union([z.enum(['none', 'auto', 'required']), z.object({ type: z.literal('function'), function: z.object({ name: z.string() }) })]).nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  response_format: ResponseFormat.nullish(),
  reasoning_effort: Effort.nullish(),
  reasoning: z.object({ effort: Effort.optional(), max_tokens: z.number().int().min(0).optional() }).nullish(),
  thinking: z.union([z.boolean(), z.object({ type: z.enum(['enabled', 'disabled']), budget_tokens: z.number().int().min(0).optional() }).loose()]).nullish(),
  thinking_budget_tokens: z.number().int().min(0).nullish(),
  chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
});

export type ChatCompletionBody = z.infer<typeof ChatCompletionBody>;

/** Zod's first complaint as one sentence naming the field. */
export function zodMessage(e: z.ZodError): { message: string; param: string | null } {
  const issue = e.issues[0];
  const at = issue.path.length ? issue.path.map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`)).join('').replace(/^\./, '') : null;
  return { message: at ? `${at}: ${issue.message}` : issue.message, param: at };
}

export function parseBody<T>(schema: z.ZodType<T>, body: unknown): T {
  const r = schema.safeParse(body);
  if (!r.success) {
    const { message, param } = zodMessage(r.error);
    throw badRequest(message, param);
  }
  return r.data;
}

/** An image part: `image_url` as an object with its `url` (OpenAI's), or the URL alone (some clients send that). */
const ImageUrlPart = z.object({ type: z.literal('image_url'), image_url: z.union([z.string(), z.object({ url: z.string(), detail: z.string().optional() }).loose()]) });

/**
 * A message's content as text, its parts as sent (a format may tokenize them apart, and K3's puts
 * a media block where each image is), and its name. Only a user message may hold images.
 */
function text(m: { role: string; content?: z.infer<typeof Content>; name?: string }, where: string): Pick<DraftMessage, 'content' | 'parts' | 'name'> {
  const named = m.name !== undefined ? { name: m.name } : {};
  const content = m.content;
  if (content === null || content === undefined) return { content: '', ...named };
  if (typeof content === 'string') return { content, ...named };
  let images = 0;
  const parts = content.map((p, i): string | RequestImage => {
    const at = `${where}.content[${i}]`;
    if (p.type === 'image_url') {
      if (m.role !== 'user') throw badRequest(`${at}: only a user message may hold images (this one is the ${m.role}'s)`, `${where}.content`);
      const r = ImageUrlPart.safeParse(p);
      if (!r.success) throw badRequest(`${at}.${zodMessage(r.error).message}`, `${where}.content`);
      images++;
      const url = typeof r.data.image_url === 'string' ? r.data.image_url : r.data.image_url.url;
      return { source: urlSource(url, at), where: at };
    }
    if (p.type !== 'text' || typeof (p as { text?: unknown }).text !== 'string') throw badRequest(`${at}: only text and image_url parts are supported (got ${quoted(String(p.type))})`, `${where}.content`);
    return (p as { text: string }).text;
  });
  const texts = parts.filter((p): p is string => typeof p === 'string');
  return { content: texts.join(''), ...(parts.length > 1 || images ? { parts } : {}), ...named };
}

/**
 * A schema the request brings, noted with the field it came in: the Host compiles it when it
 * prepares the turn (in slices, within the server's bounds) and checks some document satisfies
 * it, so no reply could be left unfinishable; its problems become a 400 naming the field. Done for
 * every schema a request brings, whether or not this reply will use it.
 */
export function enforceable(schema: unknown, param: string): unknown {
  return requestSchema(schema, param);
}

/** The reasoning switch and effort from the several ways clients say it. */
export function reasoningOf(effort: string | null | undefined, thinking: boolean | { type: string } | null | undefined): { thinking?: boolean; effort?: string } {
  const on = typeof thinking === 'boolean' ? thinking : thinking ? thinking.type === 'enabled' : undefined;
  if (effort === 'none') {
    if (on === true) throw badRequest('thinking is on but reasoning_effort is "none"', 'reasoning_effort');
    return { thinking: false };
  }
  if (effort) {
    if (on === false) throw badRequest(`thinking is off but reasoning_effort is ${quoted(effort)}`, 'reasoning_effort');
    return { thinking: true, effort };
  }
  return on === undefined ? {} : { thinking: on };
}

/** The declared tools, each schema checked (`where` names a tool's schema in the request, for errors). */
export function toolDecls(tools: z.infer<typeof Tool>[] | null | undefined, where = (i: number) => `tools[${i}].function.parameters`): ToolDecl[] {
  const out: ToolDecl[] = [];
  const seen = new Set<string>();
  (tools ?? []).forEach((t, i) => {
    if (seen.has(t.function.name)) throw badRequest(`tools[${i}]: a second function named ${quoted(t.function.name)}`, 'tools');
    seen.add(t.function.name);
    const parameters = enforceable(t.function.parameters ?? { type: 'object', properties: {} }, where(i));
    out.push({ name: t.function.name, ...(t.function.description !== undefined ? { description: t.function.description } : {}), parameters });
  });
  return out;
}

/**
 * A final assistant message is continued as the reply's beginning (see promptOptions); an empty one
 * begins it with nothing, which is the reply as if it were not there.
 */
export function dropEmptyFinal(messages: DraftMessage[]): void {
  const last = messages[messages.length - 1];
  if (messages.length > 1 && last.role === 'assistant' && !last.content && !last.toolCalls?.length && !last.reasoning && !last.parts?.length) messages.pop();
}

/** The sampling options of a request, in the engine's terms. */
export function samplingOf(b: z.infer<typeof SamplingFields>): TurnRequest['sampling'] {
  const stop = typeof b.stop === 'string' ? [b.stop] : (b.stop ?? []);
  if (stop.some((s) => s === '')) throw badRequest('stop: an empty stop string', 'stop');
  const sampling: TurnRequest['sampling'] = {};
  if (b.temperature != null) sampling.temperature = b.temperature;
  if (b.top_p != null) sampling.topP = b.top_p;
  if (b.top_k != null) sampling.topK = b.top_k;
  if (b.min_p != null) sampling.minP = b.min_p;
  if (b.presence_penalty != null) sampling.presencePenalty = b.presence_penalty;
  if (b.frequency_penalty != null) sampling.frequencyPenalty = b.frequency_penalty;
  if (b.repetition_penalty != null) sampling.repetitionPenalty = b.repetition_penalty;
  if (b.seed != null) sampling.seed = b.seed;
  if (stop.length) sampling.stop = stop;
  if (b.logit_bias) {
    if (Object.keys(b.logit_bias).length > 1024) throw badRequest('logit_bias: at most 1024 tokens', 'logit_bias');
    for (const k of Object.keys(b.logit_bias)) if (!/^(0|[1-9]\d{0,8})$/.test(k)) throw badRequest(`logit_bias: keys must be token ids (got "${k.slice(0, 40)}")`, 'logit_bias');
    sampling.logitBias = Object.fromEntries(Object.entries(b.logit_bias).map(([k, v]) => [Number(k), v]));
  }
  return sampling;
}

/** A chat completion request as a turn for the engine (its images still to be read: see ServerImages). */
export function chatTurn(b: ChatCompletionBody): DraftTurn {
  const messages: DraftMessage[] = b.messages.map((m, i) => {
    const where = `messages[${i}]`;
    switch (m.role) {
      case 'system':
      case 'developer':
        return { role: 'system', ...text(m, where) };
      case 'user':
        return { role: 'user', ...text(m, where) };
      case 'tool':
        return { role: 'tool', ...text(m, where), toolCallId: m.tool_call_id };
      case 'assistant': {
        const calls = (m.tool_calls ?? []).map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments }));
        return { role: 'assistant', ...text(m, where), ...(calls.length ? { toolCalls: calls } : {}), ...(m.reasoning_content ? { reasoning: m.reasoning_content } : {}) };
      }
    }
  });
  dropEmptyFinal(messages);
  const tools = toolDecls(b.tools);
  let toolChoice: TurnRequest['toolChoice'] = tools.length ? 'auto' : 'none';
  if (b.tool_choice) {
    if (typeof b.tool_choice === 'string') toolChoice = b.tool_choice;
    else {
      const name = b.tool_choice.function.name;
      if (!tools.some((t) => t.name === name)) throw badRequest(`tool_choice names ${quoted(name)}, which is not among the tools`, 'tool_choice');
      toolChoice = { name };
    }
    if (toolChoice !== 'none' && !tools.length) throw badRequest('tool_choice needs tools', 'tool_choice');
  }
  let schema: unknown;
  const rf = b.response_format;
  if (rf?.type === 'json_object') schema = enforceable(rf.schema ?? { type: 'object' }, 'response_format.schema');
  else if (rf?.type === 'json_schema') {
    const s = rf.json_schema?.schema ?? rf.schema;
    if (!s) throw badRequest('response_format.json_schema.schema is required', 'response_format');
    schema = enforceable(s, 'response_format.json_schema.schema');
  }
  const reasoning = reasoningOf(b.reasoning_effort ?? b.reasoning?.effort, b.thinking);
  const budget = b.thinking_budget_tokens ?? b.reasoning?.max_tokens ?? (typeof b.thinking === 'object' ? b.thinking?.budget_tokens : undefined);
  const sampling = samplingOf(b);
  if (b.top_logprobs != null && !b.logprobs) throw badRequest('top_logprobs: logprobs must be true when top_logprobs is set', 'top_logprobs');
  if (b.logprobs) {
    sampling.logprobs = true;
    sampling.topLogprobs = b.top_logprobs ?? 0;
  }
  const maxTokens = b.max_completion_tokens ?? b.max_tokens ?? undefined;
  return {
    messages,
    tools,
    toolChoice,
    parallelToolCalls: b.parallel_tool_calls ?? true,
    schema,
    ...(rf?.type === 'json_object' || rf?.type === 'json_schema' ? { responseType: rf.type } : {}),
    ...reasoning,
    ...(budget != null ? { reasoningBudget: budget } : {}),
    templateVars: b.chat_template_kwargs ?? undefined,
    sampling,
    maxTokens,
  };
}
