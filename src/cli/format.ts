/** Number formatting for the command line's reports. */

/** Fixed decimals, or "n/a" for a non-finite value. */
export function fixed(v: number | null | undefined, digits: number): string {
  return v === null || v === undefined || !Number.isFinite(v) ? "n/a" : v.toFixed(digits);
}
