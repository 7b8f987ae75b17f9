import type { Context, Hono } from 'hono';
import type { Host } from './host.js';
import type { RouteEnv } from './server.js';

/**
 * GET /v1/models and /v1/models/{id}, in the shape of the client asking: Anthropic's when the
 * request is an Anthropic client's (it sends `anthropic-version`, or its key as `x-api-key`), else
 * OpenAI's. One model is served, under any name: a chat request naming another model is answered
 * by this one (as llama-server does), so /v1/models/{any name} answers with this model's entry
 * under the name asked for, and `root` (OpenAI) / `display_name` (Anthropic) says which it is.
 */
export function modelRoutes(app: Hono<RouteEnv>, host: Host): void {
  const anthropic = (c: Context<RouteEnv>) => c.req.header('anthropic-version') !== undefined || (c.req.header('x-api-key') !== undefined && c.req.header('authorization') === undefined);
  const openaiModel = (id: string) => ({
    id,
    object: 'model',
    created: Math.floor(host.started / 1000),
    owned_by: 'waste',
    root: host.opts.id,
    meta: {
      context_length: host.contextLength,
      layers: host.model.config.layers,
      vocab: host.model.config.vocab,
      experts: host.model.config.moe.experts,
      experts_per_token: host.model.config.moe.topK,
      budget_bytes: host.model.stats().budgetBytes,
      // image_url parts are taken (a vision tower, not turned off)
      vision: host.images.accepted,
    },
  });
  const anthropicModel = (id: string) => ({
    type: 'model',
    id,
    display_name: host.opts.id,
    created_at: new Date(host.started).toISOString(),
    max_input_tokens: host.contextLength,
    max_tokens: host.opts.maxTokens,
  });
  app.get('/v1/models', (c) => {
    const id = host.opts.id;
    return anthropic(c) ? c.json({ data: [anthropicModel(id)], has_more: false, first_id: id, last_id: id }) : c.json({ object: 'list', data: [openaiModel(id)] });
  });
  app.get('/v1/models/:id', (c) => {
    const id = c.req.param('id');
    return c.json(anthropic(c) ? anthropicModel(id) : openaiModel(id));
  });
}
