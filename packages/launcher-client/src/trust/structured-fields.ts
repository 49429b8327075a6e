/**
 * RFC 8941 structured field values, as far as signed answers need them: dictionaries whose members
 * are items or inner lists, with parameters, and every bare item type. Strict: anything the RFC's
 * parsing algorithms (§4.2) refuse throws `StructuredFieldError`; nothing is guessed.
 */

export class StructuredFieldError extends Error {
  override readonly name = 'StructuredFieldError';
}

export type BareItem =
  | { readonly type: 'integer' | 'decimal'; readonly value: number }
  | { readonly type: 'string' | 'token'; readonly value: string }
  | { readonly type: 'bytes'; readonly value: Buffer }
  | { readonly type: 'boolean'; readonly value: boolean };

/** Parameters in the order they were sent (a repeated key keeps its first place, last value). */
export type Parameters = ReadonlyMap<string, BareItem>;

export interface Item {
  readonly value: BareItem;
  readonly params: Parameters;
}

export interface InnerList {
  readonly items: readonly Item[];
  readonly params: Parameters;
}

export type Member = Item | InnerList;

export function isInnerList(member: Member): member is InnerList {
  return 'items' in member;
}

const KEY_FIRST = /[a-z*]/;
const KEY_CHAR = /[a-z0-9_\-.*]/;
const TOKEN_FIRST = /[A-Za-z*]/;
const TOKEN_CHAR = /[!#$%&'*+\-.^_`|~0-9A-Za-z:/]/;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

class Parser {
  private pos = 0;

  constructor(private readonly input: string) {}

  private fail(what: string): never {
    throw new StructuredFieldError(`${what} at character ${this.pos} of ${JSON.stringify(this.input)}`);
  }

  private peek(): string {
    return this.input.charAt(this.pos);
  }

  private atEnd(): boolean {
    return this.pos >= this.input.length;
  }

  private skip(chars: string): void {
    while (!this.atEnd() && chars.includes(this.peek())) this.pos++;
  }

  /** §4.2.2 */
  dictionary(): Map<string, Member> {
    const dict = new Map<string, Member>();
    this.skip(' ');
    while (!this.atEnd()) {
      const key = this.key();
      let member: Member;
      if (this.peek() === '=') {
        this.pos++;
        member = this.peek() === '(' ? this.innerList() : this.item();
      } else {
        member = { value: { type: 'boolean', value: true }, params: this.parameters() };
      }
      dict.set(key, member);
      this.skip(' \t');
      if (this.atEnd()) return dict;
      if (this.peek() !== ',') this.fail('expected "," between dictionary members');
      this.pos++;
      this.skip(' \t');
      if (this.atEnd()) this.fail('trailing comma');
    }
    return dict;
  }

  /** §4.2.1.2 */
  private innerList(): InnerList {
    this.pos++; // '('
    const items: Item[] = [];
    for (;;) {
      this.skip(' ');
      if (this.atEnd()) this.fail('unterminated inner list');
      if (this.peek() === ')') {
        this.pos++;
        return { items, params: this.parameters() };
      }
      items.push(this.item());
      const next = this.peek();
      if (next !== ' ' && next !== ')') this.fail('expected " " or ")" in inner list');
    }
  }

  /** §4.2.3 */
  private item(): Item {
    const value = this.bareItem();
    return { value, params: this.parameters() };
  }

  /** §4.2.3.2 */
  private parameters(): Map<string, BareItem> {
    const params = new Map<string, BareItem>();
    while (this.peek() === ';') {
      this.pos++;
      this.skip(' ');
      const key = this.key();
      let value: BareItem = { type: 'boolean', value: true };
      if (this.peek() === '=') {
        this.pos++;
        value = this.bareItem();
      }
      params.set(key, value);
    }
    return params;
  }

  /** §4.2.3.3 */
  private key(): string {
    if (!KEY_FIRST.test(this.peek())) this.fail('expected a key');
    const start = this.pos;
    while (!this.atEnd() && KEY_CHAR.test(this.peek())) this.pos++;
    return this.input.slice(start, this.pos);
  }

  /** §4.2.3.1 */
  private bareItem(): BareItem {
    const c = this.peek();
    if (c === '-' || (c >= '0' && c <= '9')) return this.number();
    if (c === '"') return this.string();
    if (c === ':') return this.bytes();
    if (c === '?') return this.boolean();
    if (TOKEN_FIRST.test(c)) return this.token();
    return this.fail('expected an item');
  }

  /** §4.2.4 */
  private number(): BareItem {
    const match = /^(-?)(\d+)(?:\.(\d+))?/.exec(this.input.slice(this.pos));
    if (!match) this.fail('expected a digit');
    const [text, , whole = '', fraction] = match;
    if (fraction === undefined) {
      if (whole.length > 15) this.fail('integer longer than 15 digits');
      this.pos += text.length;
      return { type: 'integer', value: Number(text) };
    }
    if (whole.length > 12 || fraction.length > 3) this.fail('decimal out of range');
    this.pos += text.length;
    return { type: 'decimal', value: Number(text) };
  }

  /** §4.2.5 */
  private string(): BareItem {
    this.pos++; // '"'
    let out = '';
    while (!this.atEnd()) {
      const c = this.input.charAt(this.pos++);
      if (c === '\\') {
        const next = this.input.charAt(this.pos++);
        if (next !== '"' && next !== '\\') this.fail('bad escape in string');
        out += next;
      } else if (c === '"') {
        return { type: 'string', value: out };
      } else if (c < ' ' || c > '~') {
        this.fail('character outside printable ASCII in string');
      } else {
        out += c;
      }
    }
    return this.fail('unterminated string');
  }

  /** §4.2.6 */
  private token(): BareItem {
    const start = this.pos;
    this.pos++;
    while (!this.atEnd() && TOKEN_CHAR.test(this.peek())) this.pos++;
    return { type: 'token', value: this.input.slice(start, this.pos) };
  }

  /** §4.2.7 (strict: the base64 must be canonical, with its padding) */
  private bytes(): BareItem {
    const end = this.input.indexOf(':', this.pos + 1);
    if (end < 0) this.fail('unterminated byte sequence');
    const text = this.input.slice(this.pos + 1, end);
    const value = Buffer.from(text, 'base64');
    if (!BASE64.test(text) || value.toString('base64') !== text) this.fail('malformed base64 in byte sequence');
    this.pos = end + 1;
    return { type: 'bytes', value };
  }

  /** §4.2.8 */
  private boolean(): BareItem {
    const digit = this.input.charAt(this.pos + 1);
    if (digit !== '0' && digit !== '1') this.fail('expected ?0 or ?1');
    this.pos += 2;
    return { type: 'boolean', value: digit === '1' };
  }
}

/** Parses a dictionary field value (the values of repeated fields joined by ", "). */
export function parseDictionary(input: string): Map<string, Member> {
  return new Parser(input).dictionary();
}

function serializeBareItem(item: BareItem): string {
  switch (item.type) {
    case 'integer':
      return String(item.value);
    case 'decimal':
      return Number.isInteger(item.value) ? `${item.value}.0` : String(Math.round(item.value * 1000) / 1000);
    case 'string':
      return `"${item.value.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
    case 'token':
      return item.value;
    case 'bytes':
      return `:${item.value.toString('base64')}:`;
    case 'boolean':
      return item.value ? '?1' : '?0';
  }
}

function serializeParameters(params: Parameters): string {
  let out = '';
  for (const [key, value] of params) {
    out += value.type === 'boolean' && value.value ? `;${key}` : `;${key}=${serializeBareItem(value)}`;
  }
  return out;
}

/** §4.1.3: an item with its parameters (an RFC 9421 component identifier: `"@path";req`). */
export function serializeItem(item: Item): string {
  return serializeBareItem(item.value) + serializeParameters(item.params);
}

/** §4.1.1.1: an inner list with its parameters, as RFC 9421 puts it in `@signature-params`. */
export function serializeInnerList(list: InnerList): string {
  return `(${list.items.map(serializeItem).join(' ')})${serializeParameters(list.params)}`;
}
