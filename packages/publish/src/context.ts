/** What a command runs with besides its options: where its progress goes and its environment. */
export interface Context {
  /** Where progress goes (stderr); stdout carries only the answer's JSON line. */
  progress: NodeJS.WritableStream & { isTTY?: boolean };
  env: NodeJS.ProcessEnv;
}
