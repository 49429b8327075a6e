import fs from 'node:fs';
import { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import type { ByteRange } from './storage.js';

/**
 * Bytes per read of a streamed download. Node's 64 KiB default costs a read and a socket write per
 * 64 KiB; 256 KiB measured 1.2–1.5× the requests per second on 1 MiB files at 32 connections.
 */
const READ_CHUNK_BYTES = 256 * 1024;

/** Read buffers kept for reuse: at most 16 MiB, whatever the number of downloads. */
const POOL_BUFFERS = 64;
const pool: Buffer[] = [];

const takeBuffer = () => pool.pop() ?? Buffer.allocUnsafeSlow(READ_CHUNK_BYTES);

function giveBack(buffer: Buffer) {
  if (pool.length < POOL_BUFFERS) pool.push(buffer);
}

/**
 * A body dropped without being ended or destroyed (an error on a path that never sends it) closes
 * its file when collected, as Node's FileHandle does, rather than keep the descriptor forever.
 */
const abandoned = new FinalizationRegistry<number>((fd) => fs.close(fd, () => undefined));

/** How many read buffers wait for reuse (tests). */
export const pooledBuffers = () => pool.length;

/**
 * A byte range of an open file as a readable stream. Piped into an HTTP response (how Fastify sends
 * a stream), it reads into buffers that go back to a small pool once the socket has written them.
 * `fs.createReadStream` allocates a fresh buffer for every chunk instead, and V8 answers each 64 MiB
 * of such memory with a full collection: streaming at disk speed, that is several a second, each as
 * costly as the whole heap is large (a third of a download's CPU with a large catalogue in memory).
 * Any other consumer reads it as an ordinary stream of fresh chunks.
 *
 * It owns `fd`, an open file descriptor, and closes it when it ends or is destroyed. Reads go through
 * libuv's thread pool with `fs.read`. With `fs/promises`' FileHandle instead (opened and closed
 * through the thread pool as well), 64 KiB downloads ran at two thirds of the requests per second.
 *
 * Piped into a response it shows what Node's pipe shows: `pipe` on the response, `data` for each
 * chunk as it is written (the metrics count served bytes so), `end`. Those chunks are lent: a
 * listener may read them during the event but must not keep them, as their buffers are reused.
 */
export class FileBody extends Readable {
  private position: number;
  private readonly end: number;
  /** Whether `pipe` sends the bytes itself: then nothing reads through `_read`. */
  private pumping = false;
  /** The read in flight: the file is closed only once it has returned. */
  private reading: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly fd: number,
    range: ByteRange,
  ) {
    super({ highWaterMark: READ_CHUNK_BYTES });
    this.position = range.start;
    this.end = range.end;
    abandoned.register(this, fd, this);
  }

  /** Bytes of the range not read yet. */
  private get left(): number {
    return this.end - this.position + 1;
  }

  /**
   * The next chunk read into `buffer` (a view of it), or null at the end of the range. A file that
   * ends before the range does is an error: the length was already promised.
   */
  private nextChunk(buffer: Buffer): Promise<Buffer | null> {
    const wanted = Math.min(buffer.length, this.left);
    if (wanted <= 0 || this.destroyed) return Promise.resolve(null);
    const read = readAt(this.fd, buffer, wanted, this.position).then((bytesRead) => {
      if (bytesRead === 0) throw new Error('the file ended before the range it was opened for');
      this.position += bytesRead;
      return bytesRead === buffer.length ? buffer : buffer.subarray(0, bytesRead);
    });
    this.reading = read.catch(() => undefined);
    return read;
  }

  override _read(): void {
    if (this.pumping) return;
    const size = Math.max(1, Math.min(READ_CHUNK_BYTES, this.left));
    this.nextChunk(Buffer.allocUnsafeSlow(size)).then(
      (chunk) => this.push(chunk),
      (err: unknown) => this.destroy(err as Error),
    );
  }

  override pipe<T extends NodeJS.WritableStream>(destination: T, options?: { end?: boolean }): T {
    if (!(destination instanceof ServerResponse) || options?.end === false) {
      return super.pipe(destination, options);
    }
    this.pumping = true;
    destination.emit('pipe', this);
    this.send(destination).then(
      () => {
        if (this.destroyed) return;
        // Ends this stream as a consumed one would: 'end' for whoever waits on it, then the file closes.
        this.push(null);
        this.resume();
      },
      (err: unknown) => this.destroy(err as Error),
    );
    return destination;
  }

  /**
   * Reads one chunk ahead while the socket writes the last. A buffer goes back to the pool from the
   * write's callback, when the socket no longer holds it; a write that never completes (the client
   * went away) leaves its buffer to the garbage collector.
   */
  private async send(response: ServerResponse): Promise<void> {
    let buffer = takeBuffer();
    let next = this.nextChunk(buffer);
    for (;;) {
      const chunk = await next;
      if (chunk === null || response.destroyed || this.destroyed) break;
      const written = buffer;
      const flowing = response.write(chunk, (err) => {
        if (!err) giveBack(written);
      });
      this.emit('data', chunk);
      buffer = takeBuffer();
      next = this.nextChunk(buffer);
      if (!flowing) await drained(response);
    }
    // No read is in flight here: the last buffer taken was not read into, or its bytes are not wanted.
    giveBack(buffer);
    // Destroyed midway, this stream cannot complete the answer: cut it off rather than end it short.
    if (this.destroyed) response.destroy();
    else if (!response.destroyed) response.end();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    void this.reading.then(() => {
      abandoned.unregister(this);
      try {
        // Closing a file opened for reading flushes nothing: the kernel answers at once.
        fs.closeSync(this.fd);
        callback(error);
      } catch (closeError) {
        callback(error ?? (closeError as Error));
      }
    });
  }
}

/** Reads `length` bytes of `fd` at `position` into the start of `buffer`; resolves with the count read. */
function readAt(fd: number, buffer: Buffer, length: number, position: number): Promise<number> {
  return new Promise((resolve, reject) => {
    fs.read(fd, buffer, 0, length, position, (err, bytesRead) => (err ? reject(err) : resolve(bytesRead)));
  });
}

/** Until the response can take more bytes, or is gone. */
function drained(response: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      response.off('drain', done);
      response.off('close', done);
      resolve();
    };
    response.on('drain', done);
    response.on('close', done);
  });
}
