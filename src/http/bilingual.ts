import { type TOptional, type TString, Type } from 'typebox';
import type { Translatable } from '../domain/lang.js';
import { badRequest } from './errors.js';

type BilingualSchema<F extends string> = { [K in F | `${F}Zh` | `${F}En`]: TOptional<TString> };

/** Body properties of one translatable field: `f` (alias of `fZh`), `fZh` and `fEn`. */
export function bilingualBody<F extends Translatable>(field: F, maxLength = 100_000): BilingualSchema<F> {
  const text = (description: string) => Type.Optional(Type.String({ maxLength, description }));
  return {
    [field]: text(`alias of ${field}Zh`),
    [`${field}Zh`]: text('Chinese text'),
    [`${field}En`]: text('English text'),
  } as BilingualSchema<F>;
}

/** The stored `{zh, en}` values a write body sets for `field`; `fZh` wins over the plain alias `f`. */
export function bilingualWrite(body: Record<string, unknown>, field: Translatable): { zh?: string; en?: string } {
  const zh = body[`${field}Zh`] ?? body[field];
  const en = body[`${field}En`];
  return {
    ...(typeof zh === 'string' ? { zh } : {}),
    ...(typeof en === 'string' ? { en } : {}),
  };
}

/** Like `bilingualWrite`, for a field that must have a non-empty Chinese (or alias) value on create. */
export function requiredBilingual(body: Record<string, unknown>, field: Translatable): { zh: string; en: string } {
  const { zh, en } = bilingualWrite(body, field);
  if (zh === undefined || zh.trim() === '') throw badRequest(`body.${field}: is required`);
  return { zh, en: en ?? '' };
}

/** The columns an update body sets for `field` (`fZh`, `fEn`), only those it sends. */
export function bilingualColumns<F extends Translatable>(
  body: Record<string, unknown>,
  field: F,
): Partial<Record<`${F}Zh` | `${F}En`, string>> {
  const { zh, en } = bilingualWrite(body, field);
  return {
    ...(zh !== undefined ? { [`${field}Zh`]: zh } : {}),
    ...(en !== undefined ? { [`${field}En`]: en } : {}),
  } as Partial<Record<`${F}Zh` | `${F}En`, string>>;
}

/** `bilingualColumns` for a field whose Chinese value must stay non-empty: sending it empty is a 400. */
export function requiredBilingualColumns<F extends Translatable>(
  body: Record<string, unknown>,
  field: F,
): Partial<Record<`${F}Zh` | `${F}En`, string>> {
  const { zh } = bilingualWrite(body, field);
  if (zh !== undefined && zh.trim() === '') throw badRequest(`body.${field}: must not be empty`);
  return bilingualColumns(body, field);
}
