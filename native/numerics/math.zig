//! Portable binary32 `rsqrt` and `tanh` for the lmhead numerics spec.
//!
//! Both functions are built only from IEEE 754 binary32 basic operations that every
//! backend implements identically: add, sub, mul, fused multiply-add (`@mulAdd`),
//! integer operations on the bit pattern, integer comparisons and selects. There is no
//! division, no square root, no library transcendental and no reassociation, so the same
//! sequence of operations written in Metal (safe math) or CUDA (`--fmad=false`, explicit
//! `fmaf`) gives the same bits. The exact operation lists are in docs/NUMERICS.md §6; the
//! code below, and the GPU kernel source's lmh_rsqrt and lmh_tanh, follow them one to one
//! and must be kept in step with them.
//!
//! Every function is generic over `f32` and `@Vector(n, f32)`; a lane's result never
//! depends on the vector width or on the other lanes (no per-lane branches: all paths are
//! computed and the result is chosen with selects). No result depends on subnormal
//! arithmetic: subnormal inputs are normalised with integer operations and normal-range
//! arithmetic, and every value that could be subnormal is discarded by a select.
const std = @import("std");

// ---------------------------------------------------------------------------------------
// Generic scalar / vector helpers.

/// The type with the shape of `V` (scalar, or vector of the same length) and element `E`.
fn Shaped(comptime V: type, comptime E: type) type {
    return switch (@typeInfo(V)) {
        .vector => |v| @Vector(v.len, E),
        else => E,
    };
}

fn checkType(comptime V: type) void {
    const elem = switch (@typeInfo(V)) {
        .float => V,
        .vector => |v| v.child,
        else => @compileError("expected f32 or @Vector(n, f32), got " ++ @typeName(V)),
    };
    if (elem != f32) @compileError("expected f32 or @Vector(n, f32), got " ++ @typeName(V));
}

/// Broadcast a comptime-known element value to scalar or vector type `T`.
inline fn splat(comptime T: type, comptime v: anytype) T {
    return switch (@typeInfo(T)) {
        .vector => |info| @as(T, @splat(@as(info.child, v))),
        else => @as(T, v),
    };
}

/// A binary32 constant given by its exact bit pattern.
inline fn fconst(comptime V: type, comptime bits: u32) V {
    return splat(V, @as(f32, @bitCast(bits)));
}

inline fn uconst(comptime V: type, comptime v: u32) Shaped(V, u32) {
    return splat(Shaped(V, u32), v);
}

inline fn toBits(comptime V: type, x: V) Shaped(V, u32) {
    return @bitCast(x);
}

inline fn fromBits(comptime V: type, b: Shaped(V, u32)) V {
    return @bitCast(b);
}

inline fn shl(comptime V: type, x: Shaped(V, u32), comptime n: u5) Shaped(V, u32) {
    return x << splat(Shaped(V, u5), n);
}

/// Logical shift right of the 32-bit pattern.
inline fn shr(comptime V: type, x: Shaped(V, u32), comptime n: u5) Shaped(V, u32) {
    return x >> splat(Shaped(V, u5), n);
}

/// Arithmetic shift right of the 32-bit pattern read as a two's-complement integer.
inline fn sar(comptime V: type, x: Shaped(V, u32), comptime n: u5) Shaped(V, u32) {
    const s: Shaped(V, i32) = @bitCast(x);
    return @bitCast(s >> splat(Shaped(V, u5), n));
}

/// Lane-wise `if (m) a else b`.
inline fn sel(comptime T: type, m: Shaped(T, bool), a: T, b: T) T {
    return switch (@typeInfo(T)) {
        .vector => |info| @select(info.child, m, a, b),
        else => if (m) a else b,
    };
}

inline fn fma(comptime V: type, a: V, b: V, c: V) V {
    return @mulAdd(V, a, b, c);
}

// ---------------------------------------------------------------------------------------
// Constants, as exact bit patterns; the decimal values in the comments are for reading
// only (nine significant digits, enough to identify the binary32 value).

const canonical_nan: u32 = 0x7FC00000;
const pos_inf: u32 = 0x7F800000;

// rsqrt
const RS_ONE: u32 = 0x3F800000; // 1.0
const RS_TWO: u32 = 0x40000000; // 2.0
const RS_NEG_2P24: u32 = 0xCB800000; // -16777216.0 = -2^24
const RS_2P23: u32 = 0x4B000000; // 8388608.0 = 2^23 (exponent field of the subnormal fix)
const RS_MAGIC: u32 = 0x5F1FFFF9; // integer constant of the initial estimate
const RS_K1: u32 = 0x3F343637; // 0.703952253
const RS_K2: u32 = 0x4018E962; // 2.38924456
const RS_C2: u32 = 0x3F000000; // 0.5
const RS_C3: u32 = 0x3EC00000; // 0.375
const RS_C4: u32 = 0x3EA00000; // 0.3125

// tanh
const TH_POLY_LIMIT: u32 = 0x3F100000; // 0.5625: |x| below this uses the odd polynomial
const TH_TINY: u32 = 0x39800000; // 2^-12: |x| below this returns x
const TH_SAT: u32 = 0x41120000; // 9.125: |x| at or above this returns +-1
// tanh(a) ~= a + a*z*P(z), z = a*a, P(z) = p0 + p1 z + ... + p5 z^5
const TH_P0: u32 = 0xBEAAAAAA; // -0.333333313
const TH_P1: u32 = 0x3E088868; // 0.133332849
const TH_P2: u32 = 0xBD5D0333; // -0.0539581291
const TH_P3: u32 = 0x3CB25AF8; // 0.0217718929
const TH_P4: u32 = 0xBC09465C; // -0.00837859139
const TH_P5: u32 = 0x3B1A3ECB; // 0.00235359627
const TH_LOG2E: u32 = 0x3FB8AA3B; // 1.44269502 ~ 1/ln 2
const TH_ROUND: u32 = 0x4B400000; // 12582912.0 = 1.5 * 2^23 (round-to-integer shifter)
const TH_NLN2HI: u32 = 0xBF317218; // -0.693147182 = -(ln 2 rounded to binary32)
const TH_NLN2LO: u32 = 0x3102E308; // 1.90465421e-09 ~ -(ln 2 - 0.693147182)
// expm1(r) ~= r + r^2/2 + r^3*Q(r), Q(r) = q0 + q1 r + q2 r^2 + q3 r^3 + q4 r^4
const TH_Q0: u32 = 0x3E2AAAAB; // 0.166666672
const TH_Q1: u32 = 0x3D2AAA73; // 0.0416664593
const TH_Q2: u32 = 0x3C08884A; // 0.00833327509
const TH_Q3: u32 = 0x3AB6A78A; // 0.00139354286
const TH_Q4: u32 = 0x3950CE2F; // 0.000199132352
const TH_HALF: u32 = 0x3F000000; // 0.5
const TH_ONE: u32 = 0x3F800000; // 1.0
const TH_TWO: u32 = 0x40000000; // 2.0
const TH_R48: u32 = 0x4034B4B5; // 2.82352948 ~ 48/17
const TH_RN32: u32 = 0xBFF0F0F1; // -1.88235295 ~ -32/17

// ---------------------------------------------------------------------------------------
// rsqrt

/// 1/sqrt(x) in binary32, generic over `f32` and `@Vector(n, f32)`.
/// x > 0 (normal or subnormal): at most 1 ulp from the exact value (measured over every
/// input, see docs/NUMERICS.md). +Inf -> +0, +0 -> +Inf, -0 -> -Inf,
/// x < 0 and NaN -> canonical quiet NaN (bits 0x7FC00000).
pub fn rsqrt(comptime V: type, x: V) V {
    comptime checkType(V);
    const U = Shaped(V, u32);

    const b: U = toBits(V, x);
    // Subnormal x = m * 2^-149 (m = mantissa field, 1 <= m < 2^23): form 2m exactly as
    // (2^23 + m) * 2 - 2^24 with normal-range arithmetic, then x = (2m) * 2^-150.
    const is_sub = b < uconst(V, 0x00800000);
    const sub_f = fromBits(V, (b & uconst(V, 0x007FFFFF)) | uconst(V, RS_2P23));
    const sub_n = fma(V, sub_f, fconst(V, RS_TWO), fconst(V, RS_NEG_2P24));
    const bn = sel(U, is_sub, toBits(V, sub_n), b);
    // Unbiased exponent e of x (bn holds x * 2^150 for subnormal x).
    const e = shr(V, bn, 23) -% sel(U, is_sub, uconst(V, 277), uconst(V, 127));
    // x = m * 4^k, m in [1, 4): k = floor(e / 2); m keeps the mantissa, exponent e - 2k.
    const k = sar(V, e, 1);
    const mb = ((bn & uconst(V, 0x007FFFFF)) | uconst(V, RS_ONE)) +% shl(V, e & uconst(V, 1), 23);
    const m = fromBits(V, mb);
    const scale = fromBits(V, shl(V, uconst(V, 127) -% k, 23)); // 2^-k, exact

    // Initial estimate from the bit pattern and one tuned Newton-like step
    // (relative error at most 6.51e-4 on [1, 4), measured over every m).
    const y0 = fromBits(V, uconst(V, RS_MAGIC) -% shr(V, mb, 1));
    const h0 = m * y0;
    const t0 = fma(V, -h0, y0, fconst(V, RS_K2));
    const y1 = (y0 * fconst(V, RS_K1)) * t0;

    // Final step: residual d = 1 - m*y1^2 computed almost exactly (m*y1 split into
    // h + hl with an fma), then y = y1 + y1 * (d/2 + 3d^2/8 + 5d^3/16).
    const h = m * y1;
    const hl = fma(V, m, y1, -h);
    const d0 = fma(V, -h, y1, fconst(V, RS_ONE));
    const d = fma(V, -hl, y1, d0);
    const c0 = fma(V, d, fconst(V, RS_C4), fconst(V, RS_C3));
    const c1 = fma(V, d, c0, fconst(V, RS_C2));
    const c = d * c1;
    const y = fma(V, y1, c, y1);
    var r = toBits(V, y * scale);

    // Special values (integer comparisons on the input bit pattern).
    r = sel(U, b > uconst(V, pos_inf), uconst(V, canonical_nan), r); // NaN, x < 0
    r = sel(U, b == uconst(V, pos_inf), uconst(V, 0), r); // +Inf -> +0
    r = sel(U, b == uconst(V, 0), uconst(V, pos_inf), r); // +0 -> +Inf
    r = sel(U, b == uconst(V, 0x80000000), uconst(V, 0xFF800000), r); // -0 -> -Inf
    return fromBits(V, r);
}

// ---------------------------------------------------------------------------------------
// tanh

/// tanh(x) in binary32, generic over `f32` and `@Vector(n, f32)`.
/// At most 1 ulp from the f64 tanh rounded to binary32 (measured over every input, see
/// docs/NUMERICS.md); odd; monotone non-decreasing; tanh(+-0) = +-0,
/// |x| >= 9.125 (incl. +-Inf) -> +-1, NaN -> canonical quiet NaN (bits 0x7FC00000).
pub fn tanh(comptime V: type, x: V) V {
    comptime checkType(V);
    const U = Shaped(V, u32);

    const b: U = toBits(V, x);
    const ab = b & uconst(V, 0x7FFFFFFF);
    const sign = b & uconst(V, 0x80000000);
    const a = fromBits(V, ab); // |x|
    const t_poly = tanhPoly(V, a);
    const t_exp = tanhExp(V, a);

    // --- Select by |x| (integer comparisons), then restore the sign.
    var mag = toBits(V, sel(V, ab < uconst(V, TH_POLY_LIMIT), t_poly, t_exp));
    mag = sel(U, ab < uconst(V, TH_TINY), ab, mag);
    mag = sel(U, ab >= uconst(V, TH_SAT), uconst(V, TH_ONE), mag);
    var r = mag | sign;
    r = sel(U, ab > uconst(V, pos_inf), uconst(V, canonical_nan), r);
    return fromBits(V, r);
}

/// tanh(a) for 0 <= a < 0.5625: a + a * (z * P(z)), z = a^2.
inline fn tanhPoly(comptime V: type, a: V) V {
    const z = a * a;
    var p = fma(V, fconst(V, TH_P5), z, fconst(V, TH_P4));
    p = fma(V, p, z, fconst(V, TH_P3));
    p = fma(V, p, z, fconst(V, TH_P2));
    p = fma(V, p, z, fconst(V, TH_P1));
    p = fma(V, p, z, fconst(V, TH_P0));
    const zp = z * p;
    return fma(V, a, zp, a);
}

/// tanh(a) for 0.5625 <= a < 9.125: 1 - 2 / (expm1(2a) + 2).
inline fn tanhExp(comptime V: type, a: V) V {
    // y = 2a = k ln2 + rh + rl (Cody-Waite with fma, k integer, |rh| <= ln2/2 + tiny), then
    //   expm1(y) ~= (2^k - 1) + 2^k rh + 2^(k-1) r2 + 2^k (rh^3 Q(rh) + r2l/2) + rl (expm1(y) + 1)
    // with rh^2 = r2 + r2l exactly, summed into hi + lo by exact Fast2Sum steps.
    const y = a + a;
    const t = fma(V, y, fconst(V, TH_LOG2E), fconst(V, TH_ROUND));
    const kf = t - fconst(V, TH_ROUND); // k = round(y / ln 2), exact integer
    const ki = toBits(V, t) -% uconst(V, TH_ROUND);
    const rh = fma(V, kf, fconst(V, TH_NLN2HI), y); // exact
    const rl = kf * fconst(V, TH_NLN2LO);
    const s = fromBits(V, shl(V, ki +% uconst(V, 127), 23)); // 2^k
    const hs = s * fconst(V, TH_HALF); // 2^(k-1)
    const r2 = rh * rh;
    const r2l = fma(V, rh, rh, -r2); // rh^2 = r2 + r2l exactly
    var q = fma(V, fconst(V, TH_Q4), rh, fconst(V, TH_Q3));
    q = fma(V, q, rh, fconst(V, TH_Q2));
    q = fma(V, q, rh, fconst(V, TH_Q1));
    q = fma(V, q, rh, fconst(V, TH_Q0));
    const r3 = r2 * rh;
    const small = fma(V, r3, q, r2l * fconst(V, TH_HALF));
    const big_a = s - fconst(V, TH_ONE); // 2^k - 1
    const big_b = s * rh; // exact
    const big_d = hs * r2; // exact
    const big_c = s * small; // exact
    const hi1 = big_a + big_b; // Fast2Sum, |big_a| >= |big_b|
    const lo1 = big_b - (hi1 - big_a);
    const hi2 = hi1 + big_d; // Fast2Sum, |hi1| >= |big_d|
    const lo2 = big_d - (hi2 - hi1);
    const hi = hi2 + big_c; // Fast2Sum, |hi2| >= |big_c|
    const lo3 = big_c - (hi - hi2);
    var lo = (lo1 + lo2) + lo3;
    lo = fma(V, rl, hi + fconst(V, TH_ONE), lo);
    // Denominator dh + dl = expm1(2a) + 2 (Fast2Sum, hi >= 2).
    const dh = hi + fconst(V, TH_TWO);
    const dl = (fconst(V, TH_TWO) - (dh - hi)) + lo;
    // Reciprocal of dh: linear estimate 48/17 - 32/17 m on the mantissa m in [0.5, 1),
    // exponent applied by integer subtraction, then two Newton steps.
    const db = toBits(V, dh);
    const mb = (db & uconst(V, 0x007FFFFF)) | uconst(V, TH_HALF);
    const rm = fma(V, fromBits(V, mb), fconst(V, TH_RN32), fconst(V, TH_R48));
    var rc = fromBits(V, toBits(V, rm) -% (db -% mb));
    var en = fma(V, -dh, rc, fconst(V, TH_ONE));
    rc = fma(V, rc, en, rc);
    en = fma(V, -dh, rc, fconst(V, TH_ONE));
    rc = fma(V, rc, en, rc);
    // g = 2 / (dh + dl) = q0 + rc * res; tanh = 1 - g = w + (wl - rc * res).
    const g0 = rc + rc;
    var res = fma(V, -g0, dh, fconst(V, TH_TWO));
    res = fma(V, -g0, dl, res);
    const w = fconst(V, TH_ONE) - g0;
    const wl = (fconst(V, TH_ONE) - w) - g0; // 1 - g0 = w + wl exactly
    return w + fma(V, -rc, res, wl);
}

// ---------------------------------------------------------------------------------------
// Tests. Bounds asserted here are the ones stated in docs/NUMERICS.md; the exhaustive
// measurement behind them is described there.

const testing = std.testing;

/// Maximum distance, in units of the last place, from the f64 reference rounded to binary32.
const tanh_max_ulp: u64 = 1;
const rsqrt_max_ulp: u64 = 1;

/// Position of a binary32 on the ordered integer line (-0 and +0 both map to 0), so the
/// distance in ulps between two finite values is the difference of their positions.
fn ordered(x: f32) i64 {
    const b: u32 = @bitCast(x);
    return if (b & 0x80000000 != 0) -@as(i64, b & 0x7FFFFFFF) else @as(i64, b);
}

fn fromOrdered(o: i64) f32 {
    const b: u32 = if (o < 0) @as(u32, @intCast(-o)) | 0x80000000 else @intCast(o);
    return @bitCast(b);
}

fn ulpDist(a: f32, b: f32) u64 {
    return @abs(ordered(a) - ordered(b));
}

const Func = enum { tanh, rsqrt };

fn apply(comptime f: Func, comptime V: type, x: V) V {
    return switch (f) {
        .tanh => tanh(V, x),
        .rsqrt => rsqrt(V, x),
    };
}

fn reference(comptime f: Func, x: f32) f32 {
    const xd: f64 = x;
    return switch (f) {
        .tanh => @floatCast(std.math.tanh(xd)),
        .rsqrt => @floatCast(1.0 / @sqrt(xd)),
    };
}

/// Evaluates 16 inputs as one @Vector(16, f32), as two @Vector(8, f32) and lane by lane
/// as scalars; fails unless all three agree bit for bit. Returns the results.
fn eval16(comptime f: Func, xs: [16]f32) ![16]f32 {
    const v16: [16]f32 = apply(f, @Vector(16, f32), xs);
    const lo8: [8]f32 = apply(f, @Vector(8, f32), xs[0..8].*);
    const hi8: [8]f32 = apply(f, @Vector(8, f32), xs[8..16].*);
    for (xs, 0..) |x, i| {
        const s: u32 = @bitCast(apply(f, f32, x));
        const w16: u32 = @bitCast(v16[i]);
        const w8: u32 = @bitCast(if (i < 8) lo8[i] else hi8[i - 8]);
        if (s != w16 or s != w8) {
            std.debug.print("{s}(0x{x:0>8}): scalar 0x{x:0>8}, vec16 0x{x:0>8}, vec8 0x{x:0>8}\n", .{ @tagName(f), @as(u32, @bitCast(x)), s, w16, w8 });
            return error.WidthDependentResult;
        }
    }
    return v16;
}

const Sweep = struct {
    count: u64 = 0,
    max_ulp: u64 = 0,
    worst: f32 = 0,
    last: ?f32 = null,

    /// Checks a batch of consecutive (increasing) inputs: widths agree, error within
    /// `bound`, and, if `monotone`, results non-decreasing across calls.
    fn batch(self: *Sweep, comptime f: Func, xs: [16]f32, bound: u64, monotone: bool) !void {
        const ys = try eval16(f, xs);
        for (xs, ys) |x, y| {
            const d = ulpDist(y, reference(f, x));
            if (d > self.max_ulp) {
                self.max_ulp = d;
                self.worst = x;
            }
            if (d > bound) {
                std.debug.print("{s}({e}) = {e} (0x{x:0>8}), reference {e}: {d} ulp > {d}\n", .{ @tagName(f), x, y, @as(u32, @bitCast(y)), reference(f, x), d, bound });
                return error.UlpBoundExceeded;
            }
            if (monotone) {
                if (self.last) |prev| if (ordered(y) < ordered(prev)) {
                    std.debug.print("{s} not monotone at {e}: {e} after {e}\n", .{ @tagName(f), x, y, prev });
                    return error.NotMonotone;
                };
                self.last = y;
            }
            self.count += 1;
        }
    }

    /// Every `stride`-th bit pattern from `lo` up to `hi` (inclusive, ordered line).
    fn range(self: *Sweep, comptime f: Func, lo: f32, hi: f32, stride: i64, bound: u64, monotone: bool) !void {
        var o = ordered(lo);
        const end = ordered(hi);
        while (o <= end) {
            var xs: [16]f32 = undefined;
            for (&xs) |*x| {
                x.* = fromOrdered(@min(o, end));
                o += stride;
            }
            try self.batch(f, xs, bound, monotone);
        }
    }
};

test "tanh: strided sweep of [-12, 12] against f64, vector widths agree, monotone" {
    var s: Sweep = .{};
    // Stride 15 (odd) so that the low mantissa bits vary along the sweep.
    try s.range(.tanh, -12.0, 12.0, 15, tanh_max_ulp, true);
    try testing.expect(s.count > 140_000_000);
}

test "tanh: dense ranges at the switch points, oddness" {
    const ranges = [_][2]f32{
        .{ 0x1p-14, 0x1p-10 }, // |x| = 2^-12: x returned directly below
        .{ 0.5, 0.625 }, // |x| = 0.5625: polynomial / exp switch
        .{ 8.5, 9.5 }, // |x| = 9.125: saturation to 1
        .{ 0.999, 1.001 },
    };
    for (ranges) |r| {
        var pos: Sweep = .{};
        try pos.range(.tanh, r[0], r[1], 1, tanh_max_ulp, true);
        var neg: Sweep = .{};
        try neg.range(.tanh, -r[1], -r[0], 1, tanh_max_ulp, true);
        // tanh(-x) == -tanh(x) bit for bit.
        var o = ordered(r[0]);
        while (o <= ordered(r[1])) : (o += 7) {
            const x = fromOrdered(o);
            try testing.expectEqual(@as(u32, @bitCast(tanh(f32, x))) | 0x80000000, @as(u32, @bitCast(tanh(f32, -x))));
        }
    }
    // Subnormal and tiny inputs come back unchanged.
    var sub: Sweep = .{};
    try sub.range(.tanh, -0x1p-126, 0x1p-126, 97, 0, true);
    var o: i64 = 1;
    while (o < ordered(0x1p-12)) : (o += 4099) {
        const x = fromOrdered(o);
        try testing.expectEqual(x, tanh(f32, x));
        try testing.expectEqual(-x, tanh(f32, -x));
    }
}

test "tanh: special values" {
    const inf = std.math.inf(f32);
    const cases = [_][2]u32{
        .{ 0x00000000, 0x00000000 }, // +0 -> +0
        .{ 0x80000000, 0x80000000 }, // -0 -> -0
        .{ 0x7F800000, 0x3F800000 }, // +Inf -> +1
        .{ 0xFF800000, 0xBF800000 }, // -Inf -> -1
        .{ 0x7FC00000, 0x7FC00000 }, // NaN -> canonical NaN
        .{ 0xFFC00000, 0x7FC00000 },
        .{ 0x7F800001, 0x7FC00000 }, // signalling NaN
        .{ 0xFFFFFFFF, 0x7FC00000 },
        .{ 0x00000001, 0x00000001 }, // smallest subnormal kept
        .{ 0x80000001, 0x80000001 },
        .{ 0x41120000, 0x3F800000 }, // 9.125 -> 1
        .{ 0x7F7FFFFF, 0x3F800000 }, // max finite -> 1
        .{ 0xFF7FFFFF, 0xBF800000 },
    };
    var xs: [16]f32 = @splat(0);
    for (cases, 0..) |c, i| {
        try testing.expectEqual(c[1], @as(u32, @bitCast(tanh(f32, @bitCast(c[0])))));
        xs[i] = @bitCast(c[0]);
    }
    // Special lanes mixed with ordinary ones give the scalar results.
    xs[15] = 0.75;
    xs[14] = -3.0;
    _ = try eval16(.tanh, xs);
    try testing.expectEqual(@as(f32, 1.0), tanh(f32, 10.0));
    try testing.expectEqual(@as(f32, -1.0), tanh(f32, -1e30));
    try testing.expect(tanh(f32, 9.0) < 1.0); // tanh(9) rounds to 1 - 2^-24
    try testing.expectEqual(@as(f32, 1.0), tanh(f32, inf));
}

test "rsqrt: every exponent with a dense mantissa sweep, subnormals, all of [1, 4)" {
    var s: Sweep = .{};
    // All of [1, 4): every normal input reduces to m * 4^k with m in [1, 4) exactly.
    try s.range(.rsqrt, 1.0, 4.0, 1, rsqrt_max_ulp, false);
    // Every binary32 exponent (biased 1..254), 2^23 / 131 mantissas each, varying phase.
    var e: u32 = 1;
    while (e <= 254) : (e += 1) {
        const lo: f32 = @bitCast((e << 23) | (e % 131));
        const hi: f32 = @bitCast((e << 23) | 0x007FFFFF);
        try s.range(.rsqrt, lo, hi, 131, rsqrt_max_ulp, false);
    }
    // Subnormals: every third one, plus the extremes.
    try s.range(.rsqrt, @bitCast(@as(u32, 1)), @bitCast(@as(u32, 0x007FFFFF)), 3, rsqrt_max_ulp, false);
    try s.range(.rsqrt, @bitCast(@as(u32, 0x007FFFF0)), @bitCast(@as(u32, 0x00800010)), 1, rsqrt_max_ulp, false);
    try testing.expect(s.count > 35_000_000);
}

test "rsqrt: special values" {
    const cases = [_][2]u32{
        .{ 0x00000000, 0x7F800000 }, // +0 -> +Inf
        .{ 0x80000000, 0xFF800000 }, // -0 -> -Inf
        .{ 0x7F800000, 0x00000000 }, // +Inf -> +0
        .{ 0xFF800000, 0x7FC00000 }, // -Inf -> NaN
        .{ 0xBF800000, 0x7FC00000 }, // -1 -> NaN
        .{ 0x80000001, 0x7FC00000 }, // negative subnormal -> NaN
        .{ 0x7FC00000, 0x7FC00000 }, // NaN -> canonical NaN
        .{ 0xFFC00001, 0x7FC00000 },
        .{ 0x7F800001, 0x7FC00000 },
        .{ 0x3F800000, 0x3F800000 }, // 1 -> 1
        .{ 0x40800000, 0x3F000000 }, // 4 -> 0.5
        .{ 0x3E800000, 0x40000000 }, // 0.25 -> 2
        .{ 0x00000001, 0x64B504F3 }, // 2^-149 -> 2^74.5 (rounded)
        .{ 0x7F7FFFFF, 0x1F800000 }, // max finite -> 2^-64
    };
    var xs: [16]f32 = @splat(1);
    for (cases, 0..) |c, i| {
        try testing.expectEqual(c[1], @as(u32, @bitCast(rsqrt(f32, @bitCast(c[0])))));
        xs[i] = @bitCast(c[0]);
    }
    xs[15] = 1e-6;
    _ = try eval16(.rsqrt, xs);
    // Exact powers of four are exact.
    var k: i32 = -74;
    while (k <= 63) : (k += 1) {
        const x = std.math.ldexp(@as(f32, 1.0), 2 * k);
        try testing.expectEqual(std.math.ldexp(@as(f32, 1.0), -k), rsqrt(f32, x));
    }
}
