import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';

/**
 * A stand-in for the HuggingFace hub on 127.0.0.1, answering the routes `@huggingface/hub` calls
 * for a pull: the revision's commit (`/api/models/R/revision/REV`), the file listing
 * (`/api/models/R/tree/REV`) with LFS sha256 for the shards and git blob ids for the small files,
 * and `/R/resolve/REV/FILE` with byte ranges. Faults can be armed per file: cut the connection
 * after some bytes, stall, or serve damaged bytes — each once.
 */
export interface Fault {
  kind: 'cut' | 'stall' | 'corrupt';
  /** After this many bytes of the body (cut, stall) / at this offset of the file (corrupt). */
  at: number;
}

export class HubServer {
  readonly requests: { path: string; range?: string; data?: boolean }[] = [];
  /** Answer ranged requests with the whole file (HTTP 200), as a server without range support does. */
  ignoreRanges = false;
  /** Send file data at most this fast (bytes per second, per connection): a slow link for the pull bench. */
  bytesPerSecond = Infinity;
  private readonly faults = new Map<string, Fault[]>();
  private readonly sockets = new Set<import('node:net').Socket>();
  private server!: http.Server;
  readonly commit = crypto.createHash('sha1').update('the one commit').digest('hex');
  url = '';

  constructor(
    readonly repo: string,
    private readonly dir: string,
  ) {}

  async start(): Promise<this> {
    this.server = http.createServer((req, res) => this.handle(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  /** The next listing request is answered with headers and then nothing, until the client gives up. */
  holdListing = false;

  arm(file: string, fault: Fault): void {
    const l = this.faults.get(file) ?? [];
    l.push(fault);
    this.faults.set(file, l);
  }

  /** Requests for a file's data (not the library's 1-byte probes nor its reads of a header). */
  fetchesOf(file: string): number {
    return this.requests.filter((r) => r.path.endsWith(`/resolve/${this.commit}/${file}`) && r.data).length;
  }

  private files(): string[] {
    return fs.readdirSync(this.dir).filter((f) => fs.statSync(path.join(this.dir, f)).isFile()).sort();
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://x');
    const range = req.headers.range;
    this.requests.push({ path: url.pathname, range });
    const json = (v: unknown) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(v));
    };
    if (url.pathname === `/api/models/${this.repo}/revision/main` || url.pathname === `/api/models/${this.repo}/revision/${this.commit}`)
      return json({ _id: 'x', id: this.repo, sha: this.commit, private: false, downloads: 0, likes: 0, lastModified: '2026-01-01T00:00:00Z' });
    if (url.pathname === `/api/models/${this.repo}/tree/${this.commit}`) {
      if (this.holdListing) {
        this.holdListing = false;
        return void res.writeHead(200, { 'content-type': 'application/json' }).flushHeaders();
      }
      return json(
        this.files().map((f) => {
          const bytes = fs.readFileSync(path.join(this.dir, f));
          const big = f.endsWith('.safetensors');
          const blobId = crypto.createHash('sha1').update(`blob ${bytes.length}\0`).update(bytes).digest('hex');
          return big
            ? { type: 'file', path: f, size: 134, oid: 'pointer', lfs: { oid: crypto.createHash('sha256').update(bytes).digest('hex'), size: bytes.length, pointerSize: 134 } }
            : { type: 'file', path: f, size: bytes.length, oid: blobId };
        }),
      );
    }
    const prefix = `/${this.repo}/resolve/${this.commit}/`;
    if (url.pathname.startsWith(prefix)) {
      const name = url.pathname.slice(prefix.length);
      if (!this.files().includes(name)) {
        res.writeHead(404, { 'X-Error-Code': 'EntryNotFound' });
        return void res.end('not found');
      }
      const bytes = fs.readFileSync(path.join(this.dir, name));
      let start = 0;
      let end = bytes.length - 1;
      const m = range && !this.ignoreRanges ? /^bytes=(\d+)-(\d*)$/.exec(range) : null;
      if (m) {
        start = Number(m[1]);
        end = m[2] ? Math.min(Number(m[2]), bytes.length - 1) : bytes.length - 1;
      }
      let body = Buffer.from(bytes.subarray(start, end + 1));
      // faults hit reads of the data, not the library's probes nor its reads of the header
      const data = body.length > 64 << 10;
      this.requests[this.requests.length - 1].data = data;
      const fault = data ? this.faults.get(name)?.shift() : undefined;
      if (fault?.kind === 'corrupt' && fault.at >= start && fault.at <= end) body[fault.at - start] ^= 0xff;
      const etag = `"${crypto.createHash('sha1').update(name).digest('hex')}"`;
      res.writeHead(m ? 206 : 200, {
        'content-type': 'application/octet-stream',
        'content-length': String(body.length),
        etag,
        ...(m ? { 'content-range': `bytes ${start}-${end}/${bytes.length}` } : {}),
        ...(fault ? { connection: 'close' } : {}),
      });
      if (fault?.kind === 'cut' || fault?.kind === 'stall') {
        res.write(body.subarray(0, fault.at));
        // a cut drops the connection; a stall keeps it open and silent until the client gives up
        if (fault.kind === 'cut') setTimeout(() => res.socket?.destroy(), 20);
        return;
      }
      if (this.bytesPerSecond === Infinity) return void res.end(body);
      // paced in 50 ms slices of the rate
      const slice = Math.max(1024, Math.floor(this.bytesPerSecond / 20));
      const send = (off: number) => {
        if (off >= body.length || res.destroyed) return void res.end();
        const n = Math.min(slice, body.length - off);
        res.write(body.subarray(off, off + n));
        setTimeout(() => send(off + n), (1000 * n) / this.bytesPerSecond);
      };
      return send(0);
    }
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end(`no route ${url.pathname}`);
  }
}
