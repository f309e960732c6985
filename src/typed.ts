/**
 * The typed-array checks of public entry points. bun:ffi passes any object as a pointer and
 * reads a `length` wherever it finds one, so a plain array, `{ length }` or an array of the
 * wrong element type would reach native code as something else; each is refused here with an
 * LmheadError naming what was passed.
 */
import { LmheadError } from "./errors.ts";

type ViewKind = "Float32Array" | "Uint8Array" | "Uint32Array";

/** What `value` is, for an error message: "Int32Array(4)", "Array(3)", "null", "number". */
export function typeName(value: unknown): string {
  if (value === null) return "null";
  if (ArrayBuffer.isView(value)) {
    const length = (value as { length?: number }).length ?? value.byteLength;
    return `${viewKind(value)}(${length})`;
  }
  if (Array.isArray(value)) return `Array(${value.length})`;
  if (typeof value === "object") return (value as object).constructor?.name ?? "Object";
  return typeof value;
}

/** Throws unless `value` is a `kind` (at any offset, over any kind of buffer). */
export function expectTyped(value: unknown, kind: "Float32Array", what: string): asserts value is Float32Array;
export function expectTyped(value: unknown, kind: "Uint8Array", what: string): asserts value is Uint8Array;
export function expectTyped(value: unknown, kind: "Uint32Array", what: string): asserts value is Uint32Array;
export function expectTyped(value: unknown, kind: ViewKind, what: string): void {
  if (!ArrayBuffer.isView(value) || viewKind(value) !== kind) {
    throw new LmheadError("invalid_argument", `${what} must be a ${kind}, got ${typeName(value)}`);
  }
}

/** Throws unless `value` is a typed array or a DataView. */
export function expectView(value: unknown, what: string): asserts value is ArrayBufferView {
  if (!ArrayBuffer.isView(value)) throw new LmheadError("invalid_argument", `${what} must be a typed array or DataView, got ${typeName(value)}`);
}

/** The view's own kind ("Float32Array", "DataView"), whatever its constructor is called. */
function viewKind(view: ArrayBufferView): string {
  return Object.prototype.toString.call(view).slice(8, -1);
}
