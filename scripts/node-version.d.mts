/** Whether the Node version `node` satisfies the semver range `range` (`||` of space-separated comparators). */
export declare function satisfies(node: string, range: string): boolean;
