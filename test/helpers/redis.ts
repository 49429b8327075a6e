import net from 'node:net';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';

/** The Redis server the tests use (the one on this machine unless TEST_REDIS_URL says otherwise). */
export const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

function reachable(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = net.connect({ host: hostname, port: Number(port || 6379) });
    const answer = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000);
    socket.once('connect', () => answer(true));
    socket.once('error', () => answer(false));
    socket.once('timeout', () => answer(false));
  });
}

/** Redis runs when reachable (or required with TEST_REDIS=1, as CI does); TEST_REDIS=0 skips it. */
export async function redisWanted(): Promise<boolean> {
  const wanted = process.env.TEST_REDIS;
  if (wanted === '1' || wanted === '0') return wanted === '1';
  const present = await reachable(REDIS_URL);
  if (!present) console.warn(`no Redis at ${REDIS_URL}: skipping the Redis tests`);
  return present;
}

/** A key prefix of its own for one test run, and the removal of every key under it. */
export function redisNamespace(): { prefix: string; drop(): Promise<void> } {
  const prefix = `lds-test-${randomBytes(6).toString('hex')}:`;
  return {
    prefix,
    async drop() {
      const redis = new Redis(REDIS_URL);
      try {
        const keys = await redis.keys(`${prefix}*`);
        if (keys.length > 0) await redis.del(...keys);
      } finally {
        redis.disconnect();
      }
    },
  };
}
