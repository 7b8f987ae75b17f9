import { randomBytes } from 'node:crypto';
import type { Hono } from 'hono';
import { streamSSE } from 'hono/streaming';
import { z } from 'zod';
import { quoted } from '../util/errors.js';
import { anthropicErrorBody, asApiError, badRequest } from './errors.js';
import type { Host, TurnRequest, TurnResult } from './host.js';
import { type DraftMessage, type DraftTurn, type RequestImage, inlineSource, urlSource } from './image-parts.js';
import { TopK, dropEmptyFinal, enforceable, parseBody, toolDecls } from './openai-request.js';
import { refuseUnsupported } from './anthropic-unsupported.js';
import { STALL_MS, type TurnLog, holdEngine, queuedTurn, refuseIfBusy, streamAbort, streamTurn, wasteStats, writeOrAbort } from './run-turn.js';
import type { RouteEnv } from './server.js';

/** Anthropic's Messages API (POST /v1/messages), for clients that speak it. */

/** Anthropic's effort levels (output_config.effort), mapped as OpenAI's reasoning_effort is. */
const EFFORTS = ['low', 'medium', 'high', 'xhigh', 'max'] as const;

const Text = z.object({ type: z.literal('text'), text: z.string() }).loose();
const ImageSourceBlock = z.discriminatedUnion('type', [
  z.object({ type: z.literal('base64'), media_type: z.string(), data: z.string() }).loose(),
  z.object({ type: z.literal('url'), url: z.string() }).loose(),
]);
const Block = z.discriminatedUnion('type', [
  Text,
  z.object({ type: z.literal('image'), source: ImageSourceBlock }).loose(),
  z.object({ type: z.literal('tool_use'), id: z.string(), name: z.string(), input: z.unknown() }).loose(),
  z.object({ type: z.literal('tool_result'), tool_use_id: z.string(), content: z.union([z.string(), z.array(Text)]).optional(), is_error: z.boolean().optional() }).loose(),
  z.object({ type: z.literal('thinking'), thinking: z.string() }).loose(),
  z.object({ type: z.literal('redacted_thinking') }).loose(),
]);
const MessagesBody = z.object({
  model: z.string().optional(),
  max_tokens: z.number().int().min(1),
  messages: z.array(z.object({ role: z.enum(['user', 'assistant']), content: z.union([z.string(), z.array(Block)]) })).min(1, 'messages must hold at least one message'),
  system: z.union([z.string(), z.array(Text)]).optional(),
  stop_sequences: z.array(z.string().min(1)).max(16).optional(),
  stream: z.boolean().optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().gt(0).max(1).optional(),
  top_k: TopK.optional(),
  tools: z
    .array(z.object({ name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'a tool name is 1 to 64 letters, digits, _ or -'), description: z.string().optional(), input_schema: z.record(z.string(), z.unknown()) }).loose())
    .max(128)
    .optional(),
  tool_choice: z.object({ type: z.enum(['auto', 'any', 'tool', 'none']), name: z.string().optional(), disable_parallel_tool_use: z.boolean().optional() }).optional(),
  thinking: z
    .discriminatedUnion('type', [
      z.object({ type: z.literal('enabled'), budget_tokens: z.number().int().min(1).optional() }).loose(),
      // the model decides how much to reason: on, with no budget
      z.object({ type: z.literal('adaptive') }).loose(),
      z.object({ type: z.literal('disabled') }).loose(),
    ])
    .optional(),
  output_config: z
    .object({
      effort: z.enum(EFFORTS).optional(),
      format: z.object({ type: z.literal('json_schema'), schema: z.record(z.string(), z.unknown()) }).loose().optional(),
    })
    .loose()
    .optional(),
});
type MessagesBody = z.infer<typeof MessagesBody>;

/** An image block's source, checked as far as it can be without reading it. */
function imageOf(source: z.infer<typeof ImageSourceBlock>, where: string): RequestImage {
  return { source: source.type === 'base64' ? inlineSource(source.media_type, source.data, where) : urlSource(source.url, where), where };
}

function messagesTurn(b: MessagesBody): DraftTurn {
  const messages: DraftMessage[] = [];
  const system = typeof b.system === 'string' ? b.system : (b.system ?? []).map((t) => t.text).join('\n');
  if (system) messages.push({ role: 'system', content: system });
  b.messages.forEach((m, i) => {
    if (typeof m.content === 'string') {
      messages.push({ role: m.role, content: m.content });
      return;
    }
    if (m.role === 'user') {
      // text and images in the order sent (K3's format shows each image where it sits)
      const parts: (string | RequestImage)[] = [];
      m.content.forEach((block, j) => {
        if (block.type === 'tool_result') {
          const c = block.content;
          const body = typeof c === 'string' ? c : (c ?? []).map((t) => t.text).join('');
          messages.push({ role: 'tool', content: block.is_error ? `Error: ${body}` : body, toolCallId: block.tool_use_id });
        } else if (block.type === 'text') parts.push(block.text);
        else if (block.type === 'image') parts.push(imageOf(block.source, `messages[${i}].content[${j}]`));
        else throw badRequest(`messages[${i}]: a user message cannot hold a ${block.type} block`, 'messages');
      });
      const text = parts.filter((p): p is string => typeof p === 'string').join('');
      if (parts.some((p) => typeof p !== 'string')) messages.push({ role: 'user', content: text, parts });
      else if (text) messages.push({ role: 'user', content: text });
      return;
    }
    let content = '';
    let reasoning = '';
    const calls: { id: string; name: string; arguments: string }[] = [];
    for (const block of m.content) {
      if (block.type === 'text') content += block.text;
      else if (block.type === 'thinking') reasoning += block.thinking;
      else if (block.type === 'tool_use') calls.push({ id: block.id, name: block.name, arguments: JSON.stringify(block.input ?? {}) });
      else if (block.type === 'tool_result') throw badRequest(`messages[${i}]: an assistant message cannot hold a tool_result block`, 'messages');
      else if (block.type === 'image') throw badRequest(`messages[${i}]: only a user message may hold images`, 'messages');
    }
    messages.push({ role: 'assistant', content, ...(calls.length ? { toolCalls: calls } : {}), ...(reasoning ? { reasoning } : {}) });
  });
  dropEmptyFinal(messages);
  const tools = toolDecls(
    (b.tools ?? []).map((t) => ({ type: 'function' as const, function: { name: t.name, description: t.description, parameters: t.input_schema } })),
    (i) => `tools[${i}].input_schema`,
  );
  const tc = b.tool_choice;
  let toolChoice: TurnRequest['toolChoice'] = tools.length ? 'auto' : 'none';
  if (tc?.type === 'none') toolChoice = 'none';
  else if (tc?.type === 'any') toolChoice = 'required';
  else if (tc?.type === 'tool') {
    if (!tc.name || !tools.some((t) => t.name === tc.name)) throw badRequest(`tool_choice names ${quoted(tc.name ?? '')}, which is not among the tools`, 'tool_choice');
    toolChoice = { name: tc.name };
  }
  if (toolChoice !== 'none' && !tools.length) throw badRequest('tool_choice needs tools', 'tool_choice');
  const format = b.output_config?.format;
  return {
    messages,
    tools,
    toolChoice,
    parallelToolCalls: !tc?.disable_parallel_tool_use,
    // as Anthropic's API: no reasoning unless the request asks for it, whatever the template's
    // default (K3 thinks unless told not to), so content[0] is the answer
    thinking: b.thinking?.type === 'enabled' || b.thinking?.type === 'adaptive',
    ...(b.output_config?.effort ? { effort: b.output_config.effort } : {}),
    ...(b.thinking?.type === 'enabled' && typeof b.thinking.budget_tokens === 'number' ? { reasoningBudget: b.thinking.budget_tokens } : {}),
    ...(format ? { schema: enforceable(format.schema, 'output_config.format.schema'), responseType: 'json_schema' as const } : {}),
    sampling: {
      ...(b.temperature !== undefined ? { temperature: b.temperature } : {}),
      ...(b.top_p !== undefined ? { topP: b.top_p } : {}),
      ...(b.top_k !== undefined ? { topK: b.top_k } : {}),
      ...(b.stop_sequences?.length ? { stop: b.stop_sequences } : {}),
    },
    maxTokens: b.max_tokens,
  };
}

const stopReason = (r: TurnResult) => (r.finish === 'tool_calls' ? 'tool_use' : r.finish === 'length' ? 'max_tokens' : r.stopString !== undefined ? 'stop_sequence' : 'end_turn');

function input(args: string): unknown {
  try {
    return JSON.parse(args);
  } catch {
    return {};
  }
}

/**
 * Anthropic's usage: input_tokens counts only what was fed; prompt tokens a kept session had
 * already consumed (waste serve --sessions) are cache reads.
 */
const usage = (prompt: number, cached: number, output: number) => ({ input_tokens: prompt - cached, cache_read_input_tokens: cached, cache_creation_input_tokens: 0, output_tokens: output });

export function anthropicRoutes(app: Hono<RouteEnv>, host: Host): void {
  app.post('/v1/messages/count_tokens', async (c) => {
    const doc = await c.get('json')();
    refuseUnsupported(doc);
    const b = parseBody(MessagesBody.extend({ max_tokens: z.number().int().min(1).optional().default(1) }), doc);
    // each image counted as the rows it will take, as the turn would feed them
    const n = await host.countTokens(await host.images.count(messagesTurn(b), c.req.raw.signal), c.req.raw.signal);
    // as /v1/messages answers it: a conversation the model cannot take is the client's 400, and
    // its message carries the count, for a client that trims
    host.checkFits(n);
    return c.json({ input_tokens: n });
  });

  app.post('/v1/messages', async (c) => {
    refuseIfBusy(host);
    const doc = await c.get('json')();
    refuseUnsupported(doc);
    const body = parseBody(MessagesBody, doc);
    const signal = c.req.raw.signal;
    const req = await host.prepare(await host.images.resolve(messagesTurn(body), signal), signal);
    const log: TurnLog = { stream: !!body.stream, waitedSeconds: 0 };
    c.set('turn', log);
    const id = `msg_${randomBytes(12).toString('hex')}`;
    const model = host.opts.id;

    if (!body.stream) {
      const r = await queuedTurn(host, c.get('client'), signal, req, log);
      const content: unknown[] = [];
      if (r.reasoning) content.push({ type: 'thinking', thinking: r.reasoning, signature: '' });
      if (r.content) content.push({ type: 'text', text: r.content });
      for (const call of r.toolCalls) content.push({ type: 'tool_use', id: call.id, name: call.name, input: input(call.arguments) });
      return c.json({
        id,
        type: 'message',
        role: 'assistant',
        model,
        content,
        stop_reason: stopReason(r),
        stop_sequence: r.stopString ?? null,
        usage: usage(r.promptTokens, r.cachedTokens, r.completionTokens),
        waste: wasteStats(r),
      });
    }

    const finished = await holdEngine(host, c.get('client'), signal, log);
    return streamSSE(c, async (stream) => {
      const ac = streamAbort(stream, signal);
      const send = (event: string, data: Record<string, unknown>) => writeOrAbort(stream.writeSSE({ event, data: JSON.stringify({ type: event, ...data }) }), STALL_MS, ac);
      // one content block open at a time: thinking, text or a tool call
      let index = -1;
      let open: 'thinking' | 'text' | 'tool_use' | undefined;
      const close = async () => {
        if (open) await send('content_block_stop', { index });
        open = undefined;
      };
      const start = async (block: Record<string, unknown> & { type: 'thinking' | 'text' | 'tool_use' }) => {
        await close();
        index++;
        open = block.type;
        await send('content_block_start', { index, content_block: block });
      };
      try {
        await send('message_start', { message: { id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null, usage: usage(req.ids.length - req.forcedIds, Math.min(host.cachedFor(req.ids, 1, req.images), req.ids.length - req.forcedIds), 0) } });
        const r = await streamTurn(host, req, ac.signal, async (e) => {
          if (ac.signal.aborted) return;
          if (e.kind === 'reasoning') {
            if (open !== 'thinking') await start({ type: 'thinking', thinking: '' });
            await send('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: e.text } });
          } else if (e.kind === 'content') {
            if (open !== 'text') {
              if (!e.text.trim() && open === 'tool_use') return; // whitespace after a call
              await start({ type: 'text', text: '' });
            }
            await send('content_block_delta', { index, delta: { type: 'text_delta', text: e.text } });
          } else if (e.kind === 'call') await start({ type: 'tool_use', id: e.id, name: e.name, input: {} });
          else if (e.kind === 'arguments') await send('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: e.text } });
        });
        log.result = r;
        if (r.finish === 'aborted' || ac.signal.aborted) return;
        await close();
        await send('message_delta', { delta: { stop_reason: stopReason(r), stop_sequence: r.stopString ?? null }, usage: { output_tokens: r.completionTokens }, waste: wasteStats(r) });
        await send('message_stop', {});
      } catch (e) {
        const err = asApiError(e);
        c.get('warn')(`stream failed: ${err.message}`);
        if (!ac.signal.aborted) await stream.writeSSE({ event: 'error', data: JSON.stringify(anthropicErrorBody(err)) });
      } finally {
        finished();
      }
    });
  });
}
