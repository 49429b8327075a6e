import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { FORMAT_MESSAGES } from './urls.js';

/** A failure the client caused or may see: becomes `{error: message}` with `status`. */
export class AppError extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** Fields answered beside `error` (e.g. `totpRequired`). */
    readonly details: Readonly<Record<string, unknown>> = {},
  ) {
    super(message);
    this.name = 'AppError';
  }
}

export const badRequest = (message: string) => new AppError(400, message);
export const unauthorized = (message = 'authentication required') => new AppError(401, message);
export const forbidden = (message: string) => new AppError(403, message);
export const notFound = (message: string) => new AppError(404, message);
export const conflict = (message: string) => new AppError(409, message);

interface ValidationIssue {
  instancePath?: string;
  message?: string;
  params?: Record<string, unknown>;
  keyword?: string;
}

/** Turns an Ajv error into a message that names the field, e.g. `body.name: must be string`. */
function validationMessage(error: FastifyError): string {
  const issue = (error.validation?.[0] ?? {}) as ValidationIssue;
  const context = error.validationContext ?? 'request';
  const pathParts = (issue.instancePath ?? '').split('/').filter((p) => p !== '');
  const missing = issue.keyword === 'required' ? issue.params?.missingProperty : undefined;
  if (typeof missing === 'string') pathParts.push(missing);
  const extra = issue.keyword === 'additionalProperties' ? issue.params?.additionalProperty : undefined;
  if (typeof extra === 'string') return `${[context, ...pathParts, extra].join('.')}: unknown field`;
  const where = [context, ...pathParts].join('.');
  if (typeof missing === 'string') return `${where}: is required`;
  const format = issue.keyword === 'format' ? FORMAT_MESSAGES[String(issue.params?.format)] : undefined;
  if (format !== undefined) return `${where}: ${format}`;
  return `${where}: ${issue.message ?? 'is invalid'}`;
}

/** One error shape for every failure: `{error: "<message>"}`; 5xx never leak details. */
export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError | AppError, request, reply) => {
    if (error instanceof AppError) {
      return reply.code(error.status).send({ error: error.message, ...error.details });
    }
    if (error.validation) {
      return reply.code(400).send({ error: validationMessage(error) });
    }
    const status = error.statusCode ?? 500;
    if (status >= 400 && status < 500) {
      if (status === 429) return reply.code(429).send({ error: 'too many requests, try again later' });
      return reply.code(status).send({ error: error.message });
    }
    request.log.error({ err: error }, 'request failed');
    return reply.code(500).send({ error: 'internal server error' });
  });
  app.setNotFoundHandler((request, reply) => {
    reply.code(404).send({ error: `no route for ${request.method} ${request.url.split('?')[0]}` });
  });
}

/** What the HTTP parser's own refusals say (they come before any route or hook). */
function clientErrorAnswer(code: string | undefined): [number, string] {
  switch (code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return [408, 'request not received in time'];
    case 'HPE_HEADER_OVERFLOW':
      return [431, 'request header fields too large'];
    case 'HPE_URI_TOO_LONG':
      return [414, 'request URI too long'];
    default:
      return [400, 'malformed HTTP request'];
  }
}

/**
 * The server's `clientError` listener: a request the HTTP parser refuses (broken syntax, headers too
 * large, headers or body too slow) is answered `{error}` JSON, like every other failure, and closed.
 */
export function answerClientError(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  if (socket.writable) {
    const [status, message] = clientErrorAnswer(err.code);
    const body = JSON.stringify({ error: message });
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

/** Fastify's own refusals before routing (a URL that cannot be decoded, a parameter too long). */
export function answerFrameworkError(error: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  const status =
    error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 400;
  void reply.code(status).send({ error: error.message });
}
