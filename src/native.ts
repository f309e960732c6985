/**
 * The bun:ffi binding of liblmhead: one symbol table, and `check`, which turns a native
 * status into an LmheadError carrying the native message. Every other module calls the
 * library through here.
 */
import { dlopen, suffix, FFIType } from "bun:ffi";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { LmheadError, statusCodes } from "./errors.ts";

const { u32, u64, i32, f32, ptr, void: none } = FFIType;

const symbols = {
  lmh_version: { args: [], returns: u32 },
  lmh_last_error: { args: [ptr, u64], returns: u64 },
  lmh_device_open: { args: [u32, ptr], returns: i32 },
  lmh_device_close: { args: [u64], returns: i32 },
  lmh_device_info: { args: [u64, ptr, ptr, u64, ptr], returns: i32 },
  lmh_registry_list: { args: [u64, ptr, u64, ptr], returns: i32 },
  lmh_buffer_alloc: { args: [u64, u64, ptr], returns: i32 },
  lmh_buffer_wrap: { args: [u64, ptr, u64, ptr], returns: i32 },
  lmh_buffer_view: { args: [u64, u64, u64, ptr], returns: i32 },
  lmh_buffer_free: { args: [u64], returns: i32 },
  lmh_buffer_size: { args: [u64, ptr], returns: i32 },
  lmh_buffer_host_ptr: { args: [u64, ptr], returns: i32 },
  lmh_buffer_write: { args: [u64, u64, ptr, u64], returns: i32 },
  lmh_buffer_read: { args: [u64, u64, ptr, u64], returns: i32 },
  lmh_host_pin: { args: [u64, ptr, u64, ptr], returns: i32 },
  lmh_host_unpin: { args: [u64], returns: i32 },
  lmh_session_begin: { args: [u64, ptr], returns: i32 },
  lmh_session_barrier_between: { args: [u64, ptr, u32, ptr, u32], returns: i32 },
  lmh_session_rms_norm: { args: [u64, u64, u64, u64, u32, u32, f32], returns: i32 },
  lmh_session_matvec: { args: [u64, u64, u64, u32, u64, u32, u32, u32], returns: i32 },
  lmh_session_softcap: { args: [u64, u64, u64, f32], returns: i32 },
  lmh_session_count_non_finite: { args: [u64, u64, u64, u32, u32], returns: i32 },
  lmh_session_finish: { args: [u64], returns: i32 },
  lmh_session_finish_timed: { args: [u64, ptr], returns: i32 },
  lmh_session_abort: { args: [u64], returns: i32 },
  lmh_counters: { args: [ptr], returns: i32 },
  lmh_limits: { args: [ptr], returns: i32 },
  lmh_device_read_bandwidth: { args: [u64, u64, u32, ptr], returns: i32 },
  lmh_device_fma_rate: { args: [u64, u32, ptr], returns: i32 },
  lmh_set_encode_trace: { args: [u32], returns: none },
  lmh_format_info: { args: [u32, ptr, ptr, u64, ptr], returns: i32 },
  lmh_head_admit: { args: [u32, u64, u64, u64, u32], returns: i32 },
  lmh_dequantize: { args: [u32, ptr, u64, ptr, u64], returns: i32 },
  lmh_argmax_rows: { args: [ptr, u64, u64, ptr], returns: i32 },
  lmh_top_k_rows: { args: [ptr, u64, u64, ptr, u64, ptr, ptr], returns: i32 },
  lmh_file_open: { args: [ptr, u64, ptr, ptr], returns: i32 },
  lmh_file_retain: { args: [u64, ptr], returns: i32 },
  lmh_file_close: { args: [u64], returns: i32 },
  lmh_file_check: { args: [u64], returns: i32 },
  lmh_buffer_wrap_file: { args: [u64, u64, u64, u64, ptr], returns: i32 },
} as const;

const abiVersion = 5;

/** The package that carries this platform's prebuilt library, e.g. @lmhead/darwin-arm64. */
export const platformPackage = `@lmhead/${process.platform}-${process.arch}`;

/**
 * Where the library comes from: LMHEAD_LIB (a custom build), else the installed platform
 * package's prebuilt library, else a development checkout's `zig build` output.
 */
export function libraryPath(): string {
  const fromEnv = process.env.LMHEAD_LIB;
  if (fromEnv) return fromEnv;
  const file = `liblmhead.${suffix}`;
  let prebuilt: string | undefined;
  try {
    prebuilt = join(dirname(Bun.resolveSync(`${platformPackage}/package.json`, import.meta.dir)), file);
  } catch {
    // Not installed: a development checkout, or a platform without a prebuilt package.
  }
  if (prebuilt !== undefined) return prebuilt;
  const built = join(import.meta.dir, "..", "zig-out", "lib", file);
  if (!existsSync(built)) {
    throw new LmheadError("library", `native library not found: ${platformPackage} is not installed and there is no build at ${built} (in a checkout, run ./lmhead, which builds it; elsewhere set LMHEAD_LIB)`);
  }
  return built;
}

export const lib = dlopen(libraryPath(), symbols).symbols;

if (lib.lmh_version() !== abiVersion) {
  throw new LmheadError("library", `liblmhead ABI version ${lib.lmh_version()}, this package needs ${abiVersion}: rebuild with zig build`);
}

const decoder = new TextDecoder();

export function lastError(): string {
  const bytes = Number(lib.lmh_last_error(null, 0));
  const text = new Uint8Array(Math.max(bytes, 1));
  lib.lmh_last_error(text, bytes);
  return decoder.decode(text.subarray(0, bytes));
}

/** Throws the native error for a non-zero status, prefixed with what was being done. */
export function check(status: number, what: string): void {
  if (status === 0) return;
  const code = statusCodes[status - 1] ?? "library";
  throw new LmheadError(code, `${what}: ${lastError()}`);
}

/** Reads a string a native call writes into (dst, capacity, len_out), growing once if needed. */
export function nativeString(write: (dst: Uint8Array, capacity: number, len: BigUint64Array) => number, what: string): string {
  const len = new BigUint64Array(1);
  let dst = new Uint8Array(256);
  check(write(dst, dst.length, len), what);
  if (Number(len[0]) > dst.length) {
    dst = new Uint8Array(Number(len[0]));
    check(write(dst, dst.length, len), what);
  }
  return decoder.decode(dst.subarray(0, Number(len[0])));
}

/** Runs a native call that writes one u64 handle and returns it. */
export function handleOut(call: (out: BigUint64Array) => number, what: string): bigint {
  const out = new BigUint64Array(1);
  check(call(out), what);
  return out[0]!;
}

/** The native library's explicit limits. */
export const limits = (() => {
  const out = new BigUint64Array(4);
  check(lib.lmh_limits(out), "limits");
  return { maxRows: Number(out[0]), maxHidden: Number(out[1]), maxVocab: Number(out[2]), maxBufferBytes: Number(out[3]) };
})();

