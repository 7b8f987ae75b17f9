import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Hono } from 'hono';
import type { RouteEnv } from './server.js';

// dist/src/server/web.js → the package root holds web/ (HTML, CSS) and dist/web/ (the compiled script)
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

const FILES: Record<string, { file: string; type: string }> = {
  '/': { file: 'web/index.html', type: 'text/html; charset=utf-8' },
  '/style.css': { file: 'web/style.css', type: 'text/css; charset=utf-8' },
  '/app.js': { file: 'dist/web/app.js', type: 'text/javascript; charset=utf-8' },
};

/** The chat page at `/`: files read when asked for (small, and a rebuilt page shows without a restart). */
export function webRoutes(app: Hono<RouteEnv>): void {
  // browsers ask for an icon on their own: no content rather than a 404 in every console
  app.get('/favicon.ico', (c) => c.body(null, 204));
  for (const [route, { file, type }] of Object.entries(FILES)) {
    app.get(route, (c) => {
      let body: Buffer;
      try {
        body = fs.readFileSync(path.join(ROOT, file));
      } catch {
        return c.text(`${file} is missing: run npm run build`, 404);
      }
      return c.body(new Uint8Array(body), 200, {
        'content-type': type,
        'cache-control': 'no-cache',
        // the page talks to this server only
        // (images: the thumbnails of attached pictures are their data: URLs)
        'content-security-policy': "default-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data:",
      });
    });
  }
}
