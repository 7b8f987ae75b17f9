import { Model } from '../api/model.js';
import { startServer } from '../server/server.js';

/**
 * What serving costs on top of the library, measured side by side on the demo model: the same
 * greedy request through `Chat.send`, through HTTP (JSON and SSE), and with a JSON Schema enforced
 * while sampling. Greedy replies are identical across the three unconstrained paths, so their
 * token counts match and the times compare directly.
 */
export interface ServerBench {
  model: string;
  tokens: number;
  library_ms: number;
  http_json_ms: number;
  http_stream_ms: number;
  http_stream_first_token_ms: number;
  /** Time per generated token at the same temperature (0.8), free text vs a JSON Schema enforced (the masking's cost). */
  free_ms_per_token: number;
  schema_ms_per_token: number;
  schema_tokens: number;
}

const PROMPT = 'Tell me about the whale and the ship.';
const SCHEMA = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 40 }, age: { type: 'integer' }, role: { enum: ['captain', 'mate', 'harpooner'] }, ships: { type: 'array', items: { type: 'string', maxLength: 20 }, maxItems: 4 } },
  required: ['name', 'age', 'role', 'ships'],
  additionalProperties: false,
};

export async function benchServer(opts: { model: string; tokens?: number; log?: (s: string) => void }): Promise<ServerBench> {
  const n = opts.tokens ?? 200;
  const log = opts.log ?? (() => {});
  const body = { messages: [{ role: 'user', content: PROMPT }], max_tokens: n, temperature: 0 };

  const m = await Model.open(opts.model);
  let libraryMs: number;
  let tokens: number;
  try {
    const run = async () => {
      const chat = m.chat();
      const t0 = performance.now();
      for await (const _ of chat.send(PROMPT, { maxTokens: n, temperature: 0 }));
      const ms = performance.now() - t0;
      const count = chat.last!.tokens.length;
      chat.close();
      return { ms, count };
    };
    await run(); // warm the cache as the server's warm-up does
    const r = await run();
    libraryMs = r.ms;
    tokens = r.count;
  } finally {
    await m.close();
  }
  log(`library: ${tokens} tokens in ${libraryMs.toFixed(0)} ms`);

  const server = await startServer({ model: opts.model, port: 0, log: false });
  try {
    const post = (b: unknown) => fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) });
    // a different conversation between runs, so no run continues from the previous one's state
    const reset = () => post({ messages: [{ role: 'user', content: 'x' }], max_tokens: 1 }).then((r) => r.text());
    await reset();
    await (await post(body)).json(); // warm-up
    await reset();
    let t0 = performance.now();
    const j = (await (await post(body)).json()) as { usage: { completion_tokens: number } };
    const httpJsonMs = performance.now() - t0;
    if (j.usage.completion_tokens !== tokens) log(`note: HTTP reply has ${j.usage.completion_tokens} tokens, the library's ${tokens}`);
    await reset();
    t0 = performance.now();
    const res = await post({ ...body, stream: true });
    const reader = res.body!.getReader();
    let first = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!first && new TextDecoder().decode(value).includes('"content":"') && !new TextDecoder().decode(value).includes('"content":""')) first = performance.now() - t0;
    }
    const httpStreamMs = performance.now() - t0;
    log(`HTTP: JSON ${httpJsonMs.toFixed(0)} ms, SSE ${httpStreamMs.toFixed(0)} ms (first token ${first.toFixed(0)} ms)`);

    const timed = async (b: unknown) => {
      await reset();
      const r = (await (await post(b)).json()) as { waste: { decode_seconds: number; tokens: number } };
      return { ms: (r.waste.decode_seconds * 1000) / r.waste.tokens, tokens: r.waste.tokens };
    };
    const free = await timed({ ...body, temperature: 0.8, seed: 1 });
    const schema = await timed({ ...body, temperature: 0.8, seed: 1, response_format: { type: 'json_schema', json_schema: { name: 'person', schema: SCHEMA } } });
    log(`per token: free ${free.ms.toFixed(2)} ms, schema ${schema.ms.toFixed(2)} ms over ${schema.tokens} tokens`);
    return {
      model: opts.model,
      tokens,
      library_ms: libraryMs,
      http_json_ms: httpJsonMs,
      http_stream_ms: httpStreamMs,
      http_stream_first_token_ms: first,
      free_ms_per_token: free.ms,
      schema_ms_per_token: schema.ms,
      schema_tokens: schema.tokens,
    };
  } finally {
    await server.close();
  }
}

export function renderServerBench(r: ServerBench): string {
  const lines = [
    `serving ${r.model}: one greedy reply of ${r.tokens} tokens, side by side`,
    `  library Chat.send       ${r.library_ms.toFixed(0).padStart(6)} ms`,
    `  HTTP, JSON reply        ${r.http_json_ms.toFixed(0).padStart(6)} ms   ×${(r.http_json_ms / r.library_ms).toFixed(3)} the library`,
    `  HTTP, SSE stream        ${r.http_stream_ms.toFixed(0).padStart(6)} ms   ×${(r.http_stream_ms / r.library_ms).toFixed(3)} the library (first token after ${r.http_stream_first_token_ms.toFixed(0)} ms)`,
    `  decode per token: free text ${r.free_ms_per_token.toFixed(2)} ms, JSON Schema enforced ${r.schema_ms_per_token.toFixed(2)} ms (×${(r.schema_ms_per_token / r.free_ms_per_token).toFixed(2)}, ${r.schema_tokens} tokens)`,
  ];
  return lines.join('\n') + '\n';
}
