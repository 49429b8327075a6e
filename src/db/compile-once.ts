import { CompiledQuery } from 'kysely';

/**
 * Stands for a value of a statement compiled once (`compileOnce`): each use fills it in from the
 * values of row `row` (statements of many rows) or of the only row.
 */
class Slot {
  constructor(
    readonly name: string,
    readonly row: number,
  ) {}
}

/** A placeholder for value `name` (of row `row` in a statement of many rows) in a query built for `compileOnce`. */
export const slot = <T>(name: string, row = 0) => new Slot(name, row) as unknown as T;

/** A statement compiled once: given the values of its slots, the query to run. */
export type CompiledOnce = (values: Record<string, unknown> | readonly Record<string, unknown>[]) => CompiledQuery;

/**
 * A statement built and compiled by Kysely once, with slots where values go; each use fills them in.
 * Building a query costs far more than running it where it runs often: at one download at a time
 * the builder was a tenth of a download's CPU, and a thousand-row upsert of the heartbeat flush took
 * longer to build than SQLite took to run it.
 */
export function compileOnce(query: { compile(): CompiledQuery }): CompiledOnce {
  const { sql: text, parameters } = query.compile();
  return (values) => {
    const rows = Array.isArray(values) ? values : [values];
    return CompiledQuery.raw(
      text,
      parameters.map((p) => {
        if (!(p instanceof Slot)) return p;
        const value = (rows[p.row] as Record<string, unknown> | undefined)?.[p.name];
        // A slot left empty would be NULL, and a count plus NULL is NULL: refuse it rather than lose data.
        if (value === undefined) throw new Error(`compiled statement: no value for slot ${p.name} of row ${p.row}`);
        return value;
      }),
    );
  };
}
