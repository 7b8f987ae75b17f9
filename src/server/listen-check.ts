import * as net from 'node:net';
import { WasteError } from '../util/errors.js';

/** How an address reads in a message: host:port, an IPv6 address in brackets. */
export function addressText(host: string, port: number): string {
  return `${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/**
 * A failure to listen on host:port as one line naming the address and what to change; undefined
 * when it is not one of the failures a user's choice of --host or --port explains.
 */
export function listenError(e: unknown, host: string, port: number): WasteError | undefined {
  const code = (e as NodeJS.ErrnoException | undefined)?.code;
  const at = addressText(host, port);
  switch (code) {
    case 'EADDRINUSE':
      return new WasteError('E_IO', `cannot listen on ${at}: the port is in use (another server?); pick another --port`);
    case 'EACCES':
    case 'EPERM':
      return new WasteError('E_IO', `cannot listen on ${at}: not permitted (ports below 1024 need privileges); pick another --port`);
    case 'EADDRNOTAVAIL':
      return new WasteError('E_ARG', `cannot listen on ${at}: ${host} is not an address of this machine; pick another --host`);
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EAI_FAIL':
    case 'EAI_NONAME':
      return new WasteError('E_ARG', `cannot listen on ${at}: ${JSON.stringify(host.slice(0, 64))} is neither an address nor a name that resolves; pick another --host`);
    case 'EINVAL':
      return new WasteError('E_ARG', `cannot listen on ${at}: not an address that can be listened on; pick another --host`);
    default:
      return undefined;
  }
}

/**
 * Listen on host:port and let go at once: what would stop the server from listening there (a
 * name that does not resolve, an address not on this machine, a port in use or privileged) is
 * found before the model is loaded, as one line naming the address. Another program may still
 * take the port in between; the server maps that failure the same way when it listens.
 */
export async function checkListen(host: string, port: number): Promise<void> {
  const probe = net.createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      probe.once('error', reject);
      probe.listen({ host, port, exclusive: true }, () => resolve());
    });
  } catch (e) {
    throw listenError(e, host, port) ?? e;
  } finally {
    await new Promise<void>((resolve) => (probe.listening ? probe.close(() => resolve()) : resolve()));
  }
}
