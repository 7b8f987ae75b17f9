import { randomBytes } from 'node:crypto';
import type { Hono } from 'hono';
import { streamSSE } from 'hono/streaming';
import { z } from 'zod';
import { type CompletionResult, type CompletionToken, prepareCompletion, runCompletion } from './completion.js';
import { badRequest, openaiErrorBody } from './errors.js';
import type { Host } from './host.js';
import { SamplingFields, parseBody, samplingOf } from './openai-request.js';
import { STALL_MS, type TurnLog, asApiError, drain, holdEngine, queuedWork, refuseIfBusy, streamAbort, wasteStats, writeOrAbort } from './run-turn.js';
import type { RouteEnv } from './server.js';

const Id = z.number().int().min(0);

export const CompletionBody = z.object({
  model: z.string().optional(),
  // text, token ids, or a list holding one of either (checked below, for a clearer message)
  prompt: z.union([z.string(), z.array(z.union([z.string(), Id, z.array(Id)]))]),
  suffix: z.string().nullish(),
  max_tokens: z.number().int().min(0).nullish(),
  ...SamplingFields.shape,
  n: z.number().int().min(1).max(1, 'n must be 1: one completion per request').nullish(),
  best_of: z.number().int().min(1).max(1, 'best_of must be 1').nullish(),
  logprobs: z.number().int().min(0).max(20).nullish(),
  echo: z.boolean().nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).nullish(),
  user: z.string().nullish(),
});

/** The legacy logprobs object: parallel lists, alternatives keyed by their text. */
function legacyLogprobs(host: Host, entries: CompletionToken[]) {
  const tok = host.model.tokenizer();
  const utf8 = new TextDecoder();
  const text = (id: number) => utf8.decode(tok.tokenBytes(id));
  return {
    tokens: entries.map((e) => text(e.token)),
    token_logprobs: entries.map((e) => e.logprob),
    top_logprobs: entries.map((e) => (e.top ? Object.fromEntries(e.top.map((t) => [text(t.token), t.logprob])) : null)),
    text_offset: entries.map((e) => e.offset),
  };
}

/** The one prompt of a request: text, or token ids; a list of several is refused. */
function promptOf(p: z.infer<typeof CompletionBody>['prompt']): string | number[] {
  if (typeof p === 'string') return p;
  if (p.every((x) => typeof x === 'number')) return p as number[];
  if (p.some((x) => typeof x === 'number')) throw badRequest('prompt: a list of token ids, or a list holding one prompt (not both mixed)', 'prompt');
  if (p.length !== 1) throw badRequest(`prompt: one prompt per request (got ${p.length})`, 'prompt');
  return p[0] as string | number[];
}

const usage = (r: CompletionResult) => ({ prompt_tokens: r.promptTokens, completion_tokens: r.completionTokens, total_tokens: r.promptTokens + r.completionTokens, prompt_tokens_details: { cached_tokens: r.cachedTokens } });

/** POST /v1/completions: OpenAI's legacy text completions (no chat template), with echo and logprobs for scoring. */
export function completionRoutes(app: Hono<RouteEnv>, host: Host): void {
  app.post('/v1/completions', async (c) => {
    refuseIfBusy(host);
    const b = parseBody(CompletionBody, await c.get('json')());
    if (b.suffix) throw badRequest('suffix: insertion is not supported', 'suffix');
    const prompt = promptOf(b.prompt);
    const prep = prepareCompletion(host, {
      prompt,
      echo: !!b.echo,
      ...(b.logprobs != null ? { logprobs: b.logprobs } : {}),
      sampling: samplingOf(b),
      ...(b.max_tokens != null ? { maxTokens: b.max_tokens } : {}),
    });
    const signal = c.req.raw.signal;
    const log: TurnLog = { stream: !!b.stream, waitedSeconds: 0 };
    c.set('turn', log);
    const id = `cmpl-${randomBytes(12).toString('hex')}`;
    const created = Math.floor(Date.now() / 1000);
    const model = host.opts.id;
    const finishOf = (r: CompletionResult) => (r.finish === 'aborted' ? 'stop' : r.finish);


    if (!b.stream) {
      const r = await queuedWork(host, c.get('client'), signal, log, () => drain(runCompletion(host, prep, signal)));
      log.result = r;
      return c.json({
        id,
        object: 'text_completion',
        created,
        model,
        choices: [{ index: 0, text: r.text, logprobs: r.tokens ? legacyLogprobs(host, r.tokens) : null, finish_reason: finishOf(r) }],
        usage: usage(r),
        waste: wasteStats(r),
      });
    }

    const finished = await holdEngine(host, c.get('client'), signal, log);
    let pending: CompletionToken[] = [];
    const chunk = (text: string, finish: string | null = null) => {
      const logprobs = prep.req.logprobs !== undefined ? legacyLogprobs(host, pending) : null;
      pending = [];
      return { id, object: 'text_completion', created, model, choices: [{ index: 0, text, logprobs, finish_reason: finish }] };
    };
    return streamSSE(c, async (stream) => {
      const ac = streamAbort(stream, signal);
      const send = (o: unknown) => writeOrAbort(stream.writeSSE({ data: JSON.stringify(o) }), STALL_MS, ac);
      try {
        const r = await drain(runCompletion(host, prep, ac.signal), async (e) => {
          if (ac.signal.aborted) return;
          // a token comes just before its text, so the chunk carrying the text carries the token
          if (e.kind === 'token') pending.push(e.entry);
          else await send(chunk(e.text));
        });
        log.result = r;
        if (r.finish === 'aborted' || ac.signal.aborted) return;
        await send({ ...chunk('', finishOf(r)), ...(b.stream_options?.include_usage ? {} : { waste: wasteStats(r) }) });
        if (b.stream_options?.include_usage) await send({ id, object: 'text_completion', created, model, choices: [], usage: usage(r), waste: wasteStats(r) });
        await stream.writeSSE({ data: '[DONE]' });
      } catch (e) {
        const err = asApiError(e);
        c.get('warn')(`stream failed: ${err.message}`);
        if (!ac.signal.aborted) await send(openaiErrorBody(err));
      } finally {
        finished();
      }
    });
  });
}
