/**
 * The chat page served at `/` by `waste serve`, driven in headless Chromium (playwright-core with
 * the system browser) against the real server on the demo model. Skipped when no Chromium is
 * installed.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Browser, chromium, type Page } from 'playwright-core';
import { type RunningServer, startServer } from '../src/server/server.js';
import { ROOT } from './helpers.js';

function findChromium(): string | undefined {
  for (const p of [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser']) {
    if (p && fs.existsSync(p)) return p;
  }
  return undefined;
}

const demo = path.join(ROOT, 'models/demo');
const config = (JSON.parse(fs.readFileSync(path.join(demo, 'manifest.json'), 'utf8')) as { config: Record<string, number> }).config;
/** Each token runs num_experts_per_token experts in every layer after the dense ones. */
const expertsPerToken = config.num_experts_per_token * (config.num_hidden_layers - config.first_k_dense_replace);

/** The end of an assistant turn: a reply whose first token it is says nothing. */
const END = (JSON.parse(fs.readFileSync(path.join(demo, 'specials.json'), 'utf8')) as { id: number; text: string }[]).find((s) => s.text === '<|im_end|>')!.id;

const executablePath = findChromium();
const skip = executablePath
  ? false
  : 'no Chromium: install the chromium package (apt-get install chromium) to run the browser tests';

/** A page on the server that records every URL it requests, every chat request body and every script error. */
async function openPage(browser: Browser, base: string) {
  const page = await browser.newPage();
  const urls: string[] = [];
  const bodies: Record<string, unknown>[] = [];
  const errors: string[] = [];
  page.on('request', (r) => {
    urls.push(r.url());
    if (r.method() === 'POST' && new URL(r.url()).pathname === '/v1/chat/completions') bodies.push(r.postDataJSON());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  // a script error, or anything the server's Content-Security-Policy refused
  page.on('console', (m) => {
    // (Chromium asks for /favicon.ico by itself, and the server has none.)
    if (m.type() === 'error' && new URL(m.location().url || base).pathname !== '/favicon.ico') errors.push(m.text());
  });
  await page.goto(base);
  await until(page, `document.getElementById('model').textContent === 'demo'`, 'the model name');
  return { page, urls, bodies, errors };
}

// Code that runs in the page is passed as strings (the test project has no DOM types) to
// page.evaluate, which the page's Content-Security-Policy allows (page.waitForFunction would eval).

/** Poll until a JavaScript expression is true in the page (the long limit only catches a hang). */
async function until(page: Page, expr: string, what: string): Promise<void> {
  for (const end = Date.now() + 120_000; !(await page.evaluate<boolean>(expr)); await sleep(20)) {
    if (Date.now() > end) throw new Error(`the page never showed ${what}`);
  }
}

/** The text of the last assistant reply on the page. */
const LAST_REPLY = `[...document.querySelectorAll('#messages .msg.assistant .content')].map((e) => e.textContent).pop() ?? ''`;

/** Record, in the page, every length the last assistant reply's text takes while it streams. */
async function watchReplyLengths(page: Page): Promise<void> {
  await page.evaluate(`(() => {
    window.lengths = [];
    new MutationObserver(() => {
      const n = (${LAST_REPLY}).length;
      if (window.lengths[window.lengths.length - 1] !== n) window.lengths.push(n);
    }).observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
  })()`);
}

const replyText = (page: Page) => page.evaluate<string>(LAST_REPLY);
const messageClasses = (page: Page) => page.evaluate<string[]>(`[...document.querySelectorAll('#messages .msg')].map((e) => e.className)`);
const replyStarted = (page: Page) => until(page, `(${LAST_REPLY}).length > 0`, 'a reply');
/** Wait until no reply is streaming: Send enabled, Stop disabled. */
const idle = (page: Page) =>
  until(page, `!document.getElementById('send').disabled && document.getElementById('stop').disabled`, 'the reply end');
const messageCount = (page: Page, n: number) => until(page, `document.querySelectorAll('#messages .msg').length === ${n}`, `${n} messages`);

describe('web chat page', () => {
  let browser: Browser | undefined;
  let server: RunningServer | undefined;
  let base = '';

  before(async () => {
    if (skip) return;
    server = await startServer({ model: demo, host: '127.0.0.1', port: 0, log: false });
    base = new URL('/', server.url).href;
    browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
  });

  /** Expert lookups so far, from /health: while the engine runs, this grows by expertsPerToken a token. */
  async function expertDemand(): Promise<number> {
    const h = (await (await fetch(new URL('/health', base))).json()) as { cache: { hits: number; misses: number } };
    return h.cache.hits + h.cache.misses;
  }

  after(async () => {
    await browser?.close();
    await server?.close();
  });

  it('shows the model, streams a reply, keeps the conversation and shows the statistics', { skip }, async () => {
    const { page, urls, bodies, errors } = await openPage(browser!, base);
    await page.fill('#system', 'You are a storyteller.');
    await watchReplyLengths(page);
    await page.fill('#input', 'Tell me about the sea.');
    await page.click('#send');

    await replyStarted(page);
    await idle(page);
    const reply = await replyText(page);
    assert.ok(reply.length > 0);
    // The reply was painted piece by piece, not all at once.
    const lengths = await page.evaluate<number[]>('window.lengths');
    assert.ok(lengths.filter((n) => n > 0).length > 1, `reply lengths seen: ${lengths.join(',')}`);

    // (the demo model may run to the 512-token limit, and the page marks that reply as cut)
    const classes = await messageClasses(page);
    assert.equal(classes.length, 2);
    assert.equal(classes[0], 'msg user');
    assert.match(classes[1], /^msg assistant( cut)?$/);
    const stats = (await page.textContent('#stats')) ?? '';
    assert.match(stats, /\d+(\.\d+)? tok\/s/);
    assert.match(stats, /hit rate \d+(\.\d+)? %/);
    assert.match(stats, /read/);

    assert.equal(bodies.length, 1);
    assert.deepEqual(bodies[0].messages, [
      { role: 'system', content: 'You are a storyteller.' },
      { role: 'user', content: 'Tell me about the sea.' },
    ]);
    assert.equal(bodies[0].stream, true);
    assert.deepEqual(bodies[0].stream_options, { include_usage: true });

    // A second turn, sent with Enter, carries the whole conversation.
    await page.click('#settings summary');
    await page.fill('#max-tokens', '8');
    await page.fill('#input', 'And then?');
    await page.press('#input', 'Enter');
    await messageCount(page, 4);
    await idle(page);
    assert.equal(bodies.length, 2);
    assert.deepEqual(bodies[1].messages, [
      { role: 'system', content: 'You are a storyteller.' },
      { role: 'user', content: 'Tell me about the sea.' },
      { role: 'assistant', content: reply },
      { role: 'user', content: 'And then?' },
    ]);
    assert.equal(bodies[1].max_tokens, 8);
    assert.equal(await page.textContent('#error'), '');
    assert.deepEqual(errors, []);

    const origin = new URL(base).origin;
    const foreign = urls.filter((u) => new URL(u).origin !== origin);
    assert.deepEqual(foreign, [], 'the page must load nothing from elsewhere');
    await page.close();
  });

  it('an empty reply stays, says it was empty, and is part of the conversation', { skip }, async () => {
    const { page, bodies, errors } = await openPage(browser!, base);
    // the model's first token is made the end of its turn: it answers with nothing
    await page.route('**/v1/chat/completions', (route) => route.continue({ postData: JSON.stringify({ ...route.request().postDataJSON(), logit_bias: { [END]: 100 } }) }));
    await page.fill('#input', 'Say nothing.');
    const sent = page.waitForRequest('**/v1/chat/completions');
    await page.click('#send');
    await sent;
    await idle(page);
    assert.equal(bodies.length, 1);
    assert.deepEqual(await messageClasses(page), ['msg user', 'msg assistant empty']);
    assert.equal(await replyText(page), '');
    assert.equal(await page.textContent('#messages .msg.assistant .note'), '(empty reply)');
    assert.equal(await page.textContent('#error'), '');
    assert.equal(await page.inputValue('#input'), '', 'the turn was not handed back for editing');

    // the next turn carries the empty reply
    await page.unroute('**/v1/chat/completions');
    await page.click('#settings summary');
    await page.fill('#max-tokens', '4');
    await page.fill('#input', 'Go on.');
    await page.click('#send');
    await messageCount(page, 4);
    await idle(page);
    assert.deepEqual(bodies[1].messages, [
      { role: 'user', content: 'Say nothing.' },
      { role: 'assistant', content: '' },
      { role: 'user', content: 'Go on.' },
    ]);
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('Stop ends a long reply and keeps what came so far', { skip }, async () => {
    const { page, urls, bodies, errors } = await openPage(browser!, base);
    await page.fill('#temperature', '0.5');
    await page.click('#settings summary');
    await page.fill('#max-tokens', '2000');

    // The demo model may end a reply by itself before Stop lands (at 0.5 it seldom does); then
    // try again with another prompt.
    const prompts = ['Write a very long story about ships.', 'Tell me a long story.', 'Tell me about the sea.', 'Recite a long speech to Congress.'];
    let stopped = false;
    let demandBefore = 0;
    for (const prompt of prompts) {
      await page.click('#clear');
      demandBefore = await expertDemand();
      await page.fill('#input', prompt);
      await page.click('#send');
      await replyStarted(page);
      const clicked = await page.click('#stop', { timeout: 2000 }).then(
        () => true,
        () => false,
      );
      await idle(page);
      stopped = clicked && (await page.$('#messages .msg.assistant.stopped')) !== null;
      if (stopped) break;
    }
    assert.ok(stopped, 'Stop never landed while the reply was streaming');

    const partial = await replyText(page);
    assert.ok(partial.length > 0, 'the partial reply stays on the page');
    await sleep(500);
    assert.equal(await replyText(page), partial, 'the reply stops growing');
    // The server stopped too: the engine goes idle having run far fewer than the 2000 tokens asked for.
    let demand = await expertDemand();
    for (let d = -1; d !== demand; await sleep(300)) [d, demand] = [demand, await expertDemand()];
    assert.ok(demand - demandBefore < 1000 * expertsPerToken, `experts asked for after Stop: ${demand - demandBefore}`);
    assert.equal(await page.isEnabled('#send'), true);
    assert.equal(await page.isDisabled('#stop'), true);
    assert.match((await page.textContent('#stats')) ?? '', /tok\/s · stopped/);

    const last = bodies[bodies.length - 1];
    assert.equal(last.temperature, 0.5);
    assert.equal(last.max_tokens, 2000);
    assert.equal(await page.textContent('#error'), '');
    assert.deepEqual(errors, []);

    // The server is free again after the disconnect: the next turn (which includes the partial reply) runs.
    await page.fill('#max-tokens', '4');
    await page.fill('#input', 'Go on.');
    await page.click('#send');
    await messageCount(page, 4);
    await idle(page);
    const next = bodies[bodies.length - 1].messages as { role: string; content: string }[];
    assert.deepEqual(next.slice(-2), [
      { role: 'assistant', content: partial },
      { role: 'user', content: 'Go on.' },
    ]);
    assert.equal(await page.textContent('#error'), '');

    const origin = new URL(base).origin;
    assert.deepEqual(urls.filter((u) => new URL(u).origin !== origin), []);
    await page.close();
  });
});
