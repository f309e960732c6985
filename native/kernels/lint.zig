//! The lint of the GPU kernel source (docs/NUMERICS.md §8). A kernel may hold only
//! arithmetic whose every rounding the spec fixes, so outside comments and string literals
//! a kernel source file may not contain:
//! - anything but `#pragma METAL fp contract(off)` on its first line (Metal's safe math
//!   still contracts within a statement);
//! - another pragma than that one, `#pragma METAL fp math_mode(safe)`, `#pragma STDC
//!   FP_CONTRACT OFF` and `#pragma unroll`, or a `_Pragma` operator;
//! - `/`: no division at all (integers divide by shifts), so no float division can hide;
//! - a vendor reduction (`simd_sum`, `simd_prefix_*`, `quad_*`, `__reduce_*`, cooperative
//!   groups), whose order is unspecified;
//! - library math (`sqrt`, `rsqrt`, `tanh`, `exp`, …), `fast::` or `precise::`, or a
//!   directed-rounding intrinsic (`*_rz`, `*_ru`, `*_rd`);
//! - a half or bfloat type, so no half or bfloat accumulator.
const std = @import("std");
const sources = @import("sources.zig");

pub const required_first_line = "#pragma METAL fp contract(off)";

const allowed_pragmas = [_][]const u8{
    required_first_line,
    "#pragma METAL fp math_mode(safe)",
    "#pragma STDC FP_CONTRACT OFF",
    "#pragma unroll",
};

/// Vendor reductions and cooperative groups: the vendor picks their order of summation.
const vendor_reductions = [_][]const u8{
    "simd_sum", "simd_product",       "simd_min",          "simd_max",        "simd_and",          "simd_or", "simd_xor",
    "reduce",   "cooperative_groups", "thread_block_tile", "tiled_partition", "coalesced_threads",
};
/// Library math, whose rounding each vendor chooses; the contract builds its own.
const library_math = [_][]const u8{
    "sqrt",          "sqrtf",        "rsqrt",       "rsqrtf",       "cbrt",       "hypot",       "tanh",
    "tanhf",         "exp",          "expf",        "exp2",         "exp2f",      "expm1",       "expm1f",
    "exp10",         "exp10f",       "log",         "logf",         "log2",       "log2f",       "log1p",
    "pow",           "powf",         "powr",        "fmod",         "fmodf",      "divide",      "recip",
    "native_divide", "native_recip", "native_sqrt", "native_rsqrt", "native_exp", "native_tanh",
};
/// Metal's math namespaces (fast::, precise::) and pragmas written as operators, which could
/// change the math mode.
const math_namespaces = [_][]const u8{ "fast", "precise", "_Pragma", "__pragma" };
/// Half and bfloat types: no accumulator may be narrower than f32.
const narrow_types = [_][]const u8{
    "half",           "half2",  "half3",   "half4",   "__half",  "__half2", "_Float16",
    "__fp16",         "bfloat", "bfloat2", "bfloat3", "bfloat4", "__bf16",  "__nv_bfloat16",
    "__nv_bfloat162",
};
const forbidden_names = vendor_reductions ++ library_math ++ math_namespaces ++ narrow_types;

const forbidden_prefixes = [_][]const u8{ "simd_prefix_", "quad_", "__reduce_", "__fdiv", "__fsqrt", "__frsqrt", "__frcp", "__exp", "__log", "__pow", "__tanh" };
const forbidden_suffixes = [_][]const u8{ "_rz", "_ru", "_rd" };

pub const Finding = struct {
    line: u32,
    message: []const u8,
    /// The offending identifier or line, when there is one.
    text: []const u8 = "",
};

/// The first violation in `text`, or null.
pub fn lint(text: []const u8) ?Finding {
    const first = std.mem.trimEnd(u8, std.mem.sliceTo(text, '\n'), "\r");
    if (!std.mem.eql(u8, first, required_first_line)) return .{ .line = 1, .message = "the first line is not " ++ required_first_line, .text = first };
    var line: u32 = 1;
    var line_start = true;
    var i: usize = 0;
    while (i < text.len) {
        const ch = text[i];
        if (ch == '\n') {
            line += 1;
            line_start = true;
            i += 1;
        } else if (ch == ' ' or ch == '\t' or ch == '\r' or ch == '\\') {
            i += 1;
        } else if (std.mem.startsWith(u8, text[i..], "//")) {
            i = std.mem.findScalarPos(u8, text, i, '\n') orelse text.len;
        } else if (std.mem.startsWith(u8, text[i..], "/*")) {
            const end = std.mem.findPos(u8, text, i + 2, "*/") orelse return .{ .line = line, .message = "unterminated comment" };
            line += @intCast(std.mem.count(u8, text[i..end], "\n"));
            i = end + 2;
        } else if (ch == '"' or ch == '\'') {
            i = literalEnd(text, i) orelse return .{ .line = line, .message = "unterminated literal" };
        } else if (ch == '#' and line_start) {
            if (pragma(text[i..])) |directive| return .{ .line = line, .message = "a pragma outside the allowed list", .text = directive };
            line_start = false;
            i += 1;
        } else if (ch == '/') {
            return .{ .line = line, .message = "'/': a division (integers divide by shifts)" };
        } else if (std.ascii.isAlphabetic(ch) or ch == '_') {
            var end = i;
            while (end < text.len and (std.ascii.isAlphanumeric(text[end]) or text[end] == '_')) end += 1;
            if (forbidden(text[i..end])) |message| return .{ .line = line, .message = message, .text = text[i..end] };
            line_start = false;
            i = end;
        } else {
            line_start = false;
            i += 1;
        }
    }
    return null;
}

/// Past the string or character literal that starts at `start`, or null if it is unterminated.
fn literalEnd(text: []const u8, start: usize) ?usize {
    const quote = text[start];
    var i = start + 1;
    while (i < text.len) : (i += 1) {
        switch (text[i]) {
            '\\' => i += 1,
            '\n' => return null,
            else => if (text[i] == quote) return i + 1,
        }
    }
    return null;
}

/// The directive at the start of `rest` if it is a pragma outside the allowed list.
fn pragma(rest: []const u8) ?[]const u8 {
    const line = std.mem.trimEnd(u8, std.mem.sliceTo(rest, '\n'), " \t\r");
    const body = std.mem.trimStart(u8, line[1..], " \t");
    if (!std.mem.startsWith(u8, body, "pragma")) return null;
    for (allowed_pragmas) |allowed| {
        if (std.mem.eql(u8, line, allowed)) return null;
    }
    if (std.mem.startsWith(u8, line, "#pragma unroll ")) return null;
    return line;
}

fn forbidden(name: []const u8) ?[]const u8 {
    for (forbidden_names) |f| {
        if (std.mem.eql(u8, name, f)) return "a forbidden name (reduction, library math, math namespace or half type)";
    }
    for (forbidden_prefixes) |p| {
        if (std.mem.startsWith(u8, name, p)) return "a vendor reduction or intrinsic";
    }
    for (forbidden_suffixes) |s| {
        if (std.mem.endsWith(u8, name, s)) return "a directed-rounding intrinsic";
    }
    return null;
}

test "every kernel source file passes the lint" {
    for (sources.files) |file| {
        if (lint(file.text)) |f| {
            std.debug.print("{s}:{d}: {s}: '{s}'\n", .{ file.path, f.line, f.message, f.text });
            return error.LintFailed;
        }
    }
    // The joined sources too: each file begins with the pragma, so the join does.
    try std.testing.expect(lint(sources.cuda) == null and lint(sources.metal) == null);
}

test "the lint finds every forbidden construct, and only outside comments and strings" {
    const head = required_first_line ++ "\n";
    const bad = [_]struct { []const u8, u32 }{
        .{ "float x = 1.0f;\n", 1 }, // no pragma first
        .{ "\n" ++ required_first_line ++ "\n", 1 },
        .{ head ++ "float f(float a) { return simd_sum(a); }\n", 2 },
        .{ head ++ "float f(float a) { return simd_prefix_inclusive_sum(a); }\n", 2 },
        .{ head ++ "x = quad_shuffle(a, 1);\n", 2 },
        .{ head ++ "n = __reduce_add_sync(m, n);\n", 2 },
        .{ head ++ "cg::reduce(tile, v, cg::plus<float>());\n", 2 },
        .{ head ++ "\nfloat q = a / b;\n", 3 },
        .{ head ++ "q /= 2.0f;\n", 2 },
        .{ head ++ "float r = sqrt(v);\n", 2 },
        .{ head ++ "float r = metal::rsqrt(v);\n", 2 },
        .{ head ++ "float r = tanh(v);\n", 2 },
        .{ head ++ "float r = expf(v);\n", 2 },
        .{ head ++ "float r = __expf(v);\n", 2 },
        .{ head ++ "float r = fast::tanh(v);\n", 2 },
        .{ head ++ "float r = precise::exp(v);\n", 2 },
        .{ head ++ "float r = __fdividef(a, b);\n", 2 },
        .{ head ++ "float r = __fmul_rz(a, b);\n", 2 },
        .{ head ++ "half acc = 0;\n", 2 },
        .{ head ++ "bfloat acc = 0;\n", 2 },
        .{ head ++ "__nv_bfloat16 acc;\n", 2 },
        .{ head ++ "#pragma METAL fp math_mode(fast)\n", 2 },
        .{ head ++ "#pragma METAL fp contract(fast)\n", 2 },
        .{ head ++ "#  pragma clang fp contract(on)\n", 2 },
        .{ head ++ "#pragma STDC FP_CONTRACT ON\n", 2 },
        .{ head ++ "_Pragma(\"METAL fp contract(fast)\")\n", 2 },
        .{ head ++ "/* open\ncomment", 2 },
        .{ head ++ "/* a\nb */ float r = sqrt(v);\n", 3 },
    };
    for (bad) |case| {
        const f = lint(case[0]) orelse {
            std.debug.print("not found in: {s}\n", .{case[0]});
            return error.LintMissed;
        };
        try std.testing.expectEqual(case[1], f.line);
    }
    const clean = head ++
        "// no simd_sum, sqrt, tanh or a / b here: comments are free text\n" ++
        "/* nor half, fast:: or precise:: */\n" ++
        "#pragma unroll\n" ++
        "#pragma unroll 4\n" ++
        "#pragma METAL fp math_mode(safe)\n" ++
        "LMH_STATIC_ASSERT(sizeof(x) == 4, \"a / b in a string\");\n" ++
        "lmh_u32 k = (e >> 1) | lmh_rsqrt_bits; float t = lmh_tanh(x); char c = '/';\n";
    try std.testing.expectEqual(@as(?Finding, null), lint(clean));
}
