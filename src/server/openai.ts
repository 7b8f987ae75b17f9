import { randomBytes } from 'node:crypto';
import type { Hono } from 'hono';
import { Host, type TokenLogprob, type TurnEvent, type TurnResult } from './host.js';
import { ChatCompletionBody, chatTurn, parseBody } from './openai-request.js';
import { type TurnLog, collectTurn, holdEngine, queuedChoices, refuseIfBusy, streamChoices, streamTurn, wasteStats } from './run-turn.js';
import type { RouteEnv } from './server.js';

const usage = (r: TurnResult) => ({
  prompt_tokens: r.promptTokens,
  completion_tokens: r.completionTokens,
  total_tokens: r.promptTokens + r.completionTokens,
  // prompt tokens a kept session had already consumed (see --sessions)
  prompt_tokens_details: { cached_tokens: r.cachedTokens },
  completion_tokens_details: { reasoning_tokens: r.reasoningTokens ?? 0 },
});

/** OpenAI's logprobs object: a token's text, its UTF-8 bytes and log-probability, and alternatives. */
function logprobsOf(host: Host, entries: TokenLogprob[]) {
  const tok = host.model.tokenizer();
  const utf8 = new TextDecoder();
  const one = (token: number, logprob: number) => {
    const bytes = tok.tokenBytes(token);
    return { token: utf8.decode(bytes), logprob, bytes: [...bytes] };
  };
  return { content: entries.map((e) => ({ ...one(e.token, e.logprob), top_logprobs: e.top.map((t) => one(t.token, t.logprob)) })), refusal: null };
}

const toolCalls = (r: TurnResult) => r.toolCalls.map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.name, arguments: c.arguments } }));

/** POST /v1/chat/completions, in OpenAI's shapes (the models routes are in models.ts). */
export function openaiRoutes(app: Hono<RouteEnv>, host: Host): void {
  app.post('/v1/chat/completions', async (c) => {
    refuseIfBusy(host);
    const body = parseBody(ChatCompletionBody, await c.get('json')());
    const signal = c.req.raw.signal;
    // its images through the tower first: a damaged one is a 400 before the request waits
    const turn = await host.images.resolve(chatTurn(body), signal);
    // each choice is its own turn (a grammar's state is per reply), prepared before the queue
    const reqs = await host.prepareChoices(turn, body.n ?? 1, signal);
    const log: TurnLog = { stream: !!body.stream, waitedSeconds: 0 };
    c.set('turn', log);
    const id = `chatcmpl-${randomBytes(12).toString('hex')}`;
    const created = Math.floor(Date.now() / 1000);
    const model = host.opts.id;

    if (!body.stream) {
      const results = await queuedChoices(host, c.get('client'), signal, log, reqs.length, (i) => collectTurn(host, reqs[i], signal));
      const all = log.result!;
      if (turn.schema !== undefined)
        for (const r of results) {
          if (r.finish !== 'stop') continue;
          // a second opinion on what the grammar enforced; a reply is never withheld over it
          let problem: string | null;
          try {
            problem = Host.check(turn.schema, r.content);
          } catch (e) {
            problem = `the validator failed (${(e as Error).message})`;
          }
          if (problem) c.get('warn')(`structured reply did not validate: ${problem}`);
        }
      return c.json({
        id,
        object: 'chat.completion',
        created,
        model,
        choices: results.map((r, index) => ({
          index,
          message: {
            role: 'assistant',
            content: r.content === '' && r.toolCalls.length ? null : r.content,
            ...(r.reasoning ? { reasoning_content: r.reasoning } : {}),
            ...(r.toolCalls.length ? { tool_calls: toolCalls(r) } : {}),
          },
          logprobs: r.logprobs ? logprobsOf(host, r.logprobs) : null,
          finish_reason: r.finish === 'aborted' ? 'stop' : r.finish,
        })),
        usage: usage(all),
        waste: wasteStats(all),
      });
    }

    const finished = await holdEngine(host, c.get('client'), signal, log);
    // log-probabilities arrive before the text of their token and ride on the next chunk sent
    let pending: TokenLogprob[] = [];
    const chunk = (index: number, delta: Record<string, unknown>, finish: string | null = null) => {
      const logprobs = pending.length ? logprobsOf(host, pending) : null;
      pending = [];
      return { id, object: 'chat.completion.chunk', created, model, choices: [{ index, delta, logprobs, finish_reason: finish }] };
    };
    return streamChoices(c, signal, log, finished, {
      count: reqs.length,
      includeUsage: !!body.stream_options?.include_usage,
      run: async (i, send, stop) => {
        await send(chunk(i, { role: 'assistant', content: '' }));
        return streamTurn(host, reqs[i], stop, async (e: TurnEvent) => {
          if (stop.aborted) return;
          if (e.kind === 'logprob') pending.push(e.entry);
          else if (e.kind === 'content') await send(chunk(i, { content: e.text }));
          else if (e.kind === 'reasoning') await send(chunk(i, { reasoning_content: e.text }));
          else if (e.kind === 'call') await send(chunk(i, { tool_calls: [{ index: e.index, id: e.id, type: 'function', function: { name: e.name, arguments: '' } }] }));
          else await send(chunk(i, { tool_calls: [{ index: e.index, function: { arguments: e.text } }] }));
        });
      },
      finishChunk: (i, r) => chunk(i, {}, r.finish),
      usageChunk: (all) => ({ id, object: 'chat.completion.chunk', created, model, choices: [], usage: usage(all) }),
    });
  });
}
