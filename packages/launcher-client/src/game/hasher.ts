/**
 * The SHA-256 work and the writes of a game operation, on a thread of its own so that the event
 * loop's thread keeps the downloads and reads moving. Each chunk's bytes are moved to the thread
 * (their buffer transferred, not copied, and given back with the answer), hashed, and, when they
 * hash to the chunk's name, written at each of their places there and then (through descriptors
 * kept open, at most 64: the least recently used is closed when another is needed). Each work file
 * is hashed whole over its bytes in order as its places are filled: from a chunk's bytes when its
 * place is the next of its file, else read back from the file once the places before it are
 * hashed. A file's whole check so ends moments after its last place is written, not in a pass of
 * its own at the end; the file is then flushed to disk (`fsync`) and closed there, while the
 * downloads go on. A work file is made by its first write (the event loop's thread makes none but
 * the empty ones and sizes those an earlier run left).
 */
import { Worker } from 'node:worker_threads';

/** A place of a work file (`size` bytes long when whole). */
export interface At {
  readonly file: string;
  readonly offset: number;
  readonly size: number;
}

/** Messages to the thread; each is answered once (a whole check once its file is flushed). */
type Request =
  | {
      readonly op: 'chunk';
      readonly id: number;
      /** Moved to the thread, given back with the answer. */
      readonly buffer: ArrayBuffer;
      readonly size: number;
      /** When the first `size` bytes of `buffer` hash to this, they are written at `write`; `present` holds them already. */
      readonly name: string;
      readonly write: readonly At[];
      readonly present: readonly At[];
    }
  | { readonly op: 'whole'; readonly id: number; readonly file: string; readonly size: number }
  | { readonly op: 'end'; readonly id: number };

/** The thread's answer: a hex SHA-256, null (a whole file not all written, or of another size), or an error. */
type Answer =
  | { readonly id: number; readonly digest: string | null; readonly buffer?: ArrayBuffer }
  | { readonly id: number; readonly error: string; readonly code?: string; readonly buffer?: ArrayBuffer };

/**
 * The thread's code, run as the source text of this function (so it needs no file of its own
 * beside the compiled module, nor a loader for one): it takes its modules from
 * `process.getBuiltinModule` and uses nothing from outside its body.
 */
function hasherThread(): void {
  const { createHash } = process.getBuiltinModule('node:crypto');
  const fs = process.getBuiltinModule('node:fs');
  const { parentPort } = process.getBuiltinModule('node:worker_threads');
  if (parentPort === null) return;
  const port = parentPort;
  interface Progress {
    readonly file: string;
    /** The whole file's size. */
    readonly size: number;
    readonly hash: ReturnType<typeof createHash>;
    /** Its SHA-256 once every byte is hashed (the file then flushed and closed: `flushed`). */
    digest: string | null;
    /** The flush and close of the whole file, under way on the thread pool: its error, if any. */
    flushed: Promise<Error | null> | null;
    /** Its descriptor while open (see `fdOf`). */
    fd: number | null;
    /** Bytes hashed from the start. */
    next: number;
    /** Written places not hashed yet: offset → size (a place already hashed from its chunk is not kept). */
    readonly written: Map<number, number>;
  }
  const files = new Map<string, Progress>();
  /**
   * The files with a descriptor open, least recently used first: at most `MAX_OPEN` (a build of
   * 100,000 files would otherwise hold as many, past what Windows' C runtime allows a process).
   */
  const MAX_OPEN = 64;
  const open = new Set<Progress>();
  const shut = (p: Progress) => {
    open.delete(p);
    if (p.fd !== null) fs.closeSync(p.fd);
    p.fd = null;
  };
  /**
   * A work file opened for writing; on Windows, while another process holds it for a moment (a
   * scanner reads each new file: a sharing violation), tried again with backoff for up to 10 s, as
   * `disk/guard.ts` does every rename and delete (this thread cannot import it).
   */
  const openHeld = (file: string, create: boolean): number => {
    const flags = create ? fs.constants.O_RDWR | fs.constants.O_CREAT : fs.constants.O_RDWR;
    for (let waited = 0, delay = 50; ; waited += delay, delay = Math.min(delay * 2, 1000)) {
      try {
        return fs.openSync(file, flags, 0o644);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? '';
        if (process.platform !== 'win32' || !['EBUSY', 'EPERM', 'EACCES'].includes(code) || waited >= 10_000) throw err;
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, delay);
      }
    }
  };
  /** The file's descriptor, opened when closed (`create`: made when absent, for a write). */
  const fdOf = (p: Progress, create = false): number => {
    open.delete(p);
    open.add(p);
    if (p.fd !== null) return p.fd;
    const fd = openHeld(p.file, create);
    p.fd = fd;
    for (const oldest of open) {
      if (open.size <= MAX_OPEN) break;
      shut(oldest);
    }
    return fd;
  };
  let buffer = Buffer.allocUnsafe(1 << 20);
  const progress = (file: string, size: number): Progress => {
    let found = files.get(file);
    if (found === undefined) {
      found = {
        file,
        size,
        hash: createHash('sha256'),
        digest: null,
        flushed: null,
        fd: null,
        next: 0,
        written: new Map(),
      };
      files.set(file, found);
    }
    return found;
  };
  /** Flushes under way on the thread pool (at most `MAX_OPEN`; beyond, a flush is made here and then). */
  const flushing = new Set<Promise<Error | null>>();
  /**
   * Once every byte is hashed: the digest kept, the file flushed to disk (`fsync`) and closed, on
   * the thread pool while the thread goes on hashing (its descriptor no longer counted as open).
   */
  const complete = (p: Progress) => {
    if (p.digest !== null || p.next !== p.size || p.written.size > 0) return;
    p.digest = p.hash.digest('hex');
    const fd = fdOf(p);
    open.delete(p);
    p.fd = null;
    if (flushing.size >= MAX_OPEN) {
      try {
        fs.fsyncSync(fd);
      } finally {
        fs.closeSync(fd);
      }
      return;
    }
    const flushed = new Promise<Error | null>((resolve) =>
      fs.fsync(fd, (failed) => fs.close(fd, (notClosed) => resolve(failed ?? notClosed))),
    );
    p.flushed = flushed;
    flushing.add(flushed);
    void flushed.then(() => flushing.delete(flushed));
  };
  /** Hashes the file's written places that follow what is hashed, read back from the file. */
  const advance = (p: Progress) => {
    for (let size = p.written.get(p.next); size !== undefined; size = p.written.get(p.next)) {
      p.written.delete(p.next);
      if (buffer.length < size) buffer = Buffer.allocUnsafe(size);
      let read = 0;
      while (read < size) {
        const n = fs.readSync(fdOf(p), buffer, read, size - read, p.next + read);
        if (n === 0) break;
        read += n;
      }
      p.hash.update(buffer.subarray(0, read));
      p.next += read;
      if (read < size) return;
    }
  };
  /** `bytes` are at `offset` of the file: hashed now when they are its next, else read back in their turn. */
  const filled = (p: Progress, offset: number, bytes: Uint8Array) => {
    if (offset === p.next) {
      p.hash.update(bytes);
      p.next += bytes.length;
      advance(p);
      complete(p);
    } else if (offset > p.next) p.written.set(offset, bytes.length);
  };
  /** The answer to `message` (a whole check waits for its file's flush; the end, for every flush). */
  const respond = async (message: Request) => {
    const lent = message.op === 'chunk' ? [message.buffer] : [];
    try {
      if (message.op === 'chunk') {
        const bytes = new Uint8Array(message.buffer, 0, message.size);
        const digest = createHash('sha256').update(bytes).digest('hex');
        if (digest === message.name) {
          for (const place of message.write) {
            const p = progress(place.file, place.size);
            for (let done = 0; done < bytes.length;) {
              done += fs.writeSync(fdOf(p, true), bytes, done, bytes.length - done, place.offset + done);
            }
            filled(p, place.offset, bytes);
          }
          for (const place of message.present) filled(progress(place.file, place.size), place.offset, bytes);
        }
        port.postMessage({ id: message.id, digest, buffer: message.buffer } satisfies Answer, lent);
      } else if (message.op === 'whole') {
        // An empty file has no place: it is whole (and flushed) here.
        const p = progress(message.file, message.size);
        files.delete(message.file);
        try {
          complete(p);
        } finally {
          shut(p);
        }
        const failed = await p.flushed;
        if (failed) throw failed;
        const whole = p.digest !== null && p.size === message.size && fs.statSync(p.file).size === message.size;
        port.postMessage({ id: message.id, digest: whole ? p.digest : null } satisfies Answer);
      } else {
        for (const p of open) shut(p);
        files.clear();
        await Promise.all(flushing);
        port.postMessage({ id: message.id, digest: null } satisfies Answer);
      }
    } catch (err) {
      const { message: error, code } = err as NodeJS.ErrnoException;
      const answer: Answer = {
        id: message.id,
        error,
        ...(code === undefined ? {} : { code }),
        ...(lent[0] ? { buffer: lent[0] } : {}),
      };
      port.postMessage(answer, lent);
    }
  };
  port.on('message', (message: Request) => void respond(message));
}

/** A buffer one chunk at a time is read or downloaded into; lent to the thread, it holds another afterwards. */
export class ChunkBuffer {
  constructor(public bytes: Buffer) {}

  /** A buffer of `size` bytes of its own (not of Node's pool: it can be moved to the thread). */
  static of(size: number): ChunkBuffer {
    return new ChunkBuffer(Buffer.from(new ArrayBuffer(size)));
  }
}

export class Hasher {
  private readonly worker: Worker;
  private lastId = 0;
  private readonly waiting = new Map<number, { resolve: (answer: Answer) => void; reject: (err: Error) => void }>();
  private failed: Error | null = null;

  constructor() {
    // Run from TypeScript through esbuild (tsx, with `keepNames`), the function's text calls `__name`.
    this.worker = new Worker(`const __name = (f) => f;\n(${hasherThread.toString()})();`, { eval: true });
    this.worker.on('message', (answer: Answer) => {
      const waiting = this.waiting.get(answer.id);
      this.waiting.delete(answer.id);
      waiting?.resolve(answer);
    });
    this.worker.on('error', (err) => this.fail(err));
    this.worker.on('exit', () => this.fail(new Error('the hashing thread ended')));
  }

  /**
   * The SHA-256 of the first `size` bytes of `chunk`. When it is `name`, the bytes are written at
   * each place of `write` and are what `present` holds: each such place counts toward its file's
   * whole check. `chunk` holds the same bytes afterwards (in another buffer); a write that fails
   * rejects with its error (its `code` kept).
   */
  async chunk(
    chunk: ChunkBuffer,
    size: number,
    name: string,
    places: { readonly write?: readonly At[]; readonly present?: readonly At[] },
  ): Promise<string> {
    const { buffer, byteOffset, byteLength } = chunk.bytes;
    if (!(buffer instanceof ArrayBuffer) || byteOffset !== 0 || byteLength !== buffer.byteLength || size > byteLength) {
      throw new TypeError('a chunk buffer must be a whole ArrayBuffer of at least its size');
    }
    const at = (list: readonly At[] = []) => list.map(({ file, offset, size }) => ({ file, offset, size }));
    const write = at(places.write);
    const present = at(places.present);
    const answer = await this.ask((id) => ({ op: 'chunk', id, buffer, size, name, write, present }), [buffer]);
    if (answer.buffer !== undefined) chunk.bytes = Buffer.from(answer.buffer);
    return settle(answer) ?? '';
  }

  /**
   * The SHA-256 of `file`, as its places were written, once every place was told; null when they
   * do not make the whole file of `size` bytes. The file's check is over after this, and a whole
   * file is on disk (flushed).
   */
  async whole(file: string, size: number): Promise<string | null> {
    return settle(await this.ask((id) => ({ op: 'whole', id, file, size })));
  }

  /** Closes the work files still open (after the requests before) and ends the thread; later requests are refused. */
  async close(): Promise<void> {
    const ended = this.failed === null ? this.ask((id) => ({ op: 'end', id })) : null;
    this.failed ??= new Error('the hashing thread was closed');
    await ended?.catch(() => undefined);
    await this.worker.terminate();
  }

  private ask(request: (id: number) => Request, transfer: ArrayBuffer[] = []): Promise<Answer> {
    if (this.failed !== null) return Promise.reject(this.failed);
    const id = ++this.lastId;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.worker.postMessage(request(id), transfer);
    });
  }

  private fail(err: Error): void {
    this.failed ??= err;
    for (const waiting of this.waiting.values()) waiting.reject(this.failed);
    this.waiting.clear();
  }
}

/** An answer's digest, or its error thrown (with its `code`). */
function settle(answer: Answer): string | null {
  if ('digest' in answer) return answer.digest;
  throw Object.assign(new Error(answer.error), answer.code === undefined ? {} : { code: answer.code });
}
