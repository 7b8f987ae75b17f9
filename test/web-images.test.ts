/**
 * The chat page's images, driven in headless Chromium (playwright-core with the system browser)
 * against the real server on a K3 container with a vision tower: a PNG attached through the file
 * input shows as a thumbnail, goes out as an image_url data: URL, and a reply streams in; a
 * damaged one comes back with the server's error; a model that takes no images shows no attach
 * button. Skipped when no Chromium is installed.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Browser, chromium, type Page } from 'playwright-core';
import pngjs from 'pngjs';
import { convert } from '../src/convert/convert.js';
import { type RunningServer, startServer } from '../src/server/server.js';
import { checkpoint, testPicture, tmpDir } from './helpers.js';

function findChromium(): string | undefined {
  for (const p of [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser']) {
    if (p && fs.existsSync(p)) return p;
  }
  return undefined;
}

const executablePath = findChromium();
const skip = executablePath ? false : 'no Chromium: install the chromium package (apt-get install chromium) to run the browser tests';

function png(width: number, height: number, seed: number): Buffer {
  const { rgb } = testPicture(width, height, seed);
  const data = Buffer.alloc(width * height * 4, 255);
  for (let i = 0; i < width * height; i++) data.set(rgb.subarray(3 * i, 3 * i + 3), 4 * i);
  return pngjs.PNG.sync.write({ width, height, data } as unknown as pngjs.PNG, { colorType: 2 });
}

/** Poll until a JavaScript expression is true in the page (passed as a string: the page's CSP allows evaluate, not eval). */
async function until(page: Page, expr: string, what: string): Promise<void> {
  for (let i = 0; !(await page.evaluate<boolean>(expr)); i++) {
    if (i > 6000) throw new Error(`the page never showed ${what}`);
    await sleep(20);
  }
}

/** A page that records every chat request body and every script or policy error. */
async function openPage(browser: Browser, base: string, model: string) {
  const page = await browser.newPage();
  const bodies: Record<string, any>[] = [];
  const errors: string[] = [];
  page.on('request', (r) => {
    if (r.method() === 'POST' && new URL(r.url()).pathname === '/v1/chat/completions') bodies.push(r.postDataJSON());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error' && new URL(m.location().url || base).pathname !== '/favicon.ico') errors.push(m.text());
  });
  await page.goto(base);
  await until(page, `document.getElementById('model').textContent === ${JSON.stringify(model)}`, 'the model name');
  return { page, bodies, errors };
}

/** What the last assistant bubble shows: its reasoning and its reply (a random model mostly reasons). */
const LAST_REPLY = `(() => { const m = [...document.querySelectorAll('#messages .msg.assistant')].pop(); return m ? m.textContent.replace(/^Assistant/, '') : ''; })()`;
const idle = (page: Page) => until(page, `!document.getElementById('send').disabled && document.getElementById('stop').disabled`, 'the reply end');

describe('web chat page with images', () => {
  let browser: Browser | undefined;
  let server: RunningServer | undefined;
  let blind: RunningServer | undefined;
  let work = '';

  before(async () => {
    if (skip) return;
    const src = checkpoint({ shape: 'k3-tiny', seed: 3, shards: 1 }, 'hf-web-images');
    work = tmpDir('web-images');
    const dir = path.join(work, 'k3');
    await convert(src, dir, { threads: 2 });
    server = await startServer({ model: dir, port: 0, log: false });
    blind = await startServer({ model: dir, port: 0, log: false, open: { vision: false } });
    browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
  });

  after(async () => {
    await browser?.close();
    await server?.close();
    await blind?.close();
  });

  it('attaches a PNG through the file input, shows it, sends it as a data: URL, and a reply streams in', { skip }, async () => {
    const { page, bodies, errors } = await openPage(browser!, new URL('/', server!.url).href, 'k3');
    await until(page, `!document.getElementById('attach').hidden`, 'the attach button');
    const picture = png(48, 32, 3);
    await page.setInputFiles('#attach-input', { name: 'picture.png', mimeType: 'image/png', buffer: picture });
    await until(page, `document.querySelectorAll('#attachments img.thumb').length === 1`, 'the thumbnail of the attached image');
    // a second picture, then taken off again
    await page.setInputFiles('#attach-input', { name: 'other.png', mimeType: 'image/png', buffer: png(16, 16, 9) });
    await until(page, `document.querySelectorAll('#attachments img.thumb').length === 2`, 'two thumbnails');
    await page.click('#attachments button[aria-label="remove other.png"]');
    assert.deepEqual(await page.evaluate<string[]>(`[...document.querySelectorAll('#attachments img.thumb')].map((i) => i.alt)`), ['picture.png']);
    await page.click('#settings summary');
    await page.fill('#max-tokens', '12');
    await page.evaluate(`(() => {
      window.lengths = [];
      new MutationObserver(() => {
        const n = (${LAST_REPLY}).length;
        if (window.lengths[window.lengths.length - 1] !== n) window.lengths.push(n);
      }).observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
    })()`);
    await page.fill('#input', 'What is in this picture?');
    await page.click('#send');
    await until(page, `(${LAST_REPLY}).length > 0`, 'a reply');
    await idle(page);

    const lengths = await page.evaluate<number[]>('window.lengths');
    assert.ok(lengths.filter((n) => n > 0).length > 1, `the reply was painted at once: ${lengths.join(',')}`);
    assert.equal(bodies.length, 1);
    const url = `data:image/png;base64,${picture.toString('base64')}`;
    assert.deepEqual(bodies[0].messages, [
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url } },
          { type: 'text', text: 'What is in this picture?' },
        ],
      },
    ]);
    // the picture shows in the message sent, and the tray is empty for the next
    assert.equal(await page.evaluate<number>(`document.querySelectorAll('#messages .msg.user .images img.thumb').length`), 1);
    assert.equal(await page.getAttribute('#messages .msg.user img.thumb', 'src'), url);
    assert.equal(await page.evaluate<boolean>(`document.getElementById('attachments').hidden && document.getElementById('attachments').children.length === 0`), true);
    assert.equal(await page.textContent('#error'), '');

    // the next turn carries the image again, in its message
    await page.fill('#input', 'And now?');
    await page.click('#send');
    await until(page, `document.querySelectorAll('#messages .msg').length === 4`, 'the second turn');
    await idle(page);
    assert.equal(bodies.length, 2);
    assert.deepEqual(bodies[1].messages[0], bodies[0].messages[0]);
    assert.deepEqual(bodies[1].messages.slice(-1), [{ role: 'user', content: 'And now?' }]);
    assert.equal(await page.textContent('#error'), '');
    assert.deepEqual(errors, []);
    await page.close();
  });

  it("a damaged image comes back with the server's error, still attached, the message still typed", { skip }, async () => {
    const { page } = await openPage(browser!, new URL('/', server!.url).href, 'k3');
    await until(page, `!document.getElementById('attach').hidden`, 'the attach button');
    await page.setInputFiles('#attach-input', { name: 'cut.png', mimeType: 'image/png', buffer: png(20, 20, 1).subarray(0, 60) });
    await until(page, `document.querySelectorAll('#attachments img.thumb').length === 1`, 'the thumbnail');
    await page.fill('#input', 'Look.');
    await page.click('#send');
    await until(page, `document.getElementById('error').textContent !== ''`, 'the error');
    await idle(page);
    assert.match((await page.textContent('#error')) ?? '', /^400: messages\[0\]\.content\[0\]: truncated PNG data/);
    assert.equal(await page.evaluate<number>(`document.querySelectorAll('#messages .msg').length`), 0);
    assert.equal(await page.evaluate<number>(`document.querySelectorAll('#attachments img.thumb').length`), 1);
    assert.equal(await page.inputValue('#input'), 'Look.');
    await page.close();
  });

  it('a model that takes no images shows no attach button', { skip }, async () => {
    const { page, errors } = await openPage(browser!, new URL('/', blind!.url).href, 'k3');
    assert.equal(await page.isHidden('#attach'), true);
    assert.equal(await page.isDisabled('#attach-input'), true);
    assert.deepEqual(errors, []);
    await page.close();
  });
});
