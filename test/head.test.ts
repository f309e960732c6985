import { afterAll, describe, expect, test } from "bun:test";
import { BatchedHeadOut, LmheadError, MlxBuffer, MlxDevice, NonFiniteRowsError, counters, dequantize } from "../src/index.ts";
import { GraphSession } from "../src/runtime.ts";
import { bits, f32Head, opaqueDevice, randomF32, referenceHead, rng } from "./support.ts";

const device = MlxDevice.open("cpu");

// A partial last chunk (hidden % 256 != 0) and a vocab that is no multiple of the task size.
const hidden = 256 * 3 + 64;
const vocab = 1001;
const head = f32Head(device, hidden, vocab, 7);
afterAll(() => {
  head[Symbol.dispose]();
  device.close();
});

function rows(n: number, seed: number): Float32Array {
  return randomF32(n * hidden, rng(seed), 3);
}

describe("row identity", () => {
  for (const n of [1, 2, 3, 5, 8, 9, 16, 33, 64]) {
    test(`every row of an N=${n} call equals its 1-row call bit for bit, also permuted`, () => {
      const hiddenRows = rows(n, 100 + n);
      // Into caller-owned arrays: logits lent by a call are overwritten by the next.
      const batched = head.weights.lmHeadBatched(hiddenRows, n, new Float32Array(n * vocab));
      const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => ((a * 7919 + n) % 101) - ((b * 7919 + n) % 101));
      const permuted = new Float32Array(n * hidden);
      order.forEach((src, dst) => permuted.set(hiddenRows.subarray(src * hidden, (src + 1) * hidden), dst * hidden));
      const shuffled = head.weights.lmHeadBatched(permuted, n, new Float32Array(n * vocab));
      for (let r = 0; r < n; r++) {
        const single = head.weights.lmHeadBatched(hiddenRows.subarray(r * hidden, (r + 1) * hidden), 1);
        expect(bits(batched.row(r))).toEqual(bits(single.row(0)));
        expect(bits(shuffled.row(order.indexOf(r)))).toEqual(bits(single.row(0)));
      }
    });
  }
});

test("every row is softcapped, not only row 0 (docs/NUMERICS.md, Softcap: all n·vocab values)", () => {
  const n = 6;
  const hiddenRows = rows(n, 5);
  // Large weights, so that many raw logits lie beyond the cap.
  using cappedHead = f32Head(device, hidden, vocab, 8, 30, 2);
  using plainHead = f32Head(device, hidden, vocab, 8, null, 2);
  const capped = cappedHead.weights.lmHeadBatched(hiddenRows, n, new Float32Array(n * vocab));
  const plain = plainHead.weights.lmHeadBatched(hiddenRows, n);
  let beyondCap = 0;
  for (let r = 1; r < n; r++) {
    const single = cappedHead.weights.lmHeadBatched(hiddenRows.subarray(r * hidden, (r + 1) * hidden), 1);
    expect(bits(capped.row(r))).toEqual(bits(single.row(0)));
    for (let j = 0; j < vocab; j++) {
      const v = capped.row(r)[j]!;
      const raw = plain.row(r)[j]!;
      expect(Math.abs(v)).toBeLessThanOrEqual(30);
      expect(Math.abs(v - Math.tanh(raw / 30) * 30)).toBeLessThan(1e-4);
      if (Math.abs(raw) > 30) beyondCap++;
    }
  }
  expect(beyondCap).toBeGreaterThan(0); // the data reaches past the cap, so the cap is exercised
});

test("logits are within the stated tolerance of an f64 reference", () => {
  const n = 4;
  const hiddenRows = rows(n, 11);
  const out = head.weights.lmHeadBatched(hiddenRows, n);
  const ref = referenceHead(head, hiddenRows, n);
  // f32 accumulation of `hidden` products: |error| <= 2·hidden·2^-24·Σ|y·w| (+ the norm's few ulps).
  for (let i = 0; i < n * vocab; i++) {
    const bound = 2 * hidden * 2 ** -24 * ref.magnitude[i]! + 1e-6;
    expect(Math.abs(out.logits[i]! - ref.logits[i]!)).toBeLessThanOrEqual(bound);
  }
});

test("n = 0 gives an empty result", () => {
  const out = head.weights.lmHeadBatched(new Float32Array(0), 0);
  expect(out.rows).toBe(0);
  expect(out.logits.length).toBe(0);
});

describe("logits: lent, or into the caller's array", () => {
  test("without `out` the CPU lends its logits: zero-copy, and stale (an error) after the next call", () => {
    const x = rows(2, 21);
    const first = head.weights.lmHeadBatched(x, 2);
    const copy = first.logits.slice();
    const memory = first.logits.buffer;
    const second = head.weights.lmHeadBatched(rows(2, 22), 2);
    expect(second.logits.buffer).toBe(memory); // no copy: the same memory, rewritten
    expect(() => first.logits).toThrow(LmheadError);
    expect(() => first.row(0)).toThrow(/stale|overwrote/);
    expect(bits(head.weights.lmHeadBatched(x, 2).logits)).toEqual(bits(copy)); // same rows, same bits, same memory
  });

  test("a device the host cannot see (a GPU) lends a readback array the weights keep: the same bits, stale after the next call", () => {
    using opaque = f32Head(opaqueDevice(device), hidden, vocab, 7); // the same head as `head`
    const x = rows(2, 21);
    const first = opaque.weights.lmHeadBatched(x, 2);
    expect(bits(first.logits)).toEqual(bits(head.weights.lmHeadBatched(x, 2).logits));
    const memory = first.logits.buffer;
    const second = opaque.weights.lmHeadBatched(rows(1, 22), 1);
    expect(second.logits.buffer).toBe(memory); // no allocation per call
    expect(() => first.row(0)).toThrow(/stale|overwrote/);
    const lent = bits(second.logits).slice();
    const kept = new Float32Array(vocab);
    expect(opaque.weights.lmHeadBatched(rows(1, 22), 1, kept).logits).toBe(kept); // caller-owned, as before
    expect(bits(kept)).toEqual(lent);
  });

  test("with `out` the logits are written there, whatever the kind of its buffer or its offset", () => {
    const x = rows(3, 23);
    const lent = head.weights.lmHeadBatched(x, 3).logits.slice();
    const shared = new Float32Array(new SharedArrayBuffer((3 * vocab + 5) * 4)).subarray(5);
    const out = head.weights.lmHeadBatched(x, 3, shared);
    expect(out.logits).toBe(shared);
    expect(bits(shared)).toEqual(bits(lent));
    head.weights.lmHeadBatched(rows(3, 24), 3);
    expect(bits(out.logits)).toEqual(bits(lent)); // caller-owned: never stale
    expect(() => head.weights.lmHeadBatched(x, 3, new Float32Array(3 * vocab - 1))).toThrow(`out len ${3 * vocab - 1} != n*vocab ${3 * vocab}`);
  });

  test("the scratch views are made once per row count, not per call", () => {
    using fresh = f32Head(device, hidden, vocab, 31);
    const pass = () => {
      for (const n of [3, 1, 2]) fresh.weights.lmHeadBatched(rows(n, n), n);
    };
    expect(viewsMadeDuring(pass)).toBe(4 * 3); // hidden, normed, logits and count views for n = 3, 1 and 2
    expect(viewsMadeDuring(() => [pass, pass, pass].forEach((p) => p()))).toBe(0);
  });
});

/** MlxBuffer.view calls during fn. */
function viewsMadeDuring(fn: () => void): number {
  const original = MlxBuffer.prototype.view;
  let made = 0;
  MlxBuffer.prototype.view = function (this: MlxBuffer, offsetBytes: number, bytes: number) {
    made++;
    return original.call(this, offsetBytes, bytes);
  };
  try {
    fn();
  } finally {
    MlxBuffer.prototype.view = original;
  }
  return made;
}

describe("non-finite rows", () => {
  test("a NaN or ±Inf hidden row throws NonFiniteRowsError naming every such row; the others are unharmed", () => {
    const n = 5;
    const x = rows(n, 25);
    const good = head.weights.lmHeadBatched(x, n, new Float32Array(n * vocab));
    x[1 * hidden + 7] = NaN;
    x[3 * hidden] = Infinity;
    const error = nonFiniteError(x, n);
    expect(error.rows).toEqual([1, 3]);
    expect(error.n).toBe(n);
    expect(error.message).toStartWith("Gemma batched output head: non-finite logits in rows 1, 3 of 5 (row 1: hidden value 7 is NaN)");
    expectKeptRows(x, [0, 2, 4], good);
  });
});

/** The NonFiniteRowsError an n-row call on x throws. */
function nonFiniteError(x: Float32Array, n: number): NonFiniteRowsError {
  try {
    head.weights.lmHeadBatched(x, n);
  } catch (e) {
    expect(e).toBeInstanceOf(NonFiniteRowsError);
    return e as NonFiniteRowsError;
  }
  throw new Error("no NonFiniteRowsError");
}

/** The rows `kept` of x, run again alone, give the bits they had in `good` (row identity). */
function expectKeptRows(x: Float32Array, kept: number[], good: BatchedHeadOut): void {
  const again = new Float32Array(kept.length * hidden);
  kept.forEach((r, i) => again.set(x.subarray(r * hidden, (r + 1) * hidden), i * hidden));
  const out = head.weights.lmHeadBatched(again, kept.length);
  kept.forEach((r, i) => expect(bits(out.row(i))).toEqual(bits(good.row(r))));
}

describe("rows that cannot be normalised", () => {
  test("a row whose sum of squares overflows f32 is a NonFiniteRowsError, never zero logits; the others keep their bits", () => {
    const n = 3;
    const x = rows(n, 26);
    const good = head.weights.lmHeadBatched(x, n, new Float32Array(n * vocab));
    // RMS 1e20: finite values whose squares overflow f32, so the norm's rsqrt would see +Inf.
    x.fill(1e20, 1 * hidden, 2 * hidden);
    const error = nonFiniteError(x, n);
    expect(error.rows).toEqual([1]);
    expect(error.message).toContain("row 1: its RMS is too large to normalise in f32");
    expectKeptRows(x, [0, 2], good);
  });
});

describe("barriers", () => {
  // hf2q's head emits 2 (norm→matmul, matmul→softcap); lmhead adds the device-side
  // non-finite count after the last kernel that writes the logits, so one more.
  test("lmHeadBatched emits 3 barriers with softcap and 2 without", () => {
    using plain = f32Head(device, hidden, vocab, 3, null);
    const before = counters();
    head.weights.lmHeadBatched(rows(3, 1), 3);
    const mid = counters();
    plain.weights.lmHeadBatched(rows(3, 1), 3);
    const after = counters();
    expect(mid.barriers - before.barriers).toBe(3);
    expect(mid.dispatches - before.dispatches).toBe(4);
    expect(after.barriers - mid.barriers).toBe(2);
    expect(after.dispatches - mid.dispatches).toBe(3);
  });

  test("encodeLmHeadInto after a write of the hidden buffer in the same session adds one", () => {
    const n = 2;
    using source = device.allocBuffer(n * hidden * 4);
    using hiddenBuf = device.allocBuffer(n * hidden * 4);
    source.write(rows(n, 9));
    const before = counters();
    const session = GraphSession.begin(device);
    session.rmsNorm(source, head.weights.finalNorm, hiddenBuf, n, hidden, 1e-6); // the "body" writes hidden
    const { logits, normed, nonFinite } = head.weights.encodeLmHeadInto(session, hiddenBuf, n);
    session.finish();
    expect(counters().barriers - before.barriers).toBe(4);
    // And the result is the head applied to what the session wrote, every row finite.
    const expected = head.weights.lmHeadBatched(hiddenBuf.readF32(), n);
    expect(bits(logits.readF32())).toEqual(bits(expected.logits));
    expect(Array.from(new Uint32Array(nonFinite.read().buffer))).toEqual([0, 0]);
    for (const b of [logits, normed, nonFinite]) b.free();
  });
});

describe("host payload", () => {
  test("BatchedHeadOut carries logits only", () => {
    const out = head.weights.lmHeadBatched(rows(2, 2), 2);
    expect(Object.keys(out).sort()).toEqual(["rows", "vocab"]);
    expect(out.logits).toBeInstanceOf(Float32Array);
    expect(out.logits.length).toBe(2 * vocab);
  });

  for (const bad of [NaN, Infinity, -Infinity]) {
    test(`fromLogits rejects ${bad}, naming the rows and the first bad value`, () => {
      const logits = new Float32Array(12).fill(0.5);
      logits[5] = bad;
      logits[11] = bad;
      let error: unknown;
      try {
        BatchedHeadOut.fromLogits(logits, 3, 4);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(NonFiniteRowsError);
      expect((error as NonFiniteRowsError).rows).toEqual([1, 2]);
      expect((error as NonFiniteRowsError).code).toBe("non_finite");
      expect((error as Error).message).toContain(`non-finite logits in rows 1, 2 of 3 (row 1: logit 1 is ${bad})`);
    });
  }
});

describe("bad input is a typed error and the process lives", () => {
  const code = (fn: () => unknown): string => {
    try {
      fn();
    } catch (e) {
      expect(e).toBeInstanceOf(LmheadError);
      return (e as LmheadError).code;
    }
    throw new Error("no error thrown");
  };

  test("hidden rows of any type but Float32Array are refused, naming the type", () => {
    const n = 2;
    const len = n * hidden;
    const bad: [unknown, string][] = [
      [Array.from({ length: len }, () => 1), `Array(${len})`],
      [{ length: len }, "Object"],
      [new Int32Array(len), `Int32Array(${len})`],
      [new Uint8Array(len), `Uint8Array(${len})`],
      [new Float64Array(len), `Float64Array(${len})`],
      [new DataView(new ArrayBuffer(len * 4)), `DataView(${len * 4})`],
      [null, "null"],
      [undefined, "undefined"],
    ];
    for (const [value, name] of bad) {
      const call = () => head.weights.lmHeadBatched(value as Float32Array, n);
      expect(code(call)).toBe("invalid_argument");
      expect(call).toThrow(`lm_head_batched: hidden_rows must be a Float32Array, got ${name}`);
    }
    expect(() => head.weights.lmHeadBatched(rows(n, 1), n, new Float64Array(n * vocab) as unknown as Float32Array)).toThrow(
      `lm_head_batched: out must be a Float32Array, got Float64Array(${n * vocab})`,
    );
  });

  test("a Float32Array at any offset, over any kind of buffer, is taken as it is", () => {
    const n = 2;
    const x = rows(n, 31);
    const want = head.weights.lmHeadBatched(x, n).logits.slice();
    const shared = new Float32Array(new SharedArrayBuffer((x.length + 3) * 4), 12, x.length);
    const offset = new Float32Array(x.length + 1).subarray(1);
    for (const view of [shared, offset]) {
      view.set(x);
      expect(bits(head.weights.lmHeadBatched(view, n).logits)).toEqual(bits(want));
    }
  });

  test("buffers, dequantize and BatchedHeadOut refuse what is not the typed array they take", () => {
    using b = device.allocBuffer(16);
    expect(() => b.write([1, 2, 3, 4] as unknown as Float32Array)).toThrow("write buffer: data must be a typed array or DataView, got Array(4)");
    expect(() => b.write(null as unknown as Float32Array)).toThrow("got null");
    expect(() => b.readInto({ length: 4 } as unknown as Float32Array)).toThrow("read buffer: destination must be a typed array or DataView, got Object");
    expect(() => device.wrapHost(new Float32Array(4) as unknown as Uint8Array)).toThrow("wrap host memory must be a Uint8Array, got Float32Array(4)");
    expect(() => dequantize(0, [0, 0, 0, 0] as unknown as Uint8Array)).toThrow("dequantize: bytes must be a Uint8Array, got Array(4)");
    expect(() => dequantize(0, new Uint8Array(8), new Int32Array(2) as unknown as Float32Array)).toThrow("dequantize: out must be a Float32Array, got Int32Array(2)");
    expect(() => BatchedHeadOut.fromLogits(new Uint32Array(4) as unknown as Float32Array, 1, 4)).toThrow("logits must be a Float32Array, got Uint32Array(4)");
    // A DataView is a view like any other.
    b.write(new DataView(new Float32Array([1, 2, 3, 4]).buffer));
    expect(Array.from(b.readF32())).toEqual([1, 2, 3, 4]);
  });

  test("wrong hidden length names both numbers", () => {
    expect(() => head.weights.lmHeadBatched(new Float32Array(hidden * 2 - 1), 2)).toThrow(
      `hidden_rows len ${hidden * 2 - 1} != n*hidden_size ${hidden * 2}`,
    );
  });

  test("n·vocab overflow is an error, not a truncation", () => {
    const n = 2 ** 45; // n·vocab·4 bytes is past 2^53
    const fake = { length: n * hidden } as unknown as Float32Array;
    expect(code(() => head.weights.lmHeadBatched(fake, n))).toBe("overflow");
    const many = 70000; // past the row limit: refused before allocating
    expect(() => head.weights.lmHeadBatched({ length: many * hidden } as unknown as Float32Array, many)).toThrow("exceeds the limit of 65536");
  });

  test("rows past the native limit are refused before any work", () => {
    using session = GraphSession.begin(device);
    expect(code(() => session.rmsNorm(head.weights.finalNorm, head.weights.finalNorm, head.weights.finalNorm, 70000, hidden, 1e-6))).toBe("out_of_bounds");
  });

  test("freed buffer, double free, closed device, 0-byte alloc, out-of-range access", () => {
    const b = device.allocBuffer(16);
    b.free();
    expect(code(() => b.write(new Float32Array(1)))).toBe("bad_handle");
    expect(code(() => b.read(0, 4))).toBe("bad_handle");
    expect(code(() => b.free())).toBe("bad_handle");

    const other = MlxDevice.open("cpu");
    other.close();
    expect(code(() => other.allocBuffer(16))).toBe("bad_handle");
    expect(code(() => other.close())).toBe("bad_handle");

    expect(code(() => device.allocBuffer(0))).toBe("invalid_argument");
    using c = device.allocBuffer(16);
    expect(code(() => c.write(new Float32Array(5)))).toBe("out_of_bounds");
    expect(code(() => c.write(new Float32Array(1), 13))).toBe("out_of_bounds");
    expect(code(() => c.read(8, 9))).toBe("out_of_bounds");
    expect(code(() => c.read(2 ** 52, 8))).toBe("out_of_bounds");
    expect(code(() => c.read(0, 2 ** 45))).toBe("out_of_bounds");
    expect(code(() => c.readF32(0, 2 ** 45))).toBe("out_of_bounds");
    expect(code(() => c.view(8, 16))).toBe("out_of_bounds");
    // Still alive, still correct.
    c.write(new Float32Array([1, 2, 3, 4]));
    expect(Array.from(c.readF32())).toEqual([1, 2, 3, 4]);
  });

  test("a buffer in use by an unfinished session refuses host access; freeing it defers", () => {
    const n = 1;
    const input = device.allocBuffer(n * hidden * 4);
    input.write(rows(n, 4));
    const session = GraphSession.begin(device);
    const { logits, normed } = head.weights.encodeLmHeadInto(session, input, n);
    expect(code(() => input.write(new Float32Array(1)))).toBe("busy");
    expect(code(() => logits.readF32())).toBe("busy");
    input.free(); // the session keeps the memory alive until finish
    session.finish();
    expect(logits.readF32().length).toBe(vocab);
    logits.free();
    normed.free();
  });

  test("session misuse", () => {
    const session = GraphSession.begin(device);
    session.finish();
    expect(code(() => session.finish())).toBe("bad_handle");
    using small = device.allocBuffer(4);
    const s2 = GraphSession.begin(device);
    expect(code(() => s2.rmsNorm(small, small, small, 1, 2, 1e-6))).toBe("invalid_argument");
    expect(code(() => s2.softcap(small, 1, 0))).toBe("invalid_argument");
    expect(code(() => s2.softcap(small, 2, 30))).toBe("out_of_bounds");
    expect(code(() => s2.matvec(small, small, 99, small, 1, 1, 1))).toBe("unsupported");
    s2.abort();
  });
});
