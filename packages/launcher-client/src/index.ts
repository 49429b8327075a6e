/** launcher-client: the launcher's half of the distribution service (work in progress). */
export const PACKAGE_NAME = 'launcher-client';
