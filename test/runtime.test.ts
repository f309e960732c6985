/** The runtime under the head: registry, trace, host phases, the C ABI under random misuse, lent host bytes. */
import { afterAll, describe, expect, test } from "bun:test";
import { lib } from "../src/native.ts";
import { GraphSession, LmheadError, type MlxBuffer, MlxDevice, hostPhases } from "../src/index.ts";
import { f32Head, randomF32, rng } from "./support.ts";

const device = MlxDevice.open("cpu");
afterAll(() => device.close());

test("the kernel registry resolves each kernel on first use", () => {
  using fresh = MlxDevice.open("cpu");
  expect(fresh.registry.kernels()).toEqual([]);
  using head = f32Head(fresh, 256, 10, 1);
  head.weights.lmHeadBatched(randomF32(256, rng(1)), 1);
  expect(fresh.registry.kernels().sort()).toEqual(["count_non_finite_f32", "matvec_F32_f32", "rms_norm_f32", "softcap_f32"]);
});

test("the encode trace prints every dispatch and barrier to stderr", async () => {
  const script = `
    import { MlxDevice, setEncodeTrace } from "./src/index.ts";
    import { f32Head } from "./test/support.ts";
    const device = MlxDevice.open("cpu");
    const head = f32Head(device, 256, 10, 1);
    setEncodeTrace(true);
    head.weights.lmHeadBatched(new Float32Array(512).fill(1), 2);
    setEncodeTrace(false);
    head.weights.lmHeadBatched(new Float32Array(256).fill(1), 1);`;
  const child = Bun.spawn([process.execPath, "-e", script], { cwd: `${import.meta.dir}/..`, stderr: "pipe", stdout: "pipe" });
  const stderr = await new Response(child.stderr).text();
  expect(await child.exited).toBe(0);
  expect(stderr.trim().split("\n")).toEqual([
    "[lmhead encode] rms_norm rows=2 hidden=256 eps=1e-6",
    "[lmhead encode] barrier",
    "[lmhead encode] matvec_F32 rows=2 hidden=256 vocab=10",
    "[lmhead encode] barrier",
    "[lmhead encode] softcap values=20 cap=3e1",
    "[lmhead encode] barrier",
    "[lmhead encode] count_non_finite rows=2 row_values=10",
  ]);
});

test("host phase timers are off by default and accumulate head wait, readback and check when on", () => {
  using head = f32Head(device, 256, 10, 2);
  hostPhases.reset();
  head.weights.lmHeadBatched(randomF32(256, rng(2)), 1);
  expect(hostPhases.snapshot().headWait.calls).toBe(0);
  hostPhases.enabled = true;
  try {
    head.weights.lmHeadBatched(randomF32(512, rng(3)), 2);
    let phases = hostPhases.snapshot();
    expect(phases.headWait.calls).toBe(1);
    expect(phases.headReadback.calls).toBe(0); // the CPU lends its logits: nothing to copy
    expect(phases.headCheck.calls).toBe(1);
    expect(phases.headWait.totalNs).toBeGreaterThan(0);
    head.weights.lmHeadBatched(randomF32(512, rng(3)), 2, new Float32Array(20));
    phases = hostPhases.snapshot();
    expect(phases.headReadback.calls).toBe(1); // into the caller's array
    expect(phases.headCheck.calls).toBe(2);
  } finally {
    hostPhases.enabled = false;
    hostPhases.reset();
  }
});

test("the C ABI under random misuse returns errors and never faults", () => {
  const random = rng(42);
  const pick = <T,>(xs: T[]): T => xs[Math.floor(random() * xs.length)]!;
  using real = device.allocBuffer(4096);
  const freed = device.allocBuffer(64);
  freed.free();
  const closed = MlxDevice.open("cpu");
  closed.close();
  const handles = [real.handle, freed.handle, device.handle, closed.handle, 0n, 1n, 2n ** 63n, real.handle ^ (1n << 32n), real.handle + 1n];
  const sizes = [0, 1, 3, 4, 4095, 4096, 4097, 2 ** 31, 2 ** 32 + 4, 2 ** 53 - 1];
  const memory = new Uint8Array(8192);
  let errors = 0;
  for (let i = 0; i < 4000; i++) {
    const h = pick(handles);
    const a = pick(sizes);
    const b = pick(sizes);
    // Host pointers are always valid for the sizes the wrapper would pass; the native side must
    // refuse any range outside the buffer before copying.
    const status = pick([
      () => lib.lmh_buffer_write(h, a, memory, Math.min(b, memory.length)),
      () => lib.lmh_buffer_read(h, a, memory, Math.min(b, memory.length)),
      () => lib.lmh_buffer_view(h, a, b, new BigUint64Array(1)),
      () => lib.lmh_buffer_free(pick([freed.handle, closed.handle, 0n, 2n ** 63n])),
      () => lib.lmh_buffer_size(h, new BigUint64Array(1)),
      () => lib.lmh_buffer_host_ptr(h, null),
      () => lib.lmh_session_begin(h, new BigUint64Array(1)),
      () => lib.lmh_session_rms_norm(h, h, h, h, a % 2 ** 32, b % 2 ** 32, random() * 10 - 5),
      () => lib.lmh_session_matvec(h, h, h, Math.floor(random() * 40), h, a % 2 ** 32, b % 2 ** 32, a % 2 ** 32),
      () => lib.lmh_session_softcap(h, h, a, random() * 60 - 30),
      () => lib.lmh_session_finish(h),
      () => lib.lmh_device_close(pick([closed.handle, real.handle, 0n])),
      () => lib.lmh_dequantize(Math.floor(random() * 40), memory, Math.min(a, memory.length), new Float32Array(64), b % 65),
      () => lib.lmh_head_admit(Math.floor(random() * 40), a, b, a, 1),
      () => {
        // Shapes within the 4096 bytes, or refused by their own numbers (none, too long, overflowing).
        const [rows, rowValues] = pick([[pick([0, 1, 2]), a % 513], [1, 2 ** 32], [2 ** 53 - 1, 2 ** 53 - 1], [2 ** 32, 2 ** 32]]);
        return lib.lmh_argmax_rows(pick([memory.subarray(0, 4096), null]), rows!, rowValues!, pick([new Uint32Array(2), null]));
      },
      () => {
        // A pin the checks let through is a no-op on the CPU: unpin it so the table stays clear.
        const out = new BigUint64Array(1);
        const pinned = lib.lmh_host_pin(h, pick([memory, null]), pick([a, 2 ** 40 + 1, 2 ** 64 - 1]), pick([out, null]));
        if (pinned === 0) expect(lib.lmh_host_unpin(out[0]!)).toBe(0);
        return pinned;
      },
      () => lib.lmh_host_unpin(h),
      () => {
        // Rows within the 8192 bytes and k's within kMax, or refused by their own numbers (none,
        // kMax of 0 or past a row, a k past kMax, too long, overflowing).
        const [rows, rowValues] = pick([[pick([0, 1, 2]), a % 1025], [1, 2 ** 32], [2 ** 53 - 1, 2 ** 53 - 1]]);
        const kMax = pick([0, 1, b % 1025, 2 ** 53 - 1]);
        const ks = new Uint32Array([pick([0, 1, kMax % 2 ** 32, 2 ** 32 - 1]), pick([0, 1])]);
        return lib.lmh_top_k_rows(pick([memory, null]), rows!, rowValues!, pick([ks, null]), kMax, pick([new Uint32Array(2048), null]), pick([new Float32Array(2048), null]));
      },
    ])();
    if (status !== 0) errors++;
  }
  expect(errors).toBeGreaterThan(3000);
  // The library still works, and the real buffer kept its contents.
  real.write(new Float32Array([1, 2, 3]));
  expect(Array.from(real.readF32(0, 3))).toEqual([1, 2, 3]);
  expect(() => GraphSession.begin(closed)).toThrow(LmheadError);
});

test("buffers dropped without free are released when collected", async () => {
  // More than the native table's 65536 live buffer handles: without release on collection,
  // an allocation would fail with "too many live buffer handles".
  for (let round = 0; round < 8; round++) {
    for (let i = 0; i < 10_000; i++) device.allocBuffer(4);
    Bun.gc(true);
    await Bun.sleep(1); // finalizers run after the collection, from the event loop
  }
  using last = device.allocBuffer(4);
  expect(last.bytes).toBe(4);
});

describe("host bytes are lent inside a callback and never outlive the buffer", () => {
  test("the bytes are the buffer's memory during the callback and empty after it", () => {
    const b = device.allocBuffer(16);
    let kept = new Uint8Array(0);
    const sum = b.withHostBytes((bytes) => {
      bytes.set([1, 2, 3, 4], 4); // zero-copy: a write here is a write to the buffer
      kept = bytes;
      return bytes.reduce((a, v) => a + v, 0);
    });
    expect(sum).toBe(10);
    expect(Array.from(b.read(4, 4))).toEqual([1, 2, 3, 4]);
    expect(kept.length).toBe(0); // detached: reading past the callback gives nothing, not memory
    b.free();
    expect(kept[0]).toBeUndefined(); // ...even after the buffer is gone
  });

  test("the buffer cannot be freed while its bytes are lent", () => {
    const b = device.allocBuffer(16);
    expect(() => b.withHostBytes(() => b.free())).toThrow("free buffer: its bytes are lent to a withHostBytes callback");
    b.free(); // and can be after
  });

  test("bytes transferred out of the callback stay valid: the buffer's memory is kept for good", () => {
    const b = device.allocBuffer(16);
    let moved = new ArrayBuffer(0);
    expect(() =>
      b.withHostBytes((bytes) => {
        bytes.fill(9);
        moved = bytes.buffer.transfer();
      }),
    ).toThrow("the lent bytes were transferred out of the callback");
    b.free();
    Bun.gc(true);
    expect(Array.from(new Uint8Array(moved))).toEqual(new Array(16).fill(9));
  });
});

describe("pinned host memory (a GPU's readback target)", () => {
  test("is a SharedArrayBuffer's memory, pinned until unpinned once", () => {
    const memory = new Uint8Array(new SharedArrayBuffer(4096));
    const pin = device.pinHost(memory);
    expect(pin.memory).toBe(memory);
    pin.unpin();
    expect(() => pin.unpin()).toThrow("host memory already unpinned");
    pin[Symbol.dispose](); // a no-op once unpinned
    expect(lib.lmh_host_unpin(pin.handle)).not.toBe(0); // the handle is gone
  });

  test("refuses memory that could be freed or moved while pinned, and empty memory", () => {
    expect(() => device.pinHost(new Uint8Array(16))).toThrow("pin host memory: it must be a SharedArrayBuffer's");
    expect(() => device.pinHost(new Uint8Array(new SharedArrayBuffer(0)))).toThrow("pin host memory: it is empty");
    expect(() => device.pinHost(new Float32Array(new SharedArrayBuffer(16)) as unknown as Uint8Array)).toThrow(LmheadError);
  });

  test("a pin keeps its device open until it is unpinned", () => {
    const other = MlxDevice.open("cpu");
    const pin = other.pinHost(new Uint8Array(new SharedArrayBuffer(64)));
    other.close();
    expect(() => pin.unpin()).not.toThrow();
  });

  test("pins dropped without unpin are released when collected", async () => {
    // More than the native table's 1024 live pins: without release on collection, a pin
    // would fail with "too many live pin handles".
    for (let round = 0; round < 4; round++) {
      for (let i = 0; i < 600; i++) device.pinHost(new Uint8Array(new SharedArrayBuffer(64)));
      Bun.gc(true);
      await Bun.sleep(1); // finalizers run after the collection, from the event loop
    }
    using last = device.pinHost(new Uint8Array(new SharedArrayBuffer(64)));
    expect(last.memory.byteLength).toBe(64);
  });
});

test("the device's non-finite count is exact per row, whatever the neighbours", () => {
  const rowValues = 100;
  const values = new Float32Array(4 * rowValues).fill(1.5);
  values[3] = values[4] = NaN; // row 0: two in one vector
  for (let i = 0; i < 37; i++) values[rowValues + 2 * i] = NaN; // row 1: 37, spread
  values[2 * rowValues + 99] = Infinity; // row 2: the scalar tail, and one in the body
  values[2 * rowValues + 10] = -Infinity;
  using data = device.allocBuffer(values.byteLength);
  using counts = device.allocBuffer(4 * 4);
  data.write(values);
  const session = GraphSession.begin(device);
  session.countNonFinite(data, counts, 4, rowValues);
  session.finish();
  expect(Array.from(new Uint32Array(counts.read().buffer))).toEqual([2, 37, 2, 0]);
});

test("the fma-rate probe measures a positive rate and refuses a bad pass count", () => {
  const rate = device.fmaRate(1);
  expect(rate).toBeGreaterThan(1e8); // any CPU of this century does more than 0.1 G fma/s
  expect(() => device.fmaRate(0)).toThrow(LmheadError);
  expect(() => device.fmaRate(101)).toThrow(/fma probe passes 101 outside \[1, 100\]/);
});

test("a CUDA device opens where the driver and NVRTC are, and otherwise says which is missing", async () => {
  // Without a GPU the error names the driver library; LMHEAD_LIBCUDA points the search at a
  // path that cannot exist, so this holds on a GPU machine too.
  const script = `
    import { LmheadError, MlxDevice } from "./src/index.ts";
    try { MlxDevice.open("cuda"); console.log("opened"); }
    catch (e) { console.log(e instanceof LmheadError ? e.code + ": " + e.message : "other: " + e); }`;
  const child = Bun.spawn([process.execPath, "-e", script], {
    cwd: `${import.meta.dir}/..`, stdout: "pipe", env: { ...process.env, LMHEAD_LIBCUDA: "/nonexistent/libcuda.so.1" },
  });
  const out = await new Response(child.stdout).text();
  expect(await child.exited).toBe(0);
  expect(out).toContain("unsupported: open cuda device: the CUDA backend needs the NVIDIA driver library /nonexistent/libcuda.so.1, which could not be loaded");
  let cuda: MlxDevice | undefined;
  try {
    cuda = MlxDevice.open("cuda");
  } catch (e) {
    expect(e).toBeInstanceOf(LmheadError);
    expect((e as LmheadError).code).toBe("unsupported");
    expect((e as LmheadError).message).toMatch(/libcuda|NVRTC|no GPU/);
  }
  if (cuda) {
    expect(cuda.info).toStartWith("cuda: ");
    expect(cuda.hostVisible).toBe(false);
    cuda.close();
  }
});

test("finish reports the device's own time where it keeps one; the CPU keeps none", () => {
  using data = device.allocBuffer(4 * 4);
  using counts = device.allocBuffer(4);
  const session = GraphSession.begin(device);
  session.countNonFinite(data, counts, 1, 4);
  expect(session.finish()).toBeNull();
  // A null output pointer is refused before anything runs, and the session stays open.
  const open = GraphSession.begin(device);
  expect(lib.lmh_session_finish_timed(open.handle, null)).not.toBe(0);
  expect(open.finish()).toBeNull();
});

test("a session refuses operands the GPU kernels could not load, naming which and why, and takes the rest", () => {
  using big = device.allocBuffer(4096);
  using norm = device.allocBuffer(8 * 4);
  norm.write(new Float32Array(8).fill(1));
  using normed = device.allocBuffer(8 * 4);
  using logits = device.allocBuffer(4 * 4);
  const refused = (record: (s: GraphSession) => void, message: RegExp) => {
    const s = GraphSession.begin(device);
    try {
      expect(() => record(s)).toThrow(message);
    } finally {
      s.abort();
    }
  };
  // Rows of a multiple of 4 values are read with 16-byte loads; weights with aligned 16/32-bit ones.
  refused((s) => s.rmsNorm(big.view(4, 8 * 4), norm, normed, 1, 8, 1e-6), /rms_norm input is not 16-byte aligned/);
  refused((s) => s.matvec(big.view(4, 8 * 4), big.view(0, 4 * 8 * 4), 0, logits, 1, 8, 4), /matvec input is not 16-byte aligned/);
  refused((s) => s.matvec(normed, big.view(2, 4 * 8 * 4), 0, logits, 1, 8, 4), /matvec weights are not 4-byte aligned/);
  // F32 rows of 8 values (32 bytes) are read 16 bytes at a time.
  refused((s) => s.matvec(normed, big.view(4, 4 * 8 * 4), 0, logits, 1, 8, 4), /matvec weights are not 16-byte aligned/);

  // Rows of 5 values are read one value at a time: 4-byte aligned is enough, and the bytes are
  // those of an aligned copy.
  const x = randomF32(5, rng(7));
  const run = (input: MlxBuffer) => {
    using w = device.allocBuffer(5 * 4);
    w.write(new Float32Array(5).fill(0.5));
    using y = device.allocBuffer(5 * 4);
    const s = GraphSession.begin(device);
    s.rmsNorm(input, w, y, 1, 5, 1e-6);
    s.finish();
    return Array.from(new Uint32Array(y.read().buffer));
  };
  using aligned = device.allocBuffer(5 * 4);
  aligned.write(x);
  const shifted = big.view(4, 5 * 4);
  shifted.write(x);
  expect(run(shifted)).toEqual(run(aligned));
  shifted.free();
});
