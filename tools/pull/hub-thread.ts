/**
 * The test hub (test/hub-server.ts) on a thread of its own, for the pull bench: the pull's
 * conversion holds the main thread, and a hub served from there would pause with it.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { HubServer } from '../../test/hub-server.js';

const { repo, dir, bytesPerSecond } = workerData as { repo: string; dir: string; bytesPerSecond: number };
const hub = await new HubServer(repo, dir).start();
hub.bytesPerSecond = bytesPerSecond;
parentPort!.postMessage({ url: hub.url });
parentPort!.on('message', () => void hub.stop().then(() => process.exit(0)));
