/**
 * The GPU-style runtime, mirroring mlx-native: a device, its buffers, its kernel registry,
 * and graph sessions that record work and run it at `finish`, the only host sync point.
 * Native handles are released with `using` (Symbol.dispose) or explicitly.
 */
import { toArrayBuffer } from "bun:ffi";
import { LmheadError } from "./errors.ts";
import { check, handleOut, lib, nativeString } from "./native.ts";
import { expectTyped, expectView } from "./typed.ts";

export type BackendKind = "cpu" | "metal" | "cuda";

/**
 * Handles that become unreachable without being freed are released when collected, so
 * a forgotten `using` leaks nothing. The native side refcounts: a buffer a session or a
 * view still uses lives on until they end.
 */
const release = new FinalizationRegistry<() => void>((free) => free());

/** Every backend, in the native library's order (its device kind ids). */
export const backendKinds: readonly BackendKind[] = ["cpu", "metal", "cuda"];

/** A read-bandwidth measurement: the floor of a head call is weight bytes / `gbs`. */
export interface BandwidthResult {
  /** Bytes read per pass. */
  bytes: number;
  passes: number;
  /** GB/s (1e9 bytes) with all of the device's threads: the reference a head is compared against. */
  gbs: number;
  /** GB/s with one thread (a CPU's); null on a GPU, whose probe is one kernel over the whole device. */
  oneThreadGbs: number | null;
  threads: number;
  /** How it was measured, in words. */
  method: string;
}

export class MlxDevice implements Disposable {
  readonly kind: BackendKind;
  readonly registry: KernelRegistry;
  #closed = false;

  private constructor(readonly handle: bigint) {
    const info = new Uint32Array(3);
    this.info = nativeString((dst, capacity, len) => lib.lmh_device_info(handle, info, dst, capacity, len), "device info");
    this.kind = backendKinds[info[0]!]!;
    this.threads = info[1]!;
    this.hostVisible = info[2] === 1;
    this.registry = new KernelRegistry(this);
    release.register(this, () => lib.lmh_device_close(handle), this);
  }

  /** One line: the backend, its threads and vector width. */
  readonly info: string;
  /** Host threads the backend runs its work on. */
  readonly threads: number;
  /** Whether the host can address this device's buffers (then reads need no copy). */
  readonly hostVisible: boolean;

  static open(kind: BackendKind = "cpu"): MlxDevice {
    const index = backendKinds.indexOf(kind);
    if (index < 0) throw new LmheadError("invalid_argument", `unknown backend ${kind}; known: ${backendKinds.join(", ")}`);
    return new MlxDevice(handleOut((out) => lib.lmh_device_open(index, out), `open ${kind} device`));
  }

  /** A zeroed buffer of `bytes` (> 0). */
  allocBuffer(bytes: number): MlxBuffer {
    checkSize(bytes, "buffer size");
    return new MlxBuffer(handleOut((out) => lib.lmh_buffer_alloc(this.handle, bytes, out), "alloc buffer"), bytes, this);
  }

  /**
   * Wraps host memory (e.g. a Bun.mmap mapping) without copying; the buffer keeps `memory`
   * alive. Its ArrayBuffer must not be transferred while the buffer lives (a SharedArrayBuffer
   * cannot be).
   */
  wrapHost(memory: Uint8Array): MlxBuffer {
    expectTyped(memory, "Uint8Array", "wrap host memory");
    return new MlxBuffer(
      handleOut((out) => lib.lmh_buffer_wrap(this.handle, memory, memory.byteLength, out), "wrap host memory"),
      memory.byteLength,
      this,
      memory,
    );
  }

  /**
   * Pins host memory for this device's copies, so that reading a buffer into it runs at the
   * bus's rate (CUDA page-locks it); where the device addresses host memory itself (the CPU,
   * Metal) the pin does nothing. Only a SharedArrayBuffer's memory is taken: an ArrayBuffer
   * could be transferred away while the device still holds it locked.
   */
  pinHost(memory: Uint8Array): HostPin {
    expectTyped(memory, "Uint8Array", "pin host memory");
    if (!(memory.buffer instanceof SharedArrayBuffer)) throw new LmheadError("invalid_argument", "pin host memory: it must be a SharedArrayBuffer's (an ArrayBuffer can be transferred away)");
    if (memory.byteLength === 0) throw new LmheadError("invalid_argument", "pin host memory: it is empty");
    return new HostPin(handleOut((out) => lib.lmh_host_pin(this.handle, memory, memory.byteLength, out), "pin host memory"), memory);
  }

  /**
   * This machine's f32 fma rate (fmas per second, every thread of the device): the floor of a
   * head call at large N, where rows·vocab·hidden fmas in the canonical order bound it.
   */
  fmaRate(passes = 5): number {
    checkCount(passes, "probe passes");
    const out = new Float64Array(1);
    check(lib.lmh_device_fma_rate(this.handle, passes, out), "fma rate");
    return out[0]!;
  }

  /** The probe buffer sizes readBandwidth accepts (the native probe's bounds), and its default. */
  static readonly probeBytes = { min: 2 ** 24, max: 2 ** 34, default: 512 * 2 ** 20 } as const;

  /**
   * This machine's read bandwidth, measured in the same process as the figures it scales:
   * the median of `passes` reads of `bytes` (default 512 MiB, 16× a 32 MiB L3) on the device's
   * own threads (a GPU's whole grid) with wide loads, as the head reads, and on a CPU with
   * one thread.
   */
  readBandwidth(opts: { bytes?: number; passes?: number } = {}): BandwidthResult {
    const { min, max } = MlxDevice.probeBytes;
    const bytes = opts.bytes ?? MlxDevice.probeBytes.default;
    const passes = opts.passes ?? 5;
    if (!Number.isSafeInteger(bytes) || bytes < min || bytes > max) throw new LmheadError("out_of_bounds", `bandwidth probe of ${bytes} bytes outside [${min}, ${max}]`);
    checkCount(passes, "probe passes");
    const out = new Float64Array(2);
    check(lib.lmh_device_read_bandwidth(this.handle, bytes, passes, out), "read bandwidth");
    return {
      bytes,
      passes,
      gbs: out[0]! / 1e9,
      oneThreadGbs: this.kind === "cpu" ? out[1]! / 1e9 : null,
      threads: this.threads,
      method: `native probe: ${Math.round(bytes / 2 ** 20)} MiB read with wide vector loads ${this.kind === "cpu" ? `on the device's ${this.threads} threads, several interleaved streams each` : "by a kernel over the whole GPU"}, median of ${passes}`,
    };
  }

  close(): void {
    if (this.#closed) throw new LmheadError("bad_handle", "device already closed");
    check(lib.lmh_device_close(this.handle), "close device");
    this.#closed = true;
    release.unregister(this);
  }

  [Symbol.dispose](): void {
    if (!this.#closed) this.close();
  }
}

/** The device's kernel cache: kernels resolve (on a GPU: compile) on first use. */
export class KernelRegistry {
  constructor(readonly device: MlxDevice) {}

  /** Names of the kernels resolved so far, e.g. "matvec_Q6_K_f32". */
  kernels(): string[] {
    const text = nativeString((dst, capacity, len) => lib.lmh_registry_list(this.device.handle, dst, capacity, len), "list kernels");
    return text.split("\n").filter((name) => name.length > 0);
  }
}

/** A pin's memory stays reachable until the pin is released, so it is never freed while locked. */
const pins = new FinalizationRegistry<{ handle: bigint; memory: Uint8Array }>(({ handle }) => lib.lmh_host_unpin(handle));

/** Host memory pinned for a device's copies (MlxDevice.pinHost); it keeps the memory alive. */
export class HostPin implements Disposable {
  #pinned = true;

  /** @internal Created by MlxDevice.pinHost. */
  constructor(
    readonly handle: bigint,
    readonly memory: Uint8Array,
  ) {
    pins.register(this, { handle, memory }, this);
  }

  unpin(): void {
    if (!this.#pinned) throw new LmheadError("bad_handle", "host memory already unpinned");
    check(lib.lmh_host_unpin(this.handle), "unpin host memory");
    this.#pinned = false;
    pins.unregister(this);
  }

  [Symbol.dispose](): void {
    if (this.#pinned) this.unpin();
  }
}

/** Native views that keep the memory of buffers whose lent bytes were transferred away alive for good. */
const keptForever: bigint[] = [];

export class MlxBuffer implements Disposable {
  #freed = false;
  /** withHostBytes callbacks running: the buffer cannot be freed under them. */
  #lent = 0;

  /**
   * @internal Created by MlxDevice, MlxBuffer.view or a model file. `owner` keeps borrowed
   * memory or a parent alive; `readOnly` marks a buffer over a model file's read-only pages.
   */
  constructor(
    readonly handle: bigint,
    readonly bytes: number,
    readonly device: MlxDevice,
    private readonly owner?: Uint8Array | MlxBuffer,
    /** Over a model file's read-only pages: never written, and lent to the host as a copy. */
    readonly readOnly = false,
  ) {
    release.register(this, () => lib.lmh_buffer_free(handle), this);
  }

  /** A zero-copy window [offsetBytes, offsetBytes + bytes) of this buffer. */
  view(offsetBytes: number, bytes: number): MlxBuffer {
    checkSize(bytes, "view size");
    checkOffset(offsetBytes);
    return new MlxBuffer(handleOut((out) => lib.lmh_buffer_view(this.handle, offsetBytes, bytes, out), "view buffer"), bytes, this.device, this, this.readOnly);
  }

  /** Copies all of `data` (a typed array or DataView) into the buffer at offsetBytes. */
  write(data: ArrayBufferView, offsetBytes = 0): void {
    const bytes = bytesOf(data, "write buffer: data");
    checkOffset(offsetBytes);
    check(lib.lmh_buffer_write(this.handle, offsetBytes, bytes.byteLength === 0 ? null : bytes, bytes.byteLength), "write buffer");
  }

  /** Copies `dst.byteLength` bytes from offsetBytes into `dst` (a typed array or DataView). */
  readInto(dst: ArrayBufferView, offsetBytes = 0): void {
    const bytes = bytesOf(dst, "read buffer: destination");
    checkOffset(offsetBytes);
    check(lib.lmh_buffer_read(this.handle, offsetBytes, bytes.byteLength === 0 ? null : bytes, bytes.byteLength), "read buffer");
  }

  /** Copies `bytes` bytes from offsetBytes into a new array. */
  read(offsetBytes = 0, bytes = this.bytes - offsetBytes): Uint8Array<ArrayBuffer> {
    checkOffset(offsetBytes);
    checkOffset(bytes);
    // Checked here too, so that a bad size never becomes a huge host allocation.
    if (offsetBytes + bytes > this.bytes) {
      throw new LmheadError("out_of_bounds", `read buffer: range [${offsetBytes}, ${offsetBytes + bytes}) past the buffer's ${this.bytes} bytes`);
    }
    const out = new Uint8Array(bytes);
    this.readInto(out, offsetBytes);
    return out;
  }

  /** Reads `count` f32 values starting at value `first`. */
  readF32(first = 0, count = Math.floor(this.bytes / 4) - first): Float32Array {
    const bytes = this.read(first * 4, count * 4);
    return new Float32Array(bytes.buffer, 0, count);
  }

  /**
   * Lends the buffer's memory to `fn`, zero-copy (host-visible devices only), and returns what
   * fn returns. The buffer cannot be freed during fn, and the bytes are detached when fn
   * returns, so a reference kept past it reads as empty, never as freed memory. Transferring
   * their ArrayBuffer out of fn is an error that leaves the buffer's memory allocated for good.
   * Do not use them while a session that uses the buffer is unfinished. A buffer over a model
   * file (`readOnly`) lends a copy: its pages are read-only, and a write there would end the process.
   */
  withHostBytes<T>(fn: (bytes: Uint8Array<ArrayBuffer>) => T): T {
    if (this.readOnly) return fn(this.read());
    const address = new BigUint64Array(1);
    check(lib.lmh_buffer_host_ptr(this.handle, address), "host pointer");
    const lent = toArrayBuffer(Number(address[0]), 0, this.bytes);
    this.#lent++;
    try {
      return fn(new Uint8Array(lent));
    } finally {
      this.#lent--;
      if (lent.detached) this.#keepForever();
      else lent.transfer(0);
    }
  }

  #keepForever(): never {
    keptForever.push(handleOut((out) => lib.lmh_buffer_view(this.handle, 0, this.bytes, out), "keep buffer"));
    throw new LmheadError("invalid_argument", `withHostBytes: the lent bytes were transferred out of the callback; the buffer's ${this.bytes} bytes stay allocated for the life of the process so that they remain valid`);
  }

  free(): void {
    if (this.#lent > 0) throw new LmheadError("busy", "free buffer: its bytes are lent to a withHostBytes callback");
    check(lib.lmh_buffer_free(this.handle), "free buffer");
    this.#freed = true;
    release.unregister(this);
  }

  [Symbol.dispose](): void {
    if (!this.#freed) this.free();
  }
}

/**
 * One command list (mlx-native's GraphSession). Encode calls declare the buffers they
 * read and write; the tracker emits a barrier on RAW/WAR/WAW conflicts. `finish` runs
 * the work and waits; the buffers it used stay alive until then.
 */
export class GraphSession implements Disposable {
  #open = true;
  /** Keeps every buffer the recorded work touches reachable until finish. */
  readonly #used = new Set<MlxBuffer>();

  private constructor(
    readonly handle: bigint,
    readonly device: MlxDevice,
  ) {
    release.register(this, () => lib.lmh_session_abort(handle), this);
  }

  static begin(device: MlxDevice): GraphSession {
    return new GraphSession(handleOut((out) => lib.lmh_session_begin(device.handle, out), "session begin"), device);
  }

  /** Declares reads and writes of work encoded outside this session's calls. */
  barrierBetween(reads: readonly MlxBuffer[], writes: readonly MlxBuffer[]): void {
    const r = BigUint64Array.from(reads.map((b) => b.handle));
    const w = BigUint64Array.from(writes.map((b) => b.handle));
    check(lib.lmh_session_barrier_between(this.handle, r.length ? r : null, r.length, w.length ? w : null, w.length), "barrier_between");
    for (const b of [...reads, ...writes]) this.#used.add(b);
  }

  /** output[r] = (input[r]·rsqrt(mean(input[r]²) + eps))·weight, rows × hidden f32. */
  rmsNorm(input: MlxBuffer, weight: MlxBuffer, output: MlxBuffer, rows: number, hidden: number, eps: number): void {
    checkCount(rows, "rows");
    checkCount(hidden, "hidden");
    check(lib.lmh_session_rms_norm(this.handle, input.handle, weight.handle, output.handle, rows, hidden, eps), "rms_norm");
    this.#keep(input, weight, output);
  }

  /** output[r, j] = Σ_i input[r, i]·W[j, i], W = vocab rows of hidden values of ggml type typeId. */
  matvec(input: MlxBuffer, weight: MlxBuffer, typeId: number, output: MlxBuffer, rows: number, hidden: number, vocab: number): void {
    checkCount(rows, "rows");
    checkCount(hidden, "hidden");
    checkCount(vocab, "vocab");
    checkCount(typeId, "type id");
    check(lib.lmh_session_matvec(this.handle, input.handle, weight.handle, typeId, output.handle, rows, hidden, vocab), "matvec");
    this.#keep(input, weight, output);
  }

  /** data[i] = tanh(data[i]/cap)·cap for the first `count` values, in place. */
  softcap(data: MlxBuffer, count: number, cap: number): void {
    checkSize(count, "softcap count");
    check(lib.lmh_session_softcap(this.handle, data.handle, count, cap), "softcap");
    this.#keep(data);
  }

  /** counts[r] = NaN and ±Inf values in row r of data (rows × rowValues f32); counts is rows u32. */
  countNonFinite(data: MlxBuffer, counts: MlxBuffer, rows: number, rowValues: number): void {
    checkCount(rows, "rows");
    checkCount(rowValues, "row values");
    check(lib.lmh_session_count_non_finite(this.handle, data.handle, counts.handle, rows, rowValues), "count_non_finite");
    this.#keep(data, counts);
  }

  /**
   * Runs the recorded work and waits for it: the only host sync point. Returns the device's
   * own time for the work in ns where it keeps one (a GPU's start to end), else null (the CPU,
   * whose time is the wait itself).
   */
  finish(): number | null {
    const deviceNs = new BigUint64Array(1);
    this.#end(lib.lmh_session_finish_timed(this.handle, deviceNs), "session finish");
    return deviceNs[0] === 2n ** 64n - 1n ? null : Number(deviceNs[0]);
  }

  /** Drops the recorded work. */
  abort(): void {
    this.#end(lib.lmh_session_abort(this.handle), "session abort");
  }

  [Symbol.dispose](): void {
    if (this.#open) this.abort();
  }

  #keep(...buffers: MlxBuffer[]): void {
    for (const b of buffers) this.#used.add(b);
  }

  /** The native session is closed by either call, whatever its status. */
  #end(status: number, what: string): void {
    this.#open = false;
    release.unregister(this);
    this.#used.clear();
    check(status, what);
  }
}

/** Process-wide counters (mlx-native's barrier_count / dispatch_count). */
export function counters(): { barriers: number; dispatches: number } {
  const out = new BigUint64Array(2);
  check(lib.lmh_counters(out), "counters");
  return { barriers: Number(out[0]), dispatches: Number(out[1]) };
}

/** Prints every dispatch and barrier to stderr as it is encoded. */
export function setEncodeTrace(on: boolean): void {
  lib.lmh_set_encode_trace(on ? 1 : 0);
}

/** The bytes of a typed array or DataView, for a native copy. */
function bytesOf(view: ArrayBufferView, what: string): Uint8Array {
  expectView(view, what);
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

function checkSize(bytes: number, what: string): void {
  if (!Number.isSafeInteger(bytes) || bytes <= 0) throw new LmheadError("invalid_argument", `${what} ${bytes} is not a positive integer`);
}

function checkOffset(offset: number): void {
  if (!Number.isSafeInteger(offset) || offset < 0) throw new LmheadError("invalid_argument", `offset ${offset} is not a non-negative integer`);
}

function checkCount(value: number, what: string): void {
  if (!Number.isInteger(value) || value < 0 || value > 0xffffffff) throw new LmheadError("out_of_bounds", `${what} ${value} is not a u32`);
}
