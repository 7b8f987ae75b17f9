/**
 * The chat page served at `/` by `waste serve`. No framework, no external resources: it talks to
 * the server's OpenAI-compatible API (/v1/chat/completions, streamed as server-sent events) and to
 * /health for the model name, whether it takes images, and the expert-cache figures. Model output
 * is only ever rendered with textContent; attached images are sent as data: URLs.
 */

export {};

type Role = 'system' | 'user' | 'assistant';
type Part = { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } };
interface Message {
  role: Role;
  content: string | Part[];
}

/** An image picked to go with the next message. */
interface Attachment {
  name: string;
  /** data:image/…;base64,… (what is sent, and the thumbnail's source) */
  url: string;
}

/** The figures the server adds to the last chunks of a stream. */
interface WasteStats {
  tokens?: number;
  tokens_per_second?: number;
  expert_hit_rate?: number | null;
  bytes_read?: number;
  prefill_seconds?: number;
  decode_seconds?: number;
}

interface Chunk {
  choices?: { delta?: { content?: string | null; reasoning_content?: string | null }; finish_reason?: string | null }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
  waste?: WasteStats;
  error?: { message?: string };
}

interface Health {
  status?: string;
  model?: string;
  budget_bytes?: number;
  cache?: { hits?: number; misses?: number; hit_rate?: number | null; bytes_read?: number; direct?: boolean };
  images?: { accepted?: boolean; max_bytes?: number };
}

function $<T extends HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`#${id} is missing from the page`);
  return el as T;
}

const ui = {
  model: $<HTMLElement>('model'),
  panel: $<HTMLDetailsElement>('controls-panel'),
  system: $<HTMLTextAreaElement>('system'),
  temperature: $<HTMLInputElement>('temperature'),
  maxTokens: $<HTMLInputElement>('max-tokens'),
  apiKey: $<HTMLInputElement>('api-key'),
  clear: $<HTMLButtonElement>('clear'),
  messages: $<HTMLElement>('messages'),
  error: $<HTMLElement>('error'),
  composer: $<HTMLFormElement>('composer'),
  input: $<HTMLTextAreaElement>('input'),
  send: $<HTMLButtonElement>('send'),
  stop: $<HTMLButtonElement>('stop'),
  attach: $<HTMLButtonElement>('attach'),
  attachInput: $<HTMLInputElement>('attach-input'),
  attachments: $<HTMLElement>('attachments'),
  statsReply: $<HTMLElement>('stats-reply'),
  statsCache: $<HTMLElement>('stats-cache'),
};

/** The conversation so far, without the system prompt (that is read fresh each turn). */
const conversation: Message[] = [];
let controller: AbortController | null = null;
/** Images waiting for the next message. */
let pending: Attachment[] = [];
/** The server's cap on one image (from /health), so a picture too large is refused here. */
let maxImageBytes = Infinity;

// ---- formatting -------------------------------------------------------------------------------

function fmtBytes(n: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) {
    n /= 1000;
    i++;
  }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

function fmtRate(r: number | null | undefined): string {
  return typeof r === 'number' && Number.isFinite(r) ? `${(r * 100).toFixed(1)} %` : '–';
}

function showError(message: string | null): void {
  ui.error.hidden = message === null;
  ui.error.textContent = message ?? '';
}

function setBusy(busy: boolean): void {
  ui.send.disabled = busy;
  ui.stop.disabled = !busy;
  ui.clear.disabled = busy;
  // assistive technology announces the reply and the figures once they are complete
  ui.messages.setAttribute('aria-busy', String(busy));
  $('stats').setAttribute('aria-busy', String(busy));
}

// ---- the server -------------------------------------------------------------------------------

function headers(): Record<string, string> {
  const h: Record<string, string> = { 'Content-Type': 'application/json' };
  const key = ui.apiKey.value.trim();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

/** The message of an error response (`{error: {message}}`), or the status line. */
async function errorOf(res: Response): Promise<string> {
  const text = await res.text().catch(() => '');
  try {
    const j = JSON.parse(text) as { error?: { message?: string } | string };
    const m = typeof j.error === 'string' ? j.error : j.error?.message;
    if (m) return `${res.status}: ${m}`;
  } catch {
    // not JSON
  }
  return `${res.status} ${res.statusText}${text ? `: ${text.slice(0, 300)}` : ''}`;
}

async function refreshHealth(): Promise<void> {
  try {
    const res = await fetch('health', { headers: headers() });
    if (!res.ok) throw new Error(await errorOf(res));
    const h = (await res.json()) as Health;
    if (h.model) {
      ui.model.textContent = h.model;
      document.title = `waste · ${h.model}`;
    }
    // a model without a vision tower has nothing to attach images to
    const images = h.images?.accepted === true;
    ui.attach.hidden = !images;
    ui.attachInput.disabled = !images;
    if (typeof h.images?.max_bytes === 'number') maxImageBytes = h.images.max_bytes;
    const c = h.cache;
    if (c) {
      const parts = [`cache: hit rate ${fmtRate(c.hit_rate)}`];
      if (typeof c.bytes_read === 'number') parts.push(`${fmtBytes(c.bytes_read)} read in all`);
      ui.statsCache.textContent = parts.join(' · ');
    }
  } catch (e) {
    if (ui.model.textContent === '…') ui.model.textContent = 'unavailable';
    if (ui.error.hidden) showError(`health: ${(e as Error).message}`);
  }
}

// ---- the conversation -------------------------------------------------------------------------

interface Bubble {
  root: HTMLElement;
  thinking: HTMLDetailsElement | null;
  content: HTMLElement;
}

function thumbnail(a: Attachment): HTMLImageElement {
  const img = document.createElement('img');
  img.className = 'thumb';
  img.src = a.url;
  img.alt = a.name;
  img.title = a.name;
  return img;
}

function addMessage(role: 'user' | 'assistant', text = '', images: Attachment[] = []): Bubble {
  const root = document.createElement('div');
  root.className = `msg ${role}`;
  const who = document.createElement('div');
  who.className = 'role';
  who.textContent = role === 'user' ? 'You' : 'Assistant';
  root.append(who);
  if (images.length) {
    const row = document.createElement('div');
    row.className = 'images';
    row.append(...images.map(thumbnail));
    root.append(row);
  }
  const content = document.createElement('div');
  content.className = 'content';
  content.textContent = text;
  root.append(content);
  ui.messages.append(root);
  scrollDown();
  return { root, thinking: null, content };
}

/** Reasoning goes to its own, dimmer block above the reply, never into the reply. */
function appendThinking(b: Bubble, text: string): void {
  if (!b.thinking) {
    b.thinking = document.createElement('details');
    b.thinking.className = 'thinking';
    b.thinking.open = true;
    const summary = document.createElement('summary');
    summary.textContent = 'thinking';
    const body = document.createElement('div');
    body.className = 'thinking-text';
    b.thinking.append(summary, body);
    b.root.insertBefore(b.thinking, b.content);
  }
  b.thinking.lastElementChild!.append(text);
}

/** A muted note under a reply that finished without any text, so the turn does not look lost. */
function showEmpty(b: Bubble): void {
  const note = document.createElement('div');
  note.className = 'note';
  note.textContent = '(empty reply)';
  b.root.append(note);
  b.root.classList.add('empty');
}

/** A mark under a reply the token limit ended (finish_reason "length"): else it looks complete. */
function showCut(b: Bubble, limit: number | undefined): void {
  const note = document.createElement('div');
  note.className = 'note cut';
  const where = limit === undefined ? 'the token limit' : `the ${limit}-token limit`;
  note.textContent = `… cut at ${where}: raise Max tokens in the settings for a longer reply`;
  b.root.append(note);
  b.root.classList.add('cut');
}

function scrollDown(): void {
  const m = ui.messages;
  if (m.scrollHeight - m.scrollTop - m.clientHeight < 120) m.scrollTop = m.scrollHeight;
}

/** Split an SSE byte stream into the payloads of its `data:` lines. */
async function* sse(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      buf += decoder.decode(value, { stream: !done });
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, '');
        buf = buf.slice(nl + 1);
        if (line.startsWith('data:')) yield line.slice(5).trimStart();
      }
      if (done) return;
    }
  } finally {
    reader.releaseLock();
  }
}

// ---- attached images -------------------------------------------------------------------------

function showAttachments(): void {
  ui.attachments.replaceChildren(
    ...pending.map((a, i) => {
      const item = document.createElement('div');
      item.className = 'attachment';
      const remove = document.createElement('button');
      remove.type = 'button';
      remove.textContent = '×';
      remove.setAttribute('aria-label', `remove ${a.name}`);
      remove.addEventListener('click', () => {
        pending.splice(i, 1);
        showAttachments();
      });
      item.append(thumbnail(a), remove);
      return item;
    }),
  );
  ui.attachments.hidden = pending.length === 0;
}

function readAsDataUrl(file: File): Promise<string> {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result));
    r.onerror = () => reject(r.error ?? new Error('the file could not be read'));
    r.readAsDataURL(file);
  });
}

async function attach(files: FileList | null): Promise<void> {
  for (const file of files ? [...files] : []) {
    // the server decides what it can decode; these are only refused here because they never could be
    if (!file.type.startsWith('image/')) {
      showError(`${file.name} is not an image`);
      continue;
    }
    if (file.size > maxImageBytes) {
      showError(`${file.name} is ${fmtBytes(file.size)}, more than the ${fmtBytes(maxImageBytes)} the server takes`);
      continue;
    }
    try {
      pending.push({ name: file.name, url: await readAsDataUrl(file) });
    } catch (e) {
      showError(`${file.name}: ${(e as Error).message}`);
    }
  }
  showAttachments();
}

// ---- sending ----------------------------------------------------------------------------------

async function send(text: string, images: Attachment[]): Promise<void> {
  showError(null);
  const user = addMessage('user', text, images);
  const bubble = addMessage('assistant');
  bubble.root.classList.add('streaming');
  // images before the text, as the library's chat.send shows them
  const parts: Part[] = [...images.map((a): Part => ({ type: 'image_url', image_url: { url: a.url } })), ...(text ? [{ type: 'text', text } as Part] : [])];
  conversation.push({ role: 'user', content: images.length ? parts : text });

  const system = ui.system.value.trim();
  const messages: Message[] = system ? [{ role: 'system', content: system }, ...conversation] : [...conversation];
  const body: Record<string, unknown> = {
    messages,
    stream: true,
    stream_options: { include_usage: true },
  };
  const temperature = ui.temperature.valueAsNumber;
  if (Number.isFinite(temperature)) body.temperature = temperature;
  const maxTokens = ui.maxTokens.valueAsNumber;
  if (Number.isFinite(maxTokens) && maxTokens > 0) body.max_tokens = Math.floor(maxTokens);

  controller = new AbortController();
  setBusy(true);
  let reply = '';
  let deltas = 0;
  let first = 0;
  let final: WasteStats | null = null;
  let finish: string | null = null;
  let lastPaint = 0;

  const paintLive = (force = false): void => {
    const now = performance.now();
    if (!force && now - lastPaint < 250) return;
    lastPaint = now;
    const secs = first ? (now - first) / 1000 : 0;
    const rate = secs > 0 && deltas > 1 ? (deltas - 1) / secs : 0;
    ui.statsReply.textContent = `${deltas} tokens · ${rate.toFixed(1)} tok/s`;
  };

  try {
    const res = await fetch('v1/chat/completions', {
      method: 'POST',
      headers: headers(),
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!res.ok || !res.body) throw new Error(await errorOf(res));
    ui.statsReply.textContent = 'prefill…';
    for await (const data of sse(res.body)) {
      if (data === '[DONE]') break;
      let chunk: Chunk;
      try {
        chunk = JSON.parse(data) as Chunk;
      } catch {
        continue;
      }
      if (chunk.error) throw new Error(chunk.error.message ?? 'the server reported an error');
      if (chunk.waste) final = { ...(final ?? {}), ...chunk.waste };
      for (const choice of chunk.choices ?? []) {
        const d = choice.delta ?? {};
        if (d.reasoning_content || d.content) {
          deltas++;
          if (!first) first = performance.now();
        }
        if (d.reasoning_content) appendThinking(bubble, d.reasoning_content);
        if (d.content) {
          // the answer has started: the reasoning folds away (once; a tap opens it again)
          if (!reply && bubble.thinking) bubble.thinking.open = false;
          reply += d.content;
          bubble.content.append(d.content);
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      scrollDown();
      paintLive();
    }
    if (final) {
      const parts = [`${final.tokens ?? deltas} tokens`];
      if (typeof final.tokens_per_second === 'number') parts.push(`${final.tokens_per_second.toFixed(1)} tok/s`);
      if (typeof final.prefill_seconds === 'number') parts.push(`prefill ${final.prefill_seconds.toFixed(2)} s`);
      parts.push(`expert hit rate ${fmtRate(final.expert_hit_rate)}`);
      if (typeof final.bytes_read === 'number') parts.push(`${fmtBytes(final.bytes_read)} read`);
      ui.statsReply.textContent = parts.join(' · ');
    } else {
      paintLive(true);
    }
    if (finish === 'length') ui.statsReply.textContent += ' · cut at the limit';
  } catch (e) {
    if (controller.signal.aborted) {
      bubble.root.classList.add('stopped');
      paintLive(true);
      ui.statsReply.textContent += ' · stopped';
    } else {
      showError((e as Error).message);
      ui.statsReply.textContent = '';
    }
  } finally {
    bubble.root.classList.remove('streaming');
    controller = null;
    setBusy(false);
  }

  // A reply that finished (a finish_reason came) with no text is the model's answer, not a failure:
  // it stays, and says so, rather than vanishing as a failed turn does.
  const finished = finish !== null;
  if (finish === 'length') showCut(bubble, typeof body.max_tokens === 'number' ? body.max_tokens : undefined);
  else if (finished && !reply) showEmpty(bubble);
  if (reply || bubble.thinking || finished) {
    conversation.push({ role: 'assistant', content: reply });
  } else {
    // Nothing came back: take the turn back so it can be edited and sent again.
    conversation.pop();
    user.root.remove();
    bubble.root.remove();
    if (!ui.input.value) ui.input.value = text;
    if (images.length) {
      pending = [...images, ...pending];
      showAttachments();
    }
  }
  await refreshHealth();
  ui.input.focus();
}

// ---- wiring -----------------------------------------------------------------------------------

// Open on a wide screen; on a phone the settings would take half the screen, so they start folded
// (and follow the screen when it turns, not while it stays as it is).
const narrow = matchMedia('(max-width: 720px)');
ui.panel.open = !narrow.matches;
narrow.addEventListener('change', () => {
  ui.panel.open = !narrow.matches;
});

// The settings form is never submitted; Enter in its fields does nothing.
$<HTMLFormElement>('controls').addEventListener('submit', (ev) => ev.preventDefault());

ui.composer.addEventListener('submit', (ev) => {
  ev.preventDefault();
  const text = ui.input.value.trim();
  if ((!text && !pending.length) || controller) return;
  const images = pending;
  ui.input.value = '';
  pending = [];
  showAttachments();
  void send(text, images);
});

ui.input.addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    ui.composer.requestSubmit();
  }
});

ui.stop.addEventListener('click', () => controller?.abort());

ui.attach.addEventListener('click', () => ui.attachInput.click());
ui.attachInput.addEventListener('change', () => {
  const files = ui.attachInput.files;
  void attach(files).finally(() => {
    // the same file may be picked again
    ui.attachInput.value = '';
  });
});

ui.clear.addEventListener('click', () => {
  conversation.length = 0;
  ui.messages.replaceChildren();
  ui.statsReply.textContent = '';
  showError(null);
  ui.input.focus();
});

void refreshHealth();
ui.input.focus();
