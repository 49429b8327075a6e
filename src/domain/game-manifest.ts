/**
 * The game client's manifest rules (`game-files.md`, "The manifest") live in the launcher's package,
 * so that the service and every launcher apply exactly the same checks.
 */
export * from 'patchwell-client/game-manifest';
