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
  | "io"
  | "non_finite"
  | "stale"
  | "bad_artifact"
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
  "io",
];

/** Subclasses (GgufError, ArtifactError) add what they know, e.g. the file. */
export class LmheadError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
    this.name = new.target.name;
  }
}
