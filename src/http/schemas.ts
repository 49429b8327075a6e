import { Type } from 'typebox';

export const ErrorResponse = Type.Object({ error: Type.String() }, { description: 'every failure' });
export const OkResponse = Type.Object({ ok: Type.Literal(true) });
export const IdParams = Type.Object({ id: Type.String() });
