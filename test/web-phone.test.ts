/**
 * The chat page on a phone (a 390x844 viewport, touch, as an iPhone 12-15 reports it), driven in
 * headless Chromium against the real server: the settings start folded so the conversation has the
 * screen; the reasoning block folds once the answer starts; an answer cut by the token limit says
 * so. Skipped when no Chromium is installed.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';
import { type RunningServer, startServer } from '../src/server/server.js';
import { writeSyntheticContainer } from '../src/synth/synth.js';
import { ROOT, tmpDir } from './helpers.js';

function findChromium(): string | undefined {
  for (const p of [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser']) {
    if (p && fs.existsSync(p)) return p;
  }
  return undefined;
}

const executablePath = findChromium();
const skip = executablePath ? false : 'no Chromium: install the chromium package (apt-get install chromium) to run the browser tests';
const demo = path.join(ROOT, 'models/demo');
/** The end of an assistant turn on the demo model: a reply whose first token it is ends by itself. */
const END = (JSON.parse(fs.readFileSync(path.join(demo, 'specials.json'), 'utf8')) as { id: number; text: string }[]).find((s) => s.text === '<|im_end|>')!.id;

const PHONE = { viewport: { width: 390, height: 844 }, deviceScaleFactor: 3, isMobile: true, hasTouch: true };
const DESKTOP = { viewport: { width: 1280, height: 800 } };

/** Poll until a JavaScript expression is true in the page (passed as a string: the page's CSP allows evaluate, not eval; the long limit only catches a hang). */
async function until(page: Page, expr: string, what: string): Promise<void> {
  for (const end = Date.now() + 120_000; !(await page.evaluate<boolean>(expr)); await sleep(20)) {
    if (Date.now() > end) throw new Error(`the page never showed ${what}`);
  }
}

const idle = (page: Page) => until(page, `!document.getElementById('send').disabled && document.getElementById('stop').disabled`, 'the reply end');
/** The share of the viewport's height an element's box covers (what of it is on screen). */
const share = (page: Page, selector: string) =>
  page.evaluate<number>(`(() => { const r = document.querySelector(${JSON.stringify(selector)}).getBoundingClientRect(); return Math.max(0, Math.min(r.bottom, innerHeight) - Math.max(r.top, 0)) / innerHeight; })()`);
const visible = (page: Page, selector: string) => page.isVisible(selector);

describe('web chat page on a phone', () => {
  let browser: Browser | undefined;
  let server: RunningServer | undefined;
  let k3: RunningServer | undefined;

  before(async () => {
    if (skip) return;
    server = await startServer({ model: demo, host: '127.0.0.1', port: 0, log: false });
    // a K3-format model: it reasons first (thinking is on by default), then answers
    const dir = path.join(tmpDir('web-phone'), 'k3');
    writeSyntheticContainer(dir, { shape: 'k3-tiny', seed: 31, tokenizer: true });
    k3 = await startServer({ model: dir, port: 0, log: false });
    browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
  });

  after(async () => {
    await browser?.close();
    await server?.close();
    await k3?.close();
  });

  async function open(opts: typeof PHONE | typeof DESKTOP, on: RunningServer, model: string): Promise<{ context: BrowserContext; page: Page; errors: string[] }> {
    const context = await browser!.newContext(opts);
    const page = await context.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('console', (m) => {
      if (m.type() === 'error' && !/favicon\.ico/.test(m.location().url ?? '')) errors.push(m.text());
    });
    await page.goto(new URL('/', on.url).href);
    await until(page, `document.getElementById('model').textContent === ${JSON.stringify(model)}`, 'the model name');
    return { context, page, errors };
  }

  it('the settings start folded on a phone, leaving the conversation the screen, and open with a tap', { skip }, async () => {
    const { context, page, errors } = await open(PHONE, server!, 'demo');
    const settings = await share(page, '#controls');
    assert.ok(settings < 0.12, `the settings take ${(settings * 100).toFixed(1)} % of the screen`);
    assert.ok((await share(page, '#chat')) > 0.75, 'the conversation has the rest of the screen');
    assert.equal(await visible(page, '#system'), false);
    assert.equal(await visible(page, '#clear'), true, 'New chat stays at hand');
    assert.equal(await visible(page, '#input'), true);

    // a tap opens them, and what is set there is sent
    await page.tap('#controls-panel > summary');
    assert.equal(await visible(page, '#system'), true);
    assert.equal(await visible(page, '#temperature'), true);
    await page.fill('#temperature', '0.3');
    // opened, they still leave room to see the conversation
    assert.ok((await share(page, '#controls')) < 0.65, `opened, the settings take ${((await share(page, '#controls')) * 100).toFixed(1)} %`);
    await page.tap('#controls-panel > summary');
    assert.equal(await visible(page, '#system'), false);
    const sent = page.waitForRequest('**/v1/chat/completions');
    await page.fill('#input', 'Hello.');
    await page.tap('#send');
    assert.equal((await sent).postDataJSON().temperature, 0.3);
    await idle(page);
    assert.deepEqual(errors, []);
    await context.close();
  });

  it('on a wide screen the settings are open from the start', { skip }, async () => {
    const { context, page, errors } = await open(DESKTOP, server!, 'demo');
    assert.equal(await visible(page, '#system'), true);
    assert.equal(await visible(page, '#temperature'), true);
    assert.deepEqual(errors, []);
    await context.close();
  });

  it('the reasoning block is open while the model reasons and folds once the answer comes', { skip }, async () => {
    const { context, page, errors } = await open(PHONE, k3!, 'k3');
    // a reasoning budget of 3 tokens: the server closes the reasoning and the model answers
    await page.route('**/v1/chat/completions', (route) => route.continue({ postData: JSON.stringify({ ...route.request().postDataJSON(), thinking_budget_tokens: 3, seed: 5 }) }));
    // record, in the page, whether the block was open each time its text grew before any answer
    await page.evaluate(`(() => {
      window.openWhileReasoning = [];
      new MutationObserver(() => {
        const m = [...document.querySelectorAll('#messages .msg.assistant')].pop();
        const t = m && m.querySelector('details.thinking');
        if (t && !m.querySelector('.content').textContent) window.openWhileReasoning.push(t.open);
      }).observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
    })()`);
    await page.tap('#controls-panel > summary');
    await page.tap('#settings > summary');
    await page.fill('#max-tokens', '24');
    await page.tap('#controls-panel > summary');
    await page.fill('#input', 'Why?');
    await page.tap('#send');
    await idle(page);
    assert.equal(await page.textContent('#error'), '');
    const reasoning = (await page.textContent('#messages .msg.assistant details.thinking .thinking-text')) ?? '';
    const answer = (await page.textContent('#messages .msg.assistant .content')) ?? '';
    assert.ok(reasoning.length > 0, 'the model reasoned');
    assert.ok(answer.length > 0, 'the model answered');
    const seen = await page.evaluate<boolean[]>('window.openWhileReasoning');
    assert.ok(seen.length > 0 && seen.every((o) => o), `open while reasoning: ${seen.join(',')}`);
    assert.equal(await page.evaluate<boolean>(`document.querySelector('#messages .msg.assistant details.thinking').open`), false, 'the reasoning block folded after the answer');
    assert.equal(await visible(page, '#messages .msg.assistant .thinking-text'), false);
    // a tap opens it again, and it stays open
    await page.tap('#messages .msg.assistant details.thinking > summary');
    assert.equal(await visible(page, '#messages .msg.assistant .thinking-text'), true);
    assert.deepEqual(errors, []);
    await context.close();
  });

  it('an answer cut by the token limit says so; one that ended by itself does not', { skip }, async () => {
    const { context, page, errors } = await open(PHONE, server!, 'demo');
    const bodies: Record<string, unknown>[] = [];
    page.on('request', (r) => {
      if (r.method() === 'POST' && new URL(r.url()).pathname === '/v1/chat/completions') bodies.push(r.postDataJSON());
    });
    await page.tap('#controls-panel > summary');
    await page.tap('#settings > summary');
    await page.fill('#max-tokens', '3');
    await page.tap('#controls-panel > summary');
    await page.fill('#input', 'Tell me a long story about ships.');
    await page.tap('#send');
    await idle(page);
    assert.equal(bodies[0].max_tokens, 3);
    assert.equal(await page.textContent('#error'), '');
    const reply = (await page.textContent('#messages .msg.assistant .content')) ?? '';
    assert.ok(reply.length > 0);
    assert.equal(await page.evaluate<boolean>(`document.querySelector('#messages .msg.assistant').classList.contains('cut')`), true);
    assert.equal(await visible(page, '#messages .msg.assistant .note.cut'), true, 'the mark is on screen');
    assert.match((await page.textContent('#messages .msg.assistant .note.cut')) ?? '', /cut at the 3-token limit/);
    assert.match((await page.textContent('#stats')) ?? '', /cut at the limit/);
    // the cut reply is part of the conversation as it stands (the mark is not)
    await page.route('**/v1/chat/completions', (route) => route.continue({ postData: JSON.stringify({ ...route.request().postDataJSON(), logit_bias: { [END]: 100 } }) }));
    await page.fill('#input', 'Stop.');
    await page.tap('#send');
    await until(page, `document.querySelectorAll('#messages .msg').length === 4`, 'the second turn');
    await idle(page);
    assert.deepEqual((bodies[1].messages as unknown[]).slice(-2), [
      { role: 'assistant', content: reply },
      { role: 'user', content: 'Stop.' },
    ]);
    // the model ended this one itself: no mark
    const classes = await page.evaluate<string[]>(`[...document.querySelectorAll('#messages .msg.assistant')].map((e) => e.className)`);
    assert.deepEqual(classes, ['msg assistant cut', 'msg assistant empty']);
    assert.equal(await page.evaluate<number>(`document.querySelectorAll('#messages .note.cut').length`), 1);
    assert.doesNotMatch((await page.textContent('#stats')) ?? '', /cut at the limit/);
    assert.deepEqual(errors, []);
    await context.close();
  });
});
