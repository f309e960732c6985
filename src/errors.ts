/** The one error type of lmhead: a code and a message that names the numbers involved. */
export type ErrorCode =
  | "invalid_argument"
  | "bad_handle"
  | "out_of_bounds"
  | "overflow"
  | "out_of_memory"
  | "unsupported"
  | "busy"
  | "backend"
  | "non_finite"
  | "library";

/** Native status codes, in the order of native/core/status.zig. */
export const statusCodes: readonly ErrorCode[] = [
  "invalid_argument",
  "bad_handle",
  "out_of_bounds",
  "overflow",
  "out_of_memory",
  "unsupported",
  "busy",
  "backend",
];

export class LmheadError extends Error {
  override readonly name = "LmheadError";
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
  }
}
