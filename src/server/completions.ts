import { randomBytes } from 'node:crypto';
import type { Hono } from 'hono';
import { z } from 'zod';
import { type CompletionResult, type CompletionToken, prepareCompletion, runCompletion } from './completion.js';
import { PromptFork } from './prompt-fork.js';
import { ApiError, badRequest } from './errors.js';
import type { Host } from './host.js';
import { SamplingFields, parseBody, samplingOf } from './openai-request.js';
import { type TurnLog, choiceSampling, drain, holdEngine, queuedChoices, refuseIfBusy, streamChoices, wasteStats } from './run-turn.js';
import type { RouteEnv } from './server.js';

const Id = z.number().int().min(0);

export const CompletionBody = z.object({
  model: z.string().optional(),
  // text, token ids, or a list holding one of either (checked below, for a clearer message)
  prompt: z.union([z.string(), z.array(z.union([z.string(), Id, z.array(Id)]))]),
  suffix: z.string().nullish(),
  max_tokens: z.number().int().min(0).nullish(),
  ...SamplingFields.shape,
  n: z.number().int().min(1).max(16, 'n must be at most 16').nullish(),
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

/**
 * A prompt of token ids longer than the context is refused before its ids are checked one by one:
 * a body of millions of ids would otherwise be validated whole before it was found too long.
 */
function refuseLongIds(host: Host, doc: unknown): void {
  const p = (doc as { prompt?: unknown } | null)?.prompt;
  const ids = Array.isArray(p) && p.length === 1 && Array.isArray(p[0]) ? p[0] : p;
  const limit = host.contextLength;
  if (Array.isArray(ids) && ids.length > limit && typeof ids[0] === 'number')
    throw new ApiError(400, `the prompt is ${ids.length} tokens and this model's context is ${limit}`, 'invalid_request_error', 'context_length_exceeded', 'prompt');
}

const usage = (r: CompletionResult) => ({ prompt_tokens: r.promptTokens, completion_tokens: r.completionTokens, total_tokens: r.promptTokens + r.completionTokens, prompt_tokens_details: { cached_tokens: r.cachedTokens } });

/** POST /v1/completions: OpenAI's legacy text completions (no chat template), with echo and logprobs for scoring. */
export function completionRoutes(app: Hono<RouteEnv>, host: Host): void {
  app.post('/v1/completions', async (c) => {
    refuseIfBusy(host);
    const doc = await c.get('json')();
    refuseLongIds(host, doc);
    const b = parseBody(CompletionBody, doc);
    if (b.suffix) throw badRequest('suffix: insertion is not supported', 'suffix');
    const prompt = promptOf(b.prompt);
    const sampling = samplingOf(b);
    const prep = await prepareCompletion(host, {
      prompt,
      echo: !!b.echo,
      ...(b.logprobs != null ? { logprobs: b.logprobs } : {}),
      sampling,
      ...(b.max_tokens != null ? { maxTokens: b.max_tokens } : {}),
    });
    // the choices share the prompt: it is run once, for the first, and its state copied for the rest
    const fork = (b.n ?? 1) > 1 ? new PromptFork() : undefined;
    const preps = Array.from({ length: b.n ?? 1 }, (_, i) => {
      const choice = choiceSampling(sampling, i);
      host.checkSampling(choice);
      return { ...prep, req: { ...prep.req, sampling: choice }, ...(fork ? { fork } : {}) };
    });
    const signal = c.req.raw.signal;
    const log: TurnLog = { stream: !!b.stream, waitedSeconds: 0 };
    c.set('turn', log);
    const id = `cmpl-${randomBytes(12).toString('hex')}`;
    const created = Math.floor(Date.now() / 1000);
    const model = host.opts.id;
    const finishOf = (r: CompletionResult) => (r.finish === 'aborted' ? 'stop' : r.finish);


    if (!b.stream) {
      const results = await queuedChoices(host, c.get('client'), signal, log, preps.length, (i) => drain(runCompletion(host, preps[i], signal)));
      const all = log.result as CompletionResult;
      return c.json({
        id,
        object: 'text_completion',
        created,
        model,
        choices: results.map((r, index) => ({ index, text: r.text, logprobs: r.tokens ? legacyLogprobs(host, r.tokens) : null, finish_reason: finishOf(r) })),
        usage: usage(all),
        waste: wasteStats(all),
      });
    }

    const finished = await holdEngine(host, c.get('client'), signal, log);
    let pending: CompletionToken[] = [];
    const chunk = (index: number, text: string, finish: string | null = null) => {
      const logprobs = b.logprobs != null ? legacyLogprobs(host, pending) : null;
      pending = [];
      return { id, object: 'text_completion', created, model, choices: [{ index, text, logprobs, finish_reason: finish }] };
    };
    return streamChoices(c, signal, log, finished, {
      count: preps.length,
      includeUsage: !!b.stream_options?.include_usage,
      run: (i, send, stop) =>
        drain(runCompletion(host, preps[i], stop), async (e) => {
          if (stop.aborted) return;
          // a token comes just before its text, so the chunk carrying the text carries the token
          if (e.kind === 'token') pending.push(e.entry);
          else await send(chunk(i, e.text));
        }),
      finishChunk: (i, r) => chunk(i, '', finishOf(r)),
      usageChunk: (all) => ({ id, object: 'text_completion', created, model, choices: [], usage: usage(all) }),
    });
  });
}
