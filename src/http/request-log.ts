import type { FastifyBaseLogger } from 'fastify';
import type { Bindings, ChildLoggerOptions, Level } from 'pino';

type Loggable = Exclude<Level, 'silent'>;

/**
 * A request's logger (`request.log`), whose pino child is made on the first line the request logs.
 * Fastify binds each request's id into a child of the server's logger; making that child cost a
 * check-update about a seventh of its CPU, and at the default level almost no request logs at all.
 */
class RequestLog implements FastifyBaseLogger {
  #child: FastifyBaseLogger | null = null;
  readonly #parent: FastifyBaseLogger;
  readonly #bindings: Bindings;

  constructor(parent: FastifyBaseLogger, bindings: Bindings) {
    this.#parent = parent;
    this.#bindings = bindings;
  }

  get #real(): FastifyBaseLogger {
    return (this.#child ??= this.#parent.child(this.#bindings));
  }

  #log(level: Loggable, args: unknown[]): void {
    const parent = this.#parent as FastifyBaseLogger & { isLevelEnabled?: (level: string) => boolean };
    if (this.#child === null && parent.isLevelEnabled?.(level) === false) return;
    (this.#real[level] as (...line: unknown[]) => void)(...args);
  }

  get level(): string {
    return this.#child?.level ?? this.#parent.level;
  }

  set level(level: string) {
    this.#real.level = level;
  }

  fatal(...args: unknown[]): void {
    this.#log('fatal', args);
  }

  error(...args: unknown[]): void {
    this.#log('error', args);
  }

  warn(...args: unknown[]): void {
    this.#log('warn', args);
  }

  info(...args: unknown[]): void {
    this.#log('info', args);
  }

  debug(...args: unknown[]): void {
    this.#log('debug', args);
  }

  trace(...args: unknown[]): void {
    this.#log('trace', args);
  }

  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.#real.child(bindings, options);
  }
}

/**
 * Fastify's `childLoggerFactory`: a lazy `RequestLog`, or pino's own child at once when the route
 * sets a level or serializers of its own.
 */
export function requestLog(
  logger: FastifyBaseLogger,
  bindings: Bindings,
  options: ChildLoggerOptions,
): FastifyBaseLogger {
  // Fastify sets only these two, and only for a route that has its own.
  return options.level !== undefined || options.serializers !== undefined
    ? logger.child(bindings, options)
    : new RequestLog(logger, bindings);
}
