import { type Command, Option } from 'commander';
import { DEFAULT_PARALLEL, REQUEST_BOUNDS, startServer } from '../../server/server.js';
import { intArg } from '../args.js';
import { modelOrDemo } from '../default-model.js';
import { type EngineFlags, addEngineOptions, addLearnOption, openOptions } from '../engine-options.js';
import { parseSize } from '../../util/size.js';
import { OPTION_BOUNDS } from '../../engine/options.js';
import { DEFAULT_MAX_IMAGE_BYTES } from '../../image/decode.js';
import { WasteError } from '../../util/errors.js';

interface ServeFlags extends EngineFlags {
  host: string;
  port: number;
  apiKey?: string;
  modelId?: string;
  maxTokens: number;
  queue: number;
  sessions: number;
  parallel?: number;
  maxBody: string;
  maxInflight?: string;
  compiles: number;
  maxSchemaSize: number;
  maxGrammarStates: number;
  requestTimeout: number;
  maxConnections: number;
  allowImageUrls: boolean;
  maxImageSize: string;
  maxImagePixels: number;
  quiet: boolean;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

export function registerServe(program: Command): void {
  addLearnOption(addEngineOptions(
    program
      .command('serve')
      .description('serve the model over HTTP: an OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models), Anthropic\'s /v1/messages, /health, and a chat page at /')
      .argument('[model]', 'container directory (default: the demo model that ships with waste)')
      .option('--host <address>', 'address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)', '127.0.0.1')
      .option('--port <n>', 'port (0: any free port)', intArg(0, 65535), 8000)
      .addOption(new Option('--api-key <key>', 'require this key from clients (Authorization: Bearer KEY)').env('WASTE_API_KEY'))
      .option('--model-id <name>', "the model's name for clients (default: the directory's name)")
      .option('--max-tokens <n>', 'most tokens one reply may have (requests asking for more are clipped)', intArg(1, 1 << 24), 4096)
      .option('--queue <n>', 'requests that may wait for the engine; more get 429 Too Many Requests', intArg(0, 100000), 16)
      .option('--sessions <n>', 'conversations kept at once, each continuing where it left off (each reserves its context\'s state in the budget)', intArg(...OPTION_BOUNDS.sessions), 1)
      .option('--parallel <n>', `requests decoding at once, their steps batched: one read of each weight and expert serves them all (each takes a session's state in the budget; default: as many as the budget holds, up to ${DEFAULT_PARALLEL})`, intArg(...OPTION_BOUNDS.sessions))
      .option('--max-body <size>', 'largest request body (bytes, K, M); images sent inline count in it', '8M')
      .option('--max-inflight <size>', 'bytes of request bodies held at once across connections, from their first byte to the end of their answers; more get 429 (default: 4 × --max-body)')
      .option('--compiles <n>', 'request bodies parsed and JSON Schemas compiled at once (each in slices, the server answering meanwhile); more wait their turn', intArg(1, 64), REQUEST_BOUNDS.compiles)
      .option('--max-schema-size <n>', "most subschemas, names and enum values in one request's JSON Schemas (response format and tools together); more get 400", intArg(1, 10_000_000), REQUEST_BOUNDS.maxSchemaSize)
      .option('--max-grammar-states <n>', "most states one request's JSON Schemas may compile to, counted while compiling; more get 400", intArg(1, 100_000_000), REQUEST_BOUNDS.maxGrammarStates)
      .option('--request-timeout <seconds>', "seconds a request's headers and body may take to arrive; a slower one gets 408", intArg(1, 3600), REQUEST_BOUNDS.requestTimeoutMs / 1000)
      .option('--max-connections <n>', 'connections open at once; one more is answered 503 and closed', intArg(1, 1_000_000), REQUEST_BOUNDS.maxConnections)
      .option('--allow-image-urls', 'fetch http(s) image URLs that requests name (any address this machine reaches, local ones too: only for clients you trust)', false)
      .option('--max-image-size <size>', 'largest image, sent inline or fetched (bytes, K, M; at most 64M)', '20M')
      .option('--max-image-pixels <n>', 'most pixels in an image, checked before it is decoded', intArg(1, 64 * 1024 * 1024), 16 * 1024 * 1024)
      .option('-q, --quiet', 'no request log lines', false),
  )).action(async (modelArg: string | undefined, o: ServeFlags) => {
    const model = modelOrDemo(modelArg);
    const maxBodyBytes = parseSize(o.maxBody, undefined, '--max-body');
    const maxInflightBytes = o.maxInflight !== undefined ? parseSize(o.maxInflight, undefined, '--max-inflight') : 4 * maxBodyBytes;
    if (maxInflightBytes < maxBodyBytes) throw new WasteError('E_ARG', `--max-inflight ${o.maxInflight}: at least --max-body (${maxBodyBytes} bytes), or no body of the largest size could be taken`);
    const maxImageBytes = parseSize(o.maxImageSize, undefined, '--max-image-size');
    if (maxImageBytes > DEFAULT_MAX_IMAGE_BYTES) throw new WasteError('E_ARG', `--max-image-size ${o.maxImageSize}: at most ${DEFAULT_MAX_IMAGE_BYTES} bytes (the decoder's limit)`);
    const server = await startServer({
      model,
      open: openOptions(o, model),
      host: o.host,
      port: o.port,
      apiKey: o.apiKey,
      modelId: o.modelId,
      maxTokens: o.maxTokens,
      queueLimit: o.queue,
      sessions: o.sessions,
      parallel: o.parallel,
      maxBodyBytes,
      maxInflightBytes,
      compiles: o.compiles,
      maxSchemaSize: o.maxSchemaSize,
      maxGrammarStates: o.maxGrammarStates,
      requestTimeoutMs: o.requestTimeout * 1000,
      maxConnections: o.maxConnections,
      images: { allowUrls: o.allowImageUrls, maxBytes: maxImageBytes, maxPixels: o.maxImagePixels },
      log: o.quiet ? false : undefined,
    });
    // after the address was found usable: a refused --host is one line, not a warning and an error
    if (!LOOPBACK.has(o.host) && !o.apiKey) process.stderr.write(`waste serve: warning: listening on ${o.host} without --api-key: anyone who can reach this address can use the model\n`);
    const s = server.host.model.stats();
    process.stderr.write(
      `waste serve: ${server.host.opts.id} (${model}), context ${server.host.contextLength}, ${server.host.queue.slots} at once, budget ${(s.budgetBytes / 1e9).toFixed(2)} GB, expert reads ${s.direct ? 'O_DIRECT' : 'buffered'}\n` +
        `waste serve: listening on ${server.url}  (chat page: ${server.url}/, API: ${server.url}/v1)\n`,
    );
    await new Promise<void>((resolve) => {
      const stop = () => {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
        process.stderr.write('waste serve: shutting down\n');
        void server.close().then(resolve);
      };
      process.on('SIGINT', stop);
      process.on('SIGTERM', stop);
    });
  });
}
