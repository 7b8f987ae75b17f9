/**
 * Images through `waste serve`, as clients send them: OpenAI's image_url parts (data: URLs, and
 * http(s) URLs when --allow-image-urls is on) through the official openai client, Anthropic's
 * image blocks through fetch (its SDK is not installed), count_tokens counting each image's rows,
 * a hostile corpus that must each be one 400 naming its part while the server keeps serving, and
 * a model that takes no images refusing them. The K3 container's weights are random: what is
 * tested is the structure (rows fed, counts, errors), never what the model says.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import * as zlib from 'node:zlib';
import OpenAI from 'openai';
import pngjs from 'pngjs';
import { convert } from '../src/convert/convert.js';
import { Model } from '../src/api/model.js';
import { rowsFor } from '../src/image/preprocess.js';
import type { VisionSpec } from '../src/model/architecture.js';
import { ChatCompletionBody, chatTurn, parseBody } from '../src/server/openai-request.js';
import { collectTurn } from '../src/server/run-turn.js';
import { type RunningServer, startServer } from '../src/server/server.js';
import { BIN, ROOT, checkpoint, testPicture, tmpDir } from './helpers.js';
import { PNG_SIGNATURE, concat, ihdr, pngChunk, webpHeader, writeFlatJpeg } from './image-writers.js';

/** A test picture as an RGB PNG. */
function png(width: number, height: number, seed: number): Buffer {
  const { rgb } = testPicture(width, height, seed);
  const data = Buffer.alloc(width * height * 4);
  for (let i = 0; i < width * height; i++) {
    data.set(rgb.subarray(3 * i, 3 * i + 3), 4 * i);
    data[4 * i + 3] = 255;
  }
  return pngjs.PNG.sync.write({ width, height, data } as unknown as pngjs.PNG, { colorType: 2 });
}

const dataUrl = (bytes: Uint8Array, type = 'image/png') => `data:${type};base64,${Buffer.from(bytes).toString('base64')}`;
const imagePart = (url: string) => ({ type: 'image_url' as const, image_url: { url } });
const textPart = (text: string) => ({ type: 'text' as const, text });
const user = (content: string | OpenAI.ChatCompletionContentPart[]) => [{ role: 'user' as const, content }];

async function post(url: string, body: unknown): Promise<{ status: number; body: any }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

async function health(server: RunningServer): Promise<any> {
  return (await fetch(`${server.url}/health`)).json();
}

describe('waste serve takes images', () => {
  let dir = '';
  let spec: VisionSpec;
  let server: RunningServer;
  let client: OpenAI;
  const rows = (w: number, h: number) => rowsFor(w, h, spec, 'waste');

  before(async () => {
    const src = checkpoint({ shape: 'k3-tiny', seed: 3, shards: 1 }, 'hf-serve-images');
    dir = path.join(tmpDir('serve-images'), 'k3');
    await convert(src, dir, { threads: 2 });
    const m = await Model.open(dir);
    spec = m.vision!;
    await m.close();
    server = await startServer({ model: dir, port: 0, log: false });
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => server.close());

  it('a data: URL image in a chat, streamed and not: its rows are in the prompt, and both give the same reply', async () => {
    const a = png(40, 30, 1);
    const req = { model: 'k3', messages: user([textPart('What is this?'), imagePart(dataUrl(a))]), max_tokens: 6, seed: 2, reasoning_effort: 'none' as const };
    const whole = await client.chat.completions.create(req);
    assert.equal(typeof whole.choices[0].message.content, 'string');
    const plain = await client.chat.completions.create({ ...req, messages: user('What is this?') });
    assert.ok(whole.usage!.prompt_tokens - plain.usage!.prompt_tokens > rows(40, 30), JSON.stringify([whole.usage, plain.usage]));
    let content = '';
    let usage: unknown;
    for await (const ch of await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) {
      content += ch.choices[0]?.delta.content ?? '';
      if (ch.usage) usage = ch.usage;
    }
    assert.equal(content, whole.choices[0].message.content);
    assert.equal((usage as { prompt_tokens: number }).prompt_tokens, whole.usage!.prompt_tokens);
    // the bare string some clients send as image_url is the same image
    const bare = await client.chat.completions.create({ ...req, messages: user([textPart('What is this?'), { type: 'image_url', image_url: dataUrl(a) } as never]) });
    assert.equal(bare.choices[0].message.content, whole.choices[0].message.content);
  });

  it('two images in one message, each expanded to its own rows where it sits', async () => {
    const before = (await health(server)).images;
    const [a, b] = [png(64, 48, 5), png(30, 90, 6)];
    const base = { model: 'k3', max_tokens: 2, reasoning_effort: 'none' as const };
    const plain = await client.chat.completions.create({ ...base, messages: user([textPart('Compare'), textPart(' them.')]) });
    const one = await client.chat.completions.create({ ...base, messages: user([imagePart(dataUrl(a)), textPart('Compare'), textPart(' them.')]) });
    const two = await client.chat.completions.create({ ...base, messages: user([imagePart(dataUrl(a)), textPart('Compare'), imagePart(dataUrl(b)), textPart(' them.')]) });
    const block = one.usage!.prompt_tokens - plain.usage!.prompt_tokens - rows(64, 48);
    assert.ok(block > 0, 'a media block has markup around its rows');
    assert.equal(two.usage!.prompt_tokens, plain.usage!.prompt_tokens + rows(64, 48) + rows(30, 90) + 2 * block);
    const after = (await health(server)).images;
    // a went through the tower once; the second request kept its encoding
    assert.equal(after.encoded - before.encoded, 2);
    assert.equal(after.reused - before.reused, 1);
  });

  it('a conversation that sends its image again each turn: the second turn works, and the tower ran once', async () => {
    const before = (await health(server)).images;
    const pic = dataUrl(png(50, 50, 9));
    const first = user([imagePart(pic), textPart('What is in it?')]);
    const base = { model: 'k3', max_tokens: 4, reasoning_effort: 'none' as const, seed: 1 };
    const t1 = await client.chat.completions.create({ ...base, messages: first });
    const t2 = await client.chat.completions.create({ ...base, messages: [...first, { role: 'assistant', content: t1.choices[0].message.content }, ...user('And the colours?')] });
    assert.equal(typeof t2.choices[0].message.content, 'string');
    assert.ok(t2.usage!.prompt_tokens > t1.usage!.prompt_tokens);
    const after = (await health(server)).images;
    assert.equal(after.encoded - before.encoded, 1);
    assert.equal(after.reused - before.reused, 1);
  });

  it('a kept session goes on past an image only where the same image sits', async () => {
    // (a random model never closes its message, so over HTTP its next turn cannot extend the
    // last; the host is asked directly what a conversation that does would keep)
    const host = server.host;
    const signal = new AbortController().signal;
    const draft = (url: string) => chatTurn(parseBody(ChatCompletionBody, { messages: user([imagePart(url), textPart('Look.')]), max_tokens: 3, reasoning_effort: 'none', logprobs: true }));
    const turn = await host.prepare(await host.images.resolve(draft(dataUrl(png(40, 40, 21))), signal));
    const release = await host.queue.acquire('test');
    let r;
    try {
      r = await collectTurn(host, turn, signal);
    } finally {
      release();
    }
    assert.equal(r.finish, 'length');
    const history = [...turn.ids, ...r.logprobs!.map((e) => e.token)];
    const next = [...history, 5, 6];
    assert.equal(host.cachedFor(next, 1, turn.images), history.length);
    // another picture of the same size: the same ids, other rows
    const other = await host.prepare(await host.images.resolve(draft(dataUrl(png(40, 40, 22))), signal));
    assert.deepEqual(other.ids, turn.ids);
    assert.equal(host.cachedFor(next, 1, other.images), 0);
    const kept = host.sessionFor(next, 1, turn.images);
    assert.deepEqual(kept.fresh, [5, 6]);
    assert.deepEqual(kept.images, [], 'the image was fed with the first turn');
    kept.session.reset();
    kept.done();
  });

  it("Anthropic's image blocks, and count_tokens counting the image's rows as the turn feeds them", async () => {
    const bytes = png(70, 40, 11);
    const content = [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: Buffer.from(bytes).toString('base64') } }, { type: 'text', text: 'Describe it.' }];
    const messages = [{ role: 'user', content }];
    const counted = await post(`${server.url}/v1/messages/count_tokens`, { messages, thinking: { type: 'disabled' } });
    assert.equal(counted.status, 200, JSON.stringify(counted.body));
    const text = await post(`${server.url}/v1/messages/count_tokens`, { messages: [{ role: 'user', content: 'Describe it.' }], thinking: { type: 'disabled' } });
    assert.ok(counted.body.input_tokens - text.body.input_tokens > rows(70, 40));
    const r = await post(`${server.url}/v1/messages`, { max_tokens: 3, messages, thinking: { type: 'disabled' } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.usage.input_tokens + r.body.usage.cache_read_input_tokens, counted.body.input_tokens);
    const streamed = await fetch(`${server.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ max_tokens: 3, messages, thinking: { type: 'disabled' }, stream: true }) });
    const start = JSON.parse(/^event: message_start\ndata: (.*)$/m.exec(await streamed.text())![1]).message.usage;
    assert.equal(start.input_tokens + start.cache_read_input_tokens, counted.body.input_tokens);
    // the same conversation through OpenAI's route renders the same prompt
    const o = await client.chat.completions.create({ model: 'k3', max_tokens: 1, reasoning_effort: 'none', messages: user([imagePart(dataUrl(bytes)), textPart('Describe it.')]) });
    assert.equal(o.usage!.prompt_tokens, counted.body.input_tokens);
  });

  it('a hostile or damaged image is one 400 naming its part, on both routes; then the server serves on', async () => {
    const good = png(20, 20, 2);
    const flat = writeFlatJpeg({ blocksWide: 2, blocksHigh: 2, values: [[100, 90, 80, 70], [128, 128, 128, 128], [128, 128, 128, 128]] });
    const corpus: [string, RegExp][] = [
      [dataUrl(good.subarray(0, 100)), /^messages\[0\]\.content\[1\]: truncated PNG data/],
      [dataUrl(good.subarray(0, 5)), /^messages\[0\]\.content\[1\]: truncated PNG data \(5 bytes\)$/],
      [dataUrl(Buffer.from('garbage, not a picture at all')), /^messages\[0\]\.content\[1\]: not a PNG, JPEG, BMP, GIF or WebP image$/],
      [dataUrl(concat(PNG_SIGNATURE, ihdr(100000, 100000, 8, 2), pngChunk('IDAT', zlib.deflateSync(Buffer.alloc(1000))), pngChunk('IEND'))), /^messages\[0\]\.content\[1\]: 100000 x 100000 pixels exceeds the limit of 16777216$/],
      [dataUrl(webpHeader('VP8 ', 32, 32), 'image/webp'), /^messages\[0\]\.content\[1\]: unsupported image format: WebP/],
      [dataUrl(flat.subarray(0, 30), 'image/jpeg'), /^messages\[0\]\.content\[1\]: .*JPEG/],
      ['data:image/png;base64,!!!not base64!!!', /^messages\[0\]\.content\[1\]: the image data is not base64$/],
      ['data:image/png;base64,', /^messages\[0\]\.content\[1\]: the image data is empty$/],
      [`data:image/png,${'x'.repeat(20)}`, /^messages\[0\]\.content\[1\]: a data: URL image must be base64/],
      [dataUrl(good, 'text/plain'), /^messages\[0\]\.content\[1\]: the media type "text\/plain" is not an image's/],
      ['data:;base64,AAAA', /^messages\[0\]\.content\[1\]: the media type "" is not an image's/],
      ['file:///etc/passwd', /^messages\[0\]\.content\[1\]: file: URLs are not fetched/],
      ['ftp://example.com/a.png', /^messages\[0\]\.content\[1\]: ftp: URLs are not fetched/],
      ['not a url', /^messages\[0\]\.content\[1\]: "not a url" is not a URL/],
      ['http://127.0.0.1:9/a.png', /^messages\[0\]\.content\[1\]: this server does not fetch image URLs .*--allow-image-urls/],
    ];
    const results = await Promise.all(
      corpus.map(async ([url]) => {
        try {
          await client.chat.completions.create({ model: 'k3', max_tokens: 2, messages: user([textPart('Look:'), imagePart(url)]) });
          return undefined;
        } catch (e) {
          return e as InstanceType<typeof OpenAI.APIError>;
        }
      }),
    );
    results.forEach((e, i) => {
      assert.ok(e instanceof OpenAI.APIError, `${corpus[i][0].slice(0, 40)}: no error`);
      assert.equal(e.status, 400, `${corpus[i][0].slice(0, 40)}: ${e.message}`);
      const err = e.error as { message: string; type: string; param: string };
      assert.equal(err.type, 'invalid_request_error');
      assert.match(err.message, corpus[i][1]);
      assert.equal(err.message.split('\n').length, 1);
      assert.equal(err.param, 'messages[0].content');
    });
    // Anthropic's blocks, in its error shape
    const block = (source: unknown) => ({ max_tokens: 2, messages: [{ role: 'user', content: [{ type: 'text', text: 'Look:' }, { type: 'image', source }] }] });
    for (const [source, want] of [
      [{ type: 'base64', media_type: 'image/png', data: '@@@@' }, /^messages\[0\]\.content\[1\]: the image data is not base64$/],
      [{ type: 'base64', media_type: 'application/pdf', data: 'AAAA' }, /is not an image's/],
      [{ type: 'base64', media_type: 'image/png', data: Buffer.from(good.subarray(0, 60)).toString('base64') }, /^messages\[0\]\.content\[1\]: truncated PNG data/],
      [{ type: 'url', url: 'http://127.0.0.1:9/x.png' }, /--allow-image-urls/],
      [{ type: 'url', url: 'file:///etc/hosts' }, /file: URLs are not fetched/],
    ] as [unknown, RegExp][]) {
      for (const route of ['/v1/messages', '/v1/messages/count_tokens']) {
        const r = await post(`${server.url}${route}`, block(source));
        assert.equal(r.status, 400, JSON.stringify(r.body));
        assert.equal(r.body.type, 'error');
        assert.equal(r.body.error.type, 'invalid_request_error');
        assert.match(r.body.error.message, want);
      }
    }
    // an image in an assistant's message is refused too, by name
    const asAssistant = await post(`${server.url}/v1/chat/completions`, { messages: [{ role: 'assistant', content: [imagePart(dataUrl(good))] }, ...user('Hi')] });
    assert.equal(asAssistant.status, 400);
    assert.match(asAssistant.body.error.message, /^messages\[0\]\.content\[0\]: only a user message may hold images/);
    const anthropicAssistant = await post(`${server.url}/v1/messages`, { max_tokens: 2, messages: [...user('Hi'), { role: 'assistant', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }, ...user('Again')] });
    assert.equal(anthropicAssistant.status, 400);
    assert.match(anthropicAssistant.body.error.message, /^messages\[1\]: only a user message may hold images/);
    const h = await health(server);
    assert.equal(h.status, 'ok');
    assert.equal(h.images.decoding, 0);
    const ok = await client.chat.completions.create({ model: 'k3', max_tokens: 2, reasoning_effort: 'none', messages: user([imagePart(dataUrl(good)), textPart('Fine?')]) });
    assert.equal(ok.choices.length, 1);
  });

  it('an image larger than --max-image-size is refused before it is decoded', async () => {
    const small = await startServer({ model: dir, port: 0, log: false, images: { maxBytes: 1000 } });
    try {
      const r = await post(`${small.url}/v1/chat/completions`, { messages: user([imagePart(dataUrl(png(64, 64, 3)))]) });
      assert.equal(r.status, 400);
      assert.match(r.body.error.message, /^messages\[0\]\.content\[0\]: the image is (\d+ bytes, )?more than the 1000 bytes this server takes$/);
    } finally {
      await small.close();
    }
  });

  it('a model that takes no images (no tower, or --no-vision) refuses an image part with a 400 on every route', async () => {
    const demo = await startServer({ model: path.join(ROOT, 'models/demo'), port: 0, log: false });
    const off = await startServer({ model: dir, port: 0, log: false, open: { vision: false } });
    try {
      for (const s of [demo, off]) {
        const r = await post(`${s.url}/v1/chat/completions`, { messages: user([textPart('Hi'), imagePart(dataUrl(png(8, 8, 1)))]) });
        assert.equal(r.status, 400, JSON.stringify(r.body));
        assert.equal(r.body.error.type, 'invalid_request_error');
        assert.match(r.body.error.message, /^messages\[0\]\.content\[1\]: this model takes no images/);
        const a = await post(`${s.url}/v1/messages`, { max_tokens: 2, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }] });
        assert.equal(a.status, 400);
        assert.deepEqual(Object.keys(a.body), ['type', 'error']);
        assert.equal(a.body.error.type, 'invalid_request_error');
        assert.match(a.body.error.message, /takes no images/);
        const h = await health(s);
        assert.equal(h.images.accepted, false);
        const models = (await (await fetch(`${s.url}/v1/models`)).json()) as any;
        assert.equal(models.data[0].meta.vision, false);
      }
      assert.equal((await health(server)).images.accepted, true);
    } finally {
      await demo.close();
      await off.close();
    }
  });
});

describe('waste serve --allow-image-urls', () => {
  let dir = '';
  let server: RunningServer;
  let images: http.Server;
  let base = '';
  const picture = png(32, 24, 4);
  // one colour, so it is small to send and 64 M pixels to decode (seconds)
  const big = pngjs.PNG.sync.write({ width: 8000, height: 8000, data: Buffer.alloc(8000 * 8000 * 4, 200) } as unknown as pngjs.PNG, { colorType: 2 });

  before(async () => {
    const src = checkpoint({ shape: 'k3-tiny', seed: 3, shards: 1 }, 'hf-serve-image-urls');
    dir = path.join(tmpDir('serve-image-urls'), 'k3');
    await convert(src, dir, { threads: 2 });
    images = http.createServer((req, res) => {
      const u = req.url ?? '';
      if (u === '/pic.png') res.writeHead(200, { 'content-type': 'image/png' }).end(picture);
      else if (u === '/moved') res.writeHead(302, { location: '/pic.png' }).end();
      else if (u.startsWith('/loop')) res.writeHead(302, { location: `/loop${u.length}` }).end();
      else if (u === '/to-file') res.writeHead(302, { location: 'file:///etc/passwd' }).end();
      else if (u === '/page') res.writeHead(200, { 'content-type': 'text/html' }).end('<html></html>');
      else if (u === '/huge') {
        // no Content-Length: the size shows only as the bytes come
        res.writeHead(200, { 'content-type': 'image/png' });
        const chunk = Buffer.alloc(64 * 1024);
        const more = () => {
          while (res.write(chunk));
        };
        res.on('drain', more);
        res.on('close', () => res.off('drain', more));
        more();
      } else if (u === '/slow') {
        // the headers and a few bytes, then nothing: only the server's own deadline ends it
        res.writeHead(200, { 'content-type': 'image/png' });
        res.write(picture.subarray(0, 10));
      } else if (u === '/big.png') res.writeHead(200, { 'content-type': 'image/png' }).end(big);
      else res.writeHead(404).end();
    });
    await new Promise<void>((resolve) => images.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(images.address() as AddressInfo).port}`;
    server = await startServer({ model: dir, port: 0, log: false, images: { allowUrls: true, maxBytes: 1 << 20, maxPixels: 64 << 20, fetchTimeoutMs: 300 } });
  });
  after(async () => {
    await server.close();
    images.closeAllConnections();
    await new Promise((resolve) => images.close(resolve));
  });

  const ask = (url: string) => post(`${server.url}/v1/chat/completions`, { max_tokens: 2, reasoning_effort: 'none', messages: user([textPart('See'), imagePart(url)]) });

  it('fetches an http URL (through a redirect), as OpenAI parts and Anthropic url sources', async () => {
    const direct = await ask(`${base}/pic.png`);
    assert.equal(direct.status, 200, JSON.stringify(direct.body));
    const moved = await ask(`${base}/moved`);
    assert.equal(moved.status, 200, JSON.stringify(moved.body));
    assert.equal(moved.body.usage.prompt_tokens, direct.body.usage.prompt_tokens);
    const inline = await ask(dataUrl(picture));
    assert.equal(inline.body.usage.prompt_tokens, direct.body.usage.prompt_tokens);
    const a = await post(`${server.url}/v1/messages`, { max_tokens: 2, messages: [{ role: 'user', content: [{ type: 'text', text: 'See' }, { type: 'image', source: { type: 'url', url: `${base}/pic.png` } }] }] });
    assert.equal(a.status, 200, JSON.stringify(a.body));
    assert.equal((await health(server)).images.urls, true);
  });

  it('refuses, as one 400 each, what is not one image within the caps: the server is not held', async () => {
    for (const [u, want] of [
      ['/loop', /more than 3 redirects/],
      ['/to-file', /redirected to file:\/\/\/etc\/passwd: file: URLs are not fetched/],
      ['/page', /sent text\/html, not an image/],
      ['/missing.png', /answered 404/],
      ['/huge', /more than the 1048576 bytes this server takes/],
      ['/slow', /no whole image within 0\.3 s/],
    ] as [string, RegExp][]) {
      const r = await ask(`${base}${u}`);
      assert.equal(r.status, 400, `${u}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.error.message, /^messages\[0\]\.content\[1\]: http:\/\/127\.0\.0\.1:\d+\//);
      assert.match(r.body.error.message, want);
    }
    const r = await ask('http://127.0.0.1:9/closed.png');
    assert.equal(r.status, 400);
    assert.match(r.body.error.message, /could not be fetched/);
    assert.equal((await ask(`${base}/pic.png`)).status, 200);
  });

  it('`waste serve --allow-image-urls --max-image-size 64K --max-image-pixels N` serves URLs within those caps, and shuts down', async () => {
    const child = spawn(process.execPath, [BIN, 'serve', dir, '--port', '0', '-q', '--allow-image-urls', '--max-image-size', '64K', '--max-image-pixels', '1000000'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.on('data', (d) => {
        err += d;
        const m = /listening on (http:\/\/\S+)/.exec(err);
        if (m) resolve(m[1]);
      });
      child.on('exit', () => reject(new Error(`serve exited: ${err}`)));
    });
    const h = (await (await fetch(`${url}/health`)).json()) as any;
    assert.deepEqual([h.images.accepted, h.images.urls, h.images.max_bytes, h.images.max_pixels], [true, true, 65536, 1000000]);
    const send = (image: string) => post(`${url}/v1/chat/completions`, { max_tokens: 2, messages: user([imagePart(image)]) });
    assert.equal((await send(`${base}/pic.png`)).status, 200);
    const wide = await send(dataUrl(concat(PNG_SIGNATURE, ihdr(2000, 1000, 8, 2), pngChunk('IEND'))));
    assert.equal(wide.status, 400);
    assert.match(wide.body.error.message, /2000 x 1000 pixels exceeds the limit of 1000000$/);
    const code = await new Promise<number | null>((resolve) => {
      child.on('exit', (c) => resolve(c));
      child.kill('SIGTERM');
    });
    assert.equal(code, 0, err);
    const tooBig = spawnSync(process.execPath, [BIN, 'serve', dir, '--port', '0', '--max-image-size', '100M'], { encoding: 'utf8' });
    assert.notEqual(tooBig.status, 0);
    assert.match(tooBig.stderr, /^waste: --max-image-size 100M: at most 67108864 bytes/);
  });

  it('/health answers while a large image is being decoded (on a thread of its own)', async () => {
    let done = false;
    let seen = false;
    const pending = ask(`${base}/big.png`).then((r) => ((done = true), r));
    // the decode is seen in progress by /health itself: the server's thread was free during it
    while (!done && !seen) {
      seen = (await health(server)).images.decoding > 0;
      await sleep(5);
    }
    const r = await pending;
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.ok(seen, 'the decode was never seen in progress');
  });
});
