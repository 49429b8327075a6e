import { createHash } from 'node:crypto';

/** The release-safety document's bucket, computed here independently of the service's code. */
export function bucketOf(versionId: string, deviceId: string): number {
  const digest = createHash('sha256').update(`${versionId}:${deviceId}`, 'utf8').digest();
  const first4 = ((digest[0]! << 24) >>> 0) + (digest[1]! << 16) + (digest[2]! << 8) + digest[3]!;
  return first4 % 100;
}
