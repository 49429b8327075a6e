/**
 * The SHA-256 work of a game operation, on a thread of its own so that the event loop's thread keeps
 * the downloads and writes moving: each chunk's name (its bytes lent through a `SharedArrayBuffer`,
 * not copied), and each work file's whole hash, over its bytes in order as its places are filled:
 * from a chunk's bytes when its place is the next of its file, else read back from the file once
 * the places before it are hashed. A file's whole check so ends moments after its last place is
 * written, not in a pass of its own at the end.
 */
import { Worker } from 'node:worker_threads';

/** Messages to the thread; each one with an `id` is answered once, in order. */
type Request =
  | {
      readonly op: 'chunk';
      readonly id: number;
      readonly bytes: Uint8Array;
      /** When the bytes hash to this, they are what goes at `places` (each later told `written`). */
      readonly name: string;
      readonly places: readonly { readonly file: string; readonly offset: number }[];
    }
  | { readonly op: 'written'; readonly file: string; readonly offset: number; readonly size: number }
  | { readonly op: 'whole'; readonly id: number; readonly file: string; readonly size: number };

/** The thread's answer: a hex SHA-256, null (a whole file not all written, or of another size), or an error's message. */
type Answer = { readonly id: number; readonly digest: string | null } | { readonly id: number; readonly error: string };

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
    readonly hash: ReturnType<typeof createHash>;
    readonly fd: number;
    /** Bytes hashed from the start. */
    next: number;
    /** Written places not hashed yet: offset → size (a place already hashed from its chunk is not kept). */
    readonly written: Map<number, number>;
  }
  const files = new Map<string, Progress>();
  let buffer = Buffer.allocUnsafe(1 << 20);
  const progress = (file: string): Progress => {
    let found = files.get(file);
    if (found === undefined) {
      found = { hash: createHash('sha256'), fd: fs.openSync(file, 'r'), next: 0, written: new Map() };
      files.set(file, found);
    }
    return found;
  };
  /** Hashes the file's written places that follow what is hashed, read back from the file. */
  const advance = (p: Progress) => {
    for (let size = p.written.get(p.next); size !== undefined; size = p.written.get(p.next)) {
      p.written.delete(p.next);
      if (buffer.length < size) buffer = Buffer.allocUnsafe(size);
      let read = 0;
      while (read < size) {
        const n = fs.readSync(p.fd, buffer, read, size - read, p.next + read);
        if (n === 0) break;
        read += n;
      }
      p.hash.update(buffer.subarray(0, read));
      p.next += read;
      if (read < size) return;
    }
  };
  port.on('message', (message: Request) => {
    try {
      if (message.op === 'chunk') {
        const digest = createHash('sha256').update(message.bytes).digest('hex');
        if (digest === message.name) {
          for (const place of message.places) {
            const p = progress(place.file);
            if (p.next !== place.offset) continue;
            p.hash.update(message.bytes);
            p.next += message.bytes.length;
            advance(p);
          }
        }
        port.postMessage({ id: message.id, digest });
      } else if (message.op === 'written') {
        const p = progress(message.file);
        if (message.offset >= p.next) p.written.set(message.offset, message.size);
        advance(p);
      } else {
        const p = progress(message.file);
        files.delete(message.file);
        const whole = p.next === message.size && p.written.size === 0 && fs.fstatSync(p.fd).size === message.size;
        fs.closeSync(p.fd);
        port.postMessage({ id: message.id, digest: whole ? p.hash.digest('hex') : null });
      }
    } catch (err) {
      if ('id' in message) port.postMessage({ id: message.id, error: (err as Error).message });
      else throw err;
    }
  });
}

export class Hasher {
  private readonly worker: Worker;
  private lastId = 0;
  private readonly waiting = new Map<
    number,
    { resolve: (digest: string | null) => void; reject: (err: Error) => void }
  >();
  private failed: Error | null = null;

  constructor() {
    // Run from TypeScript through esbuild (tsx, with `keepNames`), the function's text calls `__name`.
    this.worker = new Worker(`const __name = (f) => f;\n(${hasherThread.toString()})();`, { eval: true });
    this.worker.on('message', (answer: Answer) => {
      const waiting = this.waiting.get(answer.id);
      this.waiting.delete(answer.id);
      if ('error' in answer) waiting?.reject(new Error(answer.error));
      else waiting?.resolve(answer.digest);
    });
    this.worker.on('error', (err) => this.fail(err));
    this.worker.on('exit', () => this.fail(new Error('the hashing thread ended')));
  }

  /**
   * The SHA-256 of `bytes`, a view of a `SharedArrayBuffer` that must not change until answered.
   * When it is `name`, the bytes are what will be written at `places`: a place that is the next of
   * its file's whole check is hashed from them there and then.
   */
  async chunk(bytes: Buffer, name: string, places: readonly { file: string; offset: number }[]): Promise<string> {
    if (!(bytes.buffer instanceof SharedArrayBuffer)) throw new TypeError('chunk bytes must be shared');
    const at = places.map(({ file, offset }) => ({ file, offset }));
    return (await this.ask((id) => ({ op: 'chunk', id, bytes, name, places: at }))) ?? '';
  }

  /** Tells the whole check of `file` that its `size` bytes at `offset` are written (each place once). */
  written(file: string, offset: number, size: number): void {
    if (this.failed === null) this.worker.postMessage({ op: 'written', file, offset, size } satisfies Request);
  }

  /**
   * The SHA-256 of `file`, read back as its places were written, once every place was told; null
   * when they do not make the whole file of `size` bytes. The file's check is over after this.
   */
  whole(file: string, size: number): Promise<string | null> {
    return this.ask((id) => ({ op: 'whole', id, file, size }));
  }

  /** Ends the thread. */
  async close(): Promise<void> {
    this.failed ??= new Error('the hashing thread was closed');
    await this.worker.terminate();
  }

  private ask(request: (id: number) => Request): Promise<string | null> {
    if (this.failed !== null) return Promise.reject(this.failed);
    const id = ++this.lastId;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.worker.postMessage(request(id));
    });
  }

  private fail(err: Error): void {
    this.failed ??= err;
    for (const waiting of this.waiting.values()) waiting.reject(this.failed);
    this.waiting.clear();
  }
}
